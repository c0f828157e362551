#include "server/structured_output.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "server/openai_api.h"

namespace ridge::server {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

// The constraint fields a request may carry (one at most).
constexpr const char* kFields[] = {"response_format", "guided_json", "guided_regex", "guided_grammar",
                                   "guided_choice",   "grammar",     "json_schema"};

const ojson* ofield(const ojson* o, const char* key) {
  if (!o || !o->is_object()) return nullptr;
  auto it = o->find(key);
  return it == o->end() || it->is_null() ? nullptr : &*it;
}

// A schema as ordered JSON: the ordered body's copy when there is one.
ojson ordered_schema(const json& schema, const ojson* ordered) {
  return ordered ? *ordered : ojson::parse(schema.dump());
}

std::string schema_gbnf(const ojson& schema, const std::string& param) {
  if (schema.is_string()) {  // guided_json may be the schema's text
    ojson parsed;
    try {
      parsed = ojson::parse(schema.get<std::string>());
    } catch (const std::exception&) {
      throw ApiError(400, param + " is a string that is not JSON", param);
    }
    return schema_gbnf(parsed, param);
  }
  try {
    return grammar::json_schema_to_gbnf(schema);
  } catch (const grammar::GrammarError& e) {
    throw ApiError(400, fmt::format("{}: {}", param, e.what()), param);
  }
}

std::string gbnf_of(const std::string& key, const json& v, const ojson* ov) {
  if (key == "response_format") {
    if (!v.is_object()) throw ApiError(400, "response_format must be an object", key);
    auto t = v.find("type");
    if (t == v.end() || !t->is_string()) throw ApiError(400, "response_format.type must be a string", "response_format.type");
    const std::string type = t->get<std::string>();
    if (type == "text") return "";
    if (type == "json_object") {
      // llama-server accepts a schema here too.
      if (auto s = v.find("schema"); s != v.end() && !s->is_null())
        return schema_gbnf(ordered_schema(*s, ofield(ov, "schema")), "response_format.schema");
      return grammar::json_value_gbnf(true);
    }
    if (type == "json_schema") {
      auto js = v.find("json_schema");
      if (js == v.end() || !js->is_object())
        throw ApiError(400, "response_format.json_schema must be an object", "response_format.json_schema");
      auto s = js->find("schema");
      if (s == js->end() || s->is_null())
        throw ApiError(400, "response_format.json_schema.schema is required", "response_format.json_schema.schema");
      return schema_gbnf(ordered_schema(*s, ofield(ofield(ov, "json_schema"), "schema")), "response_format.json_schema.schema");
    }
    throw ApiError(400, fmt::format("response_format.type '{}' is not one of text, json_object, json_schema", type),
                   "response_format.type");
  }
  if (key == "guided_json" || key == "json_schema") return schema_gbnf(ordered_schema(v, ov), key);
  if (key == "guided_regex") {
    if (!v.is_string()) throw ApiError(400, key + " must be a string", key);
    try {
      // The whole output matches (vLLM's guided_regex): ^ and $ change nothing.
      return "root ::= " + grammar::regex_to_gbnf(v.get<std::string>(), false).expr + "\n";
    } catch (const grammar::GrammarError& e) {
      throw ApiError(400, fmt::format("{}: {}", key, e.what()), key);
    }
  }
  if (key == "guided_grammar" || key == "grammar") {
    if (!v.is_string()) throw ApiError(400, key + " must be a string (GBNF)", key);
    return v.get<std::string>();
  }
  // guided_choice
  if (!v.is_array() || v.empty()) throw ApiError(400, "guided_choice must be a non-empty array of strings", key);
  std::string g = "root ::=";
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string() || v[i].get<std::string>().empty())
      throw ApiError(400, "guided_choice must be a non-empty array of non-empty strings", key);
    g += (i ? " | " : " ") + grammar::gbnf_literal(v[i].get<std::string>());
  }
  return g + "\n";
}

}  // namespace

std::shared_ptr<const grammar::Grammar> GrammarCache::get(const std::string& gbnf) {
  {
    std::lock_guard lock(mu_);
    if (auto it = index_.find(gbnf); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      ++stats_.hits;
      return it->second->second;
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<const grammar::Grammar> g = grammar::compile_gbnf(gbnf);
  if (vocab_) vocab_->tables(g)->prepare(tables_budget_s_);
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::lock_guard lock(mu_);
  ++stats_.compiled;
  stats_.compile_s += dt;
  if (index_.count(gbnf)) return g;  // another request compiled it meanwhile
  lru_.emplace_front(gbnf, g);
  index_.emplace(gbnf, lru_.begin());
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return g;
}

GrammarCache::Stats GrammarCache::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

std::shared_ptr<const grammar::Grammar> parse_structured_output(const json& body, const ojson* ordered,
                                                                GrammarCache& cache) {
  std::string key;
  for (const char* k : kFields) {
    auto it = body.find(k);
    if (it == body.end() || it->is_null()) continue;
    if (std::string(k) == "response_format" && it->is_object() && it->contains("type") && (*it)["type"] == "text") continue;
    if (!key.empty()) throw ApiError(400, fmt::format("give at most one of {} and {}", key, k), k);
    key = k;
  }
  if (const auto it = body.find("guided_whitespace_pattern"); it != body.end() && !it->is_null())
    throw ApiError(400, "guided_whitespace_pattern is not supported by ridge", "guided_whitespace_pattern");
  if (key.empty()) return nullptr;
  const std::string gbnf = gbnf_of(key, body.at(key), ofield(ordered, key.c_str()));
  if (gbnf.empty()) return nullptr;
  try {
    return cache.get(gbnf);
  } catch (const grammar::GrammarError& e) {
    throw ApiError(400, fmt::format("{}: {}", key, e.what()), key);
  }
}

}  // namespace ridge::server
