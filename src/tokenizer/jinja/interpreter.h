// The chat-template interpreter: a compiled Template renders a context (name -> value)
// to text, reproducing @huggingface/jinja 0.5.11 (runtime.ts) byte for byte on the
// constructs real chat templates use. Anything it cannot reproduce is a ridge::Error
// naming the template line and column, never a silently different prompt.
#pragma once
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/parser.h"
#include "tokenizer/jinja/value.h"

namespace ridge::jinja {

// A scope. `set` writes the innermost scope; lookups walk outwards; for-loops and macro
// calls open a scope, `if` does not (as in the reference).
struct Env {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Env> parent;
  Value lookup(const std::string& name) const;
};
using EnvPtr = std::shared_ptr<Env>;
EnvPtr make_env(EnvPtr parent);

class Template {
 public:
  // Parses; throws ridge::Error with the line and column of a syntax it cannot read.
  explicit Template(std::string source);
  ~Template();
  Template(Template&&) noexcept;
  // Each context entry becomes a global variable (messages, add_generation_prompt, ...).
  std::string render(const std::vector<std::pair<std::string, Value>>& context) const;

 private:
  std::string src_;
  std::unique_ptr<SourceMap> map_;
  NodePtr root_;
};

// --- used between interpreter.cpp and builtins.cpp ------------------------------------
class Interpreter {
 public:
  explicit Interpreter(const SourceMap& map) : map_(map) {}
  Value evaluate(const Node* n, const EnvPtr& env);
  std::string block(const std::vector<NodePtr>& stmts, const EnvPtr& env);
  // Positional values (with *spread expanded) and keyword values, in the reference's
  // evaluation order.
  void arguments(const std::vector<NodePtr>& args, size_t first, const EnvPtr& env, std::vector<Value>& pos,
                 Value& kwargs);

 private:
  Value eval_node(const Node& n, const EnvPtr& env);
  Value eval_binary(const Node& n, const EnvPtr& env);
  Value eval_member(const Node& n, const EnvPtr& env);
  Value eval_set(const Node& n, const EnvPtr& env);
  Value eval_for(const Node& n, const EnvPtr& env);
  Value eval_macro(const Node& n, const EnvPtr& env);
  Value eval_call_statement(const Node& n, const EnvPtr& env);
  void bind_macro_args(const std::string& name, const std::vector<NodePtr>& params, bool want_kwargs,
                       bool want_varargs, std::vector<Value> args, const EnvPtr& scope);

  const SourceMap& map_;
  int depth_ = 0;
};

// builtins.cpp
Value apply_filter(Interpreter& in, const Value& operand, const Node& filter, const EnvPtr& env);
bool run_test(const std::string& name, const Value& a, const Value* b);
bool has_test(const std::string& name);
// Methods and properties of strings, dicts and lists (s.strip, d.items, l.length).
Value builtin_member(const Value& object, const std::string& name);
void setup_globals(Env& env);
// JS truthiness of the raw value (containers are always true there).
bool js_truthy(const Value& v);

}  // namespace ridge::jinja
