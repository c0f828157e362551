// ChatOutputParser: each model family's documented output format, whole and streamed.
// A stream must say what one feed of the whole text says, wherever it is split: every
// case runs whole, at every single split point, byte by byte and in random pieces, and
// each way's accumulated content, reasoning and calls must be the expected ones.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "server/chat_output.h"
#include "server/tool_request.h"

namespace ridge::server {
namespace {

struct Result {
  std::string content, reasoning;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
  std::vector<std::string> ids;
  bool operator==(const Result& o) const {
    return content == o.content && reasoning == o.reasoning && calls == o.calls;
  }
};

std::ostream& operator<<(std::ostream& os, const Result& r) {
  os << "{content: '" << r.content << "', reasoning: '" << r.reasoning << "', calls: [";
  for (const auto& [n, a] : r.calls) os << n << "(" << a << ") ";
  return os << "]}";
}

void add(Result& r, const OutputDelta& d) {
  r.content += d.content;
  r.reasoning += d.reasoning;
  for (const ToolCallDelta& c : d.calls) {
    if (size_t(c.index) == r.calls.size()) {
      ASSERT_FALSE(c.id.empty()) << "a call's first delta carries its id";
      ASSERT_FALSE(c.name.empty());
      r.calls.push_back({c.name, ""});
      r.ids.push_back(c.id);
    }
    ASSERT_LT(size_t(c.index), r.calls.size()) << "calls are numbered in order";
    if (size_t(c.index) + 1 == r.calls.size() && !c.id.empty()) {
      ASSERT_EQ(c.name, r.calls.back().first);
    }
    r.calls[size_t(c.index)].second += c.arguments;
  }
}

Result run(const OutputFormat& f, const std::vector<std::string>& pieces) {
  ChatOutputParser p(f);
  Result r;
  for (const std::string& s : pieces) add(r, p.feed(s));
  add(r, p.finish());
  return r;
}

// Whole, every two-piece split, byte by byte, and random pieces: all give `want`.
void check(const OutputFormat& f, const std::string& text, const Result& want) {
  SCOPED_TRACE(text);
  EXPECT_EQ(run(f, {text}), want) << "whole";
  for (size_t i = 1; i < text.size(); ++i)
    ASSERT_EQ(run(f, {text.substr(0, i), text.substr(i)}), want) << "split at " << i;
  std::vector<std::string> bytes;
  for (char c : text) bytes.push_back(std::string(1, c));
  EXPECT_EQ(run(f, bytes), want) << "byte by byte";
  std::mt19937 rng(7);
  for (int t = 0; t < 20; ++t) {
    std::vector<std::string> pieces;
    for (size_t i = 0; i < text.size();) {
      const size_t n = 1 + rng() % 9;
      pieces.push_back(text.substr(i, n));
      i += n;
    }
    ASSERT_EQ(run(f, pieces), want) << "random pieces " << t;
  }
}

OutputFormat fmt(ToolFormat t, bool think = false, bool start_in_think = false) {
  OutputFormat f;
  f.tools = t;
  f.think = think;
  f.start_in_think = start_in_think;
  return f;
}

Result R(std::string content, std::vector<std::pair<std::string, std::string>> calls = {}, std::string reasoning = "") {
  Result r;
  r.content = std::move(content);
  r.calls = std::move(calls);
  r.reasoning = std::move(reasoning);
  return r;
}

TEST(ChatOutput, PlainTextPassesThrough) {
  check(fmt(ToolFormat::None), "Hello <tool_call> world", R("Hello <tool_call> world"));
  check(fmt(ToolFormat::Hermes), "Just an answer, no calls.", R("Just an answer, no calls."));
}

TEST(ChatOutput, Hermes) {
  const OutputFormat f = fmt(ToolFormat::Hermes);
  check(f, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>",
        R("", {{"get_weather", R"({"city": "Paris", "days": 3})"}}));
  // Two calls, content before them, whitespace between them dropped.
  check(f,
        "Let me look.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": [1, {\"y\": \"}\"}]}}\n</tool_call>\n"
        "<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>",
        R("Let me look.\n", {{"a", R"({"x": [1, {"y": "}"}]})"}, {"b", "{}"}}));
  // Arguments before the name; arguments as a JSON-encoded string; no arguments at all.
  check(f, "<tool_call>{\"arguments\": {\"q\": \"é\"}, \"name\": \"s\"}</tool_call>", R("", {{"s", R"({"q": "é"})"}}));
  check(f, "<tool_call>{\"name\": \"s\", \"arguments\": \"{\\\"q\\\": 1}\"}</tool_call>", R("", {{"s", R"({"q": 1})"}}));
  check(f, "<tool_call>{\"name\": \"now\"}</tool_call>", R("", {{"now", "{}"}}));
  // Not a call: no name. Its text stays content, markers and all.
  check(f, "a <tool_call>oops</tool_call> b", R("a <tool_call>oops</tool_call> b"));
  // Cut short by max_tokens inside the arguments: the call is what there is.
  check(f, "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1", R("", {{"a", R"({"x": 1)"}}));
  // A lookalike that is not the marker is content, once it is certain.
  check(f, "<tool_cal x>", R("<tool_cal x>"));
}

TEST(ChatOutput, ThinkThenHermes) {
  const OutputFormat f = fmt(ToolFormat::Hermes, true);
  check(f,
        "<think>\nThe user wants weather.\nCall the tool.\n</think>\n\n<tool_call>\n{\"name\": \"w\", \"arguments\": "
        "{\"c\": \"X\"}}\n</tool_call>",
        R("", {{"w", R"({"c": "X"})"}}, "The user wants weather.\nCall the tool."));
  // A <tool_call> inside the thinking is thinking.
  check(f, "<think>maybe <tool_call>{\"name\": \"x\"}</tool_call></think>Answer.",
        R("Answer.", {}, "maybe <tool_call>{\"name\": \"x\"}</tool_call>"));
}

TEST(ChatOutput, Reasoning) {
  const OutputFormat f = fmt(ToolFormat::None, true);
  check(f, "<think>\nStep 1.  \n\nStep 2.\n</think>\n\nThe answer is 4.", R("The answer is 4.", {}, "Step 1.  \n\nStep 2."));
  check(f, "No thinking here.", R("No thinking here."));
  check(f, "  <thin", R("  <thin"));
  check(f, "<think>\n\n</think>\n\nOK", R("OK"));  // enable_thinking false writes an empty one
  check(f, "<think>cut short by max_tok", R("", {}, "cut short by max_tok"));
  // DeepSeek-R1's prompt opens the thinking: the output starts inside it.
  check(fmt(ToolFormat::None, true, true), "hmm, 2+2.\n</think>\n\n4", R("4", {}, "hmm, 2+2."));
}

TEST(ChatOutput, Llama3Json) {
  const OutputFormat f = fmt(ToolFormat::Llama3);
  check(f, "{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\"}}",
        R("", {{"get_weather", R"({"location": "Paris"})"}}));
  check(f, "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"x\": 1}}; {\"name\": \"b\", \"parameters\": {}}",
        R("", {{"a", R"({"x": 1})"}, {"b", "{}"}}));
  check(f, "The weather is fine.", R("The weather is fine."));
  check(f, "{not a call}", R("{not a call}"));
}

// A JSON answer is not a call unless it names one of the request's tools; then it
// streams as content from the moment that is certain.
TEST(ChatOutput, OnlyTheRequestsToolsAreCalls) {
  OutputFormat f = fmt(ToolFormat::Json);
  f.tool_names = {"get_weather"};
  check(f, R"({"name": "Alice", "age": 30})", R(R"({"name": "Alice", "age": 30})"));
  check(f, R"({"city": "Paris", "name": "get_weather"})", R(R"({"city": "Paris", "name": "get_weather"})"));
  check(f, R"([{"name": "get_weather", "parameters": {"city": "Oslo"}}])", R("", {{"get_weather", R"({"city": "Oslo"})"}}));
  ChatOutputParser p(f);
  EXPECT_EQ(p.feed(R"({"name": "Alice", "ag)").content, R"({"name": "Alice", "ag)") << "streams once the name says it";
  OutputFormat h = fmt(ToolFormat::Hermes);
  h.tool_names = {"get_weather"};
  check(h, "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>",
        R("<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>"));
  OutputFormat m = fmt(ToolFormat::Mistral);
  check(m, "[TOOL_CALLS][1, 2] and more", R("[TOOL_CALLS][1, 2] and more"));
  check(m, R"([TOOL_CALLS][{"name": "a", "arguments": {}}] then text)", R("then text", {{"a", "{}"}}));  // layout after a call dropped
  check(m, "[TOOL_CALLS]no args here", R("[TOOL_CALLS]no args here"));
}

TEST(ChatOutput, JsonRequiredForm) {
  const OutputFormat f = fmt(ToolFormat::Json);
  check(f, R"([{"name": "a", "parameters": {"x": "y"}}, {"name": "b", "parameters": {"n": -1.5e3}}])",
        R("", {{"a", R"({"x": "y"})"}, {"b", R"({"n": -1.5e3})"}}));
  check(f, R"([{"name":"a","parameters":{}}])", R("", {{"a", "{}"}}));
}

TEST(ChatOutput, NamedFunction) {
  OutputFormat f = fmt(ToolFormat::Named);
  f.named_tool = "get_weather";
  check(f, R"({"city": "Oslo"})", R("", {{"get_weather", R"({"city": "Oslo"})"}}));
}

TEST(ChatOutput, Mistral) {
  const OutputFormat f = fmt(ToolFormat::Mistral);
  check(f, R"([TOOL_CALLS][{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {"y": "z"}}])",
        R("", {{"a", R"({"x": 1})"}, {"b", R"({"y": "z"})"}}));
  check(f, R"(Sure. [TOOL_CALLS]get_weather[ARGS]{"city": "Rome"}[TOOL_CALLS]now[ARGS]{})",
        R("Sure. ", {{"get_weather", R"({"city": "Rome"})"}, {"now", "{}"}}));
  check(f, "[TOOL_CALL] is not the marker", R("[TOOL_CALL] is not the marker"));
}

TEST(ChatOutput, DeepSeek) {
  const OutputFormat f = fmt(ToolFormat::DeepSeek);
  check(f,
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"location\": "
        "\"Tokyo\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>now\n```json\n{}\n```"
        "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        R("", {{"get_weather", R"({"location": "Tokyo"})"}, {"now", "{}"}}));
  // V3.1: name<sep>arguments.
  check(f, "Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Lima\"}"
           "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        R("Checking.", {{"get_weather", R"({"city": "Lima"})"}}));
}

TEST(ChatOutput, Harmony) {
  const OutputFormat f = fmt(ToolFormat::Harmony, true);
  check(f,
        "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
        "to=functions.get_weather <|constrain|>json<|message|>{\"location\": \"SF\"}",
        R("", {{"get_weather", R"({"location": "SF"})"}}, "Need the weather."));
  check(f, "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>It is 4.",
        R("It is 4.", {}, "Easy."));
  check(f, "<|start|>assistant to=functions.lookup<|channel|>commentary json<|message|>{\"q\": 1}<|call|>",
        R("", {{"lookup", R"({"q": 1})"}}));
}

TEST(ChatOutput, CallIdsAreUnique) {
  const Result r = run(fmt(ToolFormat::Json), {R"([{"name": "a", "parameters": {}}, {"name": "a", "parameters": {}}])"});
  ASSERT_EQ(r.ids.size(), 2u);
  EXPECT_NE(r.ids[0], r.ids[1]);
  EXPECT_TRUE(r.ids[0].starts_with("call_"));
  EXPECT_EQ(r.ids[0].size(), 29u);
}

TEST(ChatOutput, DetectsTheTemplatesFormat) {
  EXPECT_EQ(detect_tool_format("{{- '<tool_call>\\n' }}"), ToolFormat::Hermes);
  EXPECT_EQ(detect_tool_format("<｜tool▁call▁begin｜>"), ToolFormat::DeepSeek);
  EXPECT_EQ(detect_tool_format("[TOOL_CALLS]"), ToolFormat::Mistral);
  EXPECT_EQ(detect_tool_format("<|python_tag|>"), ToolFormat::Llama3);
  EXPECT_EQ(detect_tool_format("<|channel|>x<|message|>"), ToolFormat::Harmony);
  EXPECT_EQ(detect_tool_format("{% for m in messages %}{{ m.content }}{% endfor %}"), ToolFormat::Json);
  for (const char* n : {"hermes", "llama3_json", "mistral", "deepseek_v3", "openai", "json"})
    EXPECT_EQ(tool_format_name(tool_format_from_name(n)), std::string(n));
  EXPECT_EQ(tool_format_from_name("nope"), ToolFormat::None);
}

// The schema a "required" choice holds the output to, for the parser above to read.
TEST(ChatOutput, RequiredSchemaIsVllmsForm) {
  const nlohmann::json body = nlohmann::json::parse(R"({"tools": [
      {"type": "function", "function": {"name": "a", "parameters": {"type": "object", "properties": {"x": {"type": "string"}}}}},
      {"type": "function", "function": {"name": "b"}}], "tool_choice": "required", "parallel_tool_calls": false})");
  const ToolsRequest t = parse_tools(body, nullptr);
  const nlohmann::ordered_json s = tool_call_schema(t);
  EXPECT_EQ(s["type"], "array");
  EXPECT_EQ(s["maxItems"], 1);
  EXPECT_EQ(s["items"]["anyOf"][0]["properties"]["name"]["const"], "a");
  EXPECT_EQ(s["items"]["anyOf"][1]["properties"]["parameters"]["type"], "object");
}

}  // namespace
}  // namespace ridge::server
