// Chat messages (JSON) -> jinja values -> the model's template -> prompt text.
#include "tokenizer/chat_template.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "gguf/gguf.h"
#include "tokenizer/jinja/interpreter.h"

namespace ridge {

namespace {

using ojson = nlohmann::ordered_json;

// An array index key ("0", "17"): JS objects enumerate these first, in numeric order,
// and the reference builds its Maps from Object.entries of the parsed JSON.
bool is_index_key(const std::string& k) {
  if (k.empty() || k.size() > 10 || (k.size() > 1 && k[0] == '0')) return false;
  if (!std::all_of(k.begin(), k.end(), [](char c) { return c >= '0' && c <= '9'; })) return false;
  return std::stoull(k) < 4294967295ull;
}

// convertToRuntimeValues: numbers with an integral value become integers (JS cannot
// tell 1.0 from 1 after JSON.parse).
jinja::Value to_value(const ojson& j) {
  using jinja::Value;
  switch (j.type()) {
    case ojson::value_t::null: return Value::none();
    case ojson::value_t::boolean: return Value::boolean(j.get<bool>());
    case ojson::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case ojson::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      return u <= uint64_t(INT64_MAX) ? Value::integer(int64_t(u)) : Value::number(double(u));
    }
    case ojson::value_t::number_float: {
      double d = j.get<double>();
      if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9e15) return Value::integer(int64_t(d));
      return Value::number(d);
    }
    case ojson::value_t::string: return Value::string(j.get<std::string>());
    case ojson::value_t::array: {
      std::vector<Value> items;
      for (const auto& x : j) items.push_back(to_value(x));
      return Value::array(std::move(items));
    }
    case ojson::value_t::object: {
      Value o = Value::object();
      std::vector<std::pair<uint64_t, const std::string*>> index_keys;
      for (auto it = j.begin(); it != j.end(); ++it)
        if (is_index_key(it.key())) index_keys.emplace_back(std::stoull(it.key()), &it.key());
      std::sort(index_keys.begin(), index_keys.end());
      for (const auto& [n, k] : index_keys) o.obj->set(*k, to_value(j.at(*k)));
      for (auto it = j.begin(); it != j.end(); ++it)
        if (!is_index_key(it.key())) o.obj->set(it.key(), to_value(it.value()));
      return o;
    }
    default: throw Error("chat template context: unsupported JSON value");
  }
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ojson read_json(const std::string& path) {
  try {
    return ojson::parse(read_file(path));
  } catch (const ojson::parse_error& e) {
    fail("{}: invalid JSON: {}", path, e.what());
  }
}

}  // namespace

std::string render_template(const std::string& template_src, const ojson& context) {
  RIDGE_CHECK(context.is_object(), "chat template context must be a JSON object");
  std::vector<std::pair<std::string, jinja::Value>> vars;
  for (auto it = context.begin(); it != context.end(); ++it) vars.emplace_back(it.key(), to_value(it.value()));
  return jinja::Template(template_src).render(vars);
}

std::string render_chat(const std::string& template_src, const ojson& messages, const ChatOptions& o) {
  RIDGE_CHECK(messages.is_array(), "chat messages must be a JSON array");
  ojson ctx = ojson::object();
  ctx["messages"] = messages;
  ctx["add_generation_prompt"] = o.add_generation_prompt;
  ctx["bos_token"] = o.bos_token;
  ctx["eos_token"] = o.eos_token;
  if (o.tools && !o.tools->is_null()) ctx["tools"] = *o.tools;
  if (o.extra) {
    RIDGE_CHECK(o.extra->is_object(), "extra chat template variables must be a JSON object");
    for (auto it = o.extra->begin(); it != o.extra->end(); ++it) ctx[it.key()] = it.value();
  }
  return render_template(template_src, ctx);
}

std::string chat_template_from_gguf(const gguf::File& f) {
  auto t = f.get_str("tokenizer.chat_template");
  if (!t) fail("{}: no tokenizer.chat_template in this model (pass --template FILE)", f.name());
  return std::string(*t);
}

std::string gguf_special_token(const gguf::File& f, const char* id_key) {
  auto id = f.get_uint(id_key);
  const gguf::Value* toks = f.get_array("tokenizer.ggml.tokens", gguf::ValueType::STRING);
  if (!id || !toks) return "";
  RIDGE_CHECK(*id < toks->strs.size(), "{}: {} = {} is outside the vocabulary ({} tokens)", f.name(), id_key, *id,
              toks->strs.size());
  return std::string(toks->strs[*id]);
}

std::string chat_template_from_config(const std::string& path) {
  ojson c = read_json(path);
  auto it = c.find("chat_template");
  if (it == c.end() || it->is_null()) fail("{}: no chat_template", path);
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    for (const auto& t : *it)
      if (t.is_object() && t.value("name", "") == "default" && t.contains("template") && t["template"].is_string())
        return t["template"].get<std::string>();
    fail("{}: chat_template has no template named \"default\"", path);
  }
  fail("{}: chat_template must be a string or a list of named templates", path);
}

std::string config_special_token(const std::string& path, const char* key) {
  ojson c = read_json(path);
  auto it = c.find(key);
  if (it == c.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"].get<std::string>();
  return "";
}

}  // namespace ridge
