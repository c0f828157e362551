#include "tools/bench_grammar.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <random>

#include "core/text_file.h"
#include "engine/grammar_vocab.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "tokenizer/tokenizer.h"

namespace ridge::tools {
namespace {

using Clock = std::chrono::steady_clock;

// Schemas of the kind APIs send: flat records, enums and bounded numbers, arrays of
// records, recursion through $ref, patterns and formats, a tool call's arguments.
const std::vector<std::pair<std::string, std::string>>& builtin_schemas() {
  static const std::vector<std::pair<std::string, std::string>> s = {
      {"person", R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 40},
          "age": {"type": "integer", "minimum": 0, "maximum": 150}, "email": {"type": "string", "format": "email"},
          "tags": {"type": "array", "items": {"type": "string", "maxLength": 16}, "maxItems": 5}},
          "required": ["name", "age"]})"},
      {"order", R"({"type": "object", "properties": {"id": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{6}$"},
          "status": {"enum": ["pending", "shipped", "delivered", "cancelled"]}, "placed": {"type": "string", "format": "date-time"},
          "items": {"type": "array", "minItems": 1, "maxItems": 4, "items": {"type": "object", "properties": {
              "sku": {"type": "string", "maxLength": 12}, "qty": {"type": "integer", "minimum": 1, "maximum": 99},
              "price": {"type": "number", "minimum": 0}}, "required": ["sku", "qty", "price"]}}},
          "required": ["id", "status", "items"]})"},
      {"tree", R"({"$defs": {"node": {"type": "object", "properties": {"label": {"type": "string", "maxLength": 20},
          "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 3}}, "required": ["label"]}},
          "$ref": "#/$defs/node"})"},
      {"tool_call", R"({"type": "object", "properties": {"name": {"enum": ["get_weather", "search", "send_email"]},
          "arguments": {"anyOf": [
              {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}, "unit": {"enum": ["c", "f"]}}, "required": ["city"]},
              {"type": "object", "properties": {"query": {"type": "string", "maxLength": 60}, "limit": {"type": "integer", "minimum": 1, "maximum": 20}}, "required": ["query"]},
              {"type": "object", "properties": {"to": {"type": "string", "format": "email"}, "body": {"type": "string", "maxLength": 80}}, "required": ["to", "body"]}]}},
          "required": ["name", "arguments"]})"},
      {"json_object", ""},  // free JSON (response_format json_object)
  };
  return s;
}

}  // namespace

std::vector<GrammarBenchRow> run_grammar_bench(const Tokenizer& tok, const GrammarBenchOptions& o) {
  std::vector<std::pair<std::string, std::string>> schemas;
  if (o.schema_files.empty()) schemas = builtin_schemas();
  for (const std::string& f : o.schema_files) schemas.push_back({f, read_text_file(f)});

  // Without an end-of-generation token (a tokenizer.json without its config) a document
  // ends at max_tokens.
  auto trie = grammar_vocabulary(tok);

  std::vector<GrammarBenchRow> rows;
  std::mt19937_64 rng(o.seed);
  for (const auto& [name, text] : schemas) {
    GrammarBenchRow r;
    r.name = name;
    const auto t0 = Clock::now();
    const std::string gbnf = text.empty() ? grammar::json_value_gbnf(true)
                                          : grammar::json_schema_to_gbnf(nlohmann::ordered_json::parse(text));
    auto g = grammar::compile_gbnf(gbnf);
    r.compile_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    const auto tables = trie->tables(g);
    if (!o.lazy_tables) {
      const auto t1 = Clock::now();
      tables->prepare();
      r.tables_ms = std::chrono::duration<double, std::milli>(Clock::now() - t1).count();
    }
    std::vector<double> us;
    int64_t hits = 0, computed = 0;
    std::vector<int32_t> allowed;
    for (int32_t d = 0; d < o.docs; ++d) {
      grammar::Matcher m(g, trie);
      for (int32_t t = 0; t < o.max_tokens && !m.ended(); ++t) {
        const auto a = Clock::now();
        const std::vector<uint64_t>& mask = m.mask();
        us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - a).count());
        allowed.clear();
        for (int32_t id = 0; id < trie->n_vocab(); ++id)
          if ((mask[size_t(id) >> 6] >> (id & 63)) & 1) allowed.push_back(id);
        if (allowed.empty()) break;
        int32_t pick = allowed[rng() % allowed.size()];
        if (m.can_end() && !trie->eog().empty() && rng() % 4 == 0) pick = trie->eog()[0];
        m.accept(pick);
      }
      r.completed += m.ended();
      hits += m.mask_cache_hits();
      computed += m.masks_computed();
    }
    r.tokens = int64_t(us.size());
    if (!us.empty()) {
      double sum = 0;
      for (double x : us) sum += x;
      r.mask_us_mean = sum / double(us.size());
      std::sort(us.begin(), us.end());
      r.mask_us_p99 = us[std::min(us.size() - 1, size_t(double(us.size()) * 0.99))];
      r.mask_us_max = us.back();
    }
    r.hit_rate = hits + computed ? double(hits) / double(hits + computed) : 0;
    r.tables = tables->built();
    r.tables_mib = double(tables->bytes()) / double(1 << 20);
    rows.push_back(r);
  }
  return rows;
}

}  // namespace ridge::tools
