// Statement and expression evaluation, ported from @huggingface/jinja's runtime.ts
// (Interpreter). Builtin filters, tests and methods live in builtins.cpp.
#include "tokenizer/jinja/interpreter.h"

#include <cmath>
#include <cstdint>
#include <functional>

#include <fmt/format.h>

#include "core/error.h"

namespace ridge::jinja {

namespace {
struct BreakSignal {};
struct ContinueSignal {};
constexpr int kMaxEvalDepth = 400;  // bounds nesting and macro recursion: an error, not a stack overflow (ASan frames included)
}  // namespace

Value Env::lookup(const std::string& name) const {
  for (const Env* e = this; e; e = e->parent.get()) {
    auto it = e->vars.find(name);
    if (it != e->vars.end()) return it->second;
  }
  return Value::undefined();
}

EnvPtr make_env(EnvPtr parent) {
  auto e = std::make_shared<Env>();
  e->parent = std::move(parent);
  return e;
}

// --- Template ---------------------------------------------------------------------------

Template::Template(std::string source) : src_(std::move(source)), map_(std::make_unique<SourceMap>(src_)) {
  root_ = parse(tokenize(src_, *map_), *map_);
}
Template::~Template() = default;
Template::Template(Template&&) noexcept = default;

std::string Template::render(const std::vector<std::pair<std::string, Value>>& context) const {
  auto env = make_env(nullptr);
  setup_globals(*env);
  for (const auto& [k, v] : context) {
    if (env->vars.count(k)) throw Error(fmt::format("chat template context: variable already declared: {}", k));
    env->vars[k] = v;
  }
  Interpreter in(*map_);
  try {
    return in.block(root_->body, env);
  } catch (const BreakSignal&) {
    throw Error("chat template: 'break' outside of a loop");
  } catch (const ContinueSignal&) {
    throw Error("chat template: 'continue' outside of a loop");
  } catch (const TemplateFailure& e) {  // never expected: every node catches its own
    throw Error("chat template: " + e.msg);
  }
}

// --- evaluation -------------------------------------------------------------------------

std::string Interpreter::block(const std::vector<NodePtr>& stmts, const EnvPtr& env) {
  std::string out;
  for (const auto& s : stmts) {
    Value v = evaluate(s.get(), env);
    if (v.kind == Kind::None || v.kind == Kind::Undefined) continue;
    try {
      out += display(v);  // printing can fail too (a tuple, a function)
    } catch (const TemplateFailure& e) {
      throw Error(fmt::format("chat template {}: {}", map_.where(s->pos), e.msg));
    }
  }
  return out;
}

Value Interpreter::evaluate(const Node* n, const EnvPtr& env) {
  if (!n) return Value::undefined();
  struct Depth {
    int& d;
    ~Depth() { --d; }
  } guard{++depth_};
  try {
    if (depth_ > kMaxEvalDepth) raise("template recursion too deep");
    return eval_node(*n, env);
  } catch (const TemplateFailure& e) {
    // The innermost node that failed names the position.
    if (e.msg.rfind("raise_exception: ", 0) == 0)
      throw Error(fmt::format("chat template error: {} (raised at {})", e.msg.substr(17), map_.where(n->pos)));
    throw Error(fmt::format("chat template {}: {}", map_.where(n->pos), e.msg));
  }
}

void Interpreter::arguments(const std::vector<NodePtr>& args, size_t first, const EnvPtr& env, std::vector<Value>& pos,
                            Value& kwargs) {
  kwargs = Value::kwargs();
  // As in Python, every positional argument is evaluated before any keyword value.
  for (size_t k = first; k < args.size(); ++k) {
    const Node& a = *args[k];
    if (a.kind == NodeKind::Spread) {
      Value v = evaluate(a.kids[0].get(), env);
      if (!v.is_array()) raise(fmt::format("Cannot unpack non-iterable type: {}", v.type_name()));
      for (const Value& x : v.arr->items) pos.push_back(x);
    } else if (a.kind != NodeKind::KeywordArgument && a.kind != NodeKind::KeywordSpread) {
      pos.push_back(evaluate(&a, env));
    }
  }
  auto add = [&](const std::string& key, Value v) {
    if (kwargs.obj->find(key)) raise(fmt::format("Got multiple values for keyword argument '{}'", key));
    kwargs.obj->set(key, std::move(v));
  };
  for (size_t k = first; k < args.size(); ++k) {
    const Node& a = *args[k];
    if (a.kind == NodeKind::KeywordArgument) {
      add(a.text, evaluate(a.kids[0].get(), env));
    } else if (a.kind == NodeKind::KeywordSpread) {
      Value v = evaluate(a.kids[0].get(), env);
      if (!v.is_object()) raise(fmt::format("Argument after ** must be a mapping, not {}", v.type_name()));
      for (const auto& [key, x] : v.obj->entries) add(key, x);
    }
  }
}

Value Interpreter::eval_node(const Node& n, const EnvPtr& env) {
  switch (n.kind) {
    case NodeKind::Program: return Value::string(block(n.body, env));
    case NodeKind::Set: return eval_set(n, env);
    case NodeKind::If: {
      bool c = evaluate(n.kids[0].get(), env).truthy();
      return Value::string(block(c ? n.body : n.alt, env));
    }
    case NodeKind::For: return eval_for(n, env);
    case NodeKind::Macro: return eval_macro(n, env);
    case NodeKind::CallStatement: return eval_call_statement(n, env);
    case NodeKind::Break: throw BreakSignal{};
    case NodeKind::Continue: throw ContinueSignal{};
    case NodeKind::Comment: return Value::none();
    case NodeKind::IntegerLiteral: return Value::integer(n.ival);
    case NodeKind::FloatLiteral: return Value::number(n.fval);
    case NodeKind::StringLiteral: return Value::string(n.text);
    case NodeKind::ArrayLiteral:
    case NodeKind::TupleLiteral: {
      std::vector<Value> items;
      for (const auto& k : n.kids) items.push_back(evaluate(k.get(), env));
      return Value::array(std::move(items), n.kind == NodeKind::TupleLiteral);
    }
    case NodeKind::ObjectLiteral: {
      Value o = Value::object();
      for (size_t k = 0; k + 1 < n.kids.size(); k += 2) {
        Value key = evaluate(n.kids[k].get(), env);
        if (!key.is_string()) raise(fmt::format("Object keys must be strings: got {}", key.type_name()));
        o.obj->set(key.s, evaluate(n.kids[k + 1].get(), env));
      }
      return o;
    }
    case NodeKind::Identifier: return env->lookup(n.text);
    case NodeKind::Call: {
      std::vector<Value> args;
      Value kw;
      arguments(n.kids, 1, env, args, kw);
      if (!kw.obj->entries.empty()) args.push_back(kw);
      Value fn = evaluate(n.kids[0].get(), env);
      if (fn.kind != Kind::Function) raise(fmt::format("Cannot call something that is not a function: got {}", fn.type_name()));
      return fn.fn->fn(args, env);
    }
    case NodeKind::Member: return eval_member(n, env);
    case NodeKind::Unary: {
      Value a = evaluate(n.kids[0].get(), env);
      if (n.text == "not") return Value::boolean(!a.truthy());
      double sign = n.text == "-" ? -1 : 1;
      if (a.kind == Kind::Float) return Value::number(sign * a.f);
      if (a.kind == Kind::Int) {
        if (a.i == INT64_MIN) raise("integer overflow");
        return Value::integer(n.text == "-" ? -a.i : a.i);
      }
      if (a.kind == Kind::Bool) return Value::integer(int64_t(sign) * (a.b ? 1 : 0));
      raise(fmt::format("Unknown operator \"{}\" for {}", n.text, a.type_name()));
    }
    case NodeKind::Binary: return eval_binary(n, env);
    case NodeKind::Filter: return apply_filter(*this, evaluate(n.kids[0].get(), env), *n.kids[1], env);
    case NodeKind::FilterStatement: return apply_filter(*this, Value::string(block(n.body, env)), *n.kids[0], env);
    case NodeKind::Test: {
      Value a = evaluate(n.kids[0].get(), env);
      if (!has_test(n.text)) raise(fmt::format("Unknown test: {}", n.text));
      bool r = run_test(n.text, a, nullptr);
      return Value::boolean(n.flag ? !r : r);
    }
    case NodeKind::Select: {
      if (!evaluate(n.kids[1].get(), env).truthy()) return Value::undefined();
      return evaluate(n.kids[0].get(), env);
    }
    case NodeKind::Ternary:
      return evaluate(n.kids[0].get(), env).truthy() ? evaluate(n.kids[1].get(), env) : evaluate(n.kids[2].get(), env);
    case NodeKind::Slice: case NodeKind::KeywordArgument: case NodeKind::Spread: case NodeKind::KeywordSpread:
      raise("this expression is only valid inside [...] or an argument list");
  }
  raise("unknown node");
}

namespace {

bool checked(bool overflow, int64_t r, Value* out) {
  if (overflow) raise("integer overflow");
  *out = Value::integer(r);
  return true;
}

// Python-style slice with the reference's clamping (utils.ts slice()).
template <typename T>
std::vector<T> do_slice(const std::vector<T>& a, const Value& vstart, const Value& vstop, const Value& vstep) {
  int64_t len = int64_t(a.size());
  int64_t step = vstep.is_undefined() ? 1 : vstep.i;
  if (step == 0) raise("slice step cannot be zero");
  int64_t start, stop;
  if (step > 0) {
    start = vstart.is_undefined() ? 0 : vstart.i;
    start = start < 0 ? std::max<int64_t>(len + start, 0) : std::min(start, len);
    stop = vstop.is_undefined() ? len : vstop.i;
    stop = stop < 0 ? std::max<int64_t>(len + stop, 0) : std::min(stop, len);
  } else {
    start = vstart.is_undefined() ? len - 1 : vstart.i;
    start = start < 0 ? std::max<int64_t>(len + start, -1) : std::min(start, len - 1);
    stop = vstop.is_undefined() ? -1 : vstop.i;
    stop = stop < -1 ? std::max<int64_t>(len + stop, -1) : std::min(stop, len - 1);
  }
  std::vector<T> out;
  int64_t dir = step > 0 ? 1 : -1;
  for (int64_t i = start; dir * i < dir * stop; i += step) out.push_back(a[size_t(i)]);
  return out;
}

}  // namespace

Value Interpreter::eval_binary(const Node& n, const EnvPtr& env) {
  const std::string& op = n.text;
  Value left = evaluate(n.kids[0].get(), env);
  if (op == "and") return left.truthy() ? evaluate(n.kids[1].get(), env) : left;
  if (op == "or") return left.truthy() ? left : evaluate(n.kids[1].get(), env);
  Value right = evaluate(n.kids[1].get(), env);
  if (op == "==") return Value::boolean(loose_equals(left, right));
  if (op == "!=") return Value::boolean(!loose_equals(left, right));
  bool in_op = op == "in" || op == "not in";
  if (left.is_undefined() || right.is_undefined()) {
    if (right.is_undefined() && in_op) return Value::boolean(op == "not in");
    raise(fmt::format("Cannot perform operation {} on undefined values", op));
  }
  if (left.is_none() || right.is_none()) raise("Cannot perform operation on null values");
  if (op == "~") return Value::string(js_string(left) + js_string(right));
  auto numeric_like = [](const Value& v) { return v.is_numeric() || v.kind == Kind::Bool; };
  if (op == "**" && numeric_like(left) && numeric_like(right)) {
    double a = left.num(), b = right.num();
    if (a == 0 && b < 0) raise("0.0 cannot be raised to a negative power");
    double r = std::pow(a, b);
    if (!std::isfinite(r)) raise("Exponentiation result is not a finite real number");
    bool is_float = left.kind == Kind::Float || right.kind == Kind::Float || b < 0;
    if (is_float) return Value::number(r);
    if (std::fabs(r) >= 9.2e18) raise("integer overflow");
    return Value::integer(int64_t(r));
  }
  if (left.is_numeric() && right.is_numeric()) {
    bool is_float = left.kind == Kind::Float || right.kind == Kind::Float;
    Value out;
    if (op == "+" || op == "-" || op == "*") {
      if (!is_float) {
        int64_t r = 0;
        bool ovf = op == "+" ? __builtin_add_overflow(left.i, right.i, &r)
                   : op == "-" ? __builtin_sub_overflow(left.i, right.i, &r)
                               : __builtin_mul_overflow(left.i, right.i, &r);
        checked(ovf, r, &out);
        return out;
      }
      double a = left.num(), b = right.num();
      return Value::number(op == "+" ? a + b : op == "-" ? a - b : a * b);
    }
    if (op == "/") return Value::number(left.num() / right.num());
    if (op == "//" || op == "%") {
      if (!is_float) {
        if (right.i == 0) raise(fmt::format("integer {} by zero", op == "//" ? "division" : "modulo"));
        if (op == "//") return Value::integer(int64_t(std::floor(double(left.i) / double(right.i))));
        return Value::integer(left.i % right.i);  // JS remainder: sign of the dividend
      }
      double a = left.num(), b = right.num();
      return Value::number(op == "//" ? std::floor(a / b) : std::fmod(a, b));
    }
    double a = left.num(), b = right.num();
    if (op == "<") return Value::boolean(a < b);
    if (op == ">") return Value::boolean(a > b);
    if (op == ">=") return Value::boolean(a >= b);
    if (op == "<=") return Value::boolean(a <= b);
  } else if (left.is_array() && right.is_array()) {
    if (op == "+") {
      std::vector<Value> items = left.arr->items;
      items.insert(items.end(), right.arr->items.begin(), right.arr->items.end());
      return Value::array(std::move(items));
    }
  } else if (right.is_array()) {
    if (in_op) {
      bool member = false;
      for (const Value& x : right.arr->items) member = member || strict_equals(x, left);
      return Value::boolean(op == "in" ? member : !member);
    }
  }
  if ((left.is_string() || right.is_string()) && op == "+") return Value::string(js_string(left) + js_string(right));
  if (left.is_string() && right.is_string() && in_op) {
    bool has = right.s.find(left.s) != std::string::npos;
    return Value::boolean(op == "in" ? has : !has);
  }
  if (left.is_string() && right.is_object() && in_op) {
    bool has = right.obj->find(left.s) != nullptr;
    return Value::boolean(op == "in" ? has : !has);
  }
  raise(fmt::format("Unknown operator \"{}\" between {} and {}", op, left.type_name(), right.type_name()));
}

Value Interpreter::eval_member(const Node& n, const EnvPtr& env) {
  Value object = evaluate(n.kids[0].get(), env);
  const Node& pn = *n.kids[1];
  Value prop;
  if (n.flag) {
    if (pn.kind == NodeKind::Slice) {
      if (!object.is_array() && !object.is_string()) raise("Slice object must be an array or string");
      Value part[3];
      for (int k = 0; k < 3; ++k) {
        part[k] = evaluate(pn.kids[size_t(k)].get(), env);
        if (part[k].kind != Kind::Int && !part[k].is_undefined())
          raise(fmt::format("Slice {} must be numeric or undefined", k == 0 ? "start" : k == 1 ? "stop" : "step"));
      }
      if (object.is_array()) return Value::array(do_slice(object.arr->items, part[0], part[1], part[2]));
      return Value::string(utf8_encode(do_slice(utf8_decode(object.s), part[0], part[1], part[2])));
    }
    prop = evaluate(&pn, env);
  } else if (pn.kind == NodeKind::IntegerLiteral) {
    prop = Value::integer(pn.ival);
  } else {
    prop = Value::string(pn.text);
  }

  if (object.is_attr_container()) {
    if (!prop.is_string()) raise(fmt::format("Cannot access property with non-string: got {}", prop.type_name()));
    if (const Value* v = object.obj->find(prop.s)) return *v;
    return object.kind == Kind::Object ? builtin_member(object, prop.s) : Value::undefined();
  }
  if (object.is_array() || object.is_string()) {
    if (prop.kind == Kind::Int) {
      if (object.is_array()) {
        int64_t len = int64_t(object.arr->items.size()), i = prop.i < 0 ? prop.i + len : prop.i;
        return i >= 0 && i < len ? object.arr->items[size_t(i)] : Value::undefined();
      }
      // String.prototype.at indexes UTF-16 units.
      std::vector<char32_t> units;
      for (char32_t c : utf8_decode(object.s)) {
        if (c >= 0x10000) { units.push_back(0xD800); units.push_back(0xDC00); }
        else units.push_back(c);
      }
      int64_t len = int64_t(units.size()), i = prop.i < 0 ? prop.i + len : prop.i;
      if (i < 0 || i >= len) return Value::undefined();
      if (units[size_t(i)] >= 0xD800 && units[size_t(i)] <= 0xDFFF)
        raise("string index falls inside a character outside the Basic Multilingual Plane");
      std::string s;
      utf8_append(s, units[size_t(i)]);
      return Value::string(s);
    }
    if (prop.is_string()) return builtin_member(object, prop.s);
    raise(fmt::format("Cannot access property with non-string/non-number: got {}", prop.type_name()));
  }
  if (!prop.is_string()) raise(fmt::format("Cannot access property with non-string: got {}", prop.type_name()));
  return builtin_member(object, prop.s);
}

Value Interpreter::eval_set(const Node& n, const EnvPtr& env) {
  Value rhs = n.kids[1] ? evaluate(n.kids[1].get(), env) : Value::string(block(n.body, env));
  const Node& target = *n.kids[0];
  if (target.kind == NodeKind::Identifier) {
    env->vars[target.text] = rhs;
  } else if (target.kind == NodeKind::TupleLiteral) {
    if (!rhs.is_array()) raise(fmt::format("Cannot unpack non-iterable type in set: {}", rhs.type_name()));
    const auto& arr = rhs.arr->items;
    if (arr.size() != target.kids.size())
      raise(fmt::format("Too {} items to unpack in set", target.kids.size() > arr.size() ? "few" : "many"));
    for (size_t k = 0; k < arr.size(); ++k) {
      if (target.kids[k]->kind != NodeKind::Identifier) raise("Cannot unpack to non-identifier in set");
      env->vars[target.kids[k]->text] = arr[k];
    }
  } else if (target.kind == NodeKind::Member) {
    Value object = evaluate(target.kids[0].get(), env);
    if (object.kind != Kind::Namespace) raise("cannot assign attribute on non-namespace object");
    if (target.kids[1]->kind != NodeKind::Identifier) raise("Cannot assign to member with non-identifier property");
    object.obj->set(target.kids[1]->text, rhs);
  } else {
    raise("Invalid left-hand side in set");
  }
  return Value::none();
}

Value Interpreter::eval_for(const Node& n, const EnvPtr& env) {
  auto scope = make_env(env);
  const Node* iter_node = n.kids[1].get();
  const Node* test = nullptr;
  Value iterable;
  if (iter_node->kind == NodeKind::Select) {
    iterable = evaluate(iter_node->kids[0].get(), scope);
    test = iter_node->kids[1].get();
  } else {
    iterable = evaluate(iter_node, scope);
  }
  if (!iterable.is_array() && !iterable.is_object())
    raise(fmt::format("Expected iterable or object type in for loop: got {}", iterable.type_name()));
  std::vector<Value> source;
  if (iterable.is_object()) {
    for (const auto& e : iterable.obj->entries) source.push_back(Value::string(e.first));
  } else {
    source = iterable.arr->items;
  }

  const Node& var = *n.kids[0];
  auto bind = [&](const EnvPtr& s, const Value& cur) {
    if (var.kind == NodeKind::Identifier) {
      s->vars[var.text] = cur;
      return;
    }
    if (cur.kind != Kind::Array || cur.arr->tuple) raise(fmt::format("Cannot unpack non-iterable type: {}", cur.type_name()));
    if (var.kids.size() != cur.arr->items.size())
      raise(fmt::format("Too {} items to unpack", var.kids.size() > cur.arr->items.size() ? "few" : "many"));
    for (size_t j = 0; j < var.kids.size(); ++j) {
      if (var.kids[j]->kind != NodeKind::Identifier) raise("Cannot unpack non-identifier type");
      s->vars[var.kids[j]->text] = cur.arr->items[j];
    }
  };

  std::vector<Value> items;
  for (const Value& cur : source) {
    if (test) {
      auto loop_scope = make_env(scope);
      bind(loop_scope, cur);
      if (!evaluate(test, loop_scope).truthy()) continue;
    } else if (var.kind != NodeKind::Identifier) {
      bind(make_env(scope), cur);  // the reference checks unpacking before the loop runs
    }
    items.push_back(cur);
  }

  std::string out;
  bool no_iteration = true;
  const int64_t len = int64_t(items.size());
  for (int64_t i = 0; i < len; ++i) {
    Value loop = Value::object();
    auto& e = loop.obj->entries;
    e.emplace_back("index", Value::integer(i + 1));
    e.emplace_back("index0", Value::integer(i));
    e.emplace_back("revindex", Value::integer(len - i));
    e.emplace_back("revindex0", Value::integer(len - i - 1));
    e.emplace_back("first", Value::boolean(i == 0));
    e.emplace_back("last", Value::boolean(i == len - 1));
    e.emplace_back("length", Value::integer(len));
    e.emplace_back("previtem", i > 0 ? items[size_t(i - 1)] : Value::undefined());
    e.emplace_back("nextitem", i < len - 1 ? items[size_t(i + 1)] : Value::undefined());
    scope->vars["loop"] = loop;
    bind(scope, items[size_t(i)]);
    try {
      out += block(n.body, scope);
    } catch (const ContinueSignal&) {
      continue;  // as in the reference, a skipped iteration does not count for `else`
    } catch (const BreakSignal&) {
      break;
    }
    no_iteration = false;
  }
  if (no_iteration) out += block(n.alt, scope);
  return Value::string(out);
}

namespace {
// Whether a macro body reads `kwargs` / `varargs` (then the call collects extras there
// instead of rejecting them).
void scan_special(const Node* n, bool& kw, bool& va) {
  if (!n) return;
  if (n->kind == NodeKind::Identifier) {
    kw = kw || n->text == "kwargs";
    va = va || n->text == "varargs";
  }
  for (const auto* list : {&n->kids, &n->body, &n->alt, &n->params})
    for (const auto& k : *list) scan_special(k.get(), kw, va);
}
}  // namespace

void Interpreter::bind_macro_args(const std::string& name, const std::vector<NodePtr>& params, bool want_kwargs,
                                  bool want_varargs, std::vector<Value> args, const EnvPtr& scope) {
  Value kw = Value::object();
  if (!args.empty() && args.back().is_kwargs()) {
    kw.obj->entries = args.back().obj->entries;
    args.pop_back();
  }
  std::vector<std::pair<std::string, const Node*>> pending;
  for (size_t k = 0; k < params.size(); ++k) {
    const Node& p = *params[k];
    const Node* dflt = p.kind == NodeKind::KeywordArgument ? p.kids[0].get() : nullptr;
    bool have = k < args.size();
    Value v = have ? args[k] : Value::undefined();
    if (!have) {
      if (const Value* x = kw.obj->find(p.text)) {
        v = *x;
        have = true;
        kw.obj->erase(p.text);
      }
    }
    if (!have && dflt) pending.emplace_back(p.text, dflt);
    scope->vars[p.text] = v;
  }
  if (want_kwargs) scope->vars["kwargs"] = kw;
  else if (!kw.obj->entries.empty())
    raise(fmt::format("macro {} takes no keyword argument '{}'", name, kw.obj->entries[0].first));
  if (want_varargs) {
    std::vector<Value> rest;
    for (size_t k = params.size(); k < args.size(); ++k) rest.push_back(args[k]);
    scope->vars["varargs"] = Value::array(std::move(rest));
  } else if (args.size() > params.size()) {
    raise(fmt::format("macro {} takes not more than {} argument(s)", name, params.size()));
  }
  for (const auto& [pname, d] : pending) scope->vars[pname] = evaluate(d, scope);
}

Value Interpreter::eval_macro(const Node& n, const EnvPtr& env) {
  bool kw = false, va = false;
  for (const auto& b : n.body) scan_special(b.get(), kw, va);
  const Node* node = &n;
  env->vars[n.text] = Value::function([this, node, kw, va](std::vector<Value>& args, const EnvPtr& scope) {
    // Macros see the caller's scope (the reference resolves names dynamically).
    auto ms = make_env(scope);
    bind_macro_args("'" + node->text + "'", node->params, kw, va, args, ms);
    return Value::string(block(node->body, ms));
  });
  return Value::none();
}

Value Interpreter::eval_call_statement(const Node& n, const EnvPtr& env) {
  bool kw = false, va = false;
  for (const auto& b : n.body) scan_special(b.get(), kw, va);
  const Node* node = &n;
  Value caller = Value::function([this, node, kw, va, env](std::vector<Value>& args, const EnvPtr&) {
    auto ce = make_env(env);
    bind_macro_args("None", node->params, kw, va, args, ce);
    return Value::string(block(node->body, ce));
  });
  const Node& call = *n.kids[0];
  std::vector<Value> args;
  Value kwargs;
  arguments(call.kids, 1, env, args, kwargs);
  args.push_back(kwargs);
  Value fn = evaluate(call.kids[0].get(), env);
  if (fn.kind != Kind::Function) raise(fmt::format("Cannot call something that is not a function: got {}", fn.type_name()));
  auto ne = make_env(env);
  ne->vars["caller"] = caller;
  return fn.fn->fn(args, ne);
}

}  // namespace ridge::jinja
