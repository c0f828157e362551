// ridge chat-template: render chat messages with a model's chat template and print the
// prompt exactly (no added newline), or, with --batch, render many test cases and print
// one JSON line per case (the byte-identity test against @huggingface/jinja uses this).
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "tokenizer/chat_template.h"

namespace ridge::cli {
namespace {

using ojson = nlohmann::ordered_json;

ojson read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  try {
    return ojson::parse(ss.str());
  } catch (const ojson::exception& e) {  // parse_error, or out_of_range for 1e400
    fail("{}: invalid JSON: {}", path, e.what());
  }
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// --batch FILE: [{"name", "template" (source), "context" {...}}, ...] -> one line each:
// {"name", "output"} or {"name", "error"}. A failing case does not stop the others.
int run_batch(const std::string& path) {
  ojson cases = read_json(path);
  RIDGE_CHECK(cases.is_array(), "{}: expected a JSON array of cases", path);
  for (const auto& c : cases) {
    ojson line = ojson::object();
    line["name"] = c.value("name", "");
    try {
      RIDGE_CHECK(c.contains("template") && c["template"].is_string(), "case without a \"template\" string");
      line["output"] = render_template(c["template"].get<std::string>(), c.value("context", ojson::object()));
    } catch (const Error& e) {
      line["error"] = e.what();
    }
    // Invalid UTF-8 (a template slicing inside a character) is replaced, not fatal.
    std::string s = line.dump(-1, ' ', false, ojson::error_handler_t::replace);
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fputc('\n', stdout);
  }
  return 0;
}

}  // namespace

int cmd_chat_template(Args& a) {
  if (auto batch = a.str({"--batch"})) {
    a.finish();
    return run_batch(*batch);
  }
  auto messages_path = a.str({"--messages"});
  auto tools_path = a.str({"--tools"});
  auto vars_text = a.str({"--vars"});
  auto template_path = a.str({"--template"});
  auto config_path = a.str({"--config"});
  const bool no_gen = a.flag({"--no-generation-prompt"});
  std::optional<std::string> model;
  // The model is needed only for what --template / --config do not give.
  if (!template_path && !config_path) model = resolve_model(a);
  else model = a.str({"-m", "--model"});
  a.finish();
  if (!messages_path) fail("--messages FILE.json is required (a JSON array of {{role, content}})");

  ChatOptions o;
  o.add_generation_prompt = !no_gen;
  std::string src;
  if (model) {
    auto f = gguf::File::open(*model);
    o.bos_token = gguf_special_token(*f, "tokenizer.ggml.bos_token_id");
    o.eos_token = gguf_special_token(*f, "tokenizer.ggml.eos_token_id");
    if (!template_path && !config_path) src = chat_template_from_gguf(*f);
  }
  if (config_path) {
    if (!template_path) src = chat_template_from_config(*config_path);
    if (!model) {
      o.bos_token = config_special_token(*config_path, "bos_token");
      o.eos_token = config_special_token(*config_path, "eos_token");
    }
  }
  if (template_path) src = read_text(*template_path);

  const ojson messages = read_json(*messages_path);
  ojson tools, vars;
  if (tools_path) {
    tools = read_json(*tools_path);
    o.tools = &tools;
  }
  if (vars_text) {
    try {
      vars = ojson::parse(*vars_text);
    } catch (const ojson::exception& e) {  // parse_error, or out_of_range for 1e400
      fail("--vars: invalid JSON: {}", e.what());
    }
    RIDGE_CHECK(vars.is_object(), "--vars must be a JSON object, e.g. '{{\"enable_thinking\": false}}'");
    o.extra = &vars;
  }
  const std::string prompt = render_chat(src, messages, o);
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  return 0;
}

}  // namespace ridge::cli
