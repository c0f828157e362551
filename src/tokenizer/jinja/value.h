// Dynamic values of the chat-template interpreter. The reference for every behaviour is
// @huggingface/jinja (what transformers.js and the HF hub render with), which runs on
// JavaScript: its numbers, string conversions, equality and JSON output follow JS rules,
// not Python's. Reproducing those rules here is what makes a prompt byte-identical, so
// the helpers below are named after the JS operation they mirror.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ridge::jinja {

enum class Kind { Undefined, None, Bool, Int, Float, String, Array, Object, Namespace, Function };

struct Value;
struct Env;
struct Array;
struct Object;
// A native or macro callable. Keyword arguments arrive as a trailing Object value with
// is_kwargs set, exactly as the reference passes them (KeywordArgumentsValue).
using NativeFn = std::function<Value(std::vector<Value>& args, const std::shared_ptr<Env>& scope)>;
struct Function {
  NativeFn fn;
};

// Copying a Value copies containers by reference (shared_ptr), as JS does: identity
// matters for `==` on arrays and objects, and namespace() attributes mutate in place.
struct Value {
  Kind kind = Kind::Undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::shared_ptr<Array> arr;
  std::shared_ptr<Object> obj;  // Object and Namespace
  std::shared_ptr<Function> fn;

  static Value undefined() { return {}; }
  static Value none();
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value number(double v);
  static Value string(std::string v);
  static Value array(std::vector<Value> items = {}, bool tuple = false);
  static Value object();
  static Value kwargs();
  static Value ns();
  static Value function(NativeFn f);

  bool is_undefined() const { return kind == Kind::Undefined; }
  bool is_none() const { return kind == Kind::None; }
  bool is_string() const { return kind == Kind::String; }
  bool is_array() const { return kind == Kind::Array; }
  bool is_object() const { return kind == Kind::Object; }  // includes kwargs
  bool is_attr_container() const { return kind == Kind::Object || kind == Kind::Namespace; }
  bool is_numeric() const { return kind == Kind::Int || kind == Kind::Float; }
  bool is_tuple() const;
  bool is_kwargs() const;
  double num() const { return kind == Kind::Float ? f : kind == Kind::Int ? double(i) : b ? 1.0 : 0.0; }

  // The reference's __bool__: Python truthiness for containers, JS for scalars.
  bool truthy() const;
  // The reference's type names, for error messages ("StringValue", ...).
  const char* type_name() const;
};

struct Array {
  std::vector<Value> items;
  bool tuple = false;  // TupleValue: the reference treats it apart in a few places
};

// Insertion-ordered map (JS Map semantics).
struct Object {
  std::vector<std::pair<std::string, Value>> entries;
  bool is_kwargs = false;
  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value v);
  bool erase(std::string_view key);
};

// Thrown by builtins and the interpreter without a position; the evaluating node adds
// its line and column before it leaves the interpreter as a ridge::Error.
struct TemplateFailure {
  std::string msg;
};
[[noreturn]] void raise(std::string msg);

// --- conversions, as the reference does them -----------------------------------------
// RuntimeValue.toString(): what `{{ x }}` prints (floats keep ".0", containers as JSON).
std::string display(const Value& v);
// String(v.value): the JS string of the raw value, used by `~`, `+` and join.
std::string js_string(const Value& v);
// JS Number.prototype.toString.
std::string js_number(double d);
struct JsonOptions {
  int indent = 0;  // 0: none (the reference treats indent=0 as no indent)
  bool ensure_ascii = false;
  bool sort_keys = false;
  bool have_separators = false;
  std::string item_sep, key_sep;
};
// toJSON(): the `tojson` filter and container printing. undefined_as_null=false prints
// undefined as the bare word `undefined`, as the reference's toString does.
std::string to_json(const Value& v, const JsonOptions& o, bool undefined_as_null = true, int depth = 0);
// JSON.stringify of one string.
std::string json_quote(std::string_view s);

// --- comparisons -----------------------------------------------------------------------
bool loose_equals(const Value& a, const Value& b);   // JS ==
bool strict_equals(const Value& a, const Value& b);  // JS ===
bool same_value_zero(const Value& a, const Value& b);
// compareRuntimeValues: -1/0/1, throws on incomparable types.
int compare_values(const Value& a, const Value& b, bool case_sensitive);

// --- strings as JS sees them (UTF-8 here, UTF-16 there) -------------------------------
std::vector<char32_t> utf8_decode(std::string_view s);
void utf8_append(std::string& out, char32_t cp);
std::string utf8_encode(const std::vector<char32_t>& cps);
size_t utf16_length(std::string_view s);
bool is_js_space(char32_t c);
// Byte length of the JS whitespace character starting at s[pos], 0 if none.
size_t js_space_at(std::string_view s, size_t pos);
std::string js_trim(std::string_view s, bool left, bool right);
std::string js_upper(std::string_view s);
std::string js_lower(std::string_view s);
// Number(str) for the loose equality and parseInt/parseFloat for the int/float filters.
double js_to_number(std::string_view s);
bool js_parse_int(std::string_view s, double* out);
bool js_parse_float(std::string_view s, double* out);

}  // namespace ridge::jinja
