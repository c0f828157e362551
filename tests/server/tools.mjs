// Tool calling and reasoning output end to end, through the official openai client.
// usage: node tests/server/tools.mjs --url http://127.0.0.1:PORT --model NAME
// The server runs random weights over the Qwen3 vocabulary with Qwen3's own chat template
// (it renders tools and writes <tool_call> calls; it thinks in <think>). Random weights
// call no tool of their own accord, so the calls here come from tool_choice "required" or
// a named function (the output held to vLLM's call form by the grammar) and the thinking
// from a guided_regex that spells it; the parsers' formats are tests/unit/test_chat_output.
import Ajv2020 from "ajv/dist/2020.js";
import OpenAI from "openai";
import { assert, options, raw, run, test } from "./lib.mjs";

const o = options(["url", "model"]);
const client = new OpenAI({ baseURL: `${o.url}/v1`, apiKey: "unused", maxRetries: 0, timeout: 120000 });
const MODEL = o.model;
const ajv = new Ajv2020({ strict: false });

const WEATHER = {
  type: "object",
  properties: { city: { type: "string", maxLength: 16 }, unit: { enum: ["c", "f"] } },
  required: ["city", "unit"],
};
const TIME = { type: "object", properties: { zone: { type: "string", maxLength: 8 } }, required: ["zone"] };
const tools = [
  { type: "function", function: { name: "get_weather", description: "The weather in a city", parameters: WEATHER } },
  { type: "function", function: { name: "get_time", description: "The time in a zone", parameters: TIME } },
];
const schemaOf = { get_weather: ajv.compile(WEATHER), get_time: ajv.compile(TIME) };
const ask = [{ role: "user", content: "What is the weather in Paris?" }];

function checkCalls(calls, where) {
  assert.ok(calls?.length >= 1, `${where}: at least one call`);
  for (const c of calls) {
    assert.equal(c.type, "function");
    assert.match(c.id, /^call_[0-9a-f]{24}$/, `${where}: id`);
    assert.ok(schemaOf[c.function.name], `${where}: a known tool, got ${c.function.name}`);
    const args = JSON.parse(c.function.arguments);
    assert.ok(schemaOf[c.function.name](args), `${where}: ${c.function.arguments} does not validate`);
  }
}

test("tool_choice required: every call parses and validates, non-streamed, n = 3 and sampled", async () => {
  for (let seed = 0; seed < 4; ++seed) {
    const r = await client.chat.completions.create({
      model: MODEL, messages: ask, tools, tool_choice: "required", max_tokens: 1500, temperature: 1, seed, n: 3,
    });
    for (const ch of r.choices) {
      // Sampling random weights, a list of calls may run past max_tokens: then all calls
      // but the cut one must still be whole.
      const calls = ch.message.tool_calls;
      assert.equal(ch.message.content, null);
      if (ch.finish_reason === "length") checkCalls(calls.slice(0, -1), `seed ${seed} choice ${ch.index}, cut`);
      else checkCalls(calls, `seed ${seed} choice ${ch.index}`);
      assert.equal(ch.finish_reason, calls.length < 20 ? "tool_calls" : ch.finish_reason, `seed ${seed}`);
    }
  }
});

test("parallel_tool_calls false: exactly one call; a named function: that one, its arguments", async () => {
  const one = await client.chat.completions.create({
    model: MODEL, messages: ask, tools, tool_choice: "required", parallel_tool_calls: false, max_tokens: 160, temperature: 0,
  });
  assert.equal(one.choices[0].message.tool_calls.length, 1);
  checkCalls(one.choices[0].message.tool_calls, "parallel false");
  const named = await client.chat.completions.create({
    model: MODEL, messages: ask, tools, tool_choice: { type: "function", function: { name: "get_time" } },
    max_tokens: 120, temperature: 0,
  });
  const calls = named.choices[0].message.tool_calls;
  assert.equal(calls.length, 1);
  assert.equal(calls[0].function.name, "get_time");
  checkCalls(calls, "named");
});

test("streamed calls: the client's tool-call events, arguments in many deltas, equal to the non-streamed reply", async () => {
  const body = { model: MODEL, messages: ask, tools, tool_choice: "required", max_tokens: 160, temperature: 0 };
  const whole = await client.chat.completions.create(body);
  const stream = client.chat.completions.stream(body);
  let deltas = 0;
  const done = [];
  stream.on("tool_calls.function.arguments.delta", () => ++deltas);
  stream.on("tool_calls.function.arguments.done", (e) => done.push(e));
  const final = await stream.finalChatCompletion();
  const calls = final.choices[0].message.tool_calls;
  checkCalls(calls, "stream");
  assert.equal(final.choices[0].finish_reason, "tool_calls");
  assert.ok(deltas > calls.length, `arguments arrive in pieces (${deltas} deltas for ${calls.length} calls)`);
  assert.equal(done.length, calls.length, "one done event per call");
  const strip = (cs) => cs.map((c) => [c.function.name, c.function.arguments]);
  assert.deepEqual(strip(calls), strip(whole.choices[0].message.tool_calls), "stream = non-stream (greedy)");
  for (let i = 0; i < done.length; ++i) assert.equal(done[i].arguments, calls[i].function.arguments);
});

test("runTools runs a two-step tool conversation: calls, results back as tool messages, calls again", async () => {
  const seen = [];
  const fn = (name) => ({
    type: "function",
    function: {
      name, description: tools.find((t) => t.function.name === name).function.description,
      parameters: tools.find((t) => t.function.name === name).function.parameters,
      function: (args) => {
        seen.push([name, args]);
        return name === "get_weather" ? { temperature: 21 } : "12:00";
      },
      parse: JSON.parse,
    },
  });
  const runner = client.chat.completions.runTools(
    { model: MODEL, messages: ask, tools: [fn("get_weather"), fn("get_time")], tool_choice: "required",
      max_tokens: 160, temperature: 0 },
    { maxChatCompletions: 2 });
  await runner.done();
  const msgs = runner.messages;
  const completions = runner.allChatCompletions();
  assert.equal(completions.length, 2, "two completions");
  const toolMsgs = msgs.filter((m) => m.role === "tool");
  assert.ok(seen.length >= 2 && toolMsgs.length === seen.length, "every call ran and answered");
  for (const [name, args] of seen) assert.ok(schemaOf[name](args), `${name} got valid arguments`);
  // The second request carried the first's calls and results: its prompt is longer.
  assert.ok(completions[1].usage.prompt_tokens > completions[0].usage.prompt_tokens + 10);
  // A named choice: one call, then the runner stops.
  const named = client.chat.completions.runTools(
    { model: MODEL, messages: ask, tools: [fn("get_weather")], tool_choice: { type: "function", function: { name: "get_weather" } },
      max_tokens: 120, temperature: 0 });
  await named.done();
  assert.equal(named.allChatCompletions().length, 1);
});

test("after the tool results, tool_choice none answers in content; tool messages need their id", async () => {
  const first = await client.chat.completions.create({
    model: MODEL, messages: ask, tools, tool_choice: "required", parallel_tool_calls: false, max_tokens: 160, temperature: 0,
  });
  const call = first.choices[0].message.tool_calls[0];
  const messages = [...ask, first.choices[0].message, { role: "tool", tool_call_id: call.id, content: "{\"t\": 21}" }];
  const second = await client.chat.completions.create({ model: MODEL, messages, tools, tool_choice: "none", max_tokens: 8, temperature: 0 });
  const m = second.choices[0].message;
  assert.equal(m.tool_calls, undefined);
  assert.equal(typeof m.content, "string");
  assert.equal(second.choices[0].finish_reason, "length");
  const bad = await raw(`${o.url}/v1/chat/completions`, {
    method: "POST", body: { model: MODEL, messages: [...ask, first.choices[0].message, { role: "tool", content: "x" }] } });
  assert.equal(bad.status, 400);
  assert.equal(JSON.parse(bad.text).error.param, "messages[2].tool_call_id");
  const missing = await raw(`${o.url}/v1/chat/completions`, {
    method: "POST", body: { model: MODEL, messages: ask, tools, tool_choice: { type: "function", function: { name: "nope" } } } });
  assert.equal(missing.status, 400);
  assert.equal(JSON.parse(missing.text).error.param, "tool_choice.function.name");
});

test("the Vercel AI SDK's request shape (plain JSON schemas with $schema, additionalProperties false)", async () => {
  const parameters = {
    $schema: "http://json-schema.org/draft-07/schema#", type: "object",
    properties: { city: { type: "string", maxLength: 12 } }, required: ["city"], additionalProperties: false,
  };
  const r = await raw(`${o.url}/v1/chat/completions`, {
    method: "POST",
    body: {
      model: MODEL, messages: [{ role: "system", content: "Be brief." }, ...ask], max_tokens: 100, temperature: 0,
      tools: [{ type: "function", function: { name: "weather", description: "Get the weather", parameters } }],
      tool_choice: "required",
    },
  });
  assert.equal(r.status, 200, r.text);
  const calls = JSON.parse(r.text).choices[0].message.tool_calls;
  assert.equal(calls[0].function.name, "weather");
  const { $schema, ...plain } = parameters;  // ajv's 2020-12 build does not know draft-07's URI
  assert.ok(ajv.compile(plain)(JSON.parse(calls[0].function.arguments)));
});

test("reasoning: <think> goes to reasoning_content, streamed (delta.reasoning_content) and not", async () => {
  const body = {
    model: MODEL, messages: [{ role: "user", content: "2+2?" }], max_tokens: 60, temperature: 0,
    guided_regex: "<think>\\n[a-z]{2,8}( [a-z]{2,8}){1,3}\\n</think>\\n\\n[a-z]{2,8}( [a-z]{2,8}){0,2}",
  };
  const r = await client.chat.completions.create(body);
  const m = r.choices[0].message;
  assert.match(m.reasoning_content, /^[a-z]+( [a-z]+)+$/, "the thinking, without its tags and layout");
  assert.match(m.content, /^[a-z]+( [a-z]+)*$/, "the answer alone");
  let reasoning = "", content = "";
  for await (const ch of await client.chat.completions.create({ ...body, stream: true })) {
    const d = ch.choices[0]?.delta ?? {};
    reasoning += d.reasoning_content ?? "";
    content += d.content ?? "";
  }
  assert.equal(reasoning, m.reasoning_content);
  assert.equal(content, m.content);
  // enable_thinking false: the template writes an empty thinking block into the prompt.
  const on = await client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: 1 });
  const off = await client.chat.completions.create({
    model: MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: 1, chat_template_kwargs: { enable_thinking: false } });
  assert.ok(off.usage.prompt_tokens > on.usage.prompt_tokens, "enable_thinking reaches the template");
});

test("thinking_budget: after that many thinking tokens the close is forced, and the answer follows", async () => {
  // A bias makes the model write <think> (id 151667) at every step: the first opens the
  // thinking, the next 5 are its budget, then `\n</think>\n\n` is forced, then the answer.
  const body = { model: MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: 12, temperature: 0,
    logit_bias: { 151667: 100 }, thinking_budget: 5 };
  const r = await client.chat.completions.create(body);
  const m = r.choices[0].message;
  assert.equal(m.reasoning_content, "<think>".repeat(5));
  assert.equal(m.content, "<think>".repeat(3));
  assert.equal(r.usage.completion_tokens, 12);
  const unlimited = await client.chat.completions.create({ ...body, thinking_budget: -1 });
  assert.equal(unlimited.choices[0].message.reasoning_content, "<think>".repeat(11));
  assert.equal(unlimited.choices[0].message.content, null);
  const bad = await raw(`${o.url}/v1/chat/completions`, { method: "POST", body: { ...body, thinking_budget: "x" } });
  assert.equal(bad.status, 400);
  assert.equal(JSON.parse(bad.text).error.param, "thinking_budget");
});

await run("tools");
