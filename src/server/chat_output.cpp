// The output parsers of chat_output.h: <think> splitting, then one tool-call format.
#include "server/chat_output.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>

namespace ridge::server {
namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

size_t skip_ws(std::string_view s, size_t i) {
  while (i < s.size() && is_ws(s[i])) ++i;
  return i;
}

std::string_view trim(std::string_view s) {
  size_t a = skip_ws(s, 0), b = s.size();
  while (b > a && is_ws(s[b - 1])) --b;
  return s.substr(a, b - a);
}

// The longest proper prefix of `marker` that `buf` ends with: text that may still become
// the marker, held back until the next piece decides.
size_t partial_suffix(std::string_view buf, std::string_view marker) {
  for (size_t k = std::min(buf.size(), marker.size() - 1); k > 0; --k)
    if (buf.substr(buf.size() - k) == marker.substr(0, k)) return k;
  return 0;
}

// Where the JSON value starting at s[i] ends (one past it), or npos while it is not
// complete in s (a number or literal running to the end of s counts as not complete).
size_t json_value_end(std::string_view s, size_t i) {
  if (i >= s.size()) return std::string_view::npos;
  if (s[i] == '"') {
    for (size_t j = i + 1; j < s.size(); ++j) {
      if (s[j] == '\\') ++j;
      else if (s[j] == '"') return j + 1;
    }
    return std::string_view::npos;
  }
  if (s[i] == '{' || s[i] == '[') {
    int depth = 0;
    bool in_str = false;
    for (size_t j = i; j < s.size(); ++j) {
      const char c = s[j];
      if (in_str) {
        if (c == '\\') ++j;
        else if (c == '"') in_str = false;
      } else if (c == '"') {
        in_str = true;
      } else if (c == '{' || c == '[') {
        ++depth;
      } else if (c == '}' || c == ']') {
        if (--depth == 0) return j + 1;
      }
    }
    return std::string_view::npos;
  }
  for (size_t j = i; j < s.size(); ++j)
    if (is_ws(s[j]) || s[j] == ',' || s[j] == '}' || s[j] == ']' || s[j] == ';') return j;
  return std::string_view::npos;
}

bool decode_json_string(std::string_view quoted, std::string& out) {
  try {
    const nlohmann::json j = nlohmann::json::parse(quoted);
    if (!j.is_string()) return false;
    out = j.get<std::string>();
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

std::string new_tool_call_id() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  static const char* hex = "0123456789abcdef";
  std::string s = "call_";
  for (int i = 0; i < 24; ++i) s += hex[rng() & 15];
  return s;
}

void OutputDelta::append(OutputDelta&& d) {
  content += d.content;
  reasoning += d.reasoning;
  for (ToolCallDelta& c : d.calls) {
    if (!calls.empty() && calls.back().index == c.index) calls.back().arguments += c.arguments;
    else calls.push_back(std::move(c));
  }
}

// One format's parser over the content stream (the text after any thinking). Calls are
// numbered across the whole output; each call's name goes out once, then its arguments
// as they become certain.
class ChatOutputParser::Tools {
 public:
  virtual ~Tools() = default;
  virtual void feed(std::string_view text, bool final, OutputDelta& out) = 0;
  int32_t n_calls() const { return next_index_; }
  void set_names(std::vector<std::string> names) { names_ = std::move(names); }

 protected:
  struct Call {
    bool started = false, done = false;
    int32_t index = 0;
    size_t args_sent = 0;
  };

  // Call k of the current region: its name when known (empty: not yet), the raw text of
  // its arguments so far, and whether they are complete. A JSON string (arguments the
  // model encoded as a string) goes out decoded, when complete.
  void call(std::vector<Call>& calls, size_t k, std::string_view name, std::string_view args, bool complete,
            OutputDelta& out) {
    if (calls.size() <= k) calls.resize(k + 1);
    Call& c = calls[k];
    if (c.done || name.empty()) return;
    if (!c.started && !names_.empty() && std::find(names_.begin(), names_.end(), name) == names_.end()) {
      rejected_ = true;  // names no tool of the request: not a call
      return;
    }
    // Whitespace around the value is layout; inside, it goes out once text follows it.
    args = trim(args);
    if (!c.started) {
      c.started = true;
      c.index = next_index_++;
      out.calls.push_back({c.index, new_tool_call_id(), std::string(name), ""});
      after_call_ = true;
    }
    std::string send;
    if (!args.empty() && args[0] == '"') {
      if (complete && !decode_json_string(args, send)) send = std::string(args);
    } else if (args.size() > c.args_sent) {
      send = std::string(args.substr(c.args_sent));
      c.args_sent = args.size();
    }
    if (complete) {
      if (c.args_sent == 0 && send.empty()) send = "{}";
      c.done = true;
    }
    if (!send.empty()) {
      if (!out.calls.empty() && out.calls.back().index == c.index) out.calls.back().arguments += send;
      else out.calls.push_back({c.index, "", "", std::move(send)});
    }
  }

  // Content between calls: whitespace right after a call is layout, not an answer.
  void content(std::string_view t, OutputDelta& out) {
    if (after_call_) {
      const size_t i = skip_ws(t, 0);
      if (i == t.size()) return;
      t = t.substr(i);
      after_call_ = false;
    }
    out.content += t;
  }

  // A region of JSON call objects, `[{...}, ...]` or `{...}; {...}`: each object's
  // "name" and its "arguments" (or "parameters"). Returns where the parse stopped (after
  // the last whole value), and whether any call was named.
  size_t json_calls(std::vector<Call>& calls, std::string_view s, bool final, OutputDelta& out) {
    size_t i = skip_ws(s, 0);
    const bool array = i < s.size() && s[i] == '[';
    if (array) ++i;
    size_t k = 0, stop = i;
    while (true) {
      i = skip_ws(s, i);
      while (i < s.size() && (s[i] == ';' || (array && s[i] == ','))) i = skip_ws(s, i + 1);
      if (i >= s.size()) break;
      if (s[i] == ']' && array) {
        stop = i + 1;
        break;
      }
      if (s[i] != '{') break;
      const size_t end = object(calls, k++, s, i, final, out);
      if (end == std::string_view::npos) break;
      i = stop = end;
    }
    return stop;
  }

  // One call object at s[i]: returns its end, or npos while incomplete.
  size_t object(std::vector<Call>& calls, size_t k, std::string_view s, size_t i, bool final, OutputDelta& out) {
    std::string name;
    size_t a0 = std::string_view::npos, a1 = std::string_view::npos;
    size_t end = std::string_view::npos;
    ++i;  // '{'
    while (true) {
      i = skip_ws(s, i);
      if (i >= s.size()) break;
      if (s[i] == '}') {
        end = i + 1;
        break;
      }
      if (s[i] == ',') {
        ++i;
        continue;
      }
      if (s[i] != '"') break;
      const size_t kend = json_value_end(s, i);
      if (kend == std::string_view::npos) break;
      std::string key;
      decode_json_string(s.substr(i, kend - i), key);
      if (key != "name" && key != "arguments" && key != "parameters" && key != "type" && key != "id") {
        rejected_ = true;  // a call object has no other keys
        break;
      }
      i = skip_ws(s, kend);
      if (i >= s.size() || s[i] != ':') break;
      i = skip_ws(s, i + 1);
      if (i >= s.size()) break;
      const size_t vend = json_value_end(s, i);
      if (key == "name") {
        if (vend == std::string_view::npos) break;
        decode_json_string(s.substr(i, vend - i), name);
      } else if (key == "arguments" || key == "parameters") {
        a0 = i;
        a1 = vend;
      }
      if (vend == std::string_view::npos) break;
      i = vend;
    }
    const bool complete = end != std::string_view::npos || final;
    std::string_view args;
    if (a0 != std::string_view::npos)
      args = s.substr(a0, (a1 == std::string_view::npos ? s.size() : a1) - a0);
    call(calls, k, name, args, complete && (a1 != std::string_view::npos || a0 == std::string_view::npos || final),
         out);
    return end;
  }

  bool after_call_ = false;
  bool rejected_ = false;  // an object that is no call (another name, or not a call's keys)

 private:
  int32_t next_index_ = 0;
  std::vector<std::string> names_;
};

namespace {

using Tools = ChatOutputParser::Tools;
constexpr size_t npos = std::string_view::npos;

// Text with calls in marked regions (hermes): content outside, a JSON object inside.
class HermesTools : public Tools {
 public:
  void feed(std::string_view text, bool final, OutputDelta& out) override {
    buf_ += text;
    while (true) {
      if (!in_call_) {
        const size_t p = buf_.find(kOpen);
        const size_t safe = p != npos ? p : buf_.size() - (final ? 0 : partial_suffix(buf_, kOpen));
        content(std::string_view(buf_).substr(0, safe), out);
        if (p == npos) {
          buf_.erase(0, safe);
          return;
        }
        buf_.erase(0, p + kOpen.size());
        in_call_ = true;
        calls_.clear();
        continue;
      }
      const size_t p = buf_.find(kClose);
      if (p == npos) {
        const std::string_view body(buf_.data(), buf_.size() - (final ? 0 : partial_suffix(buf_, kClose)));
        json_calls(calls_, body, final, out);
        if (final && !named()) content(std::string(kOpen) + buf_, out);
        return;
      }
      json_calls(calls_, std::string_view(buf_).substr(0, p), true, out);
      if (!named()) content(std::string(kOpen) + buf_.substr(0, p + kClose.size()), out);
      buf_.erase(0, p + kClose.size());
      in_call_ = false;
    }
  }

 private:
  bool named() const {
    return std::any_of(calls_.begin(), calls_.end(), [](const Call& c) { return c.started; });
  }
  static constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";
  std::string buf_;
  bool in_call_ = false;
  std::vector<Call> calls_;
};

// The whole answer is calls when it starts like them (json, llama3): `[`, `{`, or
// Llama's <|python_tag|>; else it is content.
class JsonTools : public Tools {
 public:
  void feed(std::string_view text, bool final, OutputDelta& out) override {
    raw_ += text;
    if (mode_ == Mode::Begin) {
      size_t i = skip_ws(raw_, 0);
      const std::string_view rest = std::string_view(raw_).substr(i);
      if (rest.starts_with(kTag)) {
        mode_ = Mode::Calls;
        start_ = i + kTag.size();
      } else if (!rest.empty() && (rest[0] == '[' || rest[0] == '{')) {
        mode_ = Mode::Calls;
        start_ = i;
      } else if (!final && (rest.empty() || kTag.starts_with(rest))) {
        return;
      } else {
        mode_ = Mode::Content;
        content(raw_, out);
        return;
      }
    }
    if (mode_ == Mode::Content) {
      content(text, out);
      return;
    }
    const std::string_view region = std::string_view(raw_).substr(start_);
    const size_t stop = json_calls(calls_, region, final, out);
    const bool named = std::any_of(calls_.begin(), calls_.end(), [](const Call& c) { return c.started; });
    if (rejected_ && !named) {  // an answer that happens to be JSON: it streams as content from here
      mode_ = Mode::Content;
      content(raw_, out);
      return;
    }
    if (!final) return;
    if (!named) content(raw_, out);
    else if (!trim(region.substr(stop)).empty()) content(region.substr(stop), out);
  }

 private:
  static constexpr std::string_view kTag = "<|python_tag|>";
  enum class Mode { Begin, Calls, Content } mode_ = Mode::Begin;
  std::string raw_;
  size_t start_ = 0;
  std::vector<Call> calls_;
};

// tool_choice names the function: the output is its arguments.
class NamedTools : public Tools {
 public:
  explicit NamedTools(std::string name) : name_(std::move(name)) {}
  void feed(std::string_view text, bool final, OutputDelta& out) override {
    raw_ += text;
    const size_t i = skip_ws(raw_, 0);
    call(calls_, 0, name_, std::string_view(raw_).substr(i), final, out);
  }

 private:
  std::string name_, raw_;
  std::vector<Call> calls_;
};

// Content, then `[TOOL_CALLS]` and the calls: a JSON array (v3), or name[ARGS]{...}
// repeated (v11, each maybe after its own [TOOL_CALLS]).
class MistralTools : public Tools {
 public:
  void feed(std::string_view text, bool final, OutputDelta& out) override {
    buf_ += text;
    if (!in_calls_) {
      const size_t p = buf_.find(kTag);
      const size_t safe = p != npos ? p : buf_.size() - (final ? 0 : partial_suffix(buf_, kTag));
      content(std::string_view(buf_).substr(0, safe), out);
      buf_.erase(0, p != npos ? p + kTag.size() : safe);
      if (p == npos) return;
      in_calls_ = true;
    }
    const std::string_view s = buf_;
    const size_t i = skip_ws(s, 0);
    if (i == s.size()) return;
    if (s[i] == '[') {
      const size_t stop = json_calls(calls_, s, final, out);
      if (!final) return;
      if (std::none_of(calls_.begin(), calls_.end(), [](const Call& c) { return c.started; }))
        content(std::string(kTag) + buf_, out);  // no call after all: the text as it was
      else if (!trim(s.substr(stop)).empty())
        content(s.substr(stop), out);
      return;
    }
    size_t pos = 0, k = 0;
    while (true) {
      pos = skip_ws(s, pos);
      if (s.substr(pos).starts_with(kTag)) pos = skip_ws(s, pos + kTag.size());
      const size_t a = s.find(kArgs, pos);
      if (a == npos) {
        if (final && !trim(s.substr(pos)).empty() && calls_.size() <= k)
          content(k == 0 ? std::string(kTag) + std::string(s) : std::string(s.substr(pos)), out);
        return;
      }
      std::string_view name = trim(s.substr(pos, a - pos));
      if (const size_t id = name.find(kCallId); id != npos) name = trim(name.substr(0, id));
      const size_t v = skip_ws(s, a + kArgs.size());
      const size_t end = json_value_end(s, v);
      const std::string_view args = v < s.size() ? s.substr(v, (end == npos ? s.size() : end) - v) : std::string_view();
      call(calls_, k++, name, args, end != npos || final, out);
      if (end == npos) return;
      pos = end;
    }
  }

 private:
  static constexpr std::string_view kTag = "[TOOL_CALLS]", kArgs = "[ARGS]", kCallId = "[CALL_ID]";
  std::string buf_;
  bool in_calls_ = false;
  std::vector<Call> calls_;
};

// DeepSeek V3 / R1 / V3.1: calls between <｜tool▁call▁begin｜> and <｜tool▁call▁end｜>.
class DeepSeekTools : public Tools {
 public:
  void feed(std::string_view text, bool final, OutputDelta& out) override {
    buf_ += text;
    if (!in_calls_) {
      size_t p = buf_.find(kCallsBegin);
      size_t len = kCallsBegin.size();
      if (const size_t q = buf_.find(kBegin); q < p) p = q, len = 0;  // V3.1 may open a call at once
      const size_t safe = p != npos ? p
                                    : buf_.size() - (final ? 0 : std::max(partial_suffix(buf_, kCallsBegin),
                                                                          partial_suffix(buf_, kBegin)));
      content(std::string_view(buf_).substr(0, safe), out);
      buf_.erase(0, p != npos ? p + len : safe);
      if (p == npos) return;
      in_calls_ = true;
    }
    const std::string_view s = buf_;
    size_t pos = 0, k = 0;
    while (true) {
      const size_t b = s.find(kBegin, pos);
      if (b == npos) break;
      const size_t body = b + kBegin.size();
      const size_t e = s.find(kEnd, body);
      const bool complete = e != npos || final;
      const size_t body_end = e != npos ? e : s.size() - (final ? 0 : partial_suffix(s, kEnd));
      one(k++, s.substr(body, body_end - body), complete, final, out);
      if (e == npos) return;
      pos = e + kEnd.size();
    }
    if (final) {  // what follows the calls' end marker, if anything
      const size_t t = s.find(kCallsEnd, pos);
      const std::string_view tail = t != npos ? s.substr(t + kCallsEnd.size()) : s.substr(pos);
      if (!trim(tail).empty()) content(tail, out);
    }
  }

 private:
  void one(size_t k, std::string_view body, bool complete, bool final, OutputDelta& out) {
    const size_t sep = body.find(kSep);
    if (sep == npos) return;
    const std::string_view prefix = trim(body.substr(0, sep)), rest = body.substr(sep + kSep.size());
    if (prefix != "function") {  // V3.1: name<sep>arguments
      call(calls_, k, prefix, rest, complete, out);
      return;
    }
    const size_t nl = rest.find('\n');
    if (nl == npos) {
      if (complete) call(calls_, k, trim(rest), "", true, out);
      return;
    }
    const std::string_view name = trim(rest.substr(0, nl)), after = rest.substr(nl + 1);
    const size_t fence = after.find("```");
    if (fence == npos) {
      if (complete) call(calls_, k, name, trim(after), true, out);
      else call(calls_, k, name, "", false, out);
      return;
    }
    size_t a0 = after.find('\n', fence);
    if (a0 == npos) {
      call(calls_, k, name, "", complete, out);
      return;
    }
    ++a0;
    const size_t close = after.find("\n```", a0);
    if (close != npos) {
      call(calls_, k, name, after.substr(a0, close - a0), true, out);
    } else {
      const size_t held = final || complete ? 0 : partial_suffix(after, "\n```");
      call(calls_, k, name, after.substr(a0, after.size() - held - a0), complete, out);
    }
  }

  static constexpr std::string_view kCallsBegin = "<｜tool▁calls▁begin｜>", kCallsEnd = "<｜tool▁calls▁end｜>",
                                    kBegin = "<｜tool▁call▁begin｜>", kEnd = "<｜tool▁call▁end｜>",
                                    kSep = "<｜tool▁sep｜>";
  std::string buf_;
  bool in_calls_ = false;
  std::vector<Call> calls_;
};

// gpt-oss's harmony: messages of a header (channel, recipient) and a body. The output
// starts in a header: the prompt ends with `<|start|>assistant`.
class HarmonyTools : public Tools {
 public:
  void feed(std::string_view text, bool final, OutputDelta& out) override {
    buf_ += text;
    while (true) {
      if (in_header_) {
        const size_t m = buf_.find(kMessage);
        if (m == npos) {
          // A model that writes no header at all: its text is the answer.
          if (final && buf_.find("<|") == npos) content(buf_, out);
          return;
        }
        header(std::string_view(buf_).substr(0, m));
        buf_.erase(0, m + kMessage.size());
        in_header_ = false;
        body_sent_ = 0;
        if (!recipient_.empty()) ++k_;
        continue;
      }
      size_t e = npos, elen = 0;
      for (std::string_view mk : kEnds)
        if (const size_t p = buf_.find(mk); p < e) e = p, elen = mk.size();
      size_t safe = e;
      if (e == npos) {
        size_t held = 0;
        if (!final)
          for (std::string_view mk : kEnds) held = std::max(held, partial_suffix(buf_, mk));
        safe = buf_.size() - held;
      }
      const std::string_view body = std::string_view(buf_).substr(0, safe);
      if (!recipient_.empty()) {
        call(calls_, k_ - 1, recipient_, body, e != npos || final, out);
      } else if (safe > body_sent_) {
        const std::string_view piece = body.substr(body_sent_);
        if (channel_ == "analysis") out.reasoning += piece;
        else content(piece, out);
        body_sent_ = safe;
      }
      if (e == npos) return;
      buf_.erase(0, e + elen);
      in_header_ = true;
    }
  }

 private:
  void header(std::string_view h) {
    channel_.clear();
    recipient_.clear();
    if (const size_t c = h.find("<|channel|>"); c != npos) {
      size_t i = c + 11, j = i;
      while (j < h.size() && !is_ws(h[j]) && h[j] != '<') ++j;
      channel_ = std::string(h.substr(i, j - i));
    }
    if (const size_t t = h.find("to="); t != npos) {
      size_t i = t + 3, j = i;
      while (j < h.size() && !is_ws(h[j]) && h[j] != '<') ++j;
      std::string_view r = h.substr(i, j - i);
      if (r.starts_with("functions.")) r.remove_prefix(10);
      recipient_ = std::string(r);
    }
  }

  static constexpr std::string_view kMessage = "<|message|>";
  static constexpr std::string_view kEnds[] = {"<|end|>", "<|call|>", "<|return|>", "<|start|>"};
  std::string buf_;
  bool in_header_ = true;
  std::string channel_, recipient_;
  size_t body_sent_ = 0, k_ = 0;
  std::vector<Call> calls_;
};

}  // namespace

ToolFormat tool_format_from_name(std::string_view n) {
  if (n == "hermes" || n == "qwen" || n == "qwen3") return ToolFormat::Hermes;
  if (n == "llama3_json" || n == "llama3" || n == "llama4_json") return ToolFormat::Llama3;
  if (n == "mistral") return ToolFormat::Mistral;
  if (n == "deepseek_v3" || n == "deepseek" || n == "deepseek_v31" || n == "deepseek_r1") return ToolFormat::DeepSeek;
  if (n == "openai" || n == "harmony" || n == "gpt-oss") return ToolFormat::Harmony;
  if (n == "json" || n == "generic") return ToolFormat::Json;
  return ToolFormat::None;
}

const char* tool_format_name(ToolFormat f) {
  switch (f) {
    case ToolFormat::None: return "none";
    case ToolFormat::Hermes: return "hermes";
    case ToolFormat::Llama3: return "llama3_json";
    case ToolFormat::Mistral: return "mistral";
    case ToolFormat::DeepSeek: return "deepseek_v3";
    case ToolFormat::Harmony: return "openai";
    case ToolFormat::Json: return "json";
    case ToolFormat::Named: return "named";
  }
  return "?";
}

ToolFormat detect_tool_format(std::string_view t) {
  if (t.find("<|channel|>") != npos && t.find("<|message|>") != npos) return ToolFormat::Harmony;
  if (t.find("<tool_call>") != npos) return ToolFormat::Hermes;
  if (t.find("tool▁call▁begin") != npos) return ToolFormat::DeepSeek;
  if (t.find("[TOOL_CALLS]") != npos) return ToolFormat::Mistral;
  if (t.find("<|python_tag|>") != npos || (t.find("<|start_header_id|>") != npos && t.find("ipython") != npos))
    return ToolFormat::Llama3;
  return ToolFormat::Json;
}

bool template_thinks(std::string_view t) { return t.find("</think>") != npos; }

ChatOutputParser::ChatOutputParser(OutputFormat f) : f_(std::move(f)) {
  switch (f_.tools) {
    case ToolFormat::None: break;
    case ToolFormat::Hermes: tools_ = std::make_unique<HermesTools>(); break;
    case ToolFormat::Llama3:
    case ToolFormat::Json: tools_ = std::make_unique<JsonTools>(); break;
    case ToolFormat::Mistral: tools_ = std::make_unique<MistralTools>(); break;
    case ToolFormat::DeepSeek: tools_ = std::make_unique<DeepSeekTools>(); break;
    case ToolFormat::Harmony: tools_ = std::make_unique<HarmonyTools>(); break;
    case ToolFormat::Named: tools_ = std::make_unique<NamedTools>(f_.named_tool); break;
  }
  if (tools_) tools_->set_names(f_.tool_names);
  if (f_.tools == ToolFormat::Harmony) f_.think = false;  // its channels say what is thinking
  if (f_.think) think_ = f_.start_in_think ? Think::Inside : Think::Begin;
}

ChatOutputParser::~ChatOutputParser() = default;

int32_t ChatOutputParser::n_calls() const { return tools_ ? tools_->n_calls() : 0; }

OutputDelta ChatOutputParser::route(std::string_view content, bool final) {
  OutputDelta d;
  if (tools_) {
    tools_->feed(content, final, d);
    return d;
  }
  d.content = std::string(content);
  return d;
}

OutputDelta ChatOutputParser::feed(std::string_view text) {
  if (think_ == Think::After) {
    if (!content_started_ && f_.think) {  // the layout after </think>
      const size_t i = skip_ws(text, 0);
      if (i == text.size()) return {};
      text.remove_prefix(i);
    }
    content_started_ = true;
    return route(text, false);
  }
  held_ += text;
  OutputDelta d;
  if (think_ == Think::Begin) {
    const std::string_view rest = std::string_view(held_).substr(skip_ws(held_, 0));
    if (rest.starts_with("<think>")) {
      held_ = std::string(rest.substr(7));
      think_ = Think::Inside;
    } else if (std::string_view("<think>").starts_with(rest)) {
      return {};  // nothing but whitespace and a part of the tag yet
    } else {
      think_ = Think::After;
      content_started_ = true;  // no thinking: the text is the answer as written
      std::string all = std::move(held_);
      held_.clear();
      return route(all, false);
    }
  }
  const size_t end = held_.find("</think>");
  const size_t safe = end != npos ? end : held_.size() - partial_suffix(held_, "</think>");
  std::string_view r = std::string_view(held_).substr(0, safe);
  if (!reasoning_started_) {
    r.remove_prefix(skip_ws(r, 0));
    reasoning_started_ = !r.empty();
  }
  size_t body = r.size();
  while (body > 0 && is_ws(r[body - 1])) --body;
  if (body > 0) {
    d.reasoning = reasoning_ws_ + std::string(r.substr(0, body));
    reasoning_ws_.clear();
  }
  reasoning_ws_ += r.substr(body);
  if (end == npos) {
    held_.erase(0, safe);
    return d;
  }
  reasoning_ws_.clear();
  const std::string rest = held_.substr(end + 8);
  held_.clear();
  think_ = Think::After;
  d.append(feed(rest));
  return d;
}

OutputDelta ChatOutputParser::finish() {
  OutputDelta d;
  if (think_ == Think::Begin) {
    think_ = Think::After;
    content_started_ = true;
    d = route(held_, false);
  } else if (think_ == Think::Inside) {
    // The thinking never ended (max_tokens): what there is of it is reasoning.
    std::string_view r = held_;
    if (!reasoning_started_) r.remove_prefix(skip_ws(r, 0));
    size_t body = r.size();
    while (body > 0 && is_ws(r[body - 1])) --body;
    if (body > 0) d.reasoning = reasoning_ws_ + std::string(r.substr(0, body));
    think_ = Think::After;
  }
  held_.clear();
  d.append(route("", true));
  return d;
}

}  // namespace ridge::server
