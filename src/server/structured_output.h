// Structured output as the APIs ask for it: OpenAI's response_format (json_object,
// json_schema), vLLM's guided_json / guided_regex / guided_grammar / guided_choice and
// llama-server's grammar / json_schema fields, each turned into a compiled grammar
// (grammar/grammar.h) that the engine holds a request's tokens to.
#pragma once
#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <unordered_map>

#include "grammar/grammar.h"
#include "grammar/matcher.h"

namespace ridge::server {

// Compiled grammars by their GBNF text, the most recent `capacity` kept: a schema sent
// with every request compiles once. Thread-safe.
class GrammarCache {
 public:
  explicit GrammarCache(size_t capacity = 64) : capacity_(capacity) {}
  // Throws grammar::GrammarError.
  std::shared_ptr<const grammar::Grammar> get(const std::string& gbnf);
  // The vocabulary the engine's matchers use: compiling a grammar then also builds its
  // token tables (grammar/token_tables.h), here on the request's thread rather than in
  // the engine's step, up to a time budget (the rest are built on first use).
  void set_vocabulary(std::shared_ptr<const grammar::TokenTrie> vocab, double tables_budget_s = 2.0) {
    vocab_ = std::move(vocab);
    tables_budget_s_ = tables_budget_s;
  }

  struct Stats {
    int64_t compiled = 0, hits = 0;
    double compile_s = 0;  // total time compiling (token tables included)
  };
  Stats stats() const;

 private:
  using Lru = std::list<std::pair<std::string, std::shared_ptr<const grammar::Grammar>>>;
  mutable std::mutex mu_;
  size_t capacity_;
  Lru lru_;  // most recent first
  std::unordered_map<std::string, Lru::iterator> index_;
  Stats stats_;
  std::shared_ptr<const grammar::TokenTrie> vocab_;
  double tables_budget_s_ = 0;
};

// The request's grammar, or null when it asks for none. `ordered`: the same body parsed
// keeping key order (a schema's properties come in its order), or null. Throws ApiError
// 400 naming the field for a malformed or unsupported constraint.
std::shared_ptr<const grammar::Grammar> parse_structured_output(const nlohmann::json& body,
                                                                const nlohmann::ordered_json* ordered,
                                                                GrammarCache& cache);

}  // namespace ridge::server
