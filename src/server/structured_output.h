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

namespace ridge::server {

// Compiled grammars by their GBNF text, the most recent `capacity` kept: a schema sent
// with every request compiles once. Thread-safe.
class GrammarCache {
 public:
  explicit GrammarCache(size_t capacity = 64) : capacity_(capacity) {}
  // Throws grammar::GrammarError.
  std::shared_ptr<const grammar::Grammar> get(const std::string& gbnf);

  struct Stats {
    int64_t compiled = 0, hits = 0;
    double compile_s = 0;  // total time compiling
  };
  Stats stats() const;

 private:
  using Lru = std::list<std::pair<std::string, std::shared_ptr<const grammar::Grammar>>>;
  mutable std::mutex mu_;
  size_t capacity_;
  Lru lru_;  // most recent first
  std::unordered_map<std::string, Lru::iterator> index_;
  Stats stats_;
};

// The request's grammar, or null when it asks for none. `ordered`: the same body parsed
// keeping key order (a schema's properties come in its order), or null. Throws ApiError
// 400 naming the field for a malformed or unsupported constraint.
std::shared_ptr<const grammar::Grammar> parse_structured_output(const nlohmann::json& body,
                                                                const nlohmann::ordered_json* ordered,
                                                                GrammarCache& cache);

}  // namespace ridge::server
