// OpenAI `stop` strings for a streamed completion. A stop string may arrive split over
// several tokens, and it must never reach the client, so text that could still turn out
// to be the start of a stop is held back until the next pieces decide it.
//
// The result is exactly what a whole-text search would give: the output ends just
// before the earliest occurrence of any stop (min over stops of text.find(stop)). To
// honour "earliest" when one stop contains another ("bc" inside "abcd"), a complete
// match is not acted on while a longer stop that starts before it may still complete;
// so a stop can be decided by flush() too — check stopped() after it.
//
// Input is assumed to be valid UTF-8 (StreamDecoder's output) and so are the stops;
// then every emitted piece is valid UTF-8, because a held tail starts where a stop
// starts, which is a character boundary.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace ridge {

class StopMatcher {
 public:
  // Empty strings are ignored (they would match everywhere); no stops: a pass-through.
  explicit StopMatcher(std::vector<std::string> stops);

  struct Out {
    std::string text;  // safe to send now
    bool stopped;      // a stop matched: text is the last piece, end the generation
  };

  // Appends newly decoded text. After a stop (or flush) returns {"", stopped()}.
  Out push(std::string_view text);
  // End of generation: returns the held tail, cut before a stop if one completed in it
  // (then stopped() becomes true and finish_reason should be "stop").
  std::string flush();

  bool stopped() const { return stopped_; }
  // The stop that matched (earliest start; on a tie the longest); empty if none.
  const std::string& matched_stop() const { return matched_; }
  // Bytes currently held back (for tests and debugging).
  size_t held() const { return buf_.size(); }

 private:
  Out drain(bool final);

  std::vector<std::string> stops_;
  size_t max_len_ = 0;
  std::string buf_;  // decoded but not yet emitted; starts where a stop could start
  std::string matched_;
  bool stopped_ = false;
  bool done_ = false;
};

}  // namespace ridge
