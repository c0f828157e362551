// End-to-end tests of `ridge serve` through the official openai client (and raw fetch
// where the client hides the wire: malformed JSON, 413, bytes of the SSE stream).
// usage: node tests/server/e2e.mjs --url http://127.0.0.1:PORT --key KEY --model NAME
//          --greedy stories260K.greedy.tsv --spm-url http://127.0.0.1:PORT2 --spm-model NAME2
//          --body-limit BYTES --queue-url http://127.0.0.1:PORT3
// --url serves stories260K (context 128) with --api-key KEY and a --chat-template of the
// form <|role|>content\n...<|assistant|>; --spm-url serves a random-weight model over the
// Llama 2 SentencePiece vocabulary (byte-fallback tokens <0xNN>), without an API key;
// --queue-url serves the same model as --spm-model with --max-num-seqs 1 --max-waiting 2.
// The --url server's KV cache is small (1M: about 100 blocks of 16), so a large n preempts.
import fs from "node:fs";
import Ajv2020 from "ajv/dist/2020.js";
import OpenAI from "openai";
import { SKIP, assert, assertWellFormed, checkIdleKv, metrics as metricsOf, options, postJson, raw, run, sse, test, waitIdle }
  from "./lib.mjs";

const o = options(["url", "key", "model", "greedy", "spm-url", "spm-model", "body-limit", "queue-url"]);
const client = new OpenAI({ baseURL: `${o.url}/v1`, apiKey: o.key, maxRetries: 0, timeout: 60000 });
const spm = new OpenAI({ baseURL: `${o["spm-url"]}/v1`, apiKey: "unused", maxRetries: 0, timeout: 60000 });
const MODEL = o.model, SPM = o["spm-model"];
const AUTH = { authorization: `Bearer ${o.key}` };
const CTX = 128;  // stories260K's context

const greedy = async (prompt, max_tokens, extra = {}) =>
  client.completions.create({ model: MODEL, prompt, max_tokens, temperature: 0, ...extra });

// Streams with the client; returns the per-choice concatenated text, finish reasons, the
// chunks and the usage chunk (if any).
async function streamCompletion(c, body) {
  const chunks = [];
  for await (const ch of await c.completions.create({ ...body, stream: true })) chunks.push(ch);
  return collect(chunks, false);
}
async function streamChat(c, body) {
  const chunks = [];
  for await (const ch of await c.chat.completions.create({ ...body, stream: true })) chunks.push(ch);
  return collect(chunks, true);
}
function collect(chunks, chat) {
  const text = [], finish = [], roles = [], lp = [];
  let usage = null;
  for (const ch of chunks) {
    if (ch.usage) {
      assert.equal(usage, null, "one usage chunk");
      usage = ch.usage;
      assert.deepEqual(ch.choices, [], "the usage chunk has no choices");
      continue;
    }
    assert.equal(ch.choices.length, 1, "a chunk carries one choice");
    const c = ch.choices[0];
    const i = c.index;
    assert.equal(finish[i] ?? null, null, `choice ${i}: nothing after its finish_reason`);
    text[i] ??= "";
    lp[i] ??= [];
    const piece = chat ? c.delta?.content ?? "" : c.text;
    assertWellFormed(piece, "chunk text");
    text[i] += piece;
    if (chat && c.delta?.role) roles[i] = c.delta.role;
    if (c.logprobs) lp[i].push(c.logprobs);
    finish[i] = c.finish_reason ?? null;
  }
  return { text, finish, roles, usage, chunks, lp };
}

const tokenize = async (body) => {
  const r = await postJson(`${o.url}/tokenize`, body);
  assert.equal(r.status, 200, JSON.stringify(r.json));
  return r.json;
};

// ---------------------------------------------------------------- plumbing

test("GET /health is 200", async () => {
  const r = await raw(`${o.url}/health`);
  assert.equal(r.status, 200);
});

test("models.list() names the served model", async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m);
  assert.equal(ids.length, 1);
  assert.equal(ids[0].id, MODEL);
  assert.equal(ids[0].object, "model");
  assert.equal(ids[0].max_model_len, CTX);
});

test("/tokenize and /detokenize round trip", async () => {
  for (const text of ["Once upon a time there was a cat.", "Lily and Ben\nwent to the park!", "a"]) {
    const t = await tokenize({ prompt: text });
    assert.equal(t.count, t.tokens.length);
    assert.equal(t.max_model_len, CTX);
    assert.equal(t.tokens[0], 1, "BOS first");
    const bare = await tokenize({ prompt: text, add_special_tokens: false });
    assert.deepEqual(bare.tokens, t.tokens.slice(1), "add_special_tokens: false drops only BOS");
    const d = await postJson(`${o.url}/detokenize`, { tokens: bare.tokens });
    assert.equal(d.status, 200);
    assert.equal(d.json.prompt, text);
  }
  const bad = await postJson(`${o.url}/detokenize`, { tokens: [1, 99999] });
  assert.equal(bad.status, 400);
  assert.equal(typeof bad.json.error.message, "string");
});

test("/metrics is Prometheus text with the model label", async () => {
  const r = await raw(`${o.url}/metrics`);
  assert.equal(r.status, 200);
  assert.match(r.headers.get("content-type"), /^text\/plain/);
  for (const n of ["num_requests_running", "num_requests_waiting", "num_requests_peak", "kv_cache_usage_perc",
                   "kv_blocks_total", "engine_invariant_checks_total"])
    assert.ok(r.text.includes(`ridge:${n}{model_name="${MODEL}"}`), `ridge:${n}`);
  assert.ok(r.text.includes("# TYPE ridge:time_to_first_token_seconds histogram"));
});

// ---------------------------------------------------------------- generation

test("greedy completions equal stories260K.greedy.tsv", async () => {
  const lines = fs.readFileSync(o.greedy, "utf8").split("\n").filter((l) => l);
  assert.ok(lines.length > 0);
  for (const line of lines) {
    const [prompt, n, expected] = line.split("\t");
    const want = expected.replaceAll("\\n", "\n");
    const count = (await tokenize({ prompt })).count;
    if (count + Number(n) > CTX) continue;
    const r = await greedy(prompt, Number(n));
    assert.equal(r.choices[0].text, want, `prompt ${JSON.stringify(prompt)} n ${n}`);
    const u = r.usage;
    assert.equal(u.prompt_tokens, count);
    assert.ok(u.completion_tokens <= Number(n));
    assert.equal(r.choices[0].finish_reason, u.completion_tokens < Number(n) ? "stop" : "length");
  }
});

test("completions: stream deltas concatenate to the non-stream text (temperature 0)", async () => {
  for (const [prompt, n] of [["Once upon a time", 60], ["Tom had a big red", 40], ["Mom said", 100]]) {
    const full = await greedy(prompt, n);
    const s = await streamCompletion(client, { model: MODEL, prompt, max_tokens: n, temperature: 0 });
    assert.equal(s.text.length, 1);
    assert.equal(s.text[0], full.choices[0].text, prompt);
    assert.equal(s.finish[0], full.choices[0].finish_reason);
    assert.equal(s.usage, null, "no usage chunk unless asked");
    for (const ch of s.chunks) assert.equal(ch.object, "text_completion");
    assert.equal(new Set(s.chunks.map((c) => c.id)).size, 1, "one id for the whole stream");
  }
});

test("chat: non-stream and stream agree; the stream opens with the assistant role", async () => {
  const messages = [{ role: "system", content: "You tell stories." }, { role: "user", content: "Tell me about a cat." }];
  const full = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 50, temperature: 0 });
  assert.equal(full.object, "chat.completion");
  assert.equal(full.choices.length, 1);
  assert.equal(full.choices[0].message.role, "assistant");
  assert.equal(typeof full.choices[0].message.content, "string");
  assert.ok(["stop", "length"].includes(full.choices[0].finish_reason));
  const s = await streamChat(client, { model: MODEL, messages, max_tokens: 50, temperature: 0 });
  assert.equal(s.roles[0], "assistant");
  assert.equal(s.text[0], full.choices[0].message.content);
  assert.equal(s.finish[0], full.choices[0].finish_reason);
  for (const ch of s.chunks) assert.equal(ch.object, "chat.completion.chunk");
  // max_completion_tokens is the newer name of max_tokens.
  const mct = await client.chat.completions.create({ model: MODEL, messages, max_completion_tokens: 7, temperature: 0,
                                                     ignore_eos: true });
  assert.equal(mct.usage.completion_tokens, 7);
});

test("chat: prompt_tokens equals /tokenize of the messages", async () => {
  const messages = [{ role: "user", content: "Hi there" }, { role: "assistant", content: "Hello" },
                    { role: "user", content: [{ type: "text", text: "Tell " }, { type: "text", text: "a story" }] }];
  const t = await tokenize({ messages });
  const r = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 5, temperature: 0, ignore_eos: true });
  assert.equal(r.usage.prompt_tokens, t.count);
  assert.equal(r.usage.completion_tokens, 5);
  assert.equal(r.usage.total_tokens, t.count + 5);
});

// Greedy text and its tokens (completions logprobs give the token pieces).
async function greedyTokens(prompt, n) {
  const r = await greedy(prompt, n, { logprobs: 0 });
  const toks = r.choices[0].logprobs.tokens;
  assert.equal(toks.join(""), r.choices[0].text);
  return { text: r.choices[0].text, toks };
}

test("stop strings: single-token, spanning tokens, lists; never in the output", async () => {
  const prompt = "Once upon a time";
  const { text, toks } = await greedyTokens(prompt, 64);
  // A stop that spans a token boundary: the end of one token and the start of the next.
  let span = null;
  for (let k = 5; k + 1 < toks.length && !span; ++k)
    if (toks[k].length >= 2 && toks[k + 1].length >= 2 && /^[ -~]+$/.test(toks[k] + toks[k + 1]))
      span = toks[k].slice(-2) + toks[k + 1].slice(0, 2);
  assert.ok(span, "found a boundary to span");
  assert.ok(!toks.some((t) => t.includes(span)), `the stop ${JSON.stringify(span)} lies inside one token`);
  console.log(`     spanning stop ${JSON.stringify(span)}`);
  const cases = [[span], [" little"], ["zzz-not-there", "ball"], ["girl", "Lily"], ["\n"]];
  for (const stop of cases) {
    const idx = Math.min(...stop.map((s) => (text.indexOf(s) < 0 ? Infinity : text.indexOf(s))));
    const want = idx === Infinity ? text : text.slice(0, idx);
    const reason = idx === Infinity ? "length" : "stop";
    const r = await greedy(prompt, 64, { stop });
    assert.equal(r.choices[0].text, want, `stop ${JSON.stringify(stop)}`);
    assert.equal(r.choices[0].finish_reason, reason, `stop ${JSON.stringify(stop)}`);
    for (const s of stop) assert.ok(!r.choices[0].text.includes(s));
    const st = await streamCompletion(client, { model: MODEL, prompt, max_tokens: 64, temperature: 0, stop });
    assert.equal(st.text[0], want, `streamed, stop ${JSON.stringify(stop)}`);
    assert.equal(st.finish[0], reason);
    for (const ch of st.chunks) for (const s of stop) assert.ok(!ch.choices[0].text.includes(s), "a chunk holds the stop");
  }
  // A stop whose start ends the output but which never completes: the held-back text is
  // released when generation ends (length), streamed or not.
  const short = (await greedy(prompt, 10)).choices[0].text;
  const held = [short.slice(-2) + "QQ", short.slice(-1) + "\u00e9"];
  const hr = await greedy(prompt, 10, { stop: held });
  assert.equal(hr.choices[0].text, short);
  assert.equal(hr.choices[0].finish_reason, "length");
  const hs = await streamCompletion(client, { model: MODEL, prompt, max_tokens: 10, temperature: 0, stop: held });
  assert.equal(hs.text[0], short);
  // A stop inside the echoed prompt does not apply to the prompt.
  const es = await greedy(prompt, 8, { echo: true, stop: ["upon"] });
  assert.ok(es.choices[0].text.startsWith(prompt));
  // A stop string as a plain string, and on chat.
  const r = await greedy(prompt, 64, { stop: span });
  assert.equal(r.choices[0].finish_reason, "stop");
  const messages = [{ role: "user", content: "Tell me a story." }];
  const chatFull = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 60, temperature: 0, ignore_eos: true });
  const ct = chatFull.choices[0].message.content;
  const cstop = ct.slice(10, 13);
  const cs = await streamChat(client, { model: MODEL, messages, max_tokens: 60, temperature: 0, ignore_eos: true, stop: [cstop] });
  assert.equal(cs.text[0], ct.slice(0, ct.indexOf(cstop)));
  assert.equal(cs.finish[0], "stop");
});

test("n=2: two choices, indexes 0 and 1, stream and not", async () => {
  const r = await client.completions.create({ model: MODEL, prompt: "Lily and Ben", max_tokens: 20, n: 2, seed: 7,
                                             ignore_eos: true });
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
  assert.equal(r.usage.completion_tokens, 40);
  const s = await streamCompletion(client, { model: MODEL, prompt: "Lily and Ben", max_tokens: 20, n: 2, seed: 7,
                                             ignore_eos: true, stream_options: { include_usage: true } });
  assert.equal(s.text.length, 2);
  assert.deepEqual(s.finish, ["length", "length"]);
  assert.deepEqual(s.text, r.choices.map((c) => c.text), "seeded n=2 streams the same two texts");
  assert.equal(s.usage.completion_tokens, 40);
  const c = await client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: 8, n: 2 });
  assert.deepEqual(c.choices.map((x) => x.index), [0, 1]);
  // Several prompts: prompt-major choices.
  const m = await client.completions.create({ model: MODEL, prompt: ["Once upon a time", "Mom said"], max_tokens: 4,
                                             temperature: 0, n: 2, ignore_eos: true });
  assert.deepEqual(m.choices.map((x) => x.index), [0, 1, 2, 3]);
  const a = await greedy("Once upon a time", 4, { ignore_eos: true }), b = await greedy("Mom said", 4, { ignore_eos: true });
  assert.deepEqual(m.choices.map((x) => x.text), [a, a, b, b].map((x) => x.choices[0].text));
});

test("prompt as token ids and as a list of token-id lists", async () => {
  const t = await tokenize({ prompt: "Once upon a time" });
  const byText = await greedy("Once upon a time", 12);
  const byIds = await greedy(t.tokens, 12);
  assert.equal(byIds.choices[0].text, byText.choices[0].text);
  assert.equal(byIds.usage.prompt_tokens, t.count);
  const two = await greedy([t.tokens, t.tokens.slice(0, 3)], 5, { ignore_eos: true });
  assert.equal(two.choices.length, 2);
  assert.equal(two.choices[0].text, byText.choices[0].text.slice(0, two.choices[0].text.length));
  assert.equal(two.usage.prompt_tokens, t.count + 3);
});

test("completions logprobs=3: parallel lists, values <= 0, top >= chosen", async () => {
  for (const stream of [false, true]) {
    const body = { model: MODEL, prompt: "The sun was shining and", max_tokens: 24, temperature: 0.8, seed: 3, logprobs: 3,
                   ignore_eos: true };
    let text, lp, n;
    if (!stream) {
      const r = await client.completions.create(body);
      text = r.choices[0].text;
      lp = r.choices[0].logprobs;
      n = r.usage.completion_tokens;
    } else {
      const s = await streamCompletion(client, { ...body, stream_options: { include_usage: true } });
      text = s.text[0];
      n = s.usage.completion_tokens;
      lp = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
      for (const l of s.lp[0]) for (const k of Object.keys(lp)) lp[k].push(...l[k]);
    }
    assert.equal(n, 24);
    for (const k of ["tokens", "token_logprobs", "top_logprobs", "text_offset"]) assert.equal(lp[k].length, n, k);
    assert.equal(lp.tokens.join(""), text);
    let off = 0;
    for (let i = 0; i < n; ++i) {
      assert.ok(lp.token_logprobs[i] <= 0, `token_logprobs[${i}] = ${lp.token_logprobs[i]}`);
      const top = Object.entries(lp.top_logprobs[i]);
      assert.ok(top.length >= 1 && top.length <= 4, `top_logprobs[${i}] has ${top.length}`);
      for (const [, v] of top) assert.ok(v <= 0);
      assert.ok(Math.max(...top.map(([, v]) => v)) >= lp.token_logprobs[i] - 1e-6, `top >= chosen at ${i}`);
      assert.ok(lp.tokens[i] in lp.top_logprobs[i], "the chosen token is among the top entries");
      assert.equal(lp.text_offset[i], off, `text_offset[${i}]`);
      off += Buffer.byteLength(lp.tokens[i]);
    }
  }
  // Greedy: the chosen token is the top one.
  const g = await greedy("Once upon a time", 10, { logprobs: 2 });
  const l = g.choices[0].logprobs;
  for (let i = 0; i < l.tokens.length; ++i)
    assert.ok(Math.abs(Math.max(...Object.values(l.top_logprobs[i])) - l.token_logprobs[i]) < 1e-5);
});

test("chat logprobs + top_logprobs=2: content entries with token/logprob/bytes/top_logprobs", async () => {
  const messages = [{ role: "user", content: "Tell me about a dog." }];
  const body = { model: MODEL, messages, max_tokens: 16, logprobs: true, top_logprobs: 2, seed: 11, ignore_eos: true };
  const r = await client.chat.completions.create(body);
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, r.usage.completion_tokens);
  let joined = "";
  for (const e of content) {
    assert.equal(typeof e.token, "string");
    assert.ok(e.logprob <= 0);
    assert.ok(Array.isArray(e.bytes) && e.bytes.every((b) => Number.isInteger(b) && b >= 0 && b < 256));
    assert.equal(Buffer.from(e.bytes).toString("utf8"), e.token);
    assert.equal(e.top_logprobs.length, 2);
    for (const t of e.top_logprobs) {
      assert.equal(typeof t.token, "string");
      assert.ok(t.logprob <= 0);
      assert.ok(Array.isArray(t.bytes));
    }
    assert.ok(e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob);
    assert.ok(e.top_logprobs[0].logprob >= e.logprob - 1e-6);
    joined += e.token;
  }
  assert.equal(joined, r.choices[0].message.content);
  const s = await streamChat(client, body);
  assert.equal(s.text[0], r.choices[0].message.content, "seeded stream equals non-stream");
  const streamed = s.lp[0].flatMap((l) => l.content);
  assert.deepEqual(streamed.map((e) => e.token), content.map((e) => e.token));
});

test("seed: same seed + temperature 1 gives the same text, alone or among concurrent requests", async () => {
  const body = { model: MODEL, prompt: "One day, a little bird", max_tokens: 60, temperature: 1, seed: 424242 };
  const a = await client.completions.create(body);
  const b = await client.completions.create(body);
  assert.equal(b.choices[0].text, a.choices[0].text);
  const other = [];
  for (let i = 0; i < 8; ++i)
    other.push(client.completions.create({ model: MODEL, prompt: ["Lily", "The cat", "Tom", "Once"][i % 4] + " " + i,
                                           max_tokens: 100, temperature: 1, ignore_eos: true }));
  const c = client.completions.create(body);
  const chatBody = { model: MODEL, messages: [{ role: "user", content: "A story" }], max_tokens: 40, seed: 99 };
  const d0 = await client.chat.completions.create(chatBody);
  const [cr, d1] = await Promise.all([c, client.chat.completions.create(chatBody), ...other]);
  assert.equal(cr.choices[0].text, a.choices[0].text, "same seed under concurrency");
  assert.equal(d1.choices[0].message.content, d0.choices[0].message.content, "chat, same seed under concurrency");
  // Different seeds: not all the same text.
  const texts = new Set();
  for (const seed of [1, 2, 3]) texts.add((await client.completions.create({ ...body, seed })).choices[0].text);
  assert.ok(texts.size > 1, "three seeds gave the same text");
});

test("usage: prompt_tokens = /tokenize count, completion = max_tokens with ignore_eos, total = sum", async () => {
  const prompt = "Once upon a time, in a big forest, there lived a small fox.";
  const t = await tokenize({ prompt });
  const r = await client.completions.create({ model: MODEL, prompt, max_tokens: 30, ignore_eos: true });
  assert.equal(r.usage.prompt_tokens, t.count);
  assert.equal(r.usage.completion_tokens, 30);
  assert.equal(r.usage.total_tokens, t.count + 30);
  assert.equal(r.choices[0].finish_reason, "length");
  const s = await streamCompletion(client, { model: MODEL, prompt, max_tokens: 30, ignore_eos: true,
                                             stream_options: { include_usage: true } });
  assert.ok(s.usage, "a final usage chunk");
  assert.equal(s.chunks.at(-1).usage, s.usage, "usage comes last");
  for (const ch of s.chunks.slice(0, -1)) assert.equal(ch.usage, null, "usage: null on the other chunks");
  assert.deepEqual([s.usage.prompt_tokens, s.usage.completion_tokens, s.usage.total_tokens], [t.count, 30, t.count + 30]);
  const c = await streamChat(client, { model: MODEL, messages: [{ role: "user", content: "hello" }], max_tokens: 9,
                                       ignore_eos: true, stream_options: { include_usage: true } });
  assert.equal(c.usage.completion_tokens, 9);
  assert.equal(c.usage.prompt_tokens, (await tokenize({ messages: [{ role: "user", content: "hello" }] })).count);
  // max_tokens 0: nothing generated.
  const z = await client.completions.create({ model: MODEL, prompt, max_tokens: 0 });
  assert.equal(z.usage.completion_tokens, 0);
  assert.equal(z.choices[0].text, "");
});

test("prefix cache: a repeated long prompt reports cached_tokens", async () => {
  const prompt = `Zed the ${Date.now() % 1000} zebra liked to run fast. He ran to the big tree and saw a red bird. The bird said hello to him.`;
  const t = await tokenize({ prompt });
  assert.ok(t.count > 32 && t.count + 8 <= CTX, `prompt of ${t.count} tokens`);
  const first = await client.completions.create({ model: MODEL, prompt, max_tokens: 8, temperature: 0 });
  assert.equal(first.usage.prompt_tokens_details?.cached_tokens ?? 0, 0, "a new prompt has nothing cached");
  const second = await client.completions.create({ model: MODEL, prompt, max_tokens: 8, temperature: 0 });
  const cached = second.usage.prompt_tokens_details?.cached_tokens;
  assert.ok(cached > 0 && cached < t.count, `cached_tokens ${cached} of ${t.count}`);
  assert.equal(cached % 16, 0, "whole blocks");
  assert.equal(second.choices[0].text, first.choices[0].text, "the cache does not change greedy output");
  const s = await streamCompletion(client, { model: MODEL, prompt, max_tokens: 8, temperature: 0,
                                             stream_options: { include_usage: true } });
  assert.ok(s.usage.prompt_tokens_details.cached_tokens > 0, "streamed usage reports the cache too");
});

test("echo: the prompt comes first, stream and not", async () => {
  const prompt = "Once upon a time";
  const plain = await greedy(prompt, 10);
  const e = await greedy(prompt, 10, { echo: true });
  assert.equal(e.choices[0].text, prompt + plain.choices[0].text);
  const s = await streamCompletion(client, { model: MODEL, prompt, max_tokens: 10, temperature: 0, echo: true });
  assert.equal(s.text[0], prompt + plain.choices[0].text);
  const z = await greedy(prompt, 0, { echo: true });
  assert.equal(z.choices[0].text, prompt);
});

test("logit_bias: +100 forces a token at temperature 0; -100 bans the greedy one", async () => {
  const id = (await tokenize({ prompt: " cat", add_special_tokens: false })).tokens.at(-1);
  const piece = (await greedy([1, id], 1, { echo: false, logprobs: 0, logit_bias: { [id]: 100 } })).choices[0].logprobs.tokens[0];
  const r = await greedy("Once upon a time", 6, { logit_bias: { [String(id)]: 100 }, logprobs: 0, ignore_eos: true });
  assert.deepEqual(r.choices[0].logprobs.tokens, Array(6).fill(piece));
  assert.equal(r.choices[0].text, piece.repeat(6));
  const c = await client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "x" }], max_tokens: 3,
                                                   temperature: 0, logit_bias: { [id]: 100 }, ignore_eos: true });
  assert.equal(c.choices[0].message.content, piece.repeat(3));
  const g = await greedyTokens("Once upon a time", 1);
  const gid = (await tokenize({ prompt: "Once upon a time" + g.text })).tokens.at(-1);
  const banned = await greedy("Once upon a time", 1, { logit_bias: { [gid]: -100 }, logprobs: 0 });
  assert.notEqual(banned.choices[0].logprobs.tokens[0], g.toks[0]);
});

test("preemption: n=48 seeded choices through a small KV cache equal the same seeds alone", async () => {
  const body = { model: MODEL, prompt: "Once upon a time", max_tokens: 118, ignore_eos: true, temperature: 1, seed: 5000 };
  const before = await metricsOf(o.url);
  const big = await client.completions.create({ ...body, n: 48, ridge_timings: true });
  assert.equal(big.choices.length, 48);
  assert.equal(big.usage.completion_tokens, 48 * 118);
  // Attribution: every choice rode prefill and decode steps; preempted choices recomputed.
  const t = big.ridge_timings;
  assert.ok(t && t.queued_ms >= 0 && t.choices.length === 48, "ridge_timings with every choice");
  for (const c of t.choices) {
    assert.ok(c.prefill_ms > 0 && c.decode_ms > 0 && c.recompute_ms >= 0, JSON.stringify(c));
    assert.equal(c.generated_tokens, 118);
    if (c.preemptions === 0) assert.equal(c.recompute_ms, 0, "recompute only after a preemption");
  }
  assert.ok(t.choices.some((c) => c.preemptions > 0 && c.recompute_ms > 0), "some choice was preempted and recomputed");
  const m = await metricsOf(o.url);
  assert.ok(m.get("ridge:request_recompute_time_seconds_sum") > 0, "recompute time on /metrics");
  assert.ok(m.get("ridge:request_preemptions_count") >= 48);
  const after = await metricsOf(o.url);
  console.log(`     ${after.get("ridge:num_preemptions_total") - before.get("ridge:num_preemptions_total")} preemptions`);
  // Choice k uses seed + k: the same text as a request with that seed alone.
  for (const k of [0, 1, 17, 33, 47]) {
    const one = await client.completions.create({ ...body, seed: 5000 + k });
    assert.equal(big.choices[k].text, one.choices[0].text, `choice ${k}`);
  }
  checkIdleKv(await waitIdle(o.url));
});

test("speculative: per-request prompt lookup, suffix decoding and draft model change no token, logprob or finish; counted on /metrics", async () => {
  // Every proposed token verified (adaptive: false): how much the adaptive policy
  // speculates depends on measured step times, and this model's steps are too short for
  // speculation to pay, so it would rarely run.
  const specs = [{ method: "ngram", num_speculative_tokens: 5, prompt_lookup_min: 1, adaptive: false },
                 { method: "suffix", num_speculative_tokens: 5, adaptive: false },
                 { method: "draft", num_speculative_tokens: 4, adaptive: false }];  // the server's --draft-model
  const spec = specs[0];
  const before = await metricsOf(o.url);
  const bodies = [
    { prompt: "Once upon a time", max_tokens: 100, temperature: 0 },
    { prompt: "Tom had a big red ball. Tom had a big red", max_tokens: 60, temperature: 0, logprobs: 2 },
    { prompt: "Lily and Ben", max_tokens: 80, temperature: 1, seed: 77, frequency_penalty: 0.3 },
    { prompt: "Mom said", max_tokens: 100, temperature: 0, stop: [" the park", "!"] },
  ];
  for (const [i, b] of bodies.entries()) for (const spec of specs) {
    const body = { model: MODEL, ...b };
    const plain = await client.completions.create({ ...body, speculative: false });
    const sp = await client.completions.create({ ...body, speculative: spec, ridge_timings: true });
    const what = `${JSON.stringify(b)} ${spec.method}`;
    assert.equal(sp.choices[0].text, plain.choices[0].text, what);
    assert.equal(sp.choices[0].finish_reason, plain.choices[0].finish_reason, what);
    // (not cached_tokens: the second request of a pair finds the first's prompt cached)
    assert.equal(sp.usage.prompt_tokens, plain.usage.prompt_tokens, what);
    assert.equal(sp.usage.completion_tokens, plain.usage.completion_tokens, what);
    if (b.logprobs) assert.deepEqual(sp.choices[0].logprobs, plain.choices[0].logprobs, what);
    if (i % 2 == 0 || spec.method == "draft") {
      const st = await streamCompletion(client, { ...body, speculative: spec });
      assert.equal(st.text[0], plain.choices[0].text, `${what} (stream)`);
    }
  }
  const after = await metricsOf(o.url);
  const d = (n) => after.get(n) - before.get(n);
  assert.ok(d("ridge:spec_decode_num_draft_tokens_total") > 0, "drafts were proposed");
  assert.ok(d("ridge:spec_decode_num_accepted_tokens_total") > 0, "drafts were accepted");
  assert.ok(d("ridge:spec_decode_num_accepted_tokens_total") <= d("ridge:spec_decode_num_draft_tokens_total"));
  const t = (await client.completions.create({ model: MODEL, prompt: "Once upon a time", max_tokens: 60, temperature: 0,
                                               speculative: spec, ridge_timings: true })).ridge_timings;
  const c = t.choices[0].speculative;
  assert.ok(c && c.draft_tokens > 0 && c.accepted_tokens >= 0 && c.acceptance_rate <= 1, JSON.stringify(t));
  for (const [bad, param] of [[{ method: "eagle" }, "speculative.method"], [{ k: 3 }, "speculative.k"],
                              [{ num_speculative_tokens: 0 }, "speculative.num_speculative_tokens"], ["yes", "speculative"],
                              [{ adaptive: 1 }, "speculative.adaptive"]]) {
    const r = await postJson(`${o.url}/v1/completions`, { model: MODEL, prompt: "x", max_tokens: 1, speculative: bad }, AUTH);
    assert.equal(r.status, 400, JSON.stringify(bad));
    assert.equal(r.json.error.param, param, JSON.stringify(r.json));
  }
  // A server without a draft model refuses the draft method, naming it.
  const r = await postJson(`${o["spm-url"]}/v1/completions`,
                           { model: o["spm-model"], prompt: "x", max_tokens: 1, speculative: { method: "draft" } });
  assert.equal(r.status, 400, JSON.stringify(r.json));
  assert.equal(r.json.error.param, "speculative.method");
  assert.match(r.json.error.message, /draft model/);
  checkIdleKv(await waitIdle(o.url));
});

// Structured output. The schemas bound their documents (every string, number and array
// has a most length), so a grammar-held generation always completes: finish_reason stop.
const ajv = new Ajv2020({ strict: false });
// RFC 3339 full-date, except that ridge's grammar allows February 29 in every year.
ajv.addFormat("date", (d) => {
  const m = /^(\d{4})-(\d{2})-(\d{2})$/.exec(d);
  return !!m && +m[2] >= 1 && +m[2] <= 12 && +m[3] >= 1 && +m[3] <= [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][+m[2] - 1];
});
const PERSON = { type: "object", additionalProperties: false, required: ["name", "age", "mood"],
                 properties: { name: { type: "string", maxLength: 8 }, age: { type: "integer", minimum: 0, maximum: 99 },
                               mood: { enum: ["happy", "sad"] } } };
const SCHEMAS = [
  PERSON,
  { type: "array", items: { type: "integer", minimum: -9, maximum: 9 }, minItems: 1, maxItems: 4 },
  { $defs: { pt: { type: "object", properties: { x: { type: "integer", minimum: 0, maximum: 9 }, y: { type: ["boolean", "null"] } },
                   required: ["x"], additionalProperties: false } },
    type: "object", properties: { pts: { type: "array", items: { $ref: "#/$defs/pt" }, maxItems: 2 }, kind: { const: "pts" } },
    required: ["kind", "pts"], additionalProperties: false },
  { type: "object", properties: { day: { type: "string", format: "date" }, code: { type: "string", pattern: "^[A-Z]{2}[0-9]$" } },
    required: ["day", "code"], additionalProperties: false },
  { anyOf: [{ type: "boolean" }, { enum: ["one", 2, null] }, { type: "string", minLength: 1, maxLength: 3 }] },
];

test("structured output: the client's parse helper, streams, n, guided fields; every output validates (ajv 2020-12)", async () => {
  const validate = ajv.compile(PERSON);
  const before = await metricsOf(o.url);
  for (const temperature of [0, 1]) {
    const r = await client.chat.completions.parse({
      model: MODEL, messages: [{ role: "user", content: "Tell me about Tim." }], max_tokens: 90, temperature, seed: 3,
      response_format: { type: "json_schema", json_schema: { name: "person", strict: true, schema: PERSON } } });
    const m = r.choices[0].message;
    assert.equal(r.choices[0].finish_reason, "stop", m.content);
    assert.ok(validate(m.parsed), `${JSON.stringify(validate.errors)} ${m.content}`);
    // The same request streamed gives the same text.
    const st = await streamChat(client, { model: MODEL, messages: [{ role: "user", content: "Tell me about Tim." }],
                                          max_tokens: 90, temperature, seed: 3,
                                          response_format: { type: "json_schema", json_schema: { name: "person", schema: PERSON } } });
    assert.equal(st.text[0], m.content);
  }
  // n = 3 seeded choices of a completion, each its own document.
  const many = await client.completions.create({ model: MODEL, prompt: "Once upon a time", max_tokens: 100, temperature: 1,
                                                 seed: 11, n: 3, guided_json: SCHEMAS[2] });
  const v2 = ajv.compile(SCHEMAS[2]);
  for (const c of many.choices) {
    assert.equal(c.finish_reason, "stop", c.text);
    assert.ok(v2(JSON.parse(c.text)), `${JSON.stringify(v2.errors)} ${c.text}`);
  }
  const choice = await client.completions.create({ model: MODEL, prompt: "The cat was", max_tokens: 10, temperature: 1, seed: 4,
                                                   guided_choice: ["happy", "sad", "very sleepy"] });
  assert.ok(["happy", "sad", "very sleepy"].includes(choice.choices[0].text), choice.choices[0].text);
  const rx = await client.completions.create({ model: MODEL, prompt: "Call me at", max_tokens: 20, temperature: 1, seed: 5,
                                               guided_regex: "[0-9]{3}-[0-9]{4}" });
  assert.match(rx.choices[0].text, /^[0-9]{3}-[0-9]{4}$/);
  assert.equal(rx.choices[0].finish_reason, "stop");
  const gb = await client.completions.create({ model: MODEL, prompt: "Is it", max_tokens: 5, temperature: 0,
                                               guided_grammar: 'root ::= ("yes" | "no") "!"' });
  assert.match(gb.choices[0].text, /^(yes|no)!$/);
  // json_object: stream and non-stream agree; a finished one is one JSON object.
  const jo = { model: MODEL, prompt: "{", max_tokens: 60, temperature: 0.7, seed: 8, response_format: { type: "json_object" } };
  const full = await client.completions.create(jo);
  const s = await streamCompletion(client, jo);
  assert.equal(s.text[0], full.choices[0].text);
  if (full.choices[0].finish_reason === "stop") assert.equal(typeof JSON.parse(full.choices[0].text), "object");
  for (const [body, param, re] of [
    [{ response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "array", uniqueItems: true } } } },
     "response_format.json_schema.schema", /uniqueItems/],
    [{ guided_regex: "a(?=b)" }, "guided_regex", /lookaround/],
    [{ guided_grammar: "root ::= r\nr ::= r \"x\"" }, "guided_grammar", /left-recursive/],
    [{ guided_json: PERSON, guided_choice: ["a"] }, "guided_choice", /at most one/],
  ]) {
    const r = await postJson(`${o.url}/v1/completions`, { model: MODEL, prompt: "x", max_tokens: 5, ...body }, AUTH);
    assert.equal(r.status, 400, JSON.stringify(r.json));
    assert.equal(r.json.error.param, param);
    assert.match(r.json.error.message, re);
  }
  // The person schema was sent four times: compiled once, then served from the cache.
  const after = await metricsOf(o.url);
  const d = (n) => after.get(n) - before.get(n);
  assert.ok(d("ridge:grammar_compiled_total") >= 5, `${d("ridge:grammar_compiled_total")} compiled`);
  assert.ok(d("ridge:grammar_cache_hits_total") >= 3, `${d("ridge:grammar_cache_hits_total")} hits`);
  assert.ok(d("ridge:grammar_compile_seconds_total") > 0);
  assert.ok(d("ridge:grammar_tokens_total") > 0 && d("ridge:grammar_mask_seconds_total") > 0);
  assert.ok(d("ridge:grammar_jump_forward_tokens_total") >= d("ridge:grammar_jump_forward_accepted_tokens_total"));
  checkIdleKv(await waitIdle(o.url));
});

test("structured output on a random model over a 32000-token vocabulary: every schema's outputs validate (ajv)", async () => {
  for (const [i, schema] of SCHEMAS.entries()) {
    const validate = ajv.compile(schema);
    await Promise.all([1, 2, 3].map(async (seed) => {
      const r = await spm.completions.create({ model: SPM, prompt: "Hello", max_tokens: 200, temperature: 1, seed,
                                               response_format: { type: "json_schema", json_schema: { name: `s${i}`, schema } } });
      const t = r.choices[0].text;
      assert.equal(r.choices[0].finish_reason, "stop", `schema ${i} seed ${seed}: ${t}`);
      assert.ok(validate(JSON.parse(t)), `schema ${i} seed ${seed}: ${JSON.stringify(validate.errors)} ${t}`);
    }));
  }
});

test("queue full: 503 with Retry-After, then the queue drains", async () => {
  const q = new OpenAI({ baseURL: `${o["queue-url"]}/v1`, apiKey: "unused", maxRetries: 0 });
  const wait = async (pred) => {
    for (let i = 0; i < 600 && !pred(await metricsOf(o["queue-url"])); ++i) await new Promise((r) => setTimeout(r, 50));
  };
  // One running job that would take minutes (128 choices through one sequence slot),
  // then two waiting ones: the queue (--max-waiting 2) is full.
  const acs = [];
  const open = async (n) => {
    const ac = new AbortController();
    acs.push(ac);
    const s = await q.completions.create({ model: SPM, prompt: "queue", n, max_tokens: 200, ignore_eos: true, stream: true },
                                         { signal: ac.signal });
    const it = s[Symbol.asyncIterator]();
    return { ac, drain: (async () => { try { while (!(await it.next()).done); } catch {} })() };
  };
  try {
    const running = await open(128);
    await wait((m) => m.get("ridge:num_requests_running") === 1);
    const w1 = await open(1), w2 = await open(1);
    await wait((m) => m.get("ridge:num_requests_waiting") === 2);
    const m = await metricsOf(o["queue-url"]);
    assert.equal(m.get("ridge:num_requests_running"), 1);
    assert.equal(m.get("ridge:num_requests_waiting"), 2);
    for (const stream of [false, true]) {
      const err = await rejects(q.completions.create({ model: SPM, prompt: "x", max_tokens: 2, stream }), OpenAI.APIError, 503);
      assert.equal(err.headers.get("retry-after"), "1");
    }
    const r = await raw(`${o["queue-url"]}/v1/completions`, { method: "POST", body: { prompt: "x" } });
    assert.equal(r.status, 503);
    assert.equal(JSON.parse(r.text).error.code, 503);
    for (const x of [running, w1, w2]) x.ac.abort();
    await Promise.all([running, w1, w2].map((x) => x.drain));
  } finally {
    for (const ac of acs) ac.abort();  // never leave the long job running
  }
  checkIdleKv(await waitIdle(o["queue-url"]));
  const ok = await q.completions.create({ model: SPM, prompt: "x", max_tokens: 2, ignore_eos: true });
  assert.equal(ok.usage.completion_tokens, 2);
});

// ---------------------------------------------------------------- errors

async function rejects(promise, Cls, status, check) {
  let err = null;
  try {
    await promise;
  } catch (e) {
    err = e;
  }
  assert.ok(err, `expected ${Cls.name}, got success`);
  assert.ok(err instanceof Cls, `expected ${Cls.name}, got ${err?.constructor?.name}: ${err?.message}`);
  assert.equal(err.status, status);
  assert.equal(typeof err.error?.message, "string", "an OpenAI-shaped error body");
  if (check) check(err);
  return err;
}

test("errors as the client surfaces them", async () => {
  const base = { model: MODEL, prompt: "Once", max_tokens: 4 };
  let e = await rejects(client.completions.create({ ...base, temperature: -1 }), OpenAI.BadRequestError, 400);
  assert.equal(e.error.param, "temperature");
  await rejects(client.completions.create({ ...base, temperature: 1e9 }), OpenAI.BadRequestError, 400);
  await rejects(client.completions.create({ ...base, top_p: 2 }), OpenAI.BadRequestError, 400);
  await rejects(client.completions.create({ ...base, max_tokens: -1 }), OpenAI.BadRequestError, 400);
  await rejects(client.completions.create({ ...base, n: 100000 }), OpenAI.BadRequestError, 400);
  await rejects(client.completions.create({ ...base, temperature: "hot" }), OpenAI.BadRequestError, 400);
  await rejects(client.completions.create({ ...base, stop: 5 }), OpenAI.BadRequestError, 400);
  await rejects(client.completions.create({ ...base, logit_bias: { 99999: 1 } }), OpenAI.BadRequestError, 400);
  await rejects(client.completions.create({ ...base, prompt: [1, 100000] }), OpenAI.BadRequestError, 400);
  e = await rejects(client.completions.create({ ...base, model: "no-such-model" }), OpenAI.NotFoundError, 404);
  assert.match(e.message, /no-such-model/);
  await rejects(client.chat.completions.create({ model: "no-such-model", messages: [{ role: "user", content: "x" }] }),
                OpenAI.NotFoundError, 404);
  const long = "Once upon a time there was a cat. ".repeat(20);
  e = await rejects(client.completions.create({ ...base, prompt: long }), OpenAI.BadRequestError, 400);
  assert.match(e.message, /maximum context length/);
  assert.match(e.message, new RegExp(`\\b${CTX}\\b`));
  e = await rejects(client.completions.create({ ...base, max_tokens: CTX }), OpenAI.BadRequestError, 400,
                    (x) => assert.match(x.message, /maximum context length/));
  e = await rejects(client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "hi" }],
                                                    response_format: { type: "json_schema", json_schema: { name: "x", schema: { not: {} } } } }),
                    OpenAI.BadRequestError, 400);
  assert.match(e.message, /unsupported keyword 'not'/);
  e = await rejects(client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "hi" }],
                                                    tools: [{ type: "function", function: { name: "f", parameters: { type: "string" } } }] }),
                    OpenAI.BadRequestError, 400);
  assert.match(e.message, /tools\[0\]\.function\.parameters\.type/);
  e = await rejects(client.completions.create({ ...base, suffix: "x" }), OpenAI.BadRequestError, 400);
  assert.match(e.message, /suffix/);
  e = await rejects(client.completions.create({ ...base, best_of: 2 }), OpenAI.BadRequestError, 400);
  assert.match(e.message, /best_of/);
  e = await rejects(client.completions.create({ ...base, prompt_logprobs: 99 }), OpenAI.BadRequestError, 400);
  assert.match(e.message, /prompt_logprobs/);
  await rejects(client.chat.completions.create({ model: MODEL, messages: [] }), OpenAI.BadRequestError, 400);
  await rejects(client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "x" }], top_logprobs: 2 }),
                OpenAI.BadRequestError, 400);
  // Streaming requests fail before the stream starts, with the same errors.
  await rejects(client.completions.create({ ...base, temperature: -1, stream: true }), OpenAI.BadRequestError, 400);
  const wrong = new OpenAI({ baseURL: `${o.url}/v1`, apiKey: "sk-wrong", maxRetries: 0 });
  await rejects(wrong.completions.create(base), OpenAI.AuthenticationError, 401);
  await rejects(wrong.models.list(), OpenAI.AuthenticationError, 401);
  // The server still works after all that.
  const ok = await client.completions.create(base);
  assert.equal(ok.choices.length, 1);
});

test("raw HTTP errors: malformed JSON, wrong types, 413, unknown route, missing key", async () => {
  const post = (body, extra = {}) => raw(`${o.url}/v1/completions`, { method: "POST", body, headers: { ...AUTH, ...extra } });
  const shaped = (r, status) => {
    assert.equal(r.status, status, r.text);
    const j = JSON.parse(r.text);
    assert.equal(typeof j.error.message, "string");
    assert.ok("type" in j.error && "param" in j.error && "code" in j.error, r.text);
    return j.error;
  };
  shaped(await post('{"prompt": "x", bad'), 400);
  shaped(await post("[1, 2]"), 400);
  shaped(await post(""), 400);
  shaped(await post('{"prompt": "x"'), 400);
  shaped(await post({ prompt: "x", max_tokens: "ten" }), 400);
  shaped(await post({ prompt: "x", stream: "yes" }), 400);
  shaped(await post({ prompt: "x", seed: 1.5 }), 400);
  shaped(await post({ max_tokens: 3 }), 400);
  shaped(await post(new Uint8Array([0x7b, 0x22, 0x70, 0xff, 0xfe, 0x22, 0x3a, 0x31, 0x7d])), 400);  // invalid UTF-8
  const limit = Number(o["body-limit"]);
  const big = JSON.stringify({ prompt: "a".repeat(limit + 1000) });
  shaped(await post(big), 413);
  shaped(await raw(`${o.url}/v1/completions`, { method: "POST", body: { prompt: "x" } }), 401);
  shaped(await raw(`${o.url}/v1/nope`, { headers: AUTH }), 404);
  shaped(await raw(`${o.url}/v1/completions`, { headers: AUTH }), 405);
  // Still healthy.
  assert.equal((await raw(`${o.url}/health`)).status, 200);
});

// Every numeric field against values JSON can say but a request cannot mean (beyond a
// double, beyond an int64, the wrong type): a 4xx naming the field, never a 500.
test("no malformed value is a 500; out-of-range numbers are 400s naming their field", async () => {
  const fields = ["temperature", "top_p", "top_k", "min_p", "max_tokens", "n", "seed", "presence_penalty",
                  "frequency_penalty", "repetition_penalty", "logprobs", "priority"];
  const values = ["1e400", "-1e400", "1E+999", "123456789012345678901234567890", "-9223372036854775809",
                  "1e-400", "-0", "true", "null", "[]", "{}", '"x"'];
  const post = (path, body) => raw(`${o.url}${path}`, { method: "POST", body, headers: AUTH });
  let n = 0;
  for (const f of fields)
    for (const v of values) {
      const r = await post("/v1/completions", `{"prompt": "x", "max_tokens": 2, "${f}": ${v}}`);
      assert.ok(r.status < 500, `${f}: ${v} -> ${r.status} ${r.text}`);
      if (/e\+?[0-9]{3}$/i.test(v) && !v.startsWith("1e-")) {
        assert.equal(r.status, 400, `${f}: ${v} -> ${r.text}`);
        assert.equal(JSON.parse(r.text).error.param, f, `${f}: ${v} -> ${r.text}`);
      }
      ++n;
    }
  for (const [path, body, param] of [
    ["/v1/chat/completions", '{"messages": [{"role": "user", "content": "hi", "w": 1e400}], "max_tokens": 2}', "messages[0].w"],
    ["/v1/completions", '{"prompt": [1, 2, 1e400], "max_tokens": 2}', "prompt[2]"],
    ["/v1/completions", '{"prompt": "x", "logit_bias": {"5": -1e400}}', "logit_bias.5"],
    ["/tokenize", '{"prompt": "x", "add_special_tokens": 1e400}', "add_special_tokens"],
    ["/detokenize", '{"tokens": [1, 1e400]}', "tokens[1]"],
  ]) {
    const r = await post(path, body);
    assert.equal(r.status, 400, `${path} ${body} -> ${r.text}`);
    assert.equal(JSON.parse(r.text).error.param, param, `${path} ${body} -> ${r.text}`);
    ++n;
  }
  assert.equal((await raw(`${o.url}/health`)).status, 200);
  console.log(`  ${n} bodies, none a 500`);
});

// The server refuses on Content-Length before reading the body, and drains what is still
// arriving before it closes (closing with unread bytes would reset the connection and
// destroy the 413 on its way).
test("413 reaches a client that is still sending a large body", async () => {
  const prompt = "a".repeat(4 << 20);
  for (let i = 0; i < 3; ++i) {
    await rejects(client.completions.create({ model: MODEL, prompt, max_tokens: 1 }), OpenAI.APIError, 413);
    const r = await raw(`${o.url}/v1/completions`, { method: "POST", body: { prompt }, headers: AUTH });
    assert.equal(r.status, 413);
  }
});

// ---------------------------------------------------------------- UTF-8 over byte tokens

// A random-weight model over a byte-fallback vocabulary emits <0xNN> tokens that need not
// form valid UTF-8: every chunk must still be valid JSON of well-formed text, and the
// stream must hold back an incomplete character rather than split it.
test("invalid UTF-8 never breaks a response (random model, byte-fallback vocab)", async () => {
  const url = `${o["spm-url"]}/v1/completions`;
  let fffd = 0, multibyte = 0;
  // Seeded sampling is batch-invariant, so the seeds run side by side.
  await Promise.all(Array.from({ length: 8 }, (_, i) => i + 1).map(async (seed) => {
    const body = { model: SPM, prompt: "Hello", max_tokens: 64, temperature: 1.5, seed, ignore_eos: true };
    const [full, s, w, chat] = await Promise.all([
      spm.completions.create(body),
      streamCompletion(spm, { ...body, stream_options: { include_usage: true } }),
      sse(url, { ...body, stream: true }),  // the bytes on the wire: strict UTF-8, every data line JSON
      streamChat(spm, { model: SPM, messages: [{ role: "user", content: "hi" }], max_tokens: 40, temperature: 1.5, seed,
                        logprobs: true, top_logprobs: 3 }),
    ]);
    assertWellFormed(full.choices[0].text, "non-stream text");
    assert.equal(s.text[0], full.choices[0].text, `seed ${seed}: stream == non-stream`);
    assert.equal(s.usage.completion_tokens, 64);
    assert.ok(w.done);
    assert.equal(w.data.map((d) => d.choices[0]?.text ?? "").join(""), full.choices[0].text);
    fffd += (full.choices[0].text.match(/\uFFFD/g) ?? []).length;
    multibyte += [...full.choices[0].text].filter((c) => c.codePointAt(0) > 0x7f && c !== "\uFFFD").length;
    for (const l of chat.lp[0]) for (const e of l.content) {
      assertWellFormed(e.token, "logprobs token");
      assert.ok(e.bytes.every((b) => Number.isInteger(b) && b >= 0 && b < 256));
    }
  }));
  // Forced invalid bytes: a lone 0xE2 lead byte over and over (<0xE2> is token 3 + 0xE2).
  const lead = 3 + 0xe2, cont = 3 + 0x96;
  for (const bias of [{ [lead]: 100 }, { [cont]: 100 }]) {
    const body = { model: SPM, prompt: "x", max_tokens: 7, temperature: 0, logit_bias: bias, ignore_eos: true };
    const full = await spm.completions.create({ ...body, logprobs: 1 });
    assertWellFormed(full.choices[0].text, "forced bytes");
    assert.ok(full.choices[0].text.length > 0 && /^\uFFFD+$/.test(full.choices[0].text), JSON.stringify(full.choices[0].text));
    const w = await sse(url, { ...body, stream: true });
    assert.ok(w.done);
    assert.equal(w.data.map((d) => d.choices[0]?.text ?? "").join(""), full.choices[0].text);
    const chat = await spm.chat.completions.create({ model: SPM, messages: [{ role: "user", content: "x" }], max_tokens: 3,
                                                     temperature: 0, logit_bias: bias, logprobs: true, top_logprobs: 1 });
    for (const e of chat.choices[0].logprobs.content) assert.deepEqual(e.bytes, [Number(Object.keys(bias)[0]) - 3]);
  }
  console.log(`     (${fffd} U+FFFD and ${multibyte} other non-ASCII characters seen in the random streams)`);
});

await run("server e2e");
