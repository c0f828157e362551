// Tools in a chat request: validation, the template's abilities, the call grammar's schema.
#include "server/tool_request.h"

#include "core/error.h"
#include "server/openai_api.h"
#include "tokenizer/chat_template.h"

namespace ridge::server {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

const json* field(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

bool renders(const std::string& tpl, const ojson& messages, const ChatOptions& o, std::string* out) {
  try {
    *out = render_chat(tpl, messages, o);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

// A function name as OpenAI allows it: a-z, A-Z, 0-9, underscores, dashes (and dots,
// which MCP servers' names use), at most 64.
bool valid_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) return false;
  return true;
}

}  // namespace

TemplateCaps probe_template(const std::string& tpl, const std::string& bos, const std::string& eos) {
  TemplateCaps caps;
  caps.format = detect_tool_format(tpl);
  caps.thinks = template_thinks(tpl);
  ChatOptions o;
  o.bos_token = bos;
  o.eos_token = eos;
  const ojson tools = ojson::parse(
      R"([{"type": "function", "function": {"name": "ridge_probe_fn", "description": "d",
          "parameters": {"type": "object", "properties": {"ridge_probe_arg": {"type": "integer"}}}}}])");
  o.tools = &tools;
  std::string out;
  const ojson user = ojson::array({{{"role", "user"}, {"content", "hi"}}});
  caps.renders_tools = renders(tpl, user, o, &out) && out.find("ridge_probe_fn") != std::string::npos;
  // A past call, its arguments as the string OpenAI sends: a template that writes the
  // string as it is shows the JSON; one that applies tojson shows it escaped (and wants
  // an object).
  auto conversation = [&](const ojson& args, const ojson& content) {
    ojson call = {{"id", "call_probe"}, {"type", "function"},
                  {"function", {{"name", "ridge_probe_fn"}, {"arguments", args}}}};
    ojson asst = {{"role", "assistant"}, {"content", content}, {"tool_calls", ojson::array({call})}};
    return ojson::array({user[0], asst,
                         {{"role", "tool"}, {"tool_call_id", "call_probe"}, {"content", "42"}},
                         {{"role", "user"}, {"content", "thanks"}}});
  };
  const ojson str_args = R"({"ridge_probe_arg": 1})";
  const ojson obj_args = {{"ridge_probe_arg", 1}};
  caps.null_content = renders(tpl, conversation(str_args, nullptr), o, &out) ||
                      renders(tpl, conversation(obj_args, nullptr), o, &out);
  const ojson content = caps.null_content ? ojson(nullptr) : ojson("");
  const bool str_ok = renders(tpl, conversation(str_args, content), o, &out) &&
                      out.find(R"("ridge_probe_arg": 1)") != std::string::npos;
  caps.object_arguments = !str_ok && renders(tpl, conversation(obj_args, content), o, &out);
  return caps;
}

ToolsRequest parse_tools(const json& body, const ojson* ordered) {
  ToolsRequest t;
  const json* tools = field(body, "tools");
  if (tools) {
    if (!tools->is_array()) throw ApiError(400, "tools must be a list of tool definitions", "tools");
    if (tools->size() > 128) throw ApiError(400, "at most 128 tools", "tools");
    const ojson* otools = ordered && ordered->contains("tools") ? &(*ordered)["tools"] : nullptr;
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& tool = (*tools)[i];
      const std::string at = fmt::format("tools[{}]", i);
      if (!tool.is_object()) throw ApiError(400, at + " must be an object", at);
      const json* type = field(tool, "type");
      if (!type || !type->is_string() || type->get<std::string>() != "function")
        throw ApiError(400, at + ".type must be \"function\"", at + ".type");
      const json* fn = field(tool, "function");
      if (!fn || !fn->is_object()) throw ApiError(400, at + ".function must be an object", at + ".function");
      const json* name = field(*fn, "name");
      if (!name || !name->is_string() || !valid_name(name->get<std::string>()))
        throw ApiError(400, at + ".function.name must be 1-64 letters, digits, '_', '-' or '.'", at + ".function.name");
      if (const json* d = field(*fn, "description"); d && !d->is_string())
        throw ApiError(400, at + ".function.description must be a string", at + ".function.description");
      const std::string& n = name->get_ref<const std::string&>();
      if (std::find(t.names.begin(), t.names.end(), n) != t.names.end())
        throw ApiError(400, fmt::format("{}.function.name: '{}' is defined twice", at, n), at + ".function.name");
      if (const json* p = field(*fn, "parameters")) {
        // A function's parameters are an object schema (OpenAI's rule; a template renders
        // them, a grammar is made of them).
        const std::string pat = at + ".function.parameters";
        if (!p->is_object()) throw ApiError(400, pat + " must be a JSON schema object", pat);
        if (const json* ty = field(*p, "type"); ty && !(ty->is_string() && ty->get<std::string>() == "object"))
          throw ApiError(400, pat + ".type must be \"object\"", pat + ".type");
        if (const json* pr = field(*p, "properties"); pr && !pr->is_object())
          throw ApiError(400, pat + ".properties must be an object", pat + ".properties");
        if (const json* rq = field(*p, "required"); rq && !rq->is_array())
          throw ApiError(400, pat + ".required must be a list", pat + ".required");
      }
      t.names.push_back(n);
      t.tools.push_back(otools && otools->is_array() && i < otools->size() ? (*otools)[i] : ojson::parse(tool.dump()));
    }
  }
  if (const json* p = field(body, "parallel_tool_calls")) {
    if (!p->is_boolean()) throw ApiError(400, "parallel_tool_calls must be a boolean", "parallel_tool_calls");
    t.parallel = p->get<bool>();
  }
  const json* c = field(body, "tool_choice");
  if (!c) {
    t.choice = t.names.empty() ? ToolsRequest::Choice::None : ToolsRequest::Choice::Auto;
    return t;
  }
  if (c->is_string()) {
    const std::string s = c->get<std::string>();
    if (s == "none") t.choice = ToolsRequest::Choice::None;
    else if (s == "auto") t.choice = ToolsRequest::Choice::Auto;
    else if (s == "required") t.choice = ToolsRequest::Choice::Required;
    else throw ApiError(400, "tool_choice must be \"none\", \"auto\", \"required\" or a named function", "tool_choice");
  } else if (c->is_object()) {
    const json* fn = field(*c, "function");
    const json* name = fn && fn->is_object() ? field(*fn, "name") : nullptr;
    if (!name || !name->is_string())
      throw ApiError(400, "tool_choice.function.name is required for a named tool choice", "tool_choice.function.name");
    if (const json* type = field(*c, "type"); type && !(type->is_string() && type->get<std::string>() == "function"))
      throw ApiError(400, "tool_choice.type must be \"function\"", "tool_choice.type");
    t.choice = ToolsRequest::Choice::Named;
    t.named = name->get<std::string>();
    if (std::find(t.names.begin(), t.names.end(), t.named) == t.names.end())
      throw ApiError(400, fmt::format("tool_choice names '{}', which is not among tools", t.named),
                     "tool_choice.function.name");
  } else {
    throw ApiError(400, "tool_choice must be a string or an object", "tool_choice");
  }
  if (t.choice != ToolsRequest::Choice::None && t.choice != ToolsRequest::Choice::Auto && t.names.empty())
    throw ApiError(400, "tool_choice requires tools", "tool_choice");
  return t;
}

namespace {

ojson parameters_of(const ojson& tool) {
  const ojson& fn = tool["function"];
  auto p = fn.find("parameters");
  if (p == fn.end() || p->is_null()) return {{"type", "object"}, {"properties", ojson::object()}};
  return *p;
}

}  // namespace

ojson tool_call_schema(const ToolsRequest& t) {
  if (t.choice == ToolsRequest::Choice::Named) {
    for (size_t i = 0; i < t.names.size(); ++i)
      if (t.names[i] == t.named) return parameters_of(t.tools[i]);
  }
  if (t.choice != ToolsRequest::Choice::Required) return nullptr;
  ojson any = ojson::array();
  for (size_t i = 0; i < t.names.size(); ++i)
    any.push_back({{"type", "object"},
                   {"properties", {{"name", {{"const", t.names[i]}}}, {"parameters", parameters_of(t.tools[i])}}},
                   {"required", {"name", "parameters"}}});
  ojson items = any.size() == 1 ? any[0] : ojson{{"anyOf", any}};
  ojson s = {{"type", "array"}, {"items", items}, {"minItems", 1}};
  if (!t.parallel) s["maxItems"] = 1;
  return s;
}

std::string generic_tools_prompt(const ToolsRequest& t, bool json_form) {
  std::string s = "You can call these tools (JSON Schema function definitions):\n";
  for (const ojson& tool : t.tools) s += tool["function"].dump() + "\n";
  if (!json_form) return s;
  s += "\nTo call tools, answer with only a JSON list of calls, "
       "[{\"name\": \"<tool name>\", \"parameters\": {<arguments>}}], and nothing else. "
       "Each tool's result comes back in a message of the role \"tool\". Otherwise answer normally.";
  return s;
}

}  // namespace ridge::server
