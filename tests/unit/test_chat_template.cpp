// Chat templates: the interpreter against expectations recorded from @huggingface/jinja
// 0.5.11 (the reference ridge reproduces byte for byte), errors with positions, and real
// model templates rendered through the public API. The full templates x conversations
// byte-identity run needs node: tests/chat/run_chat_tests.sh.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "gguf/gguf.h"
#include "test_util.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/jinja/interpreter.h"

namespace {

using ojson = nlohmann::ordered_json;

std::string render(const std::string& src) {
  ojson ctx = {{"messages", ojson::array()}};
  return ridge::render_template(src, ctx);
}

// Expected outputs were produced by `new Template(src).render({messages: []})` with
// @huggingface/jinja 0.5.11; they pin the JavaScript behaviours (number printing, ==,
// strip() ignoring its argument, whitespace rules) that a Python-Jinja port would miss.
struct Case {
  const char* name;
  const char* src;
  const char* expected;
};
const Case kCases[] = {
    {"int_arith", R"J({{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 3 ** 2 }})J", R"J(7 9 3 -4 1 -1 64)J"},
    {"float_format", R"J({{ 7 / 2 }} {{ 4 / 2 }} {{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1.5 * 2 }} {{ 2 ** -2 }})J", R"J(3.5 2.0 1.0 0.30000000000000004 3.0 0.25)J"},
    {"js_concat", R"J({{ 'a' ~ 1 ~ 2.0 ~ true }} {{ 'x' + 2.5 }} {{ [1, 'a'] ~ '' }} {{ 'n' ~ {'a': 1} }})J", R"J(a12true x2.5 1,a n[object Map])J"},
    {"comparisons", R"J({{ 1 == 1.0 }} {{ '1' == 1 }} {{ true == 1 }} {{ none == undefined_thing }} {{ [1] == [1] }} {{ 2 > 1 and 1 >= 1 }} {{ 1 != 2 }})J", R"J(true true true true false true true)J"},
    {"membership", R"J({{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ '2' in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }} {{ 1 in undefined_thing }})J", R"J(true true false true true false)J"},
    {"logic", R"J({{ 0 or '' or 'x' }} {{ 1 and [] }} {{ not none }} {{ 'a' if 0 else 'b' }} {{ 'only' if true }}[{{ 'only' if false }}])J", R"J(x [] true b only[])J"},
    {"print_values", R"J({{ none }}|{{ undefined_thing }}|{{ true }}|{{ [1, 'two', none, 3.0] }}|{{ {'a': {'b': [true]}} }})J", R"J(||true|[1, "two", null, 3]|{"a": {"b": [true]}})J"},
    {"string_methods", R"J({{ '  Hi There  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ 'hello world'.title() }}|{{ 'hELLO'.capitalize() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a-b-c'.split('-', 1) }}|{{ 'aaa'.replace('a', 'b', 2) }}|{{ 'abc'.upper() }}{{ 'ABC'.lower() }}|{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }})J", R"J(Hi There|xxhixx|Hello World|HELLO|["a", "b", "", "c"]|["a", "b"]|["a", "b-c"]|bba|ABCabc|truetrue)J"},
    {"slicing", R"J({{ 'hello'[1:3] }} {{ 'hello'[::-1] }} {{ [1, 2, 3, 4][1:] }} {{ [1, 2, 3, 4][:-1] }} {{ [1, 2, 3, 4][::2] }} {{ 'hello'[-1] }} {{ [1, 2][5] is undefined }})J", R"J(el olleh [2, 3, 4] [1, 2, 3] [1, 3] o true)J"},
    {"filters_basic", R"J({{ '  t  ' | trim }}|{{ 'abc' | upper }}|{{ 'ABC' | lower }}|{{ 'ab cd' | title }}|{{ 'ab' | capitalize }}|{{ [3, 1, 2] | length }}|{{ 'héllo' | length }}|{{ [1, 2] | first }}{{ [1, 2] | last }}|{{ [1, 2, 1] | unique | join(',') }}|{{ [1, 2] | reverse | join }}|{{ ['b', 'A', 'c'] | sort | join }})J", R"J(t|ABC|abc|Ab Cd|Ab|3|5|12|1,2|21|Abc)J"},
    {"filters_numbers", R"J({{ -3 | abs }} {{ 3.9 | int }} {{ -3.9 | int }} {{ '12abc' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ ' 2.5e1z' | float }} {{ 3 | float }} {{ 3 | string }} {{ 2.0 | string }})J", R"J(3 3 -4 12 0 7 25.0 3.0 3 2.0)J"},
    {"filters_default", R"J({{ missing | default('d') }}|{{ none | default('d') }}|{{ '' | default('d', true) }}|{{ 0 | default('d', boolean=true) }}|{{ 'v' | default('d') }})J", R"J(d||d|d|v)J"},
    {"filters_collections", R"J({% set users = [{'name': 'a', 'role': 'admin', 'info': {'age': 3}}, {'name': 'b', 'role': 'user'}, {'name': 'c', 'role': 'admin'}] %}{{ users | selectattr('role', 'equalto', 'admin') | map(attribute='name') | join(',') }}|{{ users | rejectattr('role', 'equalto', 'admin') | map(attribute='name') | join }}|{{ users | selectattr('info', 'defined') | length }}|{{ users | map(attribute='info.age', default=0) | join(',') }}|{{ users | sort(attribute='name', reverse=true) | map(attribute='name') | join }})J", R"J(a,c|b|1|3,0,0|cba)J"},
    {"filters_dict", R"J({% set d = {'b': 1, 'a': 2} %}{% for k, v in d | items %}{{ k }}{{ v }}{% endfor %}|{% for k, v in d | dictsort %}{{ k }}{% endfor %}|{{ d.keys() | join }}{{ d.values() | join }}|{{ d.get('a') }}{{ d.get('x', 'none') }}{{ d.get('x') is none }}|{{ d | length }}|{% for k in d %}{{ k }}{% endfor %})J", R"J(b1a2|ab|ba12|2nonetrue|2|ba)J"},
    {"tojson", R"J({{ {'s': 'q"\\ \n\t\u0001é', 'n': [1, 2.5, none, true], 'e': {}, 'l': []} | tojson }})J", R"J({"s": "q\"\\ \n\t\u0001é", "n": [1, 2.5, null, true], "e": {}, "l": []})J"},
    {"tojson_indent", R"J({{ {'a': [1, {'b': []}], 'c': {}} | tojson(indent=2) }})J", R"J({
  "a": [
    1,
    {
      "b": []
    }
  ],
  "c": {}
})J"},
    {"tojson_options", R"J({{ {'b': 'é', 'a': 1} | tojson(ensure_ascii=true, sort_keys=true) }} {{ [1, 2] | tojson(separators=(',', ':')) }} {{ 'x' | tojson(indent=0) }})J", R"J({"a": 1, "b": "\u00e9"} [1,2] "x")J"},
    {"indent", R"J({{ 'a\nb\n\nc' | indent }}|{{ 'a\nb' | indent(2, true) }}|{{ 'a\n\nb' | indent(width=1, blank=true) }})J", R"J(a
    b

    c|  a
  b|a
 
 b)J"},
    {"loop_vars", R"J({% for x in ['a', 'b', 'c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem | default('-') }}{{ loop.nextitem | default('-') }};{% endfor %})J", R"J(1032truefalse3-b;2121falsefalse3ac;3210falsetrue3b-;)J"},
    {"loop_else_filter", R"J({% for x in [] %}x{% else %}empty{% endfor %}|{% for x in [1, 2, 3, 4] if x is even %}{{ x }}{{ loop.length }}{% endfor %}|{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %})J", R"J(empty|2242|37)J"},
    {"loop_break_continue", R"J({% for i in range(10) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 4 %}{% break %}{% endif %}{{ i }}{% endfor %})J", R"J(023)J"},
    {"loop_scope", R"J({% set x = 'outer' %}{% for i in [1] %}{% set x = 'inner' %}{{ x }}{% endfor %}{{ x }}{% if true %}{% set y = 'if-sets-outer' %}{% endif %}{{ y }})J", R"J(innerouterif-sets-outer)J"},
    {"namespace", R"J({% set ns = namespace(n=0, items=[]) %}{% for i in range(3) %}{% set ns.n = ns.n + i %}{% set ns.items = ns.items + [i] %}{% endfor %}{{ ns.n }} {{ ns.items }} {{ namespace({'a': 1}, b=2).b }})J", R"J(3 [0, 1, 2] 2)J"},
    {"set_forms", R"J({% set a, b = 1, 2 %}{{ a }}{{ b }}{% set block %}  body {{ a }}  {% endset %}[{{ block }}])J", R"J(12[  body 1  ])J"},
    {"macro_call", R"J({% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', punct='?') }} {% macro box() %}[{{ caller() }}]{% endmacro %}{% call box() %}inside{% endcall %}{% macro va() %}{{ varargs | length }}{{ kwargs | length }}{% endmacro %}{{ va(1, 2, k=3) }})J", R"J(Hi Ann! Hi Bob? [inside]21)J"},
    {"filter_block", R"J({% filter upper %}shout {{ 'this' }}{% endfilter %})J", R"J(SHOUT THIS)J"},
    {"ws_control", R"J(a  {{- ' b ' -}}  c
  {%- if true -%}
  d
  {%- endif %}
  e)J", R"J(a b cd  e)J"},
    {"trim_lstrip_blocks", R"J(line1
    {% if true %}
    kept
    {% endif %}
line2
{# comment #}
after
)J", R"J(line1
    kept
line2
after)J"},
    {"comment_ws", R"J(x  {#- c -#}  y {# plain #} z)J", R"J(xy  z)J"},
    {"raw_text_braces", R"J({{ '{{' }} { not a tag } %} }})J", R"J({{ { not a tag } %} }})J"},
    {"unicode_ws", R"J({{- '\u00a0x\u3000' | trim -}}|{{ '\u2003y'.lstrip() }})J", R"J(x|y)J"},
    {"tests", R"J({{ 1 is odd }}{{ 2 is even }}{{ 'a' is string }}{{ 1.5 is number }}{{ 1 is integer }}{{ 1.5 is integer }}{{ [] is sequence }}{{ {} is iterable }}{{ (1, 2) is iterable }}{{ none is none }}{{ x is not defined }}{{ true is true }}{{ 0 is false }}{{ 'ab' is lower }}{{ range is callable }}{{ {} is mapping }})J", R"J(truetruetruetruetruefalsetruefalsefalsetruetruetruefalsetruetruetrue)J"},
};

TEST(ChatTemplate, MatchesReferenceRenders) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(render(c.src), c.expected);
  }
}

// The message of an error thrown while rendering (or parsing), "" if none.
std::string error_of(const std::string& src) {
  try {
    render(src);
  } catch (const ridge::Error& e) {
    return e.what();
  }
  return "";
}

TEST(ChatTemplate, ErrorsNameLineAndColumn) {
  std::string e = error_of("ok\n  {% include 'x.jinja' %}");
  EXPECT_NE(e.find("line 2, column 6"), std::string::npos) << e;
  EXPECT_NE(e.find("unsupported statement 'include'"), std::string::npos) << e;
  e = error_of("{% for m in messages %}\n{% if m %}x{% endfor %}");
  EXPECT_NE(e.find("line"), std::string::npos) << e;
  e = error_of("{% if true %}never closed");
  EXPECT_NE(e.find("line 1, column 1"), std::string::npos) << e;
  EXPECT_NE(e.find("'if' block is never closed"), std::string::npos) << e;
  e = error_of("a\nb {{ 'x' | nosuch }}");
  EXPECT_NE(e.find("line 2, column 10"), std::string::npos) << e;
  EXPECT_NE(e.find("Unknown StringValue filter: nosuch"), std::string::npos) << e;
  e = error_of("{{ x + 1 }}");
  EXPECT_NE(e.find("Cannot perform operation + on undefined values"), std::string::npos) << e;
  e = error_of("{{ 1 @ 2 }}");
  EXPECT_NE(e.find("line 1, column 6"), std::string::npos) << e;
  EXPECT_NE(e.find("unexpected character '@'"), std::string::npos) << e;
  e = error_of("{{ 'unterminated }}");
  EXPECT_NE(e.find("line 1"), std::string::npos) << e;
  e = error_of("{{ [1] | round }}");  // not a filter of the reference either
  EXPECT_NE(e.find("Unknown ArrayValue filter: round"), std::string::npos) << e;
}

TEST(ChatTemplate, RaiseExceptionCarriesTheTemplatesMessage) {
  std::string e = error_of("{% if true %}\n  {{ raise_exception('Roles must alternate') }}\n{% endif %}");
  EXPECT_NE(e.find("chat template error: Roles must alternate"), std::string::npos) << e;
  EXPECT_NE(e.find("line 2"), std::string::npos) << e;
}

TEST(ChatTemplate, HostileTemplatesFailCleanly) {
  std::string deep = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_NE(error_of(deep).find("nested too deeply"), std::string::npos);
  EXPECT_NE(error_of("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").find("recursion too deep"), std::string::npos);
  EXPECT_NE(error_of("{% break %}").find("outside of a loop"), std::string::npos);
  EXPECT_NE(error_of("{{ 9223372036854775807 + 1 }}").find("overflow"), std::string::npos);
  EXPECT_NE(error_of("{{ range(1000000000) | length }}").find("too long"), std::string::npos);
  for (const char* s : {"{{", "{%", "{{ x", "{% for %}", "{% if %}", "{#", "{{ [1, }}", "{{ {'a' }}", "{{ a.( }}",
                        "{% set %}", "{% macro %}", "{{ 'a' is }}", "{{ x | }}", "{{ f(a=1, 2) }}", "}}", "%}"}) {
    SCOPED_TRACE(s);
    try {
      render(s);
    } catch (const ridge::Error&) {
    }
  }
}

const char* kLlama3 =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{{ '<|start_header_id|>assistant"
    "<|end_header_id|>\n\n' }}";

TEST(ChatTemplate, RenderChatLlama3) {
  ojson msgs = ojson::parse(R"([{"role": "system", "content": "You are a helpful assistant."},
                                {"role": "user", "content": "Hello! How are you?"}])");
  ridge::ChatOptions o;
  o.bos_token = "<|begin_of_text|>";
  EXPECT_EQ(ridge::render_chat(kLlama3, msgs, o),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHello! How are you?<|eot_id|><|start_header_id|>assistant"
            "<|end_header_id|>\n\n");
}

TEST(ChatTemplate, ToolsKeepKeyOrderAndExtraVars) {
  // JSON key order reaches the prompt through tojson: insertion order, except that
  // array-index keys come first, as JavaScript objects enumerate them.
  ojson tools = ojson::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"z": 1, "2": true, "a": 2.5}}}])");
  ojson vars = ojson::parse(R"({"enable_thinking": false})");
  ridge::ChatOptions o;
  o.tools = &tools;
  o.extra = &vars;
  o.add_generation_prompt = false;
  const char* tpl = "{% for t in tools %}{{ t | tojson }}{% endfor %}|{{ enable_thinking is false }}|{{ add_generation_prompt }}";
  EXPECT_EQ(ridge::render_chat(tpl, ojson::array(), o),
            R"({"type": "function", "function": {"name": "f", "parameters": {"2": true, "z": 1, "a": 2.5}}}|true|false)");
  o.tools = nullptr;
  EXPECT_EQ(ridge::render_chat("{{ tools is defined }}", ojson::array(), o), "false");
}

TEST(ChatTemplate, ConfigStringAndNamedTemplates) {
  const auto dir = std::filesystem::temp_directory_path() / "ridge_chat_template_test";
  std::filesystem::create_directories(dir);
  const std::string a = (dir / "a.json").string(), b = (dir / "b.json").string(), c = (dir / "c.json").string();
  std::ofstream(a) << R"({"chat_template": "{{ bos_token }}A", "bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>"})";
  std::ofstream(b) << R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})";
  std::ofstream(c) << R"({"bos_token": "<s>"})";
  EXPECT_EQ(ridge::chat_template_from_config(a), "{{ bos_token }}A");
  EXPECT_EQ(ridge::config_special_token(a, "bos_token"), "<s>");
  EXPECT_EQ(ridge::config_special_token(a, "eos_token"), "</s>");
  EXPECT_EQ(ridge::chat_template_from_config(b), "D");
  EXPECT_THROW(ridge::chat_template_from_config(c), ridge::Error);
  std::filesystem::remove_all(dir);
}

TEST(ChatTemplate, Phi3FromVocabGguf) {
  RIDGE_REQUIRE_SHARED(path, "vocab/ggml-vocab-phi-3.gguf");
  auto f = ridge::gguf::File::open(path);
  ridge::ChatOptions o;
  o.bos_token = ridge::gguf_special_token(*f, "tokenizer.ggml.bos_token_id");
  o.eos_token = ridge::gguf_special_token(*f, "tokenizer.ggml.eos_token_id");
  EXPECT_EQ(o.bos_token, "<s>");
  ojson msgs = ojson::parse(R"([{"role": "user", "content": "Hi there"},
    {"role": "assistant", "content": "Hello! How can I help you today?"}, {"role": "user", "content": "Tell me a joke."}])");
  // As rendered by @huggingface/jinja from the same GGUF's tokenizer.chat_template.
  EXPECT_EQ(ridge::render_chat(ridge::chat_template_from_gguf(*f), msgs, o),
            "<s><|user|>\nHi there<|end|>\n<|assistant|>\nHello! How can I help you today?<|end|>\n<|user|>\n"
            "Tell me a joke.<|end|>\n<|assistant|>\n");
}

}  // namespace
