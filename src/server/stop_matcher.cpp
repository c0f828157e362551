#include "server/stop_matcher.h"

#include <algorithm>

namespace ridge {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (auto& s : stops) {
    if (s.empty()) continue;
    max_len_ = std::max(max_len_, s.size());
    stops_.push_back(std::move(s));
  }
}

StopMatcher::Out StopMatcher::push(std::string_view text) {
  if (done_) return {{}, stopped_};
  buf_ += text;
  return drain(false);
}

std::string StopMatcher::flush() {
  if (done_) return {};
  Out o = drain(true);
  done_ = true;
  return std::move(o.text);
}

StopMatcher::Out StopMatcher::drain(bool final) {
  // Earliest complete match; on a tie the longest stop, so matched_stop() is the most
  // specific (the emitted text is the same either way).
  size_t m = std::string::npos;
  const std::string* hit = nullptr;
  for (const auto& s : stops_) {
    const size_t p = buf_.find(s);
    if (p == std::string::npos) continue;
    if (p < m || (p == m && s.size() > hit->size())) {
      m = p;
      hit = &s;
    }
  }

  // Earliest position whose suffix is a proper prefix of some stop: a stop may start
  // there once more text arrives. Only the last max_len_-1 bytes can qualify. At the
  // end of generation nothing more arrives, so nothing is pending.
  size_t h = buf_.size();
  if (!final) {
    const size_t from = buf_.size() - std::min(buf_.size(), max_len_ > 0 ? max_len_ - 1 : 0);
    for (size_t p = from; p < buf_.size() && h == buf_.size(); ++p) {
      const size_t n = buf_.size() - p;
      for (const auto& s : stops_) {
        if (s.size() > n && s.compare(0, n, buf_, p, n) == 0) {
          h = p;
          break;
        }
      }
    }
  }

  Out out{{}, false};
  if (m != std::string::npos && m <= h) {
    out.text = buf_.substr(0, m);
    out.stopped = stopped_ = done_ = true;
    matched_ = *hit;
    buf_.clear();
    return out;
  }
  // No decided stop: a complete match after h is kept in buf_ and found again later.
  out.text = buf_.substr(0, h);
  buf_.erase(0, h);
  return out;
}

}  // namespace ridge
