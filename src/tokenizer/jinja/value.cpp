// Values, their conversions and comparisons, following @huggingface/jinja's runtime.ts
// (and through it, JavaScript's String(), ==, === and JSON.stringify).
#include "tokenizer/jinja/value.h"

#include <utf8proc.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

namespace ridge::jinja {

void raise(std::string msg) { throw TemplateFailure{std::move(msg)}; }

Value Value::none() { Value v; v.kind = Kind::None; return v; }
Value Value::boolean(bool x) { Value v; v.kind = Kind::Bool; v.b = x; return v; }
Value Value::integer(int64_t x) { Value v; v.kind = Kind::Int; v.i = x; return v; }
Value Value::number(double x) { Value v; v.kind = Kind::Float; v.f = x; return v; }
Value Value::string(std::string x) { Value v; v.kind = Kind::String; v.s = std::move(x); return v; }
Value Value::array(std::vector<Value> items, bool tuple) {
  Value v;
  v.kind = Kind::Array;
  v.arr = std::make_shared<Array>();
  v.arr->items = std::move(items);
  v.arr->tuple = tuple;
  return v;
}
Value Value::object() { Value v; v.kind = Kind::Object; v.obj = std::make_shared<Object>(); return v; }
Value Value::kwargs() { Value v = object(); v.obj->is_kwargs = true; return v; }
Value Value::ns() { Value v; v.kind = Kind::Namespace; v.obj = std::make_shared<Object>(); return v; }
Value Value::function(NativeFn f) {
  Value v;
  v.kind = Kind::Function;
  v.fn = std::make_shared<Function>(Function{std::move(f)});
  return v;
}

bool Value::is_tuple() const { return kind == Kind::Array && arr->tuple; }
bool Value::is_kwargs() const { return kind == Kind::Object && obj->is_kwargs; }

bool Value::truthy() const {
  switch (kind) {
    case Kind::Undefined: case Kind::None: return false;
    case Kind::Bool: return b;
    case Kind::Int: return i != 0;
    case Kind::Float: return f != 0 && !std::isnan(f);
    case Kind::String: return !s.empty();
    case Kind::Array: return !arr->items.empty();
    case Kind::Object: return !obj->entries.empty();
    case Kind::Namespace: return true;  // a JS Map object: always truthy
    case Kind::Function: return true;
  }
  return false;
}

const char* Value::type_name() const {
  switch (kind) {
    case Kind::Undefined: return "UndefinedValue";
    case Kind::None: return "NullValue";
    case Kind::Bool: return "BooleanValue";
    case Kind::Int: return "IntegerValue";
    case Kind::Float: return "FloatValue";
    case Kind::String: return "StringValue";
    case Kind::Array: return arr->tuple ? "TupleValue" : "ArrayValue";
    case Kind::Object: return obj->is_kwargs ? "KeywordArgumentsValue" : "ObjectValue";
    case Kind::Namespace: return "NamespaceValue";
    case Kind::Function: return "FunctionValue";
  }
  return "?";
}

const Value* Object::find(std::string_view key) const {
  for (const auto& [k, v] : entries)
    if (k == key) return &v;
  return nullptr;
}
void Object::set(const std::string& key, Value v) {
  for (auto& [k, old] : entries)
    if (k == key) { old = std::move(v); return; }
  entries.emplace_back(key, std::move(v));
}
bool Object::erase(std::string_view key) {
  for (auto it = entries.begin(); it != entries.end(); ++it)
    if (it->first == key) { entries.erase(it); return true; }
  return false;
}

// --- UTF-8 <-> code points --------------------------------------------------------------

std::vector<char32_t> utf8_decode(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    utf8proc_int32_t cp;
    auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i), utf8proc_ssize_t(s.size() - i), &cp);
    if (n <= 0) { cp = 0xFFFD; n = 1; }  // invalid byte: as a decoder would
    out.push_back(char32_t(cp));
    i += size_t(n);
  }
  return out;
}

void utf8_append(std::string& out, char32_t cp) {
  utf8proc_uint8_t buf[4];
  auto n = utf8proc_encode_char(utf8proc_int32_t(cp), buf);
  out.append(reinterpret_cast<const char*>(buf), size_t(n));
}

std::string utf8_encode(const std::vector<char32_t>& cps) {
  std::string out;
  for (char32_t c : cps) utf8_append(out, c);
  return out;
}

size_t utf16_length(std::string_view s) {
  size_t n = 0;
  for (char32_t c : utf8_decode(s)) n += c >= 0x10000 ? 2 : 1;
  return n;
}

// ECMAScript WhiteSpace + LineTerminator: what \s, trim() and parseInt skip.
bool is_js_space(char32_t c) {
  switch (c) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0xA0: case 0x1680:
    case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000: case 0xFEFF:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

size_t js_space_at(std::string_view s, size_t pos) {
  if (pos >= s.size()) return 0;
  unsigned char c = static_cast<unsigned char>(s[pos]);
  if (c < 0x80) return is_js_space(c) ? 1 : 0;
  utf8proc_int32_t cp;
  auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + pos), utf8proc_ssize_t(s.size() - pos), &cp);
  return n > 0 && is_js_space(char32_t(cp)) ? size_t(n) : 0;
}

std::string js_trim(std::string_view s, bool left, bool right) {
  size_t b = 0, e = s.size();
  if (left)
    while (size_t n = js_space_at(s, b)) b += n;
  if (right && e > b) {
    // Walk back to the start of each code point and test it.
    while (e > b) {
      size_t p = e - 1;
      while (p > b && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
      if (js_space_at(s, p) != e - p) break;
      e = p;
    }
  }
  return std::string(s.substr(b, e - b));
}

// JS toUpperCase / toLowerCase use the full Unicode case mapping; utf8proc gives the
// simple (1:1) mapping, which differs only for a handful of characters (e.g. ß -> SS).
std::string js_upper(std::string_view s) {
  std::string out;
  for (char32_t c : utf8_decode(s)) {
    if (c == 0xDF) { out += "SS"; continue; }
    utf8_append(out, char32_t(utf8proc_toupper(utf8proc_int32_t(c))));
  }
  return out;
}
std::string js_lower(std::string_view s) {
  std::string out;
  for (char32_t c : utf8_decode(s)) {
    if (c == 0x130) { out += "i\xCC\x87"; continue; }  // İ -> i + combining dot above
    utf8_append(out, char32_t(utf8proc_tolower(utf8proc_int32_t(c))));
  }
  return out;
}

// --- numbers ----------------------------------------------------------------------------

std::string js_number(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  if (d == 0) return "0";
  // Shortest round-trip digits, then laid out by ECMAScript Number::toString's rules.
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, std::fabs(d), std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  size_t epos = sci.find('e');
  std::string digits;
  for (size_t k = 0; k < epos; ++k)
    if (sci[k] != '.') digits += sci[k];
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  int exp10 = std::atoi(sci.c_str() + epos + 1);
  int k = int(digits.size()), n = exp10 + 1;
  std::string out = d < 0 ? "-" : "";
  if (k <= n && n <= 21) {
    out += digits + std::string(size_t(n - k), '0');
  } else if (0 < n && n <= 21) {
    out += digits.substr(0, size_t(n)) + "." + digits.substr(size_t(n));
  } else if (-6 < n && n <= 0) {
    out += "0." + std::string(size_t(-n), '0') + digits;
  } else {
    out += digits.substr(0, 1);
    if (k > 1) out += "." + digits.substr(1);
    out += fmt::format("e{}{}", n - 1 >= 0 ? "+" : "-", std::abs(n - 1));
  }
  return out;
}

static bool parse_decimal_prefix(std::string_view s, size_t* len, double* out) {
  // StrDecimalLiteral without sign: digits [. digits] [e[+-]digits] | . digits [...] | Infinity
  if (s.substr(0, 8) == "Infinity") { *len = 8; *out = INFINITY; return true; }
  size_t i = 0, nd = 0;
  while (i < s.size() && isdigit(static_cast<unsigned char>(s[i]))) ++i, ++nd;
  if (i < s.size() && s[i] == '.') {
    size_t j = i + 1, fd = 0;
    while (j < s.size() && isdigit(static_cast<unsigned char>(s[j]))) ++j, ++fd;
    if (nd + fd > 0) i = j, nd += fd;
  }
  if (nd == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    size_t j = i + 1;
    if (j < s.size() && (s[j] == '+' || s[j] == '-')) ++j;
    size_t ed = 0;
    while (j < s.size() && isdigit(static_cast<unsigned char>(s[j]))) ++j, ++ed;
    if (ed > 0) i = j;
  }
  std::string text(s.substr(0, i));
  if (text[0] == '.') text = "0" + text;
  auto r = std::from_chars(text.data(), text.data() + text.size(), *out);
  if (r.ec == std::errc::result_out_of_range) *out = INFINITY;
  *len = i;
  return true;
}

static std::string_view skip_js_space(std::string_view s) {
  size_t b = 0;
  while (size_t n = js_space_at(s, b)) b += n;
  return s.substr(b);
}

double js_to_number(std::string_view s) {
  std::string t = js_trim(s, true, true);
  if (t.empty()) return 0;
  std::string_view v = t;
  if (v.size() > 2 && v[0] == '0' && (v[1] == 'x' || v[1] == 'X')) {
    double r = 0;
    for (char c : v.substr(2)) {
      int d = isdigit(static_cast<unsigned char>(c)) ? c - '0' : (c | 32) >= 'a' && (c | 32) <= 'f' ? (c | 32) - 'a' + 10 : -1;
      if (d < 0) return NAN;
      r = r * 16 + d;
    }
    return r;
  }
  double sign = 1;
  if (v[0] == '+' || v[0] == '-') { sign = v[0] == '-' ? -1 : 1; v.remove_prefix(1); }
  size_t len;
  double x;
  if (!parse_decimal_prefix(v, &len, &x) || len != v.size()) return NAN;
  return sign * x;
}

bool js_parse_int(std::string_view s, double* out) {
  s = skip_js_space(s);
  double sign = 1;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) { sign = s[0] == '-' ? -1 : 1; s.remove_prefix(1); }
  size_t i = 0;
  double r = 0;
  while (i < s.size() && isdigit(static_cast<unsigned char>(s[i]))) r = r * 10 + (s[i++] - '0');
  if (i == 0) return false;
  *out = sign * r;
  return true;
}

bool js_parse_float(std::string_view s, double* out) {
  s = skip_js_space(s);
  double sign = 1;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) { sign = s[0] == '-' ? -1 : 1; s.remove_prefix(1); }
  size_t len;
  double x;
  if (!parse_decimal_prefix(s, &len, &x)) return false;
  *out = sign * x;
  return true;
}

// --- strings of values ------------------------------------------------------------------

// The reference's integers are JS doubles: beyond 2^53 they print rounded.
static std::string int_string(int64_t i) {
  if (i > (int64_t(1) << 53) || i < -(int64_t(1) << 53)) return js_number(double(i));
  return fmt::format("{}", i);
}

std::string display(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return "undefined";
    case Kind::None: return "null";
    case Kind::Bool: return v.b ? "true" : "false";
    case Kind::Int: return int_string(v.i);
    case Kind::Float:
      if (v.f == 0 && std::signbit(v.f)) return "-0.0";
      if (std::isfinite(v.f) && std::fmod(v.f, 1.0) == 0) {
        // toFixed(1), which itself switches to exponent form from 1e21.
        if (std::fabs(v.f) >= 1e21) return js_number(v.f);
        return fmt::format("{:.1f}", v.f);
      }
      return js_number(v.f);
    case Kind::String: return v.s;
    case Kind::Array: case Kind::Object: case Kind::Namespace: return to_json(v, {}, false);
    case Kind::Function: raise("cannot print a function (the reference would print its JavaScript source)");
  }
  return "";
}

std::string js_string(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return "undefined";
    case Kind::None: return "null";
    case Kind::Bool: return v.b ? "true" : "false";
    case Kind::Int: return int_string(v.i);
    case Kind::Float: return js_number(v.f);
    case Kind::String: return v.s;
    case Kind::Array: {
      // Array.prototype.toString joins the elements' own toString() with ",".
      std::string out;
      for (size_t k = 0; k < v.arr->items.size(); ++k) {
        if (k) out += ',';
        out += display(v.arr->items[k]);
      }
      return out;
    }
    case Kind::Object: case Kind::Namespace: return "[object Map]";
    case Kind::Function: raise("cannot convert a function to a string");
  }
  return "";
}

std::string json_quote(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) out += fmt::format("\\u{:04x}", c);
        else out += ch;
    }
  }
  return out + "\"";
}

// makeAsciiSafe: every UTF-16 unit from 0x7f up becomes \uXXXX.
static std::string ascii_safe(const std::string& s) {
  std::string out;
  for (char32_t c : utf8_decode(s)) {
    if (c < 0x7f) { out += char(c); continue; }
    if (c >= 0x10000) {
      char32_t u = c - 0x10000;
      out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (u >> 10), 0xDC00 + (u & 0x3FF));
    } else {
      out += fmt::format("\\u{:04x}", uint32_t(c));
    }
  }
  return out;
}

// String.prototype.localeCompare under ICU's root collation, approximated: letters
// compare case-insensitively first, then lower case sorts before upper case.
static bool locale_less(const std::string& a, const std::string& b) {
  std::string la = js_lower(a), lb = js_lower(b);
  if (la != lb) return la < lb;
  return a > b;  // 'a' (0x61) after 'A' (0x41) in bytes, but first in the collation
}

std::string to_json(const Value& v, const JsonOptions& o, bool undefined_as_null, int depth) {
  std::string item_sep = o.have_separators ? o.item_sep : o.indent ? "," : ", ";
  std::string key_sep = o.have_separators ? o.key_sep : ": ";
  switch (v.kind) {
    case Kind::None: return "null";
    case Kind::Undefined: return undefined_as_null ? "null" : "undefined";
    case Kind::Bool: return v.b ? "true" : "false";
    case Kind::Int: return int_string(v.i);
    case Kind::Float: return std::isfinite(v.f) ? js_number(v.f) : "null";
    case Kind::String: return o.ensure_ascii ? ascii_safe(json_quote(v.s)) : json_quote(v.s);
    case Kind::Array: case Kind::Object: case Kind::Namespace: {
      if (v.is_tuple() || v.is_kwargs()) raise(fmt::format("Cannot convert to JSON: {}", v.type_name()));
      std::string indent_unit(size_t(std::max(o.indent, 0)), ' ');
      std::string base = "\n";
      for (int d = 0; d < depth; ++d) base += indent_unit;
      std::string child = base + indent_unit;
      std::vector<std::string> core;
      if (v.kind == Kind::Array) {
        for (const Value& x : v.arr->items) core.push_back(to_json(x, o, undefined_as_null, depth + 1));
        std::string out = o.indent && !core.empty() ? "[" + child : "[";
        for (size_t k = 0; k < core.size(); ++k) {
          if (k) out += o.indent ? item_sep + child : item_sep;
          out += core[k];
        }
        return out + (o.indent && !core.empty() ? base + "]" : "]");
      }
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& e : v.obj->entries) entries.push_back(&e);
      if (o.sort_keys)
        std::stable_sort(entries.begin(), entries.end(), [](auto* a, auto* b) { return locale_less(a->first, b->first); });
      std::string out = "{";
      for (size_t k = 0; k < entries.size(); ++k) {
        if (k) out += item_sep;
        if (o.indent) out += child;
        std::string key = json_quote(entries[k]->first);
        out += (o.ensure_ascii ? ascii_safe(key) : key) + key_sep + to_json(entries[k]->second, o, undefined_as_null, depth + 1);
      }
      return out + (o.indent && !entries.empty() ? base + "}" : "}");
    }
    case Kind::Function: raise("Cannot convert to JSON: FunctionValue");
  }
  return "";
}

// --- comparisons ------------------------------------------------------------------------

static bool is_container(const Value& v) {
  return v.kind == Kind::Array || v.kind == Kind::Object || v.kind == Kind::Namespace || v.kind == Kind::Function;
}
static const void* identity(const Value& v) {
  if (v.kind == Kind::Array) return v.arr.get();
  if (v.kind == Kind::Function) return v.fn.get();
  return v.obj.get();
}

bool strict_equals(const Value& a, const Value& b) {
  if (a.is_numeric() && b.is_numeric()) return a.num() == b.num();  // both JS numbers
  if (is_container(a) || is_container(b)) return is_container(a) && is_container(b) && identity(a) == identity(b);
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::Undefined: case Kind::None: return true;
    case Kind::Bool: return a.b == b.b;
    case Kind::String: return a.s == b.s;
    default: return false;
  }
}

bool same_value_zero(const Value& a, const Value& b) {
  if (a.is_numeric() && b.is_numeric() && std::isnan(a.num()) && std::isnan(b.num())) return true;
  return strict_equals(a, b);
}

bool loose_equals(const Value& a, const Value& b) {
  bool an = a.is_undefined() || a.is_none(), bn = b.is_undefined() || b.is_none();
  if (an || bn) return an && bn;
  if (is_container(a) && is_container(b)) return identity(a) == identity(b);
  // A container against a primitive compares its primitive (string) form.
  if (is_container(a)) return loose_equals(Value::string(js_string(a)), b);
  if (is_container(b)) return loose_equals(a, Value::string(js_string(b)));
  if (a.kind == Kind::Bool) return loose_equals(Value::integer(a.b), b);
  if (b.kind == Kind::Bool) return loose_equals(a, Value::integer(b.b));
  if (a.is_string() && b.is_string()) return a.s == b.s;
  double x = a.is_string() ? js_to_number(a.s) : a.num();
  double y = b.is_string() ? js_to_number(b.s) : b.num();
  return x == y;
}

int compare_values(const Value& a, const Value& b, bool case_sensitive) {
  if (a.is_none() && b.is_none()) return 0;
  if (a.is_none() || b.is_none()) raise(fmt::format("Cannot compare {} with {}", a.type_name(), b.type_name()));
  if (a.is_undefined() && b.is_undefined()) return 0;
  if (a.is_undefined() || b.is_undefined()) raise(fmt::format("Cannot compare {} with {}", a.type_name(), b.type_name()));
  auto numeric_like = [](const Value& v) { return v.is_numeric() || v.kind == Kind::Bool; };
  if (numeric_like(a) && numeric_like(b)) {
    double x = a.num(), y = b.num();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (std::strcmp(a.type_name(), b.type_name()) != 0)
    raise(fmt::format("Cannot compare different types: {} and {}", a.type_name(), b.type_name()));
  if (a.is_string()) {
    // JS compares UTF-16 units; UTF-8 bytes give the same order outside the astral planes.
    std::string x = case_sensitive ? a.s : js_lower(a.s), y = case_sensitive ? b.s : js_lower(b.s);
    return x < y ? -1 : x > y ? 1 : 0;
  }
  raise(fmt::format("Cannot compare type: {}", a.type_name()));
}

}  // namespace ridge::jinja
