// Request parsing and validation for /v1/completions and /v1/chat/completions.
#include "server/openai_api.h"

#include <cmath>
#include <optional>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "server/structured_output.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ridge::server {
namespace {

using json = nlohmann::json;

const json* field(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

double number(const json& j, const char* key, double dflt, double lo, double hi) {
  const json* v = field(j, key);
  if (!v) return dflt;
  if (!v->is_number()) throw ApiError(400, std::string(key) + " must be a number", key);
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi))
    throw ApiError(400, fmt::format("{} must be in [{}, {}], got {}", key, lo, hi, x), key);
  return x;
}

int64_t integer(const json& j, const char* key, int64_t dflt, int64_t lo, int64_t hi) {
  const json* v = field(j, key);
  if (!v) return dflt;
  if (!v->is_number_integer()) {
    // 2.0 is an integer to a JavaScript client.
    if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() && std::abs(v->get<double>()) < 9e15)
      return integer(json{{key, int64_t(v->get<double>())}}, key, dflt, lo, hi);
    throw ApiError(400, std::string(key) + " must be an integer", key);
  }
  const int64_t x = v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX) ? INT64_MAX : v->get<int64_t>();
  if (x < lo || x > hi) throw ApiError(400, fmt::format("{} must be in [{}, {}], got {}", key, lo, hi, x), key);
  return x;
}

bool boolean(const json& j, const char* key, bool dflt) {
  const json* v = field(j, key);
  if (!v) return dflt;
  if (!v->is_boolean()) throw ApiError(400, std::string(key) + " must be a boolean", key);
  return v->get<bool>();
}

// "speculative": absent or true, the server's choice; false, off; an object chooses the
// method and depth, each key it leaves out taken from the server's configuration.
std::optional<SpeculativeConfig> parse_speculative(const json& j, const SpeculativeConfig& server) {
  const json* v = field(j, "speculative");
  if (!v) return std::nullopt;
  if (v->is_boolean()) {
    if (v->get<bool>()) return std::nullopt;
    SpeculativeConfig off = server;
    off.method = SpecMethod::None;
    return off;
  }
  if (!v->is_object()) throw ApiError(400, "speculative must be a boolean or an object", "speculative");
  for (const auto& [key, _] : v->items())
    if (key != "method" && key != "num_speculative_tokens" && key != "prompt_lookup_min" && key != "prompt_lookup_max" &&
        key != "adaptive")
      throw ApiError(400, fmt::format("speculative.{} is not a known key (method, num_speculative_tokens, "
                                      "prompt_lookup_min, prompt_lookup_max, adaptive)", key), "speculative." + key);
  SpeculativeConfig c = server;
  if (const json* m = field(*v, "method")) {
    const std::string s = m->is_string() ? m->get<std::string>() : "";
    if (s == "ngram") c.method = SpecMethod::Ngram;
    else if (s == "suffix") c.method = SpecMethod::Suffix;
    else if (s == "draft") c.method = SpecMethod::Draft;
    else if (s == "none") c.method = SpecMethod::None;
    else throw ApiError(400, "speculative.method must be \"ngram\", \"suffix\", \"draft\" or \"none\"", "speculative.method");
    if (c.method == SpecMethod::Draft && server.draft_model.empty())
      throw ApiError(400, "speculative.method \"draft\": the server has no draft model (--draft-model)",
                     "speculative.method");
  } else if (c.method == SpecMethod::None) {
    // An object asks for speculation: the server's draft model when it has one.
    c.method = server.draft_model.empty() ? SpecMethod::Ngram : SpecMethod::Draft;
  }
  auto get = [&](const char* key, int32_t dflt, int32_t hi) {
    try {
      return int32_t(integer(*v, key, dflt, 1, hi));
    } catch (ApiError& e) {
      throw ApiError(400, "speculative." + std::string(e.what()), std::string("speculative.") + key);
    }
  };
  c.num_speculative_tokens = get("num_speculative_tokens", c.num_speculative_tokens, 32);
  // ridge's: false verifies every proposed token, whatever it costs (to measure a proposer).
  try {
    c.adaptive = boolean(*v, "adaptive", c.adaptive);
  } catch (ApiError& e) {
    throw ApiError(400, "speculative." + std::string(e.what()), "speculative.adaptive");
  }
  c.prompt_lookup_max = get("prompt_lookup_max", c.prompt_lookup_max, 64);
  c.prompt_lookup_min = get("prompt_lookup_min", std::min(c.prompt_lookup_min, c.prompt_lookup_max), 64);
  if (c.prompt_lookup_min > c.prompt_lookup_max)
    throw ApiError(400, "speculative.prompt_lookup_min is above prompt_lookup_max", "speculative.prompt_lookup_min");
  return c;
}

// Known but not served yet: refused by name rather than silently ignored.
void refuse_unsupported(const json& j, Endpoint ep) {
  if (const json* t = field(j, "tools"); t && !(t->is_array() && t->empty()))
    throw ApiError(400, "tools (function calling) is not supported by ridge yet", "tools");
  if (const json* t = field(j, "tool_choice"); t && !(t->is_string() && t->get<std::string>() == "none"))
    throw ApiError(400, "tool_choice is not supported by ridge yet", "tool_choice");
  if (field(j, "functions") || field(j, "function_call"))
    throw ApiError(400, "functions / function_call are not supported by ridge", "functions");
  if (ep == Endpoint::Completions && field(j, "suffix"))
    throw ApiError(400, "suffix (fill-in-the-middle) is not supported by ridge yet", "suffix");
  if (const json* b = field(j, "best_of"); b && !(b->is_number_integer() && b->get<int64_t>() <= 1))
    throw ApiError(400, "best_of > 1 is not supported by ridge yet", "best_of");
}

std::vector<int32_t> token_list(const json& a, const Tokenizer& tok, const char* param) {
  std::vector<int32_t> ids;
  ids.reserve(a.size());
  for (const json& v : a) {
    if (!v.is_number_integer()) throw ApiError(400, std::string(param) + " must be a string or a list of token ids", param);
    const int64_t id = v.get<int64_t>();
    if (id < 0 || id >= tok.n_vocab())
      throw ApiError(400, fmt::format("token id {} is out of range (vocabulary of {})", id, tok.n_vocab()), param);
    ids.push_back(int32_t(id));
  }
  return ids;
}

// prompt: "text" | ["text", ...] | [ids] | [[ids], ...]
void parse_prompts(const json& j, const ApiContext& ctx, ParsedRequest& r) {
  const json* p = field(j, "prompt");
  if (!p) throw ApiError(400, "prompt is required", "prompt");
  const Tokenizer& tok = *ctx.tok;
  auto add_text = [&](const json& s) {
    r.prompt_texts.push_back(s.get<std::string>());
    r.prompts.push_back(tokenize_prompt(tok, r.prompt_texts.back(), true));
  };
  auto add_ids = [&](const json& a) {
    r.prompts.push_back(token_list(a, tok, "prompt"));
    std::vector<int32_t> shown = r.prompts.back();
    if (!shown.empty() && shown[0] == tok.bos()) shown.erase(shown.begin());
    r.prompt_texts.push_back(tok.decode(shown));
  };
  if (p->is_string()) {
    add_text(*p);
  } else if (p->is_array() && !p->empty() && (*p)[0].is_number()) {
    add_ids(*p);
  } else if (p->is_array() && !p->empty()) {
    for (const json& e : *p) {
      if (e.is_string()) add_text(e);
      else if (e.is_array()) add_ids(e);
      else throw ApiError(400, "prompt must be a string, a list of strings or a list of token ids", "prompt");
    }
  } else {
    throw ApiError(400, "prompt must be a non-empty string, list of strings or list of token ids", "prompt");
  }
  if (r.prompts.size() > 1024) throw ApiError(400, "at most 1024 prompts per request", "prompt");
  for (const auto& ids : r.prompts)
    if (ids.empty()) throw ApiError(400, "the prompt is empty (no tokens)", "prompt");
}

void parse_messages(const json& j, const ApiContext& ctx, ParsedRequest& r) {
  const json* m = field(j, "messages");
  if (!m || !m->is_array() || m->empty()) throw ApiError(400, "messages must be a non-empty list", "messages");
  if (ctx.chat_template.empty())
    throw ApiError(400, "this model has no chat template; start the server with --chat-template FILE", "messages");
  nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
  for (const json& msg : *m) {
    if (!msg.is_object()) throw ApiError(400, "each message must be an object with role and content", "messages");
    const json* role = field(msg, "role");
    if (!role || !role->is_string()) throw ApiError(400, "each message needs a string role", "messages");
    nlohmann::ordered_json out = nlohmann::ordered_json::object();
    out["role"] = role->get<std::string>();
    const json* content = field(msg, "content");
    if (!content) {
      out["content"] = "";
    } else if (content->is_string()) {
      out["content"] = content->get<std::string>();
    } else if (content->is_array()) {
      // Content parts: text only (images and audio need a multimodal model).
      std::string text;
      for (const json& part : *content) {
        const json* type = part.is_object() ? field(part, "type") : nullptr;
        if (!type || !type->is_string() || type->get<std::string>() != "text" || !field(part, "text") ||
            !part["text"].is_string())
          throw ApiError(400, "only text content parts are supported", "messages");
        text += part["text"].get<std::string>();
      }
      out["content"] = text;
    } else {
      throw ApiError(400, "message content must be a string or a list of content parts", "messages");
    }
    if (const json* name = field(msg, "name"); name && name->is_string()) out["name"] = name->get<std::string>();
    msgs.push_back(std::move(out));
  }
  ChatOptions co;
  co.add_generation_prompt = boolean(j, "add_generation_prompt", true);
  co.bos_token = ctx.bos_token;
  co.eos_token = ctx.eos_token;
  std::string text;
  try {
    text = render_chat(ctx.chat_template, msgs, co);
  } catch (const std::exception& e) {
    throw ApiError(400, std::string("the chat template failed: ") + e.what(), "messages");
  }
  r.prompt_texts.push_back(text);
  r.prompts.push_back(tokenize_prompt(*ctx.tok, text, true));
}

std::vector<std::string> parse_stop(const json& j) {
  std::vector<std::string> out;
  const json* s = field(j, "stop");
  if (!s) return out;
  if (s->is_string()) {
    out.push_back(s->get<std::string>());
  } else if (s->is_array()) {
    for (const json& e : *s) {
      if (!e.is_string()) throw ApiError(400, "stop must be a string or a list of strings", "stop");
      out.push_back(e.get<std::string>());
    }
  } else {
    throw ApiError(400, "stop must be a string or a list of strings", "stop");
  }
  if (out.size() > 64) throw ApiError(400, "at most 64 stop strings", "stop");
  std::erase_if(out, [](const std::string& x) { return x.empty(); });
  return out;
}

std::vector<std::pair<int32_t, float>> parse_logit_bias(const json& j, const Tokenizer& tok) {
  std::vector<std::pair<int32_t, float>> out;
  const json* b = field(j, "logit_bias");
  if (!b) return out;
  if (!b->is_object()) throw ApiError(400, "logit_bias must be an object of token id -> bias", "logit_bias");
  for (auto it = b->begin(); it != b->end(); ++it) {
    char* end = nullptr;
    const long long id = std::strtoll(it.key().c_str(), &end, 10);
    if (it.key().empty() || *end || id < 0 || id >= tok.n_vocab())
      throw ApiError(400, fmt::format("logit_bias key '{}' is not a token id of this model (0..{})", it.key(),
                                      tok.n_vocab() - 1), "logit_bias");
    if (!it.value().is_number()) throw ApiError(400, "logit_bias values must be numbers", "logit_bias");
    const double v = it.value().get<double>();
    if (!(v >= -100 && v <= 100)) throw ApiError(400, "logit_bias values must be in [-100, 100]", "logit_bias");
    out.emplace_back(int32_t(id), float(v));
  }
  return out;
}

}  // namespace

void check_model(const std::string& model, const ApiContext& ctx) {
  if (!model.empty() && model != ctx.model_name)
    throw ApiError(404, fmt::format("The model `{}` does not exist.", model), "model", "NotFoundError");
}

std::vector<int32_t> tokenize_prompt(const Tokenizer& tok, const std::string& text, bool add_special) {
  std::vector<int32_t> ids = tok.encode(text, false, true);
  if (add_special && tok.add_bos() && tok.bos() >= 0 && (ids.empty() || ids[0] != tok.bos()))
    ids.insert(ids.begin(), tok.bos());
  return ids;
}

namespace {

// Where in the document a value failed to parse (a number beyond a double's range is
// valid JSON syntax but no double): the path of the value, as `messages[0].content`.
class ErrorLocator : public nlohmann::json_sax<json> {
 public:
  std::string path, token;

  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool start_object(std::size_t) override { return open(true); }
  bool key(string_t& k) override {
    stack_.back().key = k;
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(false); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t, const std::string& last_token, const nlohmann::detail::exception&) override {
    token = last_token;
    for (size_t i = 0; i < stack_.size(); ++i) {
      const Frame& f = stack_[i];
      if (f.object) path += (path.empty() ? "" : ".") + f.key;
      else  // an enclosing array counted its open element; the failing value is not counted yet
        path += "[" + std::to_string(i + 1 < stack_.size() ? f.index : f.index + 1) + "]";
    }
    return false;
  }

 private:
  struct Frame {
    bool object;
    std::string key;
    int64_t index = -1;  // arrays: the last element seen
  };
  bool value() {
    if (!stack_.empty() && !stack_.back().object) ++stack_.back().index;
    return true;
  }
  bool open(bool object) {
    value();
    stack_.push_back({object, {}});
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }
  std::vector<Frame> stack_;
};

}  // namespace

// Nesting past this is refused before anything walks the body recursively (a copy or a
// dump of a value recurses once per level; a JSON schema is held to 64 levels anyway).
constexpr int kMaxBodyDepth = 256;

json parse_body(std::string_view body) {
  json j;
  try {
    bool too_deep = false;
    j = json::parse(body, [&](int depth, json::parse_event_t, json&) {
      if (depth > kMaxBodyDepth) too_deep = true;
      return !too_deep;
    });
    if (too_deep) throw ApiError(400, fmt::format("the request body nests deeper than {} levels", kMaxBodyDepth));
  } catch (const json::parse_error& e) {
    throw ApiError(400, std::string("the request body is not valid JSON: ") + e.what());
  } catch (const json::exception& e) {
    // Well-formed but unrepresentable (out_of_range.406: a number beyond a double): the
    // client's mistake, in a named field, never an internal error.
    ErrorLocator loc;
    json::sax_parse(body, &loc);
    const std::string where = loc.path.empty() ? "the request body" : loc.path;
    throw ApiError(400,
                   loc.token.empty() ? fmt::format("{} holds a value ridge cannot represent: {}", where, e.what())
                                     : fmt::format("{} is not a representable number: {} is beyond the range of a "
                                                   "double", where, loc.token),
                   loc.path);
  }
  if (!j.is_object()) throw ApiError(400, "the request body must be a JSON object");
  return j;
}

ParsedRequest parse_request(Endpoint ep, std::string_view body, const ApiContext& ctx) {
  const json j = parse_body(body);
  // A JSON schema's properties are generated in the schema's order: parse again keeping it.
  for (const char* k : {"response_format", "guided_json", "json_schema"})
    if (j.contains(k)) {
      const nlohmann::ordered_json o = nlohmann::ordered_json::parse(body);
      return parse_request_json(ep, j, ctx, &o);
    }
  return parse_request_json(ep, j, ctx);
}

ParsedRequest parse_request_json(Endpoint ep, const json& j, const ApiContext& ctx, const nlohmann::ordered_json* ordered) {
  if (const json* m = field(j, "model")) {
    if (!m->is_string()) throw ApiError(400, "model must be a string", "model");
    check_model(m->get<std::string>(), ctx);
  }
  refuse_unsupported(j, ep);

  ParsedRequest r;
  r.endpoint = ep;
  r.stream = boolean(j, "stream", false);
  if (const json* so = field(j, "stream_options")) {
    if (!so->is_object()) throw ApiError(400, "stream_options must be an object", "stream_options");
    r.include_usage = boolean(*so, "include_usage", false);
  }
  r.n = int32_t(integer(j, "n", 1, 1, ctx.max_n));
  r.ridge_timings = boolean(j, "ridge_timings", false);
  if (ep == Endpoint::Completions) {
    r.echo = boolean(j, "echo", false);
    r.logprobs = int32_t(integer(j, "logprobs", -1, 0, ctx.max_logprobs));
    if (r.echo && r.logprobs >= 0)
      throw ApiError(400, "echo together with logprobs (prompt logprobs) is not supported by ridge yet", "echo");
    parse_prompts(j, ctx, r);
  } else {
    const bool lp = boolean(j, "logprobs", false);
    const int64_t top = integer(j, "top_logprobs", 0, 0, ctx.max_logprobs);
    if (field(j, "top_logprobs") && !lp) throw ApiError(400, "top_logprobs needs logprobs: true", "top_logprobs");
    r.logprobs = lp ? int32_t(top) : -1;
    parse_messages(j, ctx, r);
  }

  RequestParams p;
  SamplingParams& sp = p.sampling;  // OpenAI's defaults, not the CLI's
  sp.temperature = float(number(j, "temperature", 1.0, 0.0, 100.0));
  sp.top_p = float(number(j, "top_p", 1.0, 1e-9, 1.0));
  sp.top_k = int32_t(integer(j, "top_k", -1, -1, 1 << 30));
  sp.min_p = float(number(j, "min_p", 0.0, 0.0, 1.0));
  sp.presence_penalty = float(number(j, "presence_penalty", 0.0, -2.0, 2.0));
  sp.frequency_penalty = float(number(j, "frequency_penalty", 0.0, -2.0, 2.0));
  sp.repetition_penalty = float(number(j, "repetition_penalty", 1.0, 1e-6, 100.0));
  sp.penalty_last_n = -1;  // the whole history, as vLLM applies them
  sp.logit_bias = parse_logit_bias(j, *ctx.tok);
  p.ignore_eos = boolean(j, "ignore_eos", false);
  p.priority = int32_t(integer(j, "priority", 0, -1000000, 1000000));
  p.logprobs = r.logprobs;
  p.speculative = parse_speculative(j, ctx.speculative);
  if (ctx.grammars) {
    p.grammar = parse_structured_output(j, ordered, *ctx.grammars);
  } else if (const json* rf = field(j, "response_format");
             rf && !(rf->is_object() && rf->contains("type") && (*rf)["type"] == "text")) {
    throw ApiError(400, "response_format is not available here", "response_format");
  }
  if (const json* u = field(j, "user"); u && !u->is_string()) throw ApiError(400, "user must be a string", "user");
  const json* seed = field(j, "seed");
  if (seed && !seed->is_number_integer()) throw ApiError(400, "seed must be an integer", "seed");
  const std::vector<std::string> stop = parse_stop(j);

  const char* mt_key = ep == Endpoint::Chat && field(j, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  const bool mt_given = field(j, mt_key) != nullptr;
  const int64_t max_tokens = integer(j, mt_key, -1, ep == Endpoint::Chat ? 1 : 0, int64_t(1) << 30);

  std::random_device rd;
  for (size_t pi = 0; pi < r.prompts.size(); ++pi) {
    const int64_t n_prompt = int64_t(r.prompts[pi].size());
    if (n_prompt >= ctx.max_model_len || (mt_given && n_prompt + max_tokens > ctx.max_model_len))
      throw ApiError(400,
                     fmt::format("This model's maximum context length is {} tokens. However, you requested {} tokens "
                                 "({} in the {}, {} in the completion). Please reduce the length of the {} or completion.",
                                 ctx.max_model_len, n_prompt + std::max<int64_t>(max_tokens, 0), n_prompt,
                                 ep == Endpoint::Chat ? "messages" : "prompt", std::max<int64_t>(max_tokens, 0),
                                 ep == Endpoint::Chat ? "messages" : "prompt"),
                     ep == Endpoint::Chat ? "messages" : "prompt");
    for (int32_t k = 0; k < r.n; ++k) {
      ChoiceSpec c;
      c.prompt = r.prompts[pi];
      c.params = p;
      c.params.max_tokens = int32_t(mt_given ? max_tokens : ctx.max_model_len - n_prompt);
      // Each choice its own generator: a seeded choice never depends on its neighbours.
      const uint64_t base = seed ? uint64_t(seed->get<int64_t>()) : (uint64_t(rd()) << 32 | rd());
      c.params.sampling.seed = base + uint64_t(pi) * uint64_t(r.n) + uint64_t(k);
      c.stop = stop;
      r.choices.push_back(std::move(c));
    }
  }
  return r;
}

std::string token_text(const Tokenizer& tok, int32_t id) {
  const std::string& b = tok.piece_bytes(id);
  std::string out;
  size_t i = 0;
  while (i < b.size()) {
    const auto c = static_cast<unsigned char>(b[i]);
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = len > 0 && i + len <= b.size();
    for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(b[i + k]) & 0xC0) == 0x80;
    if (ok) {
      out.append(b, i, len);
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

HttpResponse error_response(int status, const std::string& message, const std::string& param, const std::string& type) {
  std::string t = type;
  if (t.empty())
    t = status == 401 ? "AuthenticationError" : status == 404 ? "NotFoundError" : status == 413 ? "RequestTooLarge"
      : status == 503 ? "ServiceUnavailableError" : status >= 500 ? "InternalServerError" : "BadRequestError";
  json e = {{"error", {{"message", message}, {"type", t}, {"param", param.empty() ? json() : json(param)}, {"code", status}}}};
  HttpResponse r;
  r.status = status;
  r.body = e.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

}  // namespace ridge::server
