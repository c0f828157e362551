// Builtin filters, tests, methods and global functions, each as @huggingface/jinja
// 0.5.11 defines it (runtime.ts applyFilter, Environment.TESTS, StringValue/ObjectValue
// builtins, setupGlobals). Filters the reference lacks (e.g. round, select, reject) are
// errors here too: a template using them does not render there either.
#include <algorithm>
#include <cmath>
#include <ctime>

#include <fmt/format.h>

#include "tokenizer/jinja/interpreter.h"

namespace ridge::jinja {

bool js_truthy(const Value& v) {
  switch (v.kind) {
    case Kind::Array: case Kind::Object: case Kind::Namespace: case Kind::Function: return true;
    default: return v.truthy();
  }
}

namespace {

Value arg_or(const std::vector<Value>& pos, size_t k, const Value& kw, const char* name, Value dflt) {
  if (k < pos.size()) return pos[k];
  if (const Value* v = kw.obj->find(name)) return *v;
  return dflt;
}

// getAttributeValue: "a.b.0" through objects and arrays.
Value attribute_path(const Value& item, const std::string& path) {
  Value v = item;
  size_t start = 0;
  for (;;) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (v.is_attr_container()) {
      const Value* x = v.obj->find(part);
      v = x ? *x : Value::undefined();
    } else if (v.is_array()) {
      double idx;
      if (!js_parse_int(part, &idx) || idx < 0 || idx >= double(v.arr->items.size())) return Value::undefined();
      v = v.arr->items[size_t(idx)];
    } else {
      return Value::undefined();
    }
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

// titleCase: /\b\w/g upper-cased, with JS's ASCII-only \w and \b.
std::string title_case(const std::string& s) {
  std::string out = s;
  auto word = [](char c) { return isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (size_t k = 0; k < out.size(); ++k)
    if (word(out[k]) && (k == 0 || !word(out[k - 1]))) out[k] = char(toupper(static_cast<unsigned char>(out[k])));
  return out;
}

// utils.ts replace(): count-limited, an empty pattern matches between code points.
std::string replace_str(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  if (count == 0) return s;
  int64_t left = count < 0 ? INT64_MAX : count;
  std::string out;
  if (from.empty()) {
    auto cps = utf8_decode(s);
    for (size_t k = 0; k <= cps.size(); ++k) {
      if (left > 0) { out += to; --left; }
      if (k < cps.size()) utf8_append(out, cps[k]);
    }
    return out;
  }
  size_t pos = 0;
  while (left > 0) {
    size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += to;
    pos = hit + from.size();
    --left;
  }
  return out + s.substr(pos);
}

Value str_array(std::vector<std::string> parts) {
  std::vector<Value> items;
  for (auto& p : parts) items.push_back(Value::string(std::move(p)));
  return Value::array(std::move(items));
}

Value split(const std::string& s, const std::vector<Value>& args) {
  Value sep = args.size() > 0 ? args[0] : Value::none();
  if (!sep.is_string() && !sep.is_none()) raise("sep argument must be a string or null");
  Value maxsplit = args.size() > 1 ? args[1] : Value::integer(-1);
  if (maxsplit.kind != Kind::Int) raise("maxsplit argument must be a number");
  std::vector<std::string> parts;
  if (sep.is_none()) {
    std::string text = js_trim(s, true, false);
    size_t k = 0;
    while (k < text.size()) {
      size_t b = k;
      while (b < text.size() && js_space_at(text, b)) b += js_space_at(text, b);
      if (b >= text.size()) break;
      size_t e = b;
      while (e < text.size() && !js_space_at(text, e)) ++e;
      if (maxsplit.i != -1 && int64_t(parts.size()) >= maxsplit.i) {
        parts.push_back(text.substr(b));
        break;
      }
      parts.push_back(text.substr(b, e - b));
      k = e;
    }
  } else {
    if (sep.s.empty()) raise("empty separator");
    size_t pos = 0;
    for (;;) {
      size_t hit = s.find(sep.s, pos);
      if (hit == std::string::npos) break;
      parts.push_back(s.substr(pos, hit - pos));
      pos = hit + sep.s.size();
    }
    parts.push_back(s.substr(pos));
    if (maxsplit.i != -1 && int64_t(parts.size()) > maxsplit.i) {
      std::string rest;
      for (size_t k = size_t(maxsplit.i); k < parts.size(); ++k) rest += (k > size_t(maxsplit.i) ? sep.s : "") + parts[k];
      parts.resize(size_t(maxsplit.i));
      parts.push_back(rest);
    }
  }
  return str_array(std::move(parts));
}

Value fn(NativeFn f) { return Value::function(std::move(f)); }

bool starts_or_ends(const std::string& s, const std::vector<Value>& args, bool ends, const char* name) {
  if (args.empty()) raise(fmt::format("{}() requires at least one argument", name));
  auto test = [&](const std::string& p) {
    return ends ? s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0 : s.rfind(p, 0) == 0;
  };
  if (args[0].is_string()) return test(args[0].s);
  if (args[0].is_array()) {
    for (const Value& item : args[0].arr->items) {
      if (!item.is_string()) raise(fmt::format("{}() tuple elements must be strings", name));
      if (test(item.s)) return true;
    }
    return false;
  }
  raise(fmt::format("{}() argument must be a string or tuple of strings", name));
}

Value string_method(const std::string& s, const std::string& name) {
  if (name == "upper") return fn([s](std::vector<Value>&, const EnvPtr&) { return Value::string(js_upper(s)); });
  if (name == "lower") return fn([s](std::vector<Value>&, const EnvPtr&) { return Value::string(js_lower(s)); });
  // strip/lstrip/rstrip ignore their argument in the reference: they trim whitespace.
  if (name == "strip") return fn([s](std::vector<Value>&, const EnvPtr&) { return Value::string(js_trim(s, true, true)); });
  if (name == "lstrip") return fn([s](std::vector<Value>&, const EnvPtr&) { return Value::string(js_trim(s, true, false)); });
  if (name == "rstrip") return fn([s](std::vector<Value>&, const EnvPtr&) { return Value::string(js_trim(s, false, true)); });
  if (name == "title") return fn([s](std::vector<Value>&, const EnvPtr&) { return Value::string(title_case(s)); });
  if (name == "capitalize")
    return fn([s](std::vector<Value>&, const EnvPtr&) {
      // charAt(0).toUpperCase() + slice(1): the rest keeps its case.
      auto cps = utf8_decode(s);
      if (cps.empty() || cps[0] >= 0x10000) return Value::string(s);
      std::string first;
      utf8_append(first, cps[0]);
      cps.erase(cps.begin());
      return Value::string(js_upper(first) + utf8_encode(cps));
    });
  if (name == "length") return Value::integer(int64_t(utf16_length(s)));
  if (name == "startswith")
    return fn([s](std::vector<Value>& a, const EnvPtr&) { return Value::boolean(starts_or_ends(s, a, false, "startswith")); });
  if (name == "endswith")
    return fn([s](std::vector<Value>& a, const EnvPtr&) { return Value::boolean(starts_or_ends(s, a, true, "endswith")); });
  if (name == "split") return fn([s](std::vector<Value>& a, const EnvPtr&) { return split(s, a); });
  if (name == "replace")
    return fn([s](std::vector<Value>& a, const EnvPtr&) {
      if (a.size() < 2) raise("replace() requires at least two arguments");
      if (!a[0].is_string() || !a[1].is_string()) raise("replace() arguments must be strings");
      Value count = Value::none();
      if (a.size() > 2) {
        if (a[2].is_kwargs()) {
          const Value* c = a[2].obj->find("count");
          count = c ? *c : Value::none();
        } else {
          count = a[2];
        }
      }
      if (count.kind != Kind::Int && !count.is_none()) raise("replace() count argument must be a number or null");
      return Value::string(replace_str(s, a[0].s, a[1].s, count.is_none() ? -1 : count.i));
    });
  return Value::undefined();
}

Value object_items(const Value& o) {
  std::vector<Value> items;
  for (const auto& [k, v] : o.obj->entries) items.push_back(Value::array({Value::string(k), v}));
  return Value::array(std::move(items));
}

Value dictsort(const Value& o, std::vector<Value>& args) {
  Value kw = Value::object();
  std::vector<Value> pos;
  for (const Value& a : args) {
    if (a.is_kwargs()) kw = a;
    else pos.push_back(a);
  }
  Value cs = arg_or(pos, 0, kw, "case_sensitive", Value::boolean(false));
  if (cs.kind != Kind::Bool) raise("case_sensitive must be a boolean");
  Value by = arg_or(pos, 1, kw, "by", Value::string("key"));
  if (!by.is_string()) raise("by must be a string");
  if (by.s != "key" && by.s != "value") raise("by must be either 'key' or 'value'");
  Value rev = arg_or(pos, 2, kw, "reverse", Value::boolean(false));
  if (rev.kind != Kind::Bool) raise("reverse must be a boolean");
  Value items = object_items(o);
  size_t idx = by.s == "key" ? 0 : 1;
  std::stable_sort(items.arr->items.begin(), items.arr->items.end(), [&](const Value& a, const Value& b) {
    int r = compare_values(a.arr->items[idx], b.arr->items[idx], cs.b);
    return (rev.b ? -r : r) < 0;
  });
  return items;
}

Value object_method(const Value& o, const std::string& name) {
  if (name == "get")
    return fn([o](std::vector<Value>& a, const EnvPtr&) {
      if (a.empty() || !a[0].is_string())
        raise(fmt::format("Object key must be a string: got {}", a.empty() ? "nothing" : a[0].type_name()));
      if (const Value* v = o.obj->find(a[0].s)) return *v;
      return a.size() > 1 ? a[1] : Value::none();
    });
  if (name == "items") return fn([o](std::vector<Value>&, const EnvPtr&) { return object_items(o); });
  if (name == "keys")
    return fn([o](std::vector<Value>&, const EnvPtr&) {
      std::vector<Value> keys;
      for (const auto& e : o.obj->entries) keys.push_back(Value::string(e.first));
      return Value::array(std::move(keys));
    });
  if (name == "values")
    return fn([o](std::vector<Value>&, const EnvPtr&) {
      std::vector<Value> vals;
      for (const auto& e : o.obj->entries) vals.push_back(e.second);
      return Value::array(std::move(vals));
    });
  if (name == "dictsort") return fn([o](std::vector<Value>& a, const EnvPtr&) { return dictsort(o, a); });
  return Value::undefined();
}

Value call0(const Value& f, const EnvPtr& env) {
  std::vector<Value> none;
  return f.fn->fn(none, env);
}

Value tojson_filter(const Value& operand, const Value& kw) {
  JsonOptions o;
  const Value* indent = kw.obj->find("indent");
  if (indent && indent->kind != Kind::Int && !indent->is_none()) raise("If set, indent must be a number");
  if (indent && indent->kind == Kind::Int) o.indent = int(std::clamp<int64_t>(indent->i, -1, 1000));
  const Value* ea = kw.obj->find("ensure_ascii");
  if (ea && ea->kind != Kind::Bool) raise("If set, ensure_ascii must be a boolean");
  o.ensure_ascii = ea && ea->b;
  const Value* sk = kw.obj->find("sort_keys");
  if (sk && sk->kind != Kind::Bool) raise("If set, sort_keys must be a boolean");
  o.sort_keys = sk && sk->b;
  const Value* sep = kw.obj->find("separators");
  if (sep && sep->is_array()) {
    if (sep->arr->items.size() != 2 || !sep->arr->items[0].is_string() || !sep->arr->items[1].is_string())
      raise("separators must be a tuple of two strings");
    o.have_separators = true;
    o.item_sep = sep->arr->items[0].s;
    o.key_sep = sep->arr->items[1].s;
  } else if (sep && !sep->is_none()) {
    raise("If set, separators must be a tuple of two strings");
  }
  return Value::string(to_json(operand, o));
}

Value int_or_float(const std::string& name, double v) {
  if (name == "float") return Value::number(v);
  if (!std::isfinite(v) || std::fabs(v) >= 9.2e18) raise("integer out of range");
  return Value::integer(int64_t(v));
}

Value filter_plain(const Value& operand, const std::string& name, const EnvPtr& env) {
  if (operand.is_array()) {
    const auto& items = operand.arr->items;
    if (name == "list") return operand;
    if (name == "first") return items.empty() ? Value::undefined() : items.front();
    if (name == "last") return items.empty() ? Value::undefined() : items.back();
    if (name == "length") return Value::integer(int64_t(items.size()));
    if (name == "reverse") return Value::array(std::vector<Value>(items.rbegin(), items.rend()));
    if (name == "sort") {
      std::vector<Value> v = items;
      std::stable_sort(v.begin(), v.end(), [](const Value& a, const Value& b) { return compare_values(a, b, false) < 0; });
      return Value::array(std::move(v));
    }
    if (name == "join") {
      std::string out;
      for (const Value& x : items)
        if (!x.is_none() && !x.is_undefined()) out += js_string(x);
      return Value::string(out);
    }
    if (name == "string") return Value::string(to_json(operand, {}, false));
    if (name == "unique") {
      std::vector<Value> out;
      for (const Value& x : items) {
        bool seen = false;
        for (const Value& y : out) seen = seen || same_value_zero(x, y);
        if (!seen) out.push_back(x);
      }
      return Value::array(std::move(out));
    }
    raise(fmt::format("Unknown ArrayValue filter: {}", name));
  }
  if (operand.is_string()) {
    const std::string& s = operand.s;
    if (name == "length" || name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
      Value b = string_method(s, name);
      return b.kind == Kind::Function ? call0(b, env) : b;
    }
    if (name == "trim") return Value::string(js_trim(s, true, true));
    if (name == "indent") {
      std::string out;
      size_t start = 0, line = 0;
      for (;;) {
        size_t nl = s.find('\n', start);
        std::string part = s.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
        if (line > 0) out += '\n';
        out += (line == 0 || part.empty()) ? part : "    " + part;
        if (nl == std::string::npos) break;
        start = nl + 1;
        ++line;
      }
      return Value::string(out);
    }
    if (name == "join" || name == "string") return operand;
    if (name == "int") {
      double v;
      return Value::integer(js_parse_int(s, &v) ? int_or_float("int", v).i : 0);
    }
    if (name == "float") {
      double v;
      return Value::number(js_parse_float(s, &v) ? v : 0.0);
    }
    raise(fmt::format("Unknown StringValue filter: {}", name));
  }
  if (operand.is_numeric()) {
    if (name == "abs") return operand.kind == Kind::Int ? Value::integer(operand.i < 0 ? -operand.i : operand.i)
                                                        : Value::number(std::fabs(operand.f));
    if (name == "int") return operand.kind == Kind::Int ? operand : int_or_float("int", std::floor(operand.f));
    if (name == "float") return Value::number(operand.num());
    if (name == "string") return Value::string(display(operand));
    raise(fmt::format("Unknown NumericValue filter: {}", name));
  }
  if (operand.is_object()) {
    if (name == "items") return object_items(operand);
    if (name == "length") return Value::integer(int64_t(operand.obj->entries.size()));
    Value b = object_method(operand, name);
    if (b.kind == Kind::Function) return call0(b, env);
    raise(fmt::format("Unknown ObjectValue filter: {}", name));
  }
  if (operand.kind == Kind::Bool) {
    if (name == "bool") return operand;
    if (name == "int") return Value::integer(operand.b ? 1 : 0);
    if (name == "float") return Value::number(operand.b ? 1.0 : 0.0);
    if (name == "string") return Value::string(operand.b ? "true" : "false");
    raise(fmt::format("Unknown BooleanValue filter: {}", name));
  }
  raise(fmt::format("Cannot apply filter \"{}\" to type: {}", name, operand.type_name()));
}

}  // namespace

Value apply_filter(Interpreter& in, const Value& operand, const Node& filter, const EnvPtr& env) {
  if (filter.kind == NodeKind::Identifier) {
    if (filter.text == "safe") return operand;
    if (filter.text == "tojson") return Value::string(to_json(operand, {}));
    return filter_plain(operand, filter.text, env);
  }
  if (filter.kind != NodeKind::Call || filter.kids[0]->kind != NodeKind::Identifier) raise("unsupported filter expression");
  const std::string& name = filter.kids[0]->text;
  std::vector<Value> args;
  Value kw;
  auto eval_args = [&] { in.arguments(filter.kids, 1, env, args, kw); };

  if (name == "tojson") {
    eval_args();
    return tojson_filter(operand, kw);
  }
  if (name == "join") {
    std::vector<std::string> parts;
    if (operand.is_string()) {
      for (char32_t c : utf8_decode(operand.s)) { parts.emplace_back(); utf8_append(parts.back(), c); }
    } else if (operand.is_array()) {
      for (const Value& x : operand.arr->items) parts.push_back(x.is_none() || x.is_undefined() ? "" : js_string(x));
    } else {
      raise(fmt::format("Cannot apply filter \"join\" to type: {}", operand.type_name()));
    }
    eval_args();
    Value sep = arg_or(args, 0, kw, "separator", Value::string(""));
    if (!sep.is_string()) raise("separator must be a string");
    std::string out;
    for (size_t k = 0; k < parts.size(); ++k) out += (k ? sep.s : "") + parts[k];
    return Value::string(out);
  }
  if (name == "int" || name == "float") {
    eval_args();
    Value dflt = arg_or(args, 0, kw, "default", name == "int" ? Value::integer(0) : Value::number(0));
    if (operand.is_string()) {
      double v;
      bool ok = name == "int" ? js_parse_int(operand.s, &v) : js_parse_float(operand.s, &v);
      return ok ? int_or_float(name, v) : dflt;
    }
    if (operand.is_numeric()) return operand;
    if (operand.kind == Kind::Bool) return name == "int" ? Value::integer(operand.b) : Value::number(operand.b);
    raise(fmt::format("Cannot apply filter \"{}\" to type: {}", name, operand.type_name()));
  }
  if (name == "default") {
    eval_args();
    Value dflt = args.size() > 0 ? args[0] : Value::string("");
    Value boolean = arg_or(args, 1, kw, "boolean", Value::boolean(false));
    if (boolean.kind != Kind::Bool) raise("`default` filter flag must be a boolean");
    if (operand.is_undefined() || (boolean.b && !operand.truthy())) return dflt;
    return operand;
  }

  if (operand.is_array()) {
    const auto& items = operand.arr->items;
    if (name == "sort") {
      eval_args();
      Value rev = arg_or(args, 0, kw, "reverse", Value::boolean(false));
      if (rev.kind != Kind::Bool) raise("reverse must be a boolean");
      Value cs = arg_or(args, 1, kw, "case_sensitive", Value::boolean(false));
      if (cs.kind != Kind::Bool) raise("case_sensitive must be a boolean");
      Value attr = arg_or(args, 2, kw, "attribute", Value::none());
      if (!attr.is_string() && attr.kind != Kind::Int && !attr.is_none())
        raise("attribute must be a string, integer, or null");
      auto key = [&](const Value& item) {
        if (attr.is_none()) return item;
        return attribute_path(item, attr.kind == Kind::Int ? fmt::format("{}", attr.i) : attr.s);
      };
      std::vector<Value> v = items;
      std::stable_sort(v.begin(), v.end(), [&](const Value& a, const Value& b) {
        int r = compare_values(key(a), key(b), cs.b);
        return (rev.b ? -r : r) < 0;
      });
      return Value::array(std::move(v));
    }
    if (name == "selectattr" || name == "rejectattr") {
      bool select = name == "selectattr";
      for (const Value& x : items)
        if (!x.is_attr_container()) raise(fmt::format("`{}` can only be applied to array of objects", name));
      for (size_t k = 1; k < filter.kids.size(); ++k)
        if (filter.kids[k]->kind != NodeKind::StringLiteral) raise(fmt::format("arguments of `{}` must be strings", name));
      if (filter.kids.size() < 2) raise(fmt::format("`{}` needs an attribute name", name));
      std::string attr = filter.kids[1]->text;
      const Node* test = filter.kids.size() > 2 ? filter.kids[2].get() : nullptr;
      Value value = filter.kids.size() > 3 ? Value::string(filter.kids[3]->text) : Value::undefined();
      if (test && !has_test(test->text)) raise(fmt::format("Unknown test: {}", test->text));
      std::vector<Value> out;
      for (const Value& x : items) {
        const Value* a = x.obj->find(attr);
        bool r = a && (test ? run_test(test->text, *a, filter.kids.size() > 3 ? &value : nullptr) : a->truthy());
        if (r == select) out.push_back(x);
      }
      return Value::array(std::move(out));
    }
    if (name == "map") {
      eval_args();
      const Value* attr = kw.obj->find("attribute");
      if (!attr) raise("`map` expressions without `attribute` set are not currently supported.");
      if (!attr->is_string()) raise("attribute must be a string");
      const Value* dflt = kw.obj->find("default");
      std::vector<Value> out;
      for (const Value& x : items) {
        if (!x.is_attr_container()) raise("items in map must be an object");
        Value v = attribute_path(x, attr->s);
        out.push_back(v.is_undefined() && dflt ? *dflt : v);
      }
      return Value::array(std::move(out));
    }
    raise(fmt::format("Unknown ArrayValue filter: {}", name));
  }
  if (operand.is_string()) {
    if (name == "indent") {
      eval_args();
      Value width = arg_or(args, 0, kw, "width", Value::integer(4));
      if (width.kind != Kind::Int) raise("width must be a number");
      bool first = js_truthy(arg_or(args, 1, kw, "first", Value::boolean(false)));
      bool blank = js_truthy(arg_or(args, 2, kw, "blank", Value::boolean(false)));
      std::string pad(size_t(std::clamp<int64_t>(width.i, 0, 1000)), ' ');
      std::string out;
      size_t start = 0, line = 0;
      for (;;) {
        size_t nl = operand.s.find('\n', start);
        std::string part = operand.s.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
        if (line > 0) out += '\n';
        out += ((!first && line == 0) || (!blank && part.empty())) ? part : pad + part;
        if (nl == std::string::npos) break;
        start = nl + 1;
        ++line;
      }
      return Value::string(out);
    }
    if (name == "replace") {
      eval_args();
      args.push_back(kw);
      return string_method(operand.s, "replace").fn->fn(args, env);
    }
    raise(fmt::format("Unknown StringValue filter: {}", name));
  }
  if (operand.is_object()) {
    Value b = object_method(operand, name);
    if (b.kind == Kind::Function) {
      eval_args();
      if (!kw.obj->entries.empty()) args.push_back(kw);
      return b.fn->fn(args, env);
    }
    raise(fmt::format("Unknown ObjectValue filter: {}", name));
  }
  raise(fmt::format("Cannot apply filter \"{}\" to type: {}", name, operand.type_name()));
}

// --- tests ------------------------------------------------------------------------------

bool has_test(const std::string& n) {
  static const char* names[] = {"boolean", "callable", "odd", "even", "false", "true", "none", "string", "number",
                                "integer", "iterable", "mapping", "sequence", "lower", "upper", "defined", "undefined",
                                "equalto", "eq"};
  for (const char* x : names)
    if (n == x) return true;
  return false;
}

bool run_test(const std::string& n, const Value& a, const Value* b) {
  if (n == "boolean") return a.kind == Kind::Bool;
  if (n == "callable") return a.kind == Kind::Function;
  if (n == "odd" || n == "even") {
    if (a.kind != Kind::Int) raise(fmt::format("cannot {} on {}", n, a.type_name()));
    return (a.i % 2 != 0) == (n == "odd");
  }
  if (n == "false") return a.kind == Kind::Bool && !a.b;
  if (n == "true") return a.kind == Kind::Bool && a.b;
  if (n == "none") return a.is_none();
  if (n == "string") return a.is_string();
  if (n == "number") return a.is_numeric();
  if (n == "integer") return a.kind == Kind::Int;
  if (n == "iterable") return (a.is_array() && !a.is_tuple()) || a.is_string();
  if (n == "mapping") return a.is_object();
  if (n == "sequence") return a.is_array() || a.is_object() || a.is_string();
  if (n == "lower") return a.is_string() && a.s == js_lower(a.s);
  if (n == "upper") return a.is_string() && a.s == js_upper(a.s);
  if (n == "defined") return !a.is_undefined();
  if (n == "undefined") return a.is_undefined();
  if (n == "equalto" || n == "eq") {
    if (!b) raise(fmt::format("the '{}' test needs a value to compare with", n));
    return strict_equals(a, *b);
  }
  raise(fmt::format("Unknown test: {}", n));
}

// --- members and globals ----------------------------------------------------------------

Value builtin_member(const Value& object, const std::string& name) {
  if (object.is_string()) return string_method(object.s, name);
  if (object.is_object()) return object_method(object, name);
  if (object.is_array() && name == "length") return Value::integer(int64_t(object.arr->items.size()));
  return Value::undefined();
}

namespace {

Value range_fn(std::vector<Value>& a, const EnvPtr&) {
  if (a.empty() || a.size() > 3) raise("range() takes 1 to 3 numeric arguments");
  for (const Value& v : a)
    if (!v.is_numeric()) raise(fmt::format("range() arguments must be numbers, got {}", v.type_name()));
  double start = a.size() == 1 ? 0 : a[0].num(), stop = a.size() == 1 ? a[0].num() : a[1].num();
  double step = a.size() == 3 ? a[2].num() : 1;
  if (step == 0) raise("range() step must not be zero");
  if (std::fabs((stop - start) / step) > 1e7) raise("range() too long");
  std::vector<Value> out;
  for (double i = start; step > 0 ? i < stop : i > stop; i += step)
    out.push_back(std::floor(i) == i ? Value::integer(int64_t(i)) : Value::number(i));
  return Value::array(std::move(out));
}

Value strftime_now(std::vector<Value>& a, const EnvPtr&) {
  if (a.empty() || !a[0].is_string()) raise("strftime_now() takes a format string");
  static const char* months[] = {"January", "February", "March", "April", "May", "June", "July",
                                 "August", "September", "October", "November", "December"};
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  const std::string& f = a[0].s;
  std::string out;
  for (size_t k = 0; k < f.size(); ++k) {
    if (f[k] != '%' || k + 1 >= f.size()) { out += f[k]; continue; }
    char c = f[k + 1];
    switch (c) {
      case 'Y': out += fmt::format("{}", tm.tm_year + 1900); break;
      case 'm': out += fmt::format("{:02}", tm.tm_mon + 1); break;
      case 'd': out += fmt::format("{:02}", tm.tm_mday); break;
      case 'b': out += std::string(months[tm.tm_mon]).substr(0, 3); break;
      case 'B': out += months[tm.tm_mon]; break;
      case 'H': out += fmt::format("{:02}", tm.tm_hour); break;
      case 'M': out += fmt::format("{:02}", tm.tm_min); break;
      case '%': out += '%'; break;
      default: out += f.substr(k, 2); break;  // unknown directives stay as written
    }
    ++k;
  }
  return Value::string(out);
}

Value namespace_fn(std::vector<Value>& a, const EnvPtr&) {
  std::vector<Value> pos = a;
  Value kw;
  if (!pos.empty() && pos.back().is_kwargs()) { kw = pos.back(); pos.pop_back(); }
  if (pos.size() > 1) raise(fmt::format("namespace expected at most 1 argument, got {}", pos.size()));
  Value ns = Value::ns();
  if (pos.size() == 1) {
    const Value& src = pos[0];
    if (src.is_object()) {
      for (const auto& [k, v] : src.obj->entries) ns.obj->set(k, v);
    } else if (src.is_array()) {
      for (const Value& pair : src.arr->items) {
        if (!pair.is_array() || pair.arr->items.size() != 2)
          raise("namespace expected an object or an iterable of [key, value] pairs");
        if (!pair.arr->items[0].is_string()) raise("namespace keys must be strings");
        ns.obj->set(pair.arr->items[0].s, pair.arr->items[1]);
      }
    } else {
      raise(fmt::format("'{}' object is not iterable", src.type_name()));
    }
  }
  if (kw.kind == Kind::Object)
    for (const auto& [k, v] : kw.obj->entries) ns.obj->set(k, v);
  return ns;
}

}  // namespace

void setup_globals(Env& env) {
  env.vars["namespace"] = Value::function(namespace_fn);
  env.vars["false"] = Value::boolean(false);
  env.vars["true"] = Value::boolean(true);
  env.vars["none"] = Value::none();
  env.vars["False"] = Value::boolean(false);
  env.vars["True"] = Value::boolean(true);
  env.vars["None"] = Value::none();
  env.vars["raise_exception"] = Value::function([](std::vector<Value>& a, const EnvPtr&) -> Value {
    // Error(String(first argument)): the template's own message reaches the user.
    std::string msg = a.empty() || a[0].is_undefined() ? "" : a[0].is_string() ? a[0].s : js_string(a[0]);
    raise("raise_exception: " + msg);
  });
  env.vars["range"] = Value::function(range_fn);
  env.vars["strftime_now"] = Value::function(strftime_now);
}

}  // namespace ridge::jinja
