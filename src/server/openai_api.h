// The OpenAI API as ridge serves it: request bodies -> engine work (validated, with
// OpenAI's defaults), and the engine's output -> OpenAI's response and stream shapes.
// Everything a client can get wrong becomes an ApiError with OpenAI's error shape and
// the right HTTP status; fields ridge knows but does not serve yet are refused by name.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "engine/config.h"
#include "server/chat_output.h"
#include "server/engine_loop.h"
#include "server/http_server.h"
#include "server/tool_request.h"

namespace ridge {
class Tokenizer;
}

namespace ridge::server {

class GrammarCache;

struct ApiError : std::runtime_error {
  ApiError(int status, std::string message, std::string param = "", std::string type = "")
      : std::runtime_error(message), status(status), param(std::move(param)), type(std::move(type)) {}
  int status;
  std::string param;
  std::string type;  // "" -> derived from the status
};

// {"error": {"message", "type", "param", "code"}} with its status.
HttpResponse error_response(int status, const std::string& message, const std::string& param = "",
                            const std::string& type = "");

struct ApiContext {
  const Tokenizer* tok = nullptr;
  std::string model_name;          // --served-model-name (or the file's name)
  int32_t max_model_len = 0;       // prompt + completion tokens
  std::string chat_template;       // "" -> chat requests are refused
  std::string bos_token, eos_token;  // for the template
  int32_t max_logprobs = 20;
  int32_t max_n = 128;
  SpeculativeConfig speculative;   // the server's (--speculative-method ...): what a request's
                                   // "speculative" object leaves out
  GrammarCache* grammars = nullptr;  // structured output's compiled grammars (null: refused)
  TemplateCaps caps;               // what the chat template does with tools (probe_template)
  ToolFormat tool_parser = ToolFormat::None;  // --tool-call-parser; None: the template's (caps.format)
  enum class Reasoning { Auto, Off, On } reasoning = Reasoning::Auto;  // --reasoning-parser; Auto: caps.thinks
  int32_t reasoning_budget = -1;   // --reasoning-budget: thinking tokens per request (-1: no limit)
};

enum class Endpoint { Completions, Chat };

struct ParsedRequest {
  Endpoint endpoint = Endpoint::Completions;
  bool stream = false;
  bool include_usage = false;
  int32_t n = 1;
  bool echo = false;
  int32_t logprobs = -1;            // completions: `logprobs`; chat: top_logprobs when logprobs
  int32_t prompt_logprobs = -1;     // vLLM's prompt_logprobs (echo's prompt logprobs: `logprobs`)
  bool ridge_timings = false;       // attach the per-request attribution to the response
  std::vector<std::vector<int32_t>> prompts;   // [prompts][tokens]
  std::vector<std::string> prompt_texts;       // for echo: the text of each prompt
  std::vector<ChoiceSpec> choices;  // [prompts * n], choice i = prompt i / n
  // Chat: how the output splits into reasoning, content and tool calls (chat_output.h);
  // parse_output false: the text is the content as it is.
  bool parse_output = false;
  OutputFormat output;
};

// The body as a JSON object; ApiError 400 when it is not valid JSON or not an object.
nlohmann::json parse_body(std::string_view body);
// Parses and validates a request. Throws ApiError.
ParsedRequest parse_request(Endpoint ep, std::string_view body, const ApiContext& ctx);
// ordered: the same body parsed keeping key order (a JSON schema's properties keep it), or null.
ParsedRequest parse_request_json(Endpoint ep, const nlohmann::json& body, const ApiContext& ctx,
                                 const nlohmann::ordered_json* ordered = nullptr);
// Text -> ids, special tokens parsed; add_special: BOS first when the vocabulary wants it
// (unless the text already starts with it, as rendered chat templates often do).
std::vector<int32_t> tokenize_prompt(const Tokenizer& tok, const std::string& text, bool add_special);
// The model field: empty or the served name; else ApiError 404.
void check_model(const std::string& model, const ApiContext& ctx);

// The HTTP stream that turns a Job's progress into the endpoint's response (SSE chunks,
// or one JSON body when not streaming). `on_cancel` runs when the client goes away.
std::shared_ptr<HttpStream> make_openai_stream(ParsedRequest req, std::shared_ptr<Job> job, const ApiContext& ctx,
                                               std::function<void()> on_cancel);

// Token text as the API shows it: the token's bytes, with bytes that are not valid
// UTF-8 replaced by U+FFFD.
std::string token_text(const Tokenizer& tok, int32_t id);

}  // namespace ridge::server
