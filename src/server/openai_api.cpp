// Request parsing and validation for /v1/completions and /v1/chat/completions.
#include "server/openai_api.h"

#include <cmath>
#include <optional>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "grammar/json_schema.h"
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
  if (ep == Endpoint::Completions)
    for (const char* k : {"tools", "tool_choice"})
      if (field(j, k)) throw ApiError(400, fmt::format("{} belongs to /v1/chat/completions", k), k);
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

std::string content_text(const json& content, const std::string& at) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    throw ApiError(400, at + ".content must be a string or a list of content parts", at + ".content");
  // Content parts: text only (images and audio need a multimodal model).
  std::string text;
  for (const json& part : content) {
    const json* type = part.is_object() ? field(part, "type") : nullptr;
    if (!type || !type->is_string() || type->get<std::string>() != "text" || !field(part, "text") ||
        !part["text"].is_string())
      throw ApiError(400, "only text content parts are supported", at + ".content");
    text += part["text"].get<std::string>();
  }
  return text;
}

// An assistant message's past calls, as the template wants them: arguments as the JSON
// string OpenAI sends, or parsed when the template applies tojson to them. A template
// that knows no tools gets them as the JSON answer the generic prompt asks for.
nlohmann::ordered_json tool_calls_of(const json& calls, const std::string& at, const ApiContext& ctx,
                                     nlohmann::ordered_json& as_text) {
  using ojson = nlohmann::ordered_json;
  if (!calls.is_array()) throw ApiError(400, at + ".tool_calls must be a list", at + ".tool_calls");
  ojson out = ojson::array();
  for (size_t k = 0; k < calls.size(); ++k) {
    const json& c = calls[k];
    const std::string ck = fmt::format("{}.tool_calls[{}]", at, k);
    if (!c.is_object()) throw ApiError(400, ck + " must be an object", ck);
    const json* fn = field(c, "function");
    if (!fn || !fn->is_object()) throw ApiError(400, ck + ".function must be an object", ck + ".function");
    const json* name = field(*fn, "name");
    if (!name || !name->is_string()) throw ApiError(400, ck + ".function.name must be a string", ck + ".function.name");
    const json* args = field(*fn, "arguments");
    std::string args_text = "{}";
    if (args && args->is_string()) args_text = args->get<std::string>();
    else if (args && args->is_object()) args_text = args->dump();
    else if (args) throw ApiError(400, ck + ".function.arguments must be a string", ck + ".function.arguments");
    ojson parsed;
    try {
      parsed = ojson::parse(args_text);
    } catch (const std::exception&) {
      if (ctx.caps.object_arguments || ctx.caps.format == ToolFormat::Json)
        throw ApiError(400, ck + ".function.arguments is not valid JSON", ck + ".function.arguments");
    }
    const json* id = field(c, "id");
    if (id && !id->is_string()) throw ApiError(400, ck + ".id must be a string", ck + ".id");
    ojson call = {{"id", id ? id->get<std::string>() : fmt::format("call_{}", k)}, {"type", "function"},
                  {"function", {{"name", name->get<std::string>()},
                                {"arguments", ctx.caps.object_arguments ? parsed : ojson(args_text)}}}};
    out.push_back(std::move(call));
    as_text.push_back({{"name", name->get<std::string>()}, {"parameters", parsed}});
  }
  return out;
}

void parse_messages(const json& j, const ApiContext& ctx, ParsedRequest& r, const ToolsRequest& tools) {
  using ojson = nlohmann::ordered_json;
  const json* m = field(j, "messages");
  if (!m || !m->is_array() || m->empty()) throw ApiError(400, "messages must be a non-empty list", "messages");
  if (ctx.chat_template.empty())
    throw ApiError(400, "this model has no chat template; start the server with --chat-template FILE", "messages");
  // A template renders tool definitions (native_tools), or at least past calls in its
  // own syntax (DeepSeek V3's renders calls but leaves the definitions to the system
  // prompt); one with neither gets both from ridge's generic JSON form.
  const bool native_tools = ctx.caps.renders_tools;
  const bool native_calls = ctx.caps.renders_tools || ctx.caps.format != ToolFormat::Json;
  ojson msgs = ojson::array();
  for (size_t i = 0; i < m->size(); ++i) {
    const json& msg = (*m)[i];
    const std::string at = fmt::format("messages[{}]", i);
    if (!msg.is_object()) throw ApiError(400, "each message must be an object with role and content", at);
    const json* role = field(msg, "role");
    if (!role || !role->is_string()) throw ApiError(400, "each message needs a string role", at + ".role");
    const std::string rs = role->get<std::string>();
    ojson out = ojson::object();
    out["role"] = rs;
    const json* content = field(msg, "content");
    const json* calls = rs == "assistant" ? field(msg, "tool_calls") : nullptr;
    if (calls && calls->is_array() && calls->empty()) calls = nullptr;
    out["content"] = content ? ojson(content_text(*content, at)) : calls && ctx.caps.null_content ? ojson(nullptr) : ojson("");
    if (const json* name = field(msg, "name"); name && name->is_string()) out["name"] = name->get<std::string>();
    if (const json* rc = field(msg, "reasoning_content"); rc && rc->is_string() && rs == "assistant")
      out["reasoning_content"] = rc->get<std::string>();
    if (calls) {
      ojson as_text = ojson::array();
      ojson tc = tool_calls_of(*calls, at, ctx, as_text);
      if (native_calls) {
        out["tool_calls"] = std::move(tc);
      } else {
        std::string c = out["content"].is_string() ? out["content"].get<std::string>() : "";
        out["content"] = c + (c.empty() ? "" : "\n") + as_text.dump();
      }
    }
    if (rs == "tool") {
      const json* id = field(msg, "tool_call_id");
      if (!id || !id->is_string())
        throw ApiError(400, at + ".tool_call_id is required in a tool message (the id of the call it answers)",
                       at + ".tool_call_id");
      out["tool_call_id"] = id->get<std::string>();
    }
    msgs.push_back(std::move(out));
  }
  // A template that knows no tools: they are described in the system prompt.
  if (tools.active() && !native_tools) {
    const std::string p = generic_tools_prompt(tools, !native_calls);
    if (msgs[0]["role"] == "system" && msgs[0]["content"].is_string())
      msgs[0]["content"] = msgs[0]["content"].get<std::string>() + "\n\n" + p;
    else
      msgs.insert(msgs.begin(), ojson{{"role", "system"}, {"content", p}});
  }
  // Template variables: chat_template_kwargs (vLLM's), and enable_thinking at the top.
  ojson extra = ojson::object();
  if (const json* kw = field(j, "chat_template_kwargs")) {
    if (!kw->is_object()) throw ApiError(400, "chat_template_kwargs must be an object", "chat_template_kwargs");
    for (auto it = kw->begin(); it != kw->end(); ++it) {
      if (it.key() == "messages" || it.key() == "tools" || it.key() == "add_generation_prompt")
        throw ApiError(400, "chat_template_kwargs." + it.key() + " is set by the request itself",
                       "chat_template_kwargs." + it.key());
      extra[it.key()] = ojson::parse(it.value().dump());
    }
  }
  if (const json* et = field(j, "enable_thinking")) {
    if (!et->is_boolean()) throw ApiError(400, "enable_thinking must be a boolean", "enable_thinking");
    extra["enable_thinking"] = et->get<bool>();
  }
  ChatOptions co;
  co.add_generation_prompt = boolean(j, "add_generation_prompt", true);
  co.bos_token = ctx.bos_token;
  co.eos_token = ctx.eos_token;
  co.extra = &extra;
  if (tools.active() && native_tools) co.tools = &tools.tools;
  std::string text;
  try {
    text = render_chat(ctx.chat_template, msgs, co);
  } catch (const std::exception& e) {
    throw ApiError(400, std::string("the chat template failed: ") + e.what(), "messages");
  }
  r.prompt_texts.push_back(text);
  r.prompts.push_back(tokenize_prompt(*ctx.tok, text, true));
}

// How the chat output splits: the request's tool choice picks the call format (a
// constrained choice's is vLLM's JSON whatever the template), the template (or the
// server's flags) the reasoning; the rendered prompt says whether thinking is open.
OutputFormat output_format(const ApiContext& ctx, const ToolsRequest& tools, const std::string& prompt) {
  OutputFormat f;
  f.tool_names = tools.names;
  if (tools.active()) {
    if (tools.choice == ToolsRequest::Choice::Named) {
      f.tools = ToolFormat::Named;
      f.named_tool = tools.named;
    } else if (tools.choice == ToolsRequest::Choice::Required) {
      f.tools = ToolFormat::Json;
    } else if (ctx.tool_parser != ToolFormat::None) {
      f.tools = ctx.tool_parser;
    } else {
      f.tools = ctx.caps.format;
    }
  }
  // gpt-oss's channels hold its thinking and its answer, tools or not.
  const ToolFormat own = ctx.tool_parser != ToolFormat::None ? ctx.tool_parser : ctx.caps.format;
  if (f.tools == ToolFormat::None && own == ToolFormat::Harmony && ctx.reasoning != ApiContext::Reasoning::Off)
    f.tools = ToolFormat::Harmony;
  f.think = ctx.reasoning == ApiContext::Reasoning::On || (ctx.reasoning == ApiContext::Reasoning::Auto && ctx.caps.thinks);
  if (f.think) {
    size_t e = prompt.size();
    while (e > 0 && (prompt[e - 1] == ' ' || prompt[e - 1] == '\n' || prompt[e - 1] == '\r' || prompt[e - 1] == '\t')) --e;
    f.start_in_think = std::string_view(prompt).substr(0, e).ends_with("<think>");
  }
  return f;
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
  for (const char* k : {"response_format", "guided_json", "json_schema", "tools"})
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
  ToolsRequest tools;
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
    parse_prompts(j, ctx, r);
  } else {
    const bool lp = boolean(j, "logprobs", false);
    const int64_t top = integer(j, "top_logprobs", 0, 0, ctx.max_logprobs);
    if (field(j, "top_logprobs") && !lp) throw ApiError(400, "top_logprobs needs logprobs: true", "top_logprobs");
    r.logprobs = lp ? int32_t(top) : -1;
    tools = parse_tools(j, ordered);
    parse_messages(j, ctx, r, tools);
    r.output = output_format(ctx, tools, r.prompt_texts.back());
    r.parse_output = r.output.tools != ToolFormat::None || r.output.think;
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
  // The prompt's logprobs: echo with logprobs (OpenAI's legacy completions), or vLLM's
  // prompt_logprobs (the number of alternatives per prompt token).
  r.prompt_logprobs = int32_t(integer(j, "prompt_logprobs", -1, 0, ctx.max_logprobs));
  p.prompt_logprobs = std::max(r.prompt_logprobs, r.echo ? r.logprobs : -1);
  p.speculative = parse_speculative(j, ctx.speculative);
  if (ctx.grammars) {
    p.grammar = parse_structured_output(j, ordered, *ctx.grammars);
    // tool_choice "required" or a named function: the output is held to the calls' form.
    if (const nlohmann::ordered_json schema = tool_call_schema(tools); !schema.is_null() && tools.active()) {
      if (p.grammar)
        throw ApiError(400, "tool_choice \"required\" or a named function cannot be combined with a response format",
                       "tool_choice");
      std::string gbnf;
      try {
        gbnf = grammar::json_schema_to_gbnf(schema);
        p.grammar = ctx.grammars->get(gbnf);
      } catch (const grammar::GrammarError& e) {
        // Name the function whose schema it is.
        for (size_t i = 0; i < tools.tools.size(); ++i) {
          const auto& fn = tools.tools[i]["function"];
          if (!fn.contains("parameters")) continue;
          try {
            grammar::json_schema_to_gbnf(fn["parameters"]);
          } catch (const grammar::GrammarError& ei) {
            const std::string at = fmt::format("tools[{}].function.parameters", i);
            throw ApiError(400, fmt::format("{}: {}", at, ei.what()), at);
          }
        }
        throw ApiError(400, std::string("tools: the calls' grammar: ") + e.what(), "tools");
      }
    }
  } else if (const json* rf = field(j, "response_format");
             rf && !(rf->is_object() && rf->contains("type") && (*rf)["type"] == "text")) {
    throw ApiError(400, "response_format is not available here", "response_format");
  }
  // A grammar holds the output from its first token: a prompt that opened the thinking
  // does not make that output reasoning (a grammar that writes <think> itself still does).
  if (p.grammar) r.output.start_in_think = false;
  // A budget on thinking tokens (Qwen's and SGLang's thinking_budget; the server's
  // --reasoning-budget by default), for a model that thinks in <think>...</think>.
  if (ep == Endpoint::Chat) {
    const int32_t budget = int32_t(integer(j, "thinking_budget", ctx.reasoning_budget, -1, 1 << 30));
    if (budget >= 0 && r.output.think) {
      ThinkingBudget& tb = p.thinking;
      tb.budget = budget;
      tb.inside = r.output.start_in_think;
      tb.open = ctx.tok->encode("<think>", false, true);
      tb.end = ctx.tok->encode("</think>", false, true);
      tb.force = ctx.tok->encode("\n</think>\n\n", false, true);
    } else if (budget >= 0 && field(j, "thinking_budget")) {
      throw ApiError(400, "thinking_budget: this model does not think in <think> (or --reasoning-parser none)",
                     "thinking_budget");
    }
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
      // Formats whose markers are control tokens (Mistral's [TOOL_CALLS], harmony's
      // channels, Llama's <|python_tag|>, DeepSeek's call markers in some conversions).
      const ToolFormat tf = r.output.tools;
      c.show_control = tf == ToolFormat::Mistral || tf == ToolFormat::Harmony || tf == ToolFormat::Llama3 ||
                       tf == ToolFormat::DeepSeek;
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
