// ridge grammar: structured output's grammars at the command line.
//   gbnf   the GBNF a JSON schema, a regex or free JSON compiles to (checked by compiling)
//   masks  the token masks along given token sequences, for comparing with another
//          implementation (tests/grammar/xgrammar_masks.mjs compares with XGrammar)
#include <nlohmann/json.hpp>
#include <cstdio>
#include <fstream>
#include <unordered_set>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "core/text_file.h"
#include "engine/grammar_vocab.h"
#include "gguf/gguf.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/regex.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace ridge::cli {
namespace {

int grammar_gbnf(Args& a) {
  const auto schema = a.str({"--json-schema"});
  const auto regex = a.str({"--regex"});
  const bool object = a.flag({"--json-object"});
  grammar::JsonSchemaLimits lim;
  lim.strict = !a.flag({"--no-strict"});
  a.finish();
  if (int(bool(schema)) + int(bool(regex)) + int(object) != 1)
    fail("usage: ridge grammar gbnf --json-schema FILE [--no-strict] | --regex REGEX | --json-object");
  std::string g;
  if (schema) {
    nlohmann::ordered_json j;
    try {
      j = nlohmann::ordered_json::parse(read_text_file(*schema));
    } catch (const nlohmann::json::exception& e) {
      fail("{} is not JSON: {}", *schema, e.what());
    }
    g = grammar::json_schema_to_gbnf(j, lim);
  } else if (regex) {
    g = "root ::= " + grammar::regex_to_gbnf(*regex, false).expr + "\n";
  } else {
    g = grammar::json_value_gbnf(true);
  }
  grammar::compile_gbnf(g);
  std::fputs(g.c_str(), stdout);
  return 0;
}

// One line per position of each document (before each token and after the last):
//   DOC POS ALLOWED HASH END
// ALLOWED: how many tokens outside --ignore the mask allows; HASH: FNV-1a (32-bit) over
// their ids in increasing order, 4 little-endian bytes each; END: 1 where the grammar may
// end. A token the grammar refuses prints "DOC POS reject ID" and ends its document.
int grammar_masks(Args& a) {
  const auto gfile = a.str({"--grammar"});
  const auto tokens = a.str({"--tokens"});
  const auto ignore_file = a.str({"--ignore"});
  const std::string root = a.str({"--root"}).value_or("root");
  const bool full = a.flag({"--full"});  // the allowed ids themselves after each line
  // The ids no grammar allows here (control tokens, bytes no UTF-8 text holds), as JSON.
  const bool print_excluded = a.flag({"--print-excluded"});
  if (!print_excluded && (!gfile || !tokens)) fail("usage: ridge grammar masks (-m MODEL | --tokenizer-json FILE) --grammar FILE --tokens FILE.jsonl [--ignore IDS.json] [--root NAME]");
  const Vocabulary vocab = load_vocabulary(a);
  const std::unique_ptr<Tokenizer>& tok = vocab.tok;
  a.finish();
  std::unordered_set<int32_t> ignore;
  if (ignore_file)
    for (const auto& v : nlohmann::json::parse(read_text_file(*ignore_file))) ignore.insert(v.get<int32_t>());
  const std::vector<int32_t> ignored(ignore.begin(), ignore.end());
  auto trie = grammar_vocabulary(*tok, ignored);
  if (print_excluded) {
    std::string out = "[";
    for (int32_t id = 0; id < trie->n_vocab(); ++id)
      if (!trie->producible(id) && !trie->is_eog(id) && !ignore.count(id)) out += (out.size() > 1 ? "," : "") + std::to_string(id);
    std::printf("%s]\n", out.c_str());
    return 0;
  }
  auto g = grammar::compile_gbnf(read_text_file(*gfile), root);
  std::ifstream in(*tokens);
  if (!in) fail("cannot open '{}'", *tokens);
  std::string line;
  for (int doc = 0; std::getline(in, line); ++doc) {
    if (line.empty()) continue;
    const auto ids = nlohmann::json::parse(line).get<std::vector<int32_t>>();
    grammar::Matcher m(g, trie);
    for (size_t pos = 0; pos <= ids.size(); ++pos) {
      const std::vector<uint64_t>& mask = m.mask();
      uint32_t h = 2166136261u;
      int64_t n = 0;
      for (int32_t id = 0; id < trie->n_vocab(); ++id) {
        if (!((mask[size_t(id) >> 6] >> (id & 63)) & 1) || ignore.count(id) || trie->is_eog(id)) continue;
        ++n;
        for (int k = 0; k < 4; ++k) h = (h ^ ((uint32_t(id) >> (8 * k)) & 0xFF)) * 16777619u;
      }
      std::printf("%d %zu %lld %u %d\n", doc, pos, (long long)n, h, m.can_end() ? 1 : 0);
      if (full) {
        for (int32_t id = 0; id < trie->n_vocab(); ++id)
          if (((mask[size_t(id) >> 6] >> (id & 63)) & 1) && !ignore.count(id) && !trie->is_eog(id)) std::printf(" %d", id);
        std::printf("\n");
      }
      if (pos == ids.size()) break;
      if (!m.accept(ids[pos])) {
        std::printf("%d %zu reject %d\n", doc, pos, ids[pos]);
        break;
      }
    }
  }
  return 0;
}

// Whether a JSON schema's grammar accepts each text (JSON lines: one JSON string each):
// a line "1" or "0" per text, or one line "error MESSAGE" when the schema does not compile.
int grammar_accepts(Args& a) {
  const auto schema = a.str({"--json-schema"});
  const auto texts = a.str({"--texts"});
  grammar::JsonSchemaLimits lim;
  lim.strict = !a.flag({"--no-strict"});
  a.finish();
  if (!schema || !texts) fail("usage: ridge grammar accepts --json-schema FILE --texts FILE.jsonl [--no-strict]");
  std::shared_ptr<const grammar::Grammar> g;
  try {
    g = grammar::compile_gbnf(grammar::json_schema_to_gbnf(nlohmann::ordered_json::parse(read_text_file(*schema)), lim));
  } catch (const grammar::GrammarError& e) {
    std::printf("error %s\n", e.what());
    return 0;
  }
  std::vector<std::string> bytes;
  for (int c = 0; c < 256; ++c) bytes.push_back(std::string(1, char(c)));
  auto trie = std::make_shared<grammar::TokenTrie>(bytes, std::vector<bool>(), std::vector<int32_t>{});
  std::ifstream in(*texts);
  if (!in) fail("cannot open '{}'", *texts);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    grammar::Matcher m(g, trie);
    std::printf("%d\n", m.accept_bytes(nlohmann::json::parse(line).get<std::string>()) && m.can_end() ? 1 : 0);
  }
  return 0;
}

}  // namespace

int cmd_grammar(Args& a) {
  const auto sub = a.subcommand();
  if (sub && *sub == "gbnf") return grammar_gbnf(a);
  if (sub && *sub == "masks") return grammar_masks(a);
  if (sub && *sub == "accepts") return grammar_accepts(a);
  fail("usage: ridge grammar gbnf|masks|accepts [options] (see ridge --help)");
}

}  // namespace ridge::cli
