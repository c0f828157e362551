// Multiple-choice scoring as lm-evaluation-harness does it, through `echo` + `logprobs`
// with max_tokens 0 (one request per choice: the continuation's tokens are the prompt's
// last ones, their logprobs summed), against a reference loop that scores each
// continuation token on its own (a one-token completion of its prefix, the token forced
// by logit_bias; logprobs are of the distribution before the bias). The rankings must be
// the same and the sums equal within 1e-4; vLLM's prompt_logprobs must give the same
// numbers; a prefix cache that holds the prompts must change nothing.
// usage: node tests/server/mc_scoring.mjs --url http://127.0.0.1:PORT --key KEY --model NAME
import OpenAI from "openai";
import { assert, options, postJson, run, test } from "./lib.mjs";

const o = options(["url", "key", "model"]);
const client = new OpenAI({ baseURL: `${o.url}/v1`, apiKey: o.key, maxRetries: 0, timeout: 60000 });
const AUTH = { authorization: `Bearer ${o.key}` };
const TOL = 1e-4;

const ITEMS = [
  { ctx: "Once upon a time, there was a little", choices: [" girl", " dog", " car", " moon"] },
  { ctx: "Tom and Lily went to the park. They played on the", choices: [" swings", " moon", " happy", " and"] },
  { ctx: "The cat was very", choices: [" happy", " sad", " blue car", " ran"] },
];

async function tokenize(text) {
  const r = await postJson(`${o.url}/tokenize`, { prompt: text }, AUTH);
  assert.equal(r.status, 200, r.text);
  return r.json.tokens;
}

// [context ids, whole ids] for each choice: the continuation is whole's tail.
async function split(item) {
  const ctx = await tokenize(item.ctx);
  const out = [];
  for (const c of item.choices) {
    const whole = await tokenize(item.ctx + c);
    assert.deepEqual(whole.slice(0, ctx.length), ctx, "the context tokenizes the same inside the whole");
    out.push({ ctx, whole });
  }
  return out;
}

async function scoreEcho({ ctx, whole }) {
  const r = await client.completions.create({ model: o.model, prompt: whole, max_tokens: 0, echo: true, logprobs: 0 });
  const lp = r.choices[0].logprobs;
  assert.equal(lp.token_logprobs.length, whole.length, "a logprob entry per prompt token");
  assert.equal(lp.token_logprobs[0], null, "the first token has none");
  assert.equal(r.usage.completion_tokens, 0);
  return lp.token_logprobs.slice(ctx.length).reduce((a, b) => a + b, 0);
}

async function scorePromptLogprobs({ ctx, whole }) {
  const r = await client.completions.create({ model: o.model, prompt: whole, max_tokens: 1, prompt_logprobs: 0 });
  const pl = r.choices[0].prompt_logprobs;
  assert.equal(pl.length, whole.length);
  let s = 0;
  for (let i = ctx.length; i < whole.length; ++i) s += pl[i][String(whole[i])].logprob;
  return s;
}

async function scoreLoop({ ctx, whole }) {
  let s = 0;
  for (let i = ctx.length; i < whole.length; ++i) {
    const r = await client.completions.create({
      model: o.model, prompt: whole.slice(0, i), max_tokens: 1, logprobs: 0, temperature: 0,
      logit_bias: { [whole[i]]: 100 }, speculative: false,
    });
    const lp = r.choices[0].logprobs;
    assert.equal(lp.tokens.length, 1);
    s += lp.token_logprobs[0];
  }
  return s;
}

const rank = (xs) => xs.map((x, i) => [x, i]).sort((a, b) => b[0] - a[0]).map(([, i]) => i);

test("echo + logprobs scoring ranks the choices as a one-token-at-a-time loop does, sums within 1e-4", async () => {
  for (const item of ITEMS) {
    const parts = await split(item);
    const fast = [], ref = [], vllm = [], again = [];
    for (const p of parts) {
      fast.push(await scoreEcho(p));
      ref.push(await scoreLoop(p));
      vllm.push(await scorePromptLogprobs(p));
      again.push(await scoreEcho(p));  // the prefix cache holds these prompts now
    }
    for (let i = 0; i < fast.length; ++i) {
      assert.ok(Math.abs(fast[i] - ref[i]) <= TOL, `${item.ctx}|${item.choices[i]}: echo ${fast[i]} vs loop ${ref[i]}`);
      assert.ok(Math.abs(vllm[i] - ref[i]) <= TOL, `prompt_logprobs ${vllm[i]} vs loop ${ref[i]}`);
      assert.equal(again[i], fast[i], "a warm prefix cache changes nothing");
    }
    assert.deepEqual(rank(fast), rank(ref), `ranking of ${item.ctx}`);
  }
});

test("echo + logprobs streamed: the prompt's entries arrive with its text, before the generated ones", async () => {
  const whole = await tokenize("Once upon a time");
  const chunks = [];
  for await (const ch of await client.completions.create({
    model: o.model, prompt: "Once upon a time", max_tokens: 3, echo: true, logprobs: 1, stream: true, temperature: 0 }))
    chunks.push(ch.choices[0]);
  assert.ok(chunks[0].text.startsWith("Once upon a time"));
  assert.equal(chunks[0].logprobs.token_logprobs[0], null);
  assert.ok(chunks[0].logprobs.tokens.length >= whole.length);
  const n = chunks.reduce((a, c) => a + (c.logprobs?.tokens.length ?? 0), 0);
  assert.equal(n, whole.length + 3, "prompt tokens + generated tokens");
  // A chat request's prompt logprobs sit beside its choices (vLLM's shape).
  const chat = await client.chat.completions.create({
    model: o.model, messages: [{ role: "user", content: "hi" }], max_tokens: 1, prompt_logprobs: 2 });
  assert.ok(Array.isArray(chat.prompt_logprobs) && chat.prompt_logprobs[0] === null);
  assert.equal(chat.prompt_logprobs.length, chat.usage.prompt_tokens);
  for (const e of chat.prompt_logprobs.slice(1)) assert.ok(Object.keys(e).length >= 2 && Object.keys(e).length <= 3);
});

await run("mc scoring");
