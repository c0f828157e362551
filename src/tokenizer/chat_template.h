// Chat templates: turn a list of chat messages into the exact prompt text the model was
// trained on, by running the model's own Jinja template (GGUF tokenizer.chat_template or
// tokenizer_config.json chat_template) through ridge's interpreter, which reproduces
// @huggingface/jinja byte for byte.
//
// Messages, tools and extra variables are nlohmann::ordered_json: key order reaches the
// prompt (tools | tojson), so it must survive parsing (plain nlohmann::json sorts keys).
// Only the forward declaration is included here.
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace ridge::gguf {
class File;
}

namespace ridge {

struct ChatOptions {
  bool add_generation_prompt = true;
  std::string bos_token;
  std::string eos_token;
  // A JSON array of tool definitions, exposed as `tools`; null pointer: `tools` is
  // undefined (templates test `tools is defined` / `if tools`).
  const nlohmann::ordered_json* tools = nullptr;
  // A JSON object whose keys become template variables (e.g. {"enable_thinking": false}).
  const nlohmann::ordered_json* extra = nullptr;
};

// Renders `messages` (a JSON array of {role, content, ...}) with the template. Throws
// ridge::Error for a template it cannot run (with line and column) and for errors the
// template raises itself (raise_exception), with the template's message.
std::string render_chat(const std::string& template_src, const nlohmann::ordered_json& messages, const ChatOptions& o);

// Renders with an explicit context: every key of the JSON object becomes a variable.
std::string render_template(const std::string& template_src, const nlohmann::ordered_json& context);

// tokenizer.chat_template of a GGUF (vocab-only files included); throws if absent.
std::string chat_template_from_gguf(const gguf::File& f);
// The token string of tokenizer.ggml.bos_token_id / eos_token_id, "" if absent.
std::string gguf_special_token(const gguf::File& f, const char* id_key);

// chat_template of a tokenizer_config.json: a string, or a list of {name, template}
// from which "default" is taken. Throws if absent.
std::string chat_template_from_config(const std::string& path);
// bos_token / eos_token of a tokenizer_config.json (a string or {"content": ...}); "" if absent.
std::string config_special_token(const std::string& path, const char* key);

}  // namespace ridge
