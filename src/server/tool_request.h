// The request side of tool calling and reasoning: `tools`, `tool_choice`,
// `parallel_tool_calls` validated; what a chat template can do with them (probed once,
// by rendering); the grammar that holds a "required" or named choice to a call; and the
// prompt that tells a model whose template knows no tools how to call them.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/chat_output.h"

namespace ridge::server {

// What a chat template does with tools, thinking and tool-call messages, found by
// rendering probe conversations through it (probe_template).
struct TemplateCaps {
  bool renders_tools = false;     // `tools` reach the prompt
  bool object_arguments = false;  // a call's arguments must be an object (tojson), not the string
  bool null_content = true;       // an assistant message with calls may have content null
  ToolFormat format = ToolFormat::Json;  // the template's own call syntax
  bool thinks = false;                   // <think>...</think>
};
TemplateCaps probe_template(const std::string& chat_template, const std::string& bos, const std::string& eos);

struct ToolsRequest {
  enum class Choice { Auto, None, Required, Named };
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();  // [{type, function}] as sent
  std::vector<std::string> names;
  Choice choice = Choice::Auto;
  std::string named;      // Choice::Named
  bool parallel = true;   // parallel_tool_calls
  // The model may call tools in this request (there are some, and the choice allows it).
  bool active() const { return !names.empty() && choice != Choice::None; }
};

// tools / tool_choice / parallel_tool_calls of a chat body (`ordered`: the same body with
// key order kept, for the schemas; may be null). Throws ApiError 400 naming the field.
ToolsRequest parse_tools(const nlohmann::json& body, const nlohmann::ordered_json* ordered);

// The JSON schema a "required" or named choice holds the output to (vLLM's forms:
// `[{"name": ..., "parameters": {...}}, ...]`, or the named function's arguments);
// null for auto and none.
nlohmann::ordered_json tool_call_schema(const ToolsRequest& t);

// The system prompt text that describes the tools to a model whose template does not
// render them, and (json_form) how to call them in ridge's generic JSON form, for a model
// that has no call syntax of its own.
std::string generic_tools_prompt(const ToolsRequest& t, bool json_form);

}  // namespace ridge::server
