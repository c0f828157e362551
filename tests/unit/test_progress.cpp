// Progress lines: what they say, and that short or quiet work prints nothing (so fast
// commands and tests stay clean).
#include <gtest/gtest.h>

#include <thread>

#include "core/progress.h"

namespace ridge {
namespace {

TEST(Progress, LineSaysCountTotalRateAndTimeLeft) {
  Progress p("perplexity", 1000, "tokens");
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  p.set(250);
  p.set_detail("chunk 2/8");
  const std::string l = p.line();
  EXPECT_NE(l.find("perplexity  250/1000 tokens  chunk 2/8"), std::string::npos) << l;
  EXPECT_NE(l.find("tokens/s"), std::string::npos) << l;
  EXPECT_NE(l.find(" left"), std::string::npos) << l;
}

TEST(Progress, BytesAreMiBAndUnknownTotalsHaveNoTimeLeft) {
  Progress p("writing x.gguf", 0, "B");
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  p.add(int64_t(300) << 20);
  const std::string l = p.line();
  EXPECT_NE(l.find("writing x.gguf  300 MiB"), std::string::npos) << l;
  EXPECT_NE(l.find("MiB/s"), std::string::npos) << l;
  EXPECT_EQ(l.find("left"), std::string::npos) << l;
}

TEST(Progress, ShortAndQuietWorkPrintNothing) {
  testing::internal::CaptureStderr();
  {
    Progress p("fast", 10, "steps");
    for (int i = 0; i < 10; ++i) p.add(1);
  }
  Progress::set_quiet(true);
  {
    Progress p("quiet", 10, "steps");
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    p.add(5);
  }
  Progress::set_quiet(false);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

}  // namespace
}  // namespace ridge
