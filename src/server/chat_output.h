// A chat model's output as the API returns it: the thinking (reasoning_content), the answer
// (content) and the tool calls (tool_calls), split out of the one text the model writes,
// in each model family's own format. Streamed: feed() takes each new piece of text as the
// engine produces it and returns what can be said for sure so far; text that may still
// turn out to be the start of a marker (`<tool_` of `<tool_call>`) is held back until the
// next piece decides it. The deltas of a stream concatenate to what one feed of the whole
// text and finish() return, whatever the split (tested over every split point).
//
// Formats (detect_tool_format picks one from the chat template; --tool-call-parser names
// one):
//   hermes    `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, any number
//             (Hermes 2/3, Qwen 2.5 / Qwen3 and most fine-tunes of them)
//   llama3    the whole answer is `{"name": ..., "parameters": {...}}`, several separated
//             by `;`, maybe after `<|python_tag|>` (Llama 3.1 / 3.2 JSON tool calling)
//   mistral   `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]` (v3 tokenizers) or
//             `[TOOL_CALLS]name[ARGS]{...}` (v11 and later)
//   deepseek  `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>name\n```json\n
//             {...}\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>` (V3, R1), or
//             `<｜tool▁call▁begin｜>name<｜tool▁sep｜>{...}<｜tool▁call▁end｜>` (V3.1)
//   harmony   gpt-oss's channels: `<|channel|>analysis<|message|>...<|end|>` is reasoning,
//             `<|channel|>commentary to=functions.name ...<|message|>{...}<|call|>` a call,
//             `<|channel|>final<|message|>...` the answer
//   json      ridge's generic form, for templates that know no tools, and vLLM's form for
//             tool_choice "required": `[{"name": ..., "parameters": {...}}, ...]` (a lone
//             object, or objects separated by `;`, are taken too)
//   named     tool_choice names a function: the whole output is its arguments object
// Arguments are passed on as the model wrote them (the raw JSON text of the value, so
// that a stream's fragments concatenate to the final string); a string value (a model
// that wrote the arguments JSON-encoded) is decoded. A call whose body never yields a
// name, or names no tool of the request, is not a call: its text, markers included, is
// content (so a JSON answer {"name": "Alice"} in the json format stays an answer).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ridge::server {

enum class ToolFormat { None, Hermes, Llama3, Mistral, DeepSeek, Harmony, Json, Named };

// "hermes", "llama3_json", "mistral", "deepseek_v3", "openai" (harmony), "json"; vLLM's
// --tool-call-parser names where they exist. Unknown -> None.
ToolFormat tool_format_from_name(std::string_view name);
const char* tool_format_name(ToolFormat f);
// The format a chat template's own tool-call syntax shows, or Json when it has none.
ToolFormat detect_tool_format(std::string_view chat_template);
// Whether the template's model thinks in <think>...</think>.
bool template_thinks(std::string_view chat_template);

struct ToolCallDelta {
  int32_t index = 0;
  std::string id, name;   // on the call's first delta only
  std::string arguments;  // a fragment
};

struct OutputDelta {
  std::string content, reasoning;
  std::vector<ToolCallDelta> calls;
  bool empty() const { return content.empty() && reasoning.empty() && calls.empty(); }
  void append(OutputDelta&& d);  // merges d after this (a call's fragments joined)
};

struct OutputFormat {
  ToolFormat tools = ToolFormat::None;  // None: no tool calls are parsed
  std::string named_tool;               // ToolFormat::Named: the function
  std::vector<std::string> tool_names;  // the request's tools: what names another is no call (empty: any)
  bool think = false;                   // split <think>...</think> into reasoning
  bool start_in_think = false;          // the prompt left the model inside <think>
};

class ChatOutputParser {
 public:
  explicit ChatOutputParser(OutputFormat f);
  ~ChatOutputParser();
  OutputDelta feed(std::string_view text);
  OutputDelta finish();  // the end of the output: everything held back is decided
  int32_t n_calls() const;

  class Tools;  // one per format (chat_output.cpp)

 private:
  OutputDelta route(std::string_view content, bool final);

  OutputFormat f_;
  std::unique_ptr<Tools> tools_;
  // <think> splitting: where the output stands and the text not decided yet.
  enum class Think { Begin, Inside, After } think_ = Think::After;
  std::string held_;
  bool reasoning_started_ = false;
  std::string reasoning_ws_;  // trailing whitespace of the reasoning, sent if more follows
  bool content_started_ = false;
};

// A tool call id as OpenAI's look: "call_" and 24 hex digits.
std::string new_tool_call_id();

}  // namespace ridge::server
