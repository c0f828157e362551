// StopMatcher: stops split across pushes, held prefixes released, nested and overlapping
// stops, multibyte text, and a randomized comparison with a whole-text search.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "server/stop_matcher.h"

namespace ridge {
namespace {

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = uint8_t(s[i]);
    const size_t n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((uint8_t(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

TEST(StopMatcher, NoStopsPassesThrough) {
  StopMatcher m({});
  auto o = m.push("hello");
  EXPECT_EQ(o.text, "hello");
  EXPECT_FALSE(o.stopped);
  EXPECT_EQ(m.flush(), "");
  StopMatcher e({"", ""});  // empty stops are ignored
  EXPECT_EQ(e.push("abc").text, "abc");
}

TEST(StopMatcher, StopSplitAcrossPushes) {
  for (const std::vector<std::string>& pieces :
       {std::vector<std::string>{"Hello EN", "D world"},
        std::vector<std::string>{"Hello E", "N", "D world"},
        std::vector<std::string>{"Hello ", "E", "N", "D"}}) {
    StopMatcher m({"END"});
    std::string emitted;
    bool stopped = false;
    for (const auto& p : pieces) {
      auto o = m.push(p);
      emitted += o.text;
      if ((stopped = o.stopped)) break;
      EXPECT_EQ(emitted.find('E'), std::string::npos) << "a stop prefix leaked";
    }
    EXPECT_TRUE(stopped);
    EXPECT_EQ(emitted, "Hello ");
    EXPECT_EQ(m.matched_stop(), "END");
    auto after = m.push("more");
    EXPECT_EQ(after.text, "");
    EXPECT_TRUE(after.stopped);
    EXPECT_EQ(m.flush(), "");
  }
}

TEST(StopMatcher, HeldPrefixReleasedWhenNotAStop) {
  StopMatcher m({"</s>"});
  auto o = m.push("a </");
  EXPECT_EQ(o.text, "a ");
  EXPECT_EQ(m.held(), 2u);
  o = m.push("b> c");
  EXPECT_EQ(o.text, "</b> c");
  EXPECT_FALSE(o.stopped);
  EXPECT_EQ(m.held(), 0u);
  o = m.push("<");
  EXPECT_EQ(o.text, "");
  EXPECT_EQ(m.flush(), "<");  // end of generation releases the undecided tail
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, StopAtFirstPush) {
  StopMatcher m({"x"});
  auto o = m.push("xyz");
  EXPECT_EQ(o.text, "");
  EXPECT_TRUE(o.stopped);
  StopMatcher w({"stop"});
  o = w.push("a stop here stop");
  EXPECT_EQ(o.text, "a ");
  EXPECT_TRUE(o.stopped);
}

TEST(StopMatcher, OneStopPrefixOfAnother) {
  // "ab" completes first and starts at the same place as "abc": stop now, report the
  // longest complete one (the emitted text is the same either way).
  StopMatcher m({"abc", "ab"});
  auto o = m.push("xa");
  EXPECT_EQ(o.text, "x");
  o = m.push("b");
  EXPECT_TRUE(o.stopped);
  EXPECT_EQ(o.text, "");
  EXPECT_EQ(m.matched_stop(), "ab");

  StopMatcher l({"ab", "abc"});
  o = l.push("xabc");
  EXPECT_TRUE(o.stopped);
  EXPECT_EQ(o.text, "x");
  EXPECT_EQ(l.matched_stop(), "abc");
}

TEST(StopMatcher, InnerStopWaitsForEarlierLongerCandidate) {
  // "bc" is complete, but "abcd" may still start earlier; the earliest occurrence wins.
  StopMatcher m({"abcd", "bc"});
  auto o = m.push("zabc");
  EXPECT_EQ(o.text, "z");
  EXPECT_FALSE(o.stopped);
  o = m.push("d!");
  EXPECT_TRUE(o.stopped);
  EXPECT_EQ(o.text, "");
  EXPECT_EQ(m.matched_stop(), "abcd");

  StopMatcher n({"abcd", "bc"});
  n.push("zabc");
  o = n.push("x");
  EXPECT_TRUE(o.stopped);
  EXPECT_EQ(o.text, "a");
  EXPECT_EQ(n.matched_stop(), "bc");

  // Generation ends while undecided: flush decides the stop.
  StopMatcher f({"abcd", "bc"});
  f.push("zabc");
  EXPECT_EQ(f.flush(), "a");
  EXPECT_TRUE(f.stopped());
  EXPECT_EQ(f.matched_stop(), "bc");
}

TEST(StopMatcher, OverlappingCandidates) {
  StopMatcher m({"ab"});
  auto o = m.push("a");
  EXPECT_EQ(o.text, "");
  o = m.push("a");  // the first 'a' is no longer a candidate, the second is
  EXPECT_EQ(o.text, "a");
  o = m.push("b");
  EXPECT_TRUE(o.stopped);
  EXPECT_EQ(o.text, "");

  StopMatcher r({"aab"});
  EXPECT_EQ(r.push("aa").text, "");
  EXPECT_EQ(r.push("a").text, "a");  // "aaa": keep the last "aa"
  o = r.push("b");
  EXPECT_TRUE(o.stopped);
  EXPECT_EQ(o.text, "");
}

TEST(StopMatcher, MultibyteStopsAndText) {
  StopMatcher m({"é!", "🙂"});
  auto o = m.push("café");
  EXPECT_EQ(o.text, "caf");  // "é" may begin "é!"; held as a whole character
  EXPECT_EQ(m.held(), 2u);
  o = m.push("s 🙃");
  EXPECT_EQ(o.text, "és 🙃");
  o = m.push("x🙂y");
  EXPECT_TRUE(o.stopped);
  EXPECT_EQ(o.text, "x");
  EXPECT_EQ(m.matched_stop(), "🙂");

  StopMatcher e({"\xC3\xA9\xF0\x9F\x99\x82"});  // "é🙂"
  EXPECT_EQ(e.push("aé").text, "a");
  o = e.push("🙂b");
  EXPECT_TRUE(o.stopped);
  EXPECT_EQ(o.text, "");
}

// Smallest p such that text[p..] is a proper prefix of some stop (text.size() if none):
// the matcher must emit exactly text[0..p) before the stop is decided.
size_t held_from(const std::string& text, const std::vector<std::string>& stops) {
  for (size_t p = 0; p < text.size(); ++p)
    for (const auto& s : stops)
      if (!s.empty() && s.size() > text.size() - p && s.compare(0, text.size() - p, text, p) == 0)
        return p;
  return text.size();
}

TEST(StopMatcher, RandomAgainstWholeTextSearch) {
  const std::vector<std::string> alphabet = {"a", "b", "c", "é", "🙂"};
  std::mt19937 g(1234);
  auto rnd = [&](size_t n) { return size_t(g() % n); };
  for (int iter = 0; iter < 20000; ++iter) {
    std::vector<std::string> stops(1 + rnd(4));
    for (auto& s : stops)
      for (size_t k = rnd(5); k > 0; --k) s += alphabet[rnd(alphabet.size())];
    std::vector<std::string> chars(rnd(40));
    std::string text;
    for (auto& c : chars) text += c = alphabet[rnd(3 + (iter % 3 == 0 ? 2 : 0))];

    size_t ref = std::string::npos;
    for (const auto& s : stops)
      if (!s.empty()) ref = std::min(ref, text.find(s));
    const std::string want = text.substr(0, ref);

    // Random pieces of whole characters, as a detokenizer would hand them over.
    StopMatcher m(stops);
    std::string got, so_far;
    bool stopped = false;
    for (size_t i = 0; i < chars.size() && !stopped;) {
      std::string piece;
      for (size_t n = 1 + rnd(4); n > 0 && i < chars.size(); --n) piece += chars[i++];
      so_far += piece;
      auto o = m.push(piece);
      ASSERT_TRUE(valid_utf8(o.text));
      got += o.text;
      stopped = o.stopped;
      if (!stopped) {
        ASSERT_EQ(got, so_far.substr(0, held_from(so_far, stops))) << "held too much or too little";
      }
    }
    if (!stopped) {
      got += m.flush();
      stopped = m.stopped();
    }
    ASSERT_EQ(got, want) << "text=" << text << " iter=" << iter;
    ASSERT_EQ(stopped, ref != std::string::npos);
    // The matched stop occurs at the cut (it may be shorter than another stop starting
    // there that had not completed when the match was decided).
    if (stopped) {
      ASSERT_EQ(text.compare(ref, m.matched_stop().size(), m.matched_stop()), 0);
    }
    for (const auto& s : stops) {
      if (!s.empty()) {
        ASSERT_EQ(got.find(s), std::string::npos);
      }
    }
  }
}

}  // namespace
}  // namespace ridge
