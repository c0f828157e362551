// A stream of requests with their timing: what `ridge serve --record FILE` writes and
// `ridge tune --workload FILE.jsonl` replays. JSON lines, one request per line:
//
//   {"t": 0.512, "prompt": [1, 450, 3681], "max_tokens": 128, "output_tokens": 97}
//
//   t              seconds from the start of the recording to the request's arrival
//   prompt         its token ids; or "prompt_len": N for a trace without the text (a
//                  replay then sends N random ids, so prefix sharing is lost)
//   max_tokens     the request's limit
//   output_tokens  what it generated; a replay generates exactly this many, EOS ignored,
//                  so that the load is the recorded one (absent: max_tokens)
//
// Blank lines and lines starting with '#' are skipped; the lines need not be in time
// order (the server writes a request when it ends). A bad line is an error naming the
// file and the line.
#pragma once
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace ridge {

struct TracedRequest {
  double t = 0;
  std::vector<int32_t> prompt;  // empty when the trace gives only prompt_len
  int32_t prompt_len = 0;       // == prompt.size() when the ids are given
  int32_t max_tokens = 0;
  int32_t output_tokens = 0;
};

// Parses a whole trace, sorted by t (stable). `name` goes into error messages
// ("NAME:LINE: ..."). Throws ridge::Error for a malformed line, a negative time, a token
// id outside [0, n_vocab) (n_vocab 0: unchecked) or an empty trace.
std::vector<TracedRequest> parse_request_trace(std::string_view text, std::string_view name, int32_t n_vocab = 0);
std::vector<TracedRequest> read_request_trace(const std::string& path, int32_t n_vocab = 0);
// One line, without the newline.
std::string request_trace_line(const TracedRequest& r);

// Appends requests to a trace file from any thread. A write that fails (a full disk, a
// removed directory) stops the recording with one warning on stderr; it never stops the
// server that records.
class TraceRecorder {
 public:
  // Throws ridge::Error when the file cannot be created.
  TraceRecorder(const std::string& path, double start_s);
  ~TraceRecorder();
  TraceRecorder(const TraceRecorder&) = delete;
  TraceRecorder& operator=(const TraceRecorder&) = delete;
  // arrival_s on the same clock as start_s.
  void record(double arrival_s, const std::vector<int32_t>& prompt, int32_t max_tokens, int32_t output_tokens);
  int64_t written() const;

 private:
  std::string path_;
  double start_s_;
  mutable std::mutex mu_;
  std::FILE* f_ = nullptr;
  int64_t written_ = 0;
};

}  // namespace ridge
