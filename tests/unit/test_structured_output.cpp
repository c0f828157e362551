// Structured output through the engine: every output keeps its grammar and, where the
// grammar bounds the document, completes into JSON that satisfies its schema, on
// stories260K and on random models of every architecture; batching, a small token budget,
// preemption (recompute and swap), speculative decoding and jump-forward change no token.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "model/mkmodel.h"
#include "model/model.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace ridge {
namespace {

using json = nlohmann::json;

// Schemas whose documents are bounded (every string, number and array has a most
// length), so a grammar-held generation always completes within its token budget.
const char* kPerson = R"({"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 12}, "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "mood": {"enum": ["happy", "sad", "sleepy"]}, "pet": {"type": ["boolean", "null"]}},
    "required": ["name", "age", "mood"]})";
const char* kList = R"({"type": "array", "items": {"type": "integer", "minimum": -50, "maximum": 50}, "minItems": 1, "maxItems": 5})";
const char* kTree = R"({"$defs": {"leaf": {"type": "object", "properties": {"id": {"type": "integer", "minimum": 1, "maximum": 9},
    "tag": {"type": "string", "pattern": "^[a-z]{1,6}$"}}, "required": ["id", "tag"]}},
    "type": "object", "properties": {"kind": {"const": "tree"}, "leaves": {"type": "array", "items": {"$ref": "#/$defs/leaf"}, "maxItems": 3}},
    "required": ["kind", "leaves"]})";

// The schema's constraints, checked on the parsed document (independently of the grammar).
void check_document(const char* schema, const json& j, const std::string& text) {
  if (schema == kPerson) {
    ASSERT_TRUE(j.is_object()) << text;
    ASSERT_TRUE(j.contains("name") && j["name"].is_string()) << text;
    ASSERT_TRUE(j.contains("age") && j["age"].is_number_integer()) << text;
    EXPECT_GE(j["age"].get<int64_t>(), 0) << text;
    EXPECT_LE(j["age"].get<int64_t>(), 120) << text;
    ASSERT_TRUE(j.contains("mood")) << text;
    const std::string mood = j["mood"].get<std::string>();
    EXPECT_TRUE(mood == "happy" || mood == "sad" || mood == "sleepy") << text;
    if (j.contains("pet")) {
      EXPECT_TRUE(j["pet"].is_boolean() || j["pet"].is_null()) << text;
    }
    for (auto& [k, v] : j.items()) EXPECT_TRUE(k == "name" || k == "age" || k == "mood" || k == "pet") << text;
  } else if (schema == kList) {
    ASSERT_TRUE(j.is_array()) << text;
    EXPECT_GE(j.size(), 1u);
    EXPECT_LE(j.size(), 5u);
    for (const json& v : j) {
      ASSERT_TRUE(v.is_number_integer()) << text;
      EXPECT_LE(std::abs(v.get<int64_t>()), 50) << text;
    }
  } else {
    ASSERT_TRUE(j.is_object()) << text;
    EXPECT_EQ(j["kind"], "tree") << text;
    ASSERT_TRUE(j["leaves"].is_array()) << text;
    EXPECT_LE(j["leaves"].size(), 3u);
    for (const json& l : j["leaves"]) {
      EXPECT_TRUE(l["id"].is_number_integer()) << text;
      const std::string tag = l["tag"].get<std::string>();
      EXPECT_TRUE(!tag.empty() && tag.size() <= 6) << text;
    }
  }
}

struct Req {
  std::vector<int32_t> prompt;
  RequestParams p;
  const char* schema;
};

std::vector<RequestOutput> run(const Model& m, const Tokenizer& tok, EngineConfig cfg, const std::vector<Req>& reqs,
                               std::vector<std::string>* finish = nullptr, EngineStats* st = nullptr,
                               int64_t* preemptions = nullptr) {
  cfg.threads = 2;
  Engine e(m, &tok, cfg);
  std::vector<int64_t> ids;
  for (const Req& r : reqs) ids.push_back(e.add_request(r.prompt, r.p));
  while (e.has_work()) {
    e.step();
    e.check_invariants();
  }
  std::vector<RequestOutput> out;
  for (int64_t id : ids) {
    out.push_back(e.output(id));
    if (finish) finish->push_back(std::string(e.request_stats(id).finish_reason));
  }
  if (st) *st = e.stats();
  if (preemptions) *preemptions = e.n_preemptions();
  return out;
}

std::vector<Req> requests(const Tokenizer& tok, int n, bool sampled, int max_tokens) {
  const char* schemas[] = {kPerson, kList, kTree};
  // Prompts with JSON in them, so prompt lookup has something to propose.
  const char* texts[] = {R"(Once upon a time {"name": "Tim", "age": 3, "mood": "happy"} and {"name": ")",
                         R"(The list was [1, 2, 3] and then [4, 5)", R"(Lily said {"kind": "tree", "leaves": [{"id": 1, "tag": "ab"}]})",
                         "Once upon a time there was a little girl"};
  std::vector<Req> out;
  for (int i = 0; i < n; ++i) {
    Req r;
    r.schema = schemas[i % 3];
    r.prompt = tok.encode(texts[i % 4], true);
    r.p.max_tokens = max_tokens;
    r.p.grammar = grammar::compile_gbnf(grammar::json_schema_to_gbnf(nlohmann::ordered_json::parse(r.schema)));
    if (sampled) {
      r.p.sampling.temperature = 0.9f;
      r.p.sampling.seed = 7 + uint64_t(i);
    } else {
      r.p.sampling.temperature = 0;
    }
    out.push_back(std::move(r));
  }
  return out;
}

void check_outputs(const Tokenizer& tok, const std::vector<Req>& reqs, const std::vector<RequestOutput>& outs,
                   const std::vector<std::string>& finish, bool must_finish) {
  for (size_t i = 0; i < outs.size(); ++i) {
    const std::string text = tok.decode(outs[i].tokens);
    // Whatever the budget left of it, the text is a prefix the grammar allows.
    std::vector<std::string> bytes;
    for (int32_t id = 0; id < tok.n_vocab(); ++id) bytes.push_back(tok.piece_bytes(id));
    grammar::Matcher m(reqs[i].p.grammar,
                       std::make_shared<grammar::TokenTrie>(bytes, std::vector<bool>(), std::vector<int32_t>{}));
    ASSERT_TRUE(m.accept_bytes(text)) << text;
    if (finish[i] != "stop") {
      EXPECT_FALSE(must_finish) << "request " << i << " ran out of tokens: " << text;
      continue;
    }
    ASSERT_TRUE(m.can_end()) << text;
    json j;
    ASSERT_NO_THROW(j = json::parse(text)) << text;
    check_document(reqs[i].schema, j, text);
  }
}

TEST(StructuredOutput, Stories260KValidAndUnchangedByScheduling) {
  RIDGE_REQUIRE_SHARED(path, "models/stories260K.gguf");
  auto m = Model::load(path);
  auto tok = Tokenizer::from_gguf(m->file());
  for (bool sampled : {false, true}) {
    const auto reqs = requests(*tok, 12, sampled, 160);
    EngineConfig base;
    base.max_num_seqs = 6;
    base.kv_cache_bytes = int64_t(32) << 20;
    std::vector<std::string> finish;
    EngineStats base_stats;
    const auto plain = run(*m, *tok, base, reqs, &finish, &base_stats);
    check_outputs(*tok, reqs, plain, finish, true);
    // Jump-forward (on by default) ran forced spans as drafts, and the model took some.
    EXPECT_GT(base_stats.jump_accepted, 0);
    std::printf("%-32s drafted %5lld accepted %5lld\n", "jump-forward", (long long)base_stats.jump_tokens,
                (long long)base_stats.jump_accepted);
    KVLayout kl{m->hparams().n_layer, m->hparams().n_head_kv, m->hparams().head_dim_k, m->hparams().head_dim_v, 16, 0,
                base.kv_dtype};
    struct Case {
      const char* name;
      EngineConfig cfg;
    };
    std::vector<Case> cases;
    cases.push_back({"no jump-forward", base});
    cases.back().cfg.jump_forward = false;
    cases.push_back({"speculative ngram k = 4", base});
    cases.back().cfg.speculative = SpeculativeConfig::make(SpecMethod::Ngram, 4, 1, 4, false);
    cases.push_back({"8-token budget, speculative", cases.back().cfg});
    cases.back().cfg.max_num_batched_tokens = 8;
    cases.push_back({"small pool, recompute", base});
    cases.back().cfg.kv_cache_bytes = 260 * kl.bytes_per_token();  // about 2.5 of the 6 sequences
    cases.push_back({"small pool, swap, speculative", cases.back().cfg});
    cases.back().cfg.preemption = PreemptionMode::Swap;
    cases.back().cfg.swap_bytes = int64_t(64) << 20;
    cases.back().cfg.speculative = SpeculativeConfig::make(SpecMethod::Ngram, 4, 1, 4, false);
    for (const Case& c : cases) {
      std::vector<std::string> f;
      EngineStats st;
      int64_t preempted = 0;
      const auto got = run(*m, *tok, c.cfg, reqs, &f, &st, &preempted);
      if (std::string(c.name).find("small pool") != std::string::npos) {
        EXPECT_GT(preempted, 0) << c.name;
      }
      if (c.cfg.speculative.method != SpecMethod::None) {
        EXPECT_GT(st.spec_accepted_tokens, 0) << c.name << ": no proposal was accepted, nothing was tested";
        std::printf("%-32s drafted %5lld accepted %5lld\n", c.name, (long long)st.spec_draft_tokens,
                    (long long)st.spec_accepted_tokens);
      }
      for (size_t i = 0; i < reqs.size(); ++i) {
        ASSERT_EQ(got[i].tokens, plain[i].tokens) << c.name << ", request " << i << (sampled ? " (sampled)" : "");
        ASSERT_EQ(f[i], finish[i]) << c.name;
      }
    }
  }
}

// Random weights follow no text: the grammar alone makes their output valid JSON.
TEST(StructuredOutput, RandomModelsOfEveryArchitecture) {
  for (const char* arch : {"llama", "qwen2", "qwen3"}) {
    const std::string path = testing::TempDir() + "/so-" + arch + ".gguf";
    MkModelOptions o;
    o.arch = arch;
    o.preset = "tiny";
    o.dtype = DType::Q8_0;
    o.seed = 5;
    make_model(o, path);
    auto m = Model::load(path);
    auto tok = Tokenizer::from_gguf(m->file());
    for (bool sampled : {false, true}) {
      const auto reqs = requests(*tok, 6, sampled, 200);
      EngineConfig cfg;
      cfg.max_num_seqs = 6;
      cfg.kv_cache_bytes = int64_t(32) << 20;
      std::vector<std::string> finish;
      const auto outs = run(*m, *tok, cfg, reqs, &finish);
      check_outputs(*tok, reqs, outs, finish, true);
    }
  }
}

TEST(StructuredOutput, ChoiceEndsTheRequestWithoutAnEndToken) {
  RIDGE_REQUIRE_SHARED(path, "models/stories260K.gguf");
  auto m = Model::load(path);
  auto tok = Tokenizer::from_gguf(m->file());
  EngineConfig cfg;
  cfg.threads = 2;
  cfg.kv_cache_bytes = int64_t(16) << 20;
  Engine e(*m, tok.get(), cfg);
  RequestParams p;
  p.max_tokens = 50;
  p.ignore_eos = true;  // the grammar's end still ends it
  p.sampling.temperature = 0;
  p.grammar = grammar::compile_gbnf(R"(root ::= "yes" | "no" | "maybe so")");
  const int64_t id = e.add_request(tok->encode("Once upon a time", true), p);
  while (e.has_work()) e.step();
  const std::string text = tok->decode(e.output(id).tokens);
  EXPECT_TRUE(text == "yes" || text == "no" || text == "maybe so") << text;
  EXPECT_EQ(std::string(e.request_stats(id).finish_reason), "stop");
  // Without a tokenizer there are no token bytes to hold to a grammar.
  Engine bare(*m, nullptr, cfg);
  EXPECT_THROW(bare.add_request({1, 2}, p), Error);
}

}  // namespace
}  // namespace ridge
