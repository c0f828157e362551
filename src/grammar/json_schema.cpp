// JSON Schema to GBNF: each schema becomes an expression over the core JSON rules below;
// objects, arrays and $ref targets become rules of their own.
#include "grammar/json_schema.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>

#include "grammar/grammar.h"
#include "grammar/regex.h"

namespace ridge::grammar {
namespace {

using ojson = nlohmann::ordered_json;

// The JSON every schema's grammar is made of. ws: at most two whitespace characters;
// numbers: 16 digits of integer and of fraction, 2 of exponent (a double holds them all).
constexpr const char* kCore = R"(ws ::= ([ \t\n] [ \t\n]?)?
json-value ::= json-object | json-array | json-string | json-number | json-bool | json-null
json-object ::= "{" ws (json-member ws ("," ws json-member ws)*)? "}"
json-member ::= json-string ws ":" ws json-value
json-array ::= "[" ws (json-value ws ("," ws json-value ws)*)? "]"
json-string ::= "\"" json-char* "\""
json-char ::= [^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
json-number ::= "-"? json-unumber
json-unumber ::= json-uint ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?
json-integer ::= "-"? json-uint
json-uint ::= "0" | [1-9] [0-9]{0,15}
json-bool ::= "true" | "false"
json-null ::= "null"
)";

constexpr int64_t kMaxMagnitude = 9'999'999'999'999'999;  // 16 digits

const std::set<std::string>& known_keywords() {
  static const std::set<std::string> k = {
      "type", "properties", "required", "additionalProperties", "enum", "const", "anyOf", "oneOf", "allOf", "items",
      "prefixItems", "additionalItems", "minItems", "maxItems", "minLength", "maxLength", "pattern", "format",
      "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "$ref", "$defs", "definitions", "nullable",
      "uniqueItems",
      // annotations: no effect on the grammar
      "title", "description", "examples", "default", "$schema", "$id", "id", "$comment", "deprecated", "readOnly",
      "writeOnly", "$anchor", "contentMediaType", "contentEncoding"};
  return k;
}
// Keywords that constrain a value (a $ref, anyOf or allOf beside one of them is refused).
bool constrains(const std::string& k) {
  static const std::set<std::string> annotations = {"title", "description", "examples", "default", "$schema", "$id",
                                                    "id", "$comment", "deprecated", "readOnly", "writeOnly",
                                                    "$anchor", "$defs", "definitions", "contentMediaType",
                                                    "contentEncoding"};
  return !annotations.count(k);
}

std::string paren(const std::string& e) { return "(" + e + ")"; }

std::string repeat_suffix(int64_t lo, int64_t hi) {  // hi < 0: unbounded
  if (hi < 0) return lo == 0 ? "*" : lo == 1 ? "+" : fmt::format("{{{},}}", lo);
  if (lo == hi) return fmt::format("{{{}}}", lo);
  if (lo == 0 && hi == 1) return "?";
  return fmt::format("{{{},{}}}", lo, hi);
}

// The decimal strings from x to y (equal length, x <= y) as GBNF.
std::string same_length(const std::string& x, const std::string& y) {
  if (x == y) return gbnf_literal(x);
  if (x.size() == 1) return fmt::format("[{}-{}]", x[0], y[0]);
  const std::string xr = x.substr(1), yr = y.substr(1);
  const size_t n = xr.size();
  const bool x_low = std::all_of(xr.begin(), xr.end(), [](char c) { return c == '0'; });
  const bool y_high = std::all_of(yr.begin(), yr.end(), [](char c) { return c == '9'; });
  if (x[0] == y[0]) return gbnf_literal(std::string(1, x[0])) + " " + paren(same_length(xr, yr));
  std::vector<std::string> alts;
  char a = x[0], b = y[0];
  if (!x_low) {
    alts.push_back(gbnf_literal(std::string(1, x[0])) + " " + paren(same_length(xr, std::string(n, '9'))));
    ++a;
  }
  if (!y_high) --b;
  if (a <= b) alts.push_back(fmt::format("[{}-{}] [0-9]{{{}}}", a, b, n));
  if (!y_high) alts.push_back(gbnf_literal(std::string(1, y[0])) + " " + paren(same_length(std::string(n, '0'), yr)));
  std::string s;
  for (size_t k = 0; k < alts.size(); ++k) s += (k ? " | " : "") + alts[k];
  return s;
}

// The integers a..b, 0 <= a <= b, without leading zeros.
std::string uint_range(int64_t a, int64_t b) {
  std::vector<std::string> alts;
  const std::string sa = std::to_string(a), sb = std::to_string(b);
  for (size_t len = sa.size(); len <= sb.size(); ++len) {
    const std::string lo = len == sa.size() ? sa : "1" + std::string(len - 1, '0');
    const std::string hi = len == sb.size() ? sb : std::string(len, '9');
    alts.push_back(paren(same_length(lo, hi)));
  }
  std::string s;
  for (size_t k = 0; k < alts.size(); ++k) s += (k ? " | " : "") + alts[k];
  return paren(s);
}

class Converter {
 public:
  Converter(const ojson& root, const JsonSchemaLimits& lim) : root_(root), lim_(lim) {}

  std::string run() {
    const std::string e = visit(root_, "#", 0);
    std::string out = "root ::= " + e + "\n";
    for (const std::string& r : rules_) out += r + "\n";
    out += kCore;
    if (escapes_) out += json_escape_rules();
    return out;
  }

 private:
  [[noreturn]] static void fail(const std::string& ptr, const std::string& what) {
    throw GrammarError(fmt::format("JSON schema at {}: {}", ptr, what));
  }

  std::string rule(const std::string& hint, const std::string& body) {
    const std::string name = fresh(hint);
    rules_.push_back(name + " ::= " + body);
    return name;
  }
  std::string fresh(const std::string& hint) {
    if (int64_t(rules_.size()) >= lim_.max_rules) fail("#", fmt::format("the schema needs more than {} rules", lim_.max_rules));
    std::string base = "s";
    for (char c : hint) {
      const bool ok = std::isalnum(static_cast<unsigned char>(c));
      if (ok) base += c;
      else if (base.back() != '-') base += '-';
      if (base.size() > 40) break;
    }
    while (base.size() > 1 && base.back() == '-') base.pop_back();
    // A counter per base: names sharing a long base never probe each other's numbers.
    int& k = counters_[base];
    std::string name = k == 0 ? base : fmt::format("{}-{}", base, k);
    while (names_.count(name)) name = fmt::format("{}-{}", base, ++k);
    ++k;
    names_.insert(name);
    return name;
  }

  static int64_t int_of(const ojson& v, const std::string& ptr, const char* key) {
    if (!v.is_number_integer() && !(v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()))
      fail(ptr, fmt::format("{} must be a non-negative integer", key));
    const double d = v.get<double>();
    if (d < 0 || d > 1e9) fail(ptr, fmt::format("{} out of range", key));
    return int64_t(d);
  }

  std::string visit(const ojson& s, const std::string& ptr, int depth) {
    if (depth > lim_.max_depth) fail(ptr, fmt::format("nested deeper than {} schemas", lim_.max_depth));
    if (s.is_boolean()) {
      if (s.get<bool>()) return "json-value";
      fail(ptr, "the schema false allows no value");
    }
    if (!s.is_object()) fail(ptr, "a schema must be an object or a boolean");
    for (auto& [k, v] : s.items())
      if (!known_keywords().count(k)) fail(ptr, fmt::format("unsupported keyword '{}'", k));
    std::vector<std::string> constraints;
    for (auto& [k, v] : s.items())
      if (constrains(k)) constraints.push_back(k);
    auto alone = [&](const char* k) {
      for (const std::string& c : constraints)
        if (c != k && c != "nullable")
          fail(ptr, fmt::format("'{}' beside '{}' is not supported (put the constraints inside it)", c, k));
    };
    std::string e = body(s, ptr, depth, alone);
    if (auto it = s.find("nullable"); it != s.end() && it->is_boolean() && it->get<bool>()) e = paren(e + " | json-null");
    return e;
  }

  template <class Alone>
  std::string body(const ojson& s, const std::string& ptr, int depth, Alone&& alone) {
    if (auto it = s.find("$ref"); it != s.end()) {
      alone("$ref");
      if (!it->is_string()) fail(ptr, "$ref must be a string");
      return ref(it->get<std::string>(), ptr, depth);
    }
    if (auto it = s.find("const"); it != s.end()) {
      alone("const");
      std::string lit = gbnf_literal(it->dump());
      if ((text_ += lit.size()) > kMaxText) fail(ptr, fmt::format("the schema's grammar is over {} MiB of text", kMaxText >> 20));
      return lit;
    }
    if (auto it = s.find("enum"); it != s.end()) {
      alone("enum");
      if (!it->is_array() || it->empty()) fail(ptr + "/enum", "enum must be a non-empty array");
      std::string alts;
      for (const ojson& v : *it) alts += (alts.empty() ? "" : " | ") + gbnf_literal(v.dump());
      if ((text_ += alts.size()) > kMaxText) fail(ptr, fmt::format("the schema's grammar is over {} MiB of text", kMaxText >> 20));
      return paren(alts);
    }
    for (const char* k : {"anyOf", "oneOf"})
      if (auto it = s.find(k); it != s.end()) {
        alone(k);
        if (!it->is_array() || it->empty()) fail(ptr + "/" + k, fmt::format("{} must be a non-empty array", k));
        std::string alts;
        for (size_t i = 0; i < it->size(); ++i)
          alts += (i ? " | " : "") + visit((*it)[i], fmt::format("{}/{}/{}", ptr, k, i), depth + 1);
        return paren(alts);
      }
    if (auto it = s.find("allOf"); it != s.end()) {
      alone("allOf");
      if (!it->is_array() || it->size() != 1) fail(ptr + "/allOf", "only an allOf of one schema is supported");
      return visit((*it)[0], ptr + "/allOf/0", depth + 1);
    }
    std::vector<std::string> types;
    if (auto it = s.find("type"); it != s.end()) {
      if (it->is_string()) types.push_back(it->get<std::string>());
      else if (it->is_array())
        for (const ojson& t : *it) {
          if (!t.is_string()) fail(ptr + "/type", "type must be a string or an array of strings");
          types.push_back(t.get<std::string>());
        }
      else fail(ptr + "/type", "type must be a string or an array of strings");
      if (types.empty()) fail(ptr + "/type", "type is an empty array");
    } else {
      auto has = [&](std::initializer_list<const char*> ks) {
        for (const char* k : ks)
          if (s.contains(k)) return true;
        return false;
      };
      // No type: every type is allowed, each held to the keywords that apply to it (JSON
      // Schema's meaning: {"maxLength": 3} allows any number, any object, ...).
      if (!has({"properties", "required", "additionalProperties", "items", "prefixItems", "minItems", "maxItems",
                "additionalItems", "minLength", "maxLength", "pattern", "format", "minimum", "maximum",
                "exclusiveMinimum", "exclusiveMaximum"}))
        return "json-value";
      types = {"object", "array", "string", "number", "boolean", "null"};
    }
    std::sort(types.begin(), types.end());
    types.erase(std::unique(types.begin(), types.end()), types.end());
    std::string alts;
    for (const std::string& t : types) alts += (alts.empty() ? "" : " | ") + typed(s, t, ptr, depth);
    text_ += alts.size();
    if (text_ > kMaxText) fail(ptr, fmt::format("the schema's grammar is over {} MiB of text", kMaxText >> 20));
    return types.size() == 1 ? alts : paren(alts);
  }

  std::string ref(const std::string& r, const std::string& ptr, int depth) {
    if (auto it = refs_.find(r); it != refs_.end()) return it->second;
    if (r.empty() || r[0] != '#') fail(ptr, fmt::format("$ref '{}': only references within the schema (#...) are supported", r));
    const ojson* target = &root_;
    if (r.size() > 1) {
      try {
        target = &root_.at(nlohmann::ordered_json::json_pointer(r.substr(1)));
      } catch (const std::exception&) {
        fail(ptr, fmt::format("$ref '{}' points at nothing", r));
      }
    }
    const std::string name = fresh("ref-" + r.substr(1));
    refs_.emplace(r, name);
    const size_t slot = rules_.size();
    rules_.emplace_back();
    rules_[slot] = name + " ::= " + visit(*target, r, depth + 1);
    return name;
  }

  std::string typed(const ojson& s, const std::string& t, const std::string& ptr, int depth) {
    if (t == "string") return string_expr(s, ptr);
    if (t == "integer") return integer(s, ptr);
    if (t == "number") return number(s, ptr);
    if (t == "boolean") return "json-bool";
    if (t == "null") return "json-null";
    if (t == "object") return object(s, ptr, depth);
    if (t == "array") return array(s, ptr, depth);
    fail(ptr + "/type", fmt::format("unknown type '{}'", t));
  }

  std::string string_expr(const ojson& s, const std::string& ptr) {
    const bool has_len = s.contains("minLength") || s.contains("maxLength");
    if (auto it = s.find("format"); it != s.end()) {
      if (has_len || s.contains("pattern")) fail(ptr, "format beside pattern, minLength or maxLength is not supported");
      return "\"\\\"\" " + format(it->is_string() ? it->get<std::string>() : "", ptr) + " \"\\\"\"";
    }
    if (auto it = s.find("pattern"); it != s.end()) {
      if (has_len) fail(ptr, "pattern beside minLength or maxLength is not supported");
      if (!it->is_string()) fail(ptr + "/pattern", "pattern must be a string");
      RegexGbnf rx;
      try {
        rx = regex_to_gbnf(it->get<std::string>(), true, "json-char*");
      } catch (const GrammarError& e) {
        fail(ptr + "/pattern", e.what());
      }
      escapes_ |= rx.uses_json_escapes;
      // A pattern matches anywhere in the string unless anchored (the search above).
      return "\"\\\"\" " + rx.expr + " \"\\\"\"";
    }
    if (has_len) {
      const int64_t lo = s.contains("minLength") ? int_of(s["minLength"], ptr, "minLength") : 0;
      const int64_t hi = s.contains("maxLength") ? int_of(s["maxLength"], ptr, "maxLength") : -1;
      if (hi >= 0 && hi < lo) fail(ptr, "maxLength < minLength");
      if (lo > 10000 || hi > 10000) fail(ptr, "minLength / maxLength over 10000 is not supported");
      return "\"\\\"\" json-char" + repeat_suffix(lo, hi) + " \"\\\"\"";
    }
    return "json-string";
  }

  std::string format(const std::string& f, const std::string& ptr) {
    auto named = [&](const std::string& n, const std::string& body) {
      if (auto it = formats_.find(n); it != formats_.end()) return it->second;
      return formats_[n] = rule("format-" + n, body);
    };
    // Days by month (February to the 29th in every year: leap years are beyond a small grammar).
    const std::string date =
        R"([0-9]{4} "-" (("0" [13578] | "1" [02]) "-" ("0" [1-9] | [12] [0-9] | "3" [01]) | ("0" [469] | "11") "-" ("0" [1-9] | [12] [0-9] | "30") | "02-" ("0" [1-9] | [12] [0-9])))";
    const std::string time =
        R"(([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" ([0-5] [0-9] | "60") ("." [0-9]{1,9})? ("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9]))";
    if (f == "date") return named(f, date);
    if (f == "time") return named(f, time);
    if (f == "date-time") return named(f, date + " \"T\" " + time);
    if (f == "uuid")
      return named(f, R"([0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12})");
    if (f == "email") return named(f, R"([a-zA-Z0-9._%+\-]{1,64} "@" [a-zA-Z0-9\-]{1,63} ("." [a-zA-Z0-9\-]{1,63}){1,8})");
    if (f == "ipv4") {
      const std::string octet = R"(("25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9] | [1-9]? [0-9]))";
      return named(f, octet + " (\".\" " + octet + "){3}");
    }
    if (f == "uri") return named(f, R"([a-zA-Z] [a-zA-Z0-9+.\-]{0,31} ":" [!#-\[\]-~]{1,2000})");
    fail(ptr + "/format", fmt::format("unsupported format '{}'", f));
  }

  // A bound of draft 4 (exclusive* as booleans) or later (exclusive* as numbers).
  static bool bound(const ojson& s, const char* key, const char* excl_key, bool upper, double& v, bool& excl) {
    excl = false;
    bool have = false;
    if (auto it = s.find(key); it != s.end() && it->is_number()) v = it->get<double>(), have = true;
    if (auto it = s.find(excl_key); it != s.end()) {
      if (it->is_boolean()) excl = have && it->get<bool>();
      else if (it->is_number()) {
        const double x = it->get<double>();
        if (!have || (upper ? x <= v : x >= v)) v = x, excl = true, have = true;
      }
    }
    return have;
  }

  std::string integer(const ojson& s, const std::string& ptr) {
    double lo_d = 0, hi_d = 0;
    bool lo_x = false, hi_x = false;
    const bool has_lo = bound(s, "minimum", "exclusiveMinimum", false, lo_d, lo_x);
    const bool has_hi = bound(s, "maximum", "exclusiveMaximum", true, hi_d, hi_x);
    if (!has_lo && !has_hi) return "json-integer";
    // In doubles only to within 2^62 (exactly representable there), then in integers.
    auto clamp = [](double d) { return std::max(-4e18, std::min(4e18, d)); };
    int64_t lo = -kMaxMagnitude, hi = kMaxMagnitude;
    if (has_lo) {
      const double c = std::ceil(clamp(lo_d));
      lo = std::max(-kMaxMagnitude, int64_t(c) + (lo_x && c == lo_d ? 1 : 0));
    }
    if (has_hi) {
      const double f = std::floor(clamp(hi_d));
      hi = std::min(kMaxMagnitude, int64_t(f) - (hi_x && f == hi_d ? 1 : 0));
    }
    if (lo > hi) fail(ptr, "no integer lies between minimum and maximum");
    std::vector<std::string> alts;
    if (lo < 0) alts.push_back("\"-\" " + uint_range(hi < 0 ? -hi : 1, -lo));
    if (hi >= 0) alts.push_back(uint_range(std::max<int64_t>(lo, 0), hi));
    return paren(alts.size() == 1 ? alts[0] : alts[0] + " | " + alts[1]);
  }

  std::string number(const ojson& s, const std::string& ptr) {
    double lo = 0, hi = 0;
    bool lo_x = false, hi_x = false;
    const bool has_lo = bound(s, "minimum", "exclusiveMinimum", false, lo, lo_x);
    const bool has_hi = bound(s, "maximum", "exclusiveMaximum", true, hi, hi_x);
    if (!has_lo && !has_hi) return "json-number";
    if (!has_hi && lo == 0 && !lo_x) return "json-unumber";
    fail(ptr, "minimum / maximum on a number are supported only as a minimum of 0 (use an integer type for ranges)");
  }

  std::string object(const ojson& s, const std::string& ptr, int depth) {
    const ojson* props = nullptr;
    if (auto it = s.find("properties"); it != s.end()) {
      if (!it->is_object()) fail(ptr + "/properties", "properties must be an object");
      props = &*it;
    }
    std::set<std::string> required;
    if (auto it = s.find("required"); it != s.end()) {
      if (!it->is_array()) fail(ptr + "/required", "required must be an array of strings");
      for (const ojson& r : *it) {
        if (!r.is_string()) fail(ptr + "/required", "required must be an array of strings");
        required.insert(r.get<std::string>());
      }
    }
    std::string extra;  // the value of an additional property, or empty: none allowed
    if (auto it = s.find("additionalProperties"); it != s.end()) {
      if (!(it->is_boolean() && !it->get<bool>())) extra = visit(*it, ptr + "/additionalProperties", depth + 1);
    } else if (!props || !lim_.strict) {
      extra = "json-value";  // {"type": "object"} alone: any object
    }
    // (key, value expression, required) in the schema's order; required names without a
    // property schema take any value.
    std::vector<std::tuple<std::string, std::string, bool>> members;
    std::set<std::string> seen;
    if (props)
      for (auto& [k, v] : props->items()) {
        members.emplace_back(k, visit(v, ptr + "/properties/" + k, depth + 1), required.count(k) > 0);
        seen.insert(k);
      }
    for (const std::string& r : required)
      if (!seen.count(r)) members.emplace_back(r, "json-value", true);
    if (members.empty() && extra.empty()) return "\"{\" ws \"}\"";
    // S_i: members from i on, none written yet; R_i: members from i on after one was
    // written (each starts with a comma). Optional members may be skipped.
    const std::string base = "obj-" + ptr.substr(1);
    const size_t n = members.size();
    std::vector<std::string> s_name(n + 1), r_name(n + 1);
    for (size_t i = 0; i <= n; ++i) {
      s_name[i] = fresh(fmt::format("{}-s{}", base, i));
      if (i > 0 || n == 0) r_name[i] = fresh(fmt::format("{}-r{}", base, i));
    }
    std::string extra_kv;
    if (!extra.empty()) {
      std::vector<std::string> names;
      for (const auto& m : members) names.push_back(std::get<0>(m));
      extra_kv = key_except(names, base) + " ws \":\" ws " + extra;
    }
    for (size_t i = 0; i <= n; ++i) {
      std::string sb, rb;
      if (i == n) {
        if (extra.empty()) sb = "\"\"", rb = "\"\"";
        else {
          sb = extra_kv + " ws " + r_name[n] + " | \"\"";
          rb = "\",\" ws " + extra_kv + " ws " + r_name[n] + " | \"\"";
        }
      } else {
        const auto& [key, val, req] = members[i];
        const std::string kv = gbnf_literal(nlohmann::json(key).dump()) + " ws \":\" ws " + val;
        sb = kv + " ws " + r_name[i + 1] + (req ? "" : " | " + s_name[i + 1]);
        rb = "\",\" ws " + kv + " ws " + r_name[i + 1] + (req ? "" : " | " + r_name[i + 1]);
      }
      rules_.push_back(s_name[i] + " ::= " + sb);
      if (!r_name[i].empty()) rules_.push_back(r_name[i] + " ::= " + rb);  // R_0 follows nothing unless it is R_n
    }
    return rule(base, "\"{\" ws " + s_name[0] + " \"}\"");
  }

  // A key (a JSON string) that is none of `names`: a trie over the names' JSON text, where
  // each node may close the string unless a name ends there, go on into a child, or take
  // any other character (or an escape) and then anything. Names with characters JSON
  // escapes or outside ASCII are not excluded (an escape spelling a name's character is
  // not caught either): such keys may repeat.
  std::string key_except(const std::vector<std::string>& names, const std::string& base) {
    struct Node {
      std::map<char, int> next;
      bool end = false;
    };
    std::vector<Node> trie(1);
    for (const std::string& n : names) {
      if (std::any_of(n.begin(), n.end(), [](char c) { return c < 0x20 || c > 0x7E || c == '"' || c == '\\'; })) continue;
      int at = 0;
      for (char c : n) {
        auto it = trie[size_t(at)].next.find(c);
        if (it == trie[size_t(at)].next.end()) {
          trie.push_back({});
          it = trie[size_t(at)].next.emplace(c, int(trie.size()) - 1).first;
        }
        at = it->second;
      }
      trie[size_t(at)].end = true;
    }
    if (trie.size() == 1) return "json-string";
    std::vector<std::string> rule_names(trie.size());
    for (size_t i = 0; i < trie.size(); ++i) rule_names[i] = fresh(base + "-key");
    for (size_t i = 0; i < trie.size(); ++i) {
      const Node& nd = trie[i];
      std::string other = "[^\"\\\\\\x00-\\x1F";
      std::vector<std::string> alts;
      for (auto [c, child] : nd.next) {
        other += (c == ']' || c == '-' || c == '^' || c == '[') ? std::string("\\") + c : std::string(1, c);
        alts.push_back(gbnf_literal(std::string(1, c)) + " " + rule_names[size_t(child)]);
      }
      other += "]";
      alts.push_back("(" + other + " | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})) json-char* \"\\\"\"");
      if (!nd.end) alts.push_back("\"\\\"\"");
      std::string body;
      for (size_t k = 0; k < alts.size(); ++k) body += (k ? " | " : "") + alts[k];
      rules_.push_back(rule_names[i] + " ::= " + body);
    }
    return "\"\\\"\" " + rule_names[0];
  }

  std::string array(const ojson& s, const std::string& ptr, int depth) {
    if (auto it = s.find("uniqueItems"); it != s.end() && it->is_boolean() && it->get<bool>())
      fail(ptr + "/uniqueItems", "uniqueItems true cannot be expressed in a grammar");
    std::vector<std::string> prefix;
    std::string rest = "json-value";  // empty: no items past the prefix
    auto items = s.find("items");
    if (auto it = s.find("prefixItems"); it != s.end()) {
      if (!it->is_array()) fail(ptr + "/prefixItems", "prefixItems must be an array");
      for (size_t i = 0; i < it->size(); ++i) prefix.push_back(visit((*it)[i], fmt::format("{}/prefixItems/{}", ptr, i), depth + 1));
    } else if (items != s.end() && items->is_array()) {  // draft 4 tuples
      for (size_t i = 0; i < items->size(); ++i) prefix.push_back(visit((*items)[i], fmt::format("{}/items/{}", ptr, i), depth + 1));
      rest = "json-value";
      if (auto ai = s.find("additionalItems"); ai != s.end())
        rest = ai->is_boolean() && !ai->get<bool>() ? "" : visit(*ai, ptr + "/additionalItems", depth + 1);
      items = s.end();
    }
    if (items != s.end()) rest = items->is_boolean() && !items->get<bool>() ? "" : visit(*items, ptr + "/items", depth + 1);
    int64_t k = int64_t(prefix.size());
    const int64_t lo = s.contains("minItems") ? int_of(s["minItems"], ptr, "minItems") : 0;
    int64_t hi = s.contains("maxItems") ? int_of(s["maxItems"], ptr, "maxItems") : -1;
    if (rest.empty()) hi = hi < 0 ? k : std::min(hi, k);
    if (hi >= 0 && hi < lo) fail(ptr, "no array satisfies minItems, maxItems and the items allowed");
    if (hi >= 0 && hi < k) prefix.resize(size_t(hi)), k = hi;  // maxItems cuts the prefix too
    if (lo > 10000 || hi > 10000) fail(ptr, "minItems / maxItems over 10000 is not supported");
    // A_i: the items from position i on (i < k: the prefix's), after i were written.
    const std::string base = "arr-" + ptr.substr(1);
    std::string tail;  // A_k
    if (!rest.empty() && (hi < 0 || hi > k)) {
      const int64_t a = std::max<int64_t>(0, lo - k), b = hi < 0 ? -1 : hi - k;
      if (k > 0) {
        tail = paren("\",\" ws " + rest + " ws") + repeat_suffix(a, b);
      } else {
        const std::string more = paren("\",\" ws " + rest + " ws") + repeat_suffix(std::max<int64_t>(0, a - 1), b < 0 ? -1 : b - 1);
        tail = a > 0 ? rest + " ws " + more : paren(rest + " ws " + more) + "?";
      }
    } else {
      tail = "\"\"";
    }
    std::string next = rule(base + "-tail", tail);
    for (int64_t i = k - 1; i >= 0; --i) {
      const std::string sep = i == 0 ? "" : "\",\" ws ";
      next = rule(fmt::format("{}-{}", base, i), sep + prefix[size_t(i)] + " ws " + next + (i >= lo ? " | \"\"" : ""));
    }
    return rule(base, "\"[\" ws " + next + " \"]\"");
  }

  const ojson& root_;
  const JsonSchemaLimits& lim_;
  std::vector<std::string> rules_;
  std::set<std::string> names_{"root", "ws"};
  std::map<std::string, std::string> refs_, formats_;
  std::unordered_map<std::string, int> counters_;
  static constexpr size_t kMaxText = size_t(16) << 20;  // of generated expressions (a bound on enum/const/pattern sizes too)
  size_t text_ = 0;
  bool escapes_ = false;
};

}  // namespace

std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema, const JsonSchemaLimits& limits) {
  try {
    return Converter(schema, limits).run();
  } catch (const nlohmann::json::exception& e) {  // e.g. a string that is not UTF-8
    throw GrammarError(fmt::format("JSON schema: {}", e.what()));
  }
}

std::string json_value_gbnf(bool object_only) {
  return std::string("root ::= ") + (object_only ? "json-object" : "json-value") + "\n" + kCore;
}

}  // namespace ridge::grammar
