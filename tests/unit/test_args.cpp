// The command line's flag parser: aliases, the last occurrence winning, and flags from a
// config file (Args::append) under the command line's whatever the alias.
#include <gtest/gtest.h>

#include "cli/args.h"
#include "core/error.h"

namespace ridge::cli {
namespace {

TEST(Args, TheCommandLineWinsOverAConfigFileWhateverTheAlias) {
  Args a({"-b", "512", "--max-num-seqs=8"});
  a.append("--max-num-batched-tokens=64", "--config f.json");
  a.append("--kv-cache-dtype=int8", "--config f.json");
  a.append("--no-prefix-cache", "--config f.json");
  EXPECT_EQ(a.integer({"--max-num-batched-tokens", "-b"}, 2048, 1, 1 << 20), 512);
  EXPECT_EQ(a.integer({"--max-num-seqs"}, 256, 1, 1 << 20), 8);
  EXPECT_EQ(a.str({"--kv-cache-dtype", "--kv-type"}, "auto"), "int8");
  EXPECT_TRUE(a.flag({"--no-prefix-cache"}));
  EXPECT_NO_THROW(a.finish());
}

TEST(Args, LastOccurrenceWinsAndLeftoversAreNamed) {
  Args a({"--port", "1", "--port=2"});
  EXPECT_EQ(a.integer({"--port"}, 0, 0, 10), 2);
  a.append("--frobnicate=1", "--config f.json");
  try {
    a.finish();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--config f.json: '--frobnicate=1'"), std::string::npos) << e.what();
  }
  Args b({"--bogus"});
  EXPECT_THROW(b.finish(), Error);
  EXPECT_TRUE(b.given({"--bogus"}));
}

TEST(Args, AnOptionDoesNotTakeItsValueFromAConfigEntry) {
  Args a({"--host"});
  a.append("--no-prefix-cache", "--config f.json");
  EXPECT_THROW(a.str({"--host"}), Error);  // not "--no-prefix-cache"
  Args b({});
  b.append("--swap-dir", "--config f.json");  // a boolean true given to an option that takes a value
  b.append("--no-prefix-cache", "--config f.json");
  try {
    b.str({"--swap-dir"});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--config f.json: --swap-dir needs a value"), std::string::npos) << e.what();
  }
}

TEST(Args, ReadsAreLoggedByTheirLongName) {
  Args a({"-b", "512", "--mlock", "--kv-type=int8"});
  a.append("--swap-dir=/x", "--config f.json");
  EXPECT_EQ(a.integer({"-b", "--max-num-batched-tokens"}, 2048, 1, 1 << 20), 512);
  EXPECT_TRUE(a.flag({"--mlock"}));
  EXPECT_FALSE(a.flag({"--swa-full"}));                    // absent: not logged
  EXPECT_EQ(a.str({"--port"}, "8080"), "8080");             // a default: not logged
  EXPECT_EQ(a.str({"--kv-cache-dtype", "--kv-type"}, "auto"), "int8");
  EXPECT_EQ(a.str({"--swap-dir"}, "/tmp"), "/x");
  ASSERT_EQ(a.reads().size(), 4u);
  EXPECT_EQ(a.reads()[0].name, "max-num-batched-tokens");
  EXPECT_EQ(a.reads()[0].value, "512");
  EXPECT_EQ(a.reads()[1].name, "mlock");
  EXPECT_TRUE(a.reads()[1].flag);
  EXPECT_FALSE(a.reads()[0].flag);
  EXPECT_EQ(a.reads()[2].name, "kv-cache-dtype");
  EXPECT_EQ(a.reads()[3].value, "/x");
}

}  // namespace
}  // namespace ridge::cli
