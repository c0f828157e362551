// Load and disconnects against `ridge serve`, through the official openai client.
// usage: node tests/server/load.mjs --url http://127.0.0.1:PORT --model NAME --clients 256
//          --max-tokens 160 --disconnects 100
// The server must run with --max-num-seqs below --clients and --max-waiting >= --clients,
// so most requests queue. Checks correctness and accounting only, never timing.
import net from "node:net";
import OpenAI from "openai";
import { assert, checkIdleKv, metrics, options, raw, run, sleep, test, waitIdle } from "./lib.mjs";

const o = options(["url", "model", "clients", "max-tokens", "disconnects"]);
const N = Number(o.clients), MAX = Number(o["max-tokens"]), D = Number(o.disconnects);
const MODEL = o.model;
// Node's fetch (undici) opens as many connections per origin as there are requests in
// flight (its Agent has no per-origin cap by default); the peak gauge below proves each
// request reached the server at once.
const client = new OpenAI({ baseURL: `${o.url}/v1`, apiKey: "unused", maxRetries: 0, timeout: 300000 });

// Deterministic pseudo-random numbers, so a failing run can be repeated.
let rng = 12345;
const rand = () => ((rng = (rng * 1103515245 + 12345) % 2147483648) / 2147483648);
const randInt = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));

test(`${N} concurrent streams each get exactly max_tokens tokens`, async () => {
  const before = await metrics(o.url);
  const lengthBefore = before.get("ridge:request_success_total", { finished_reason: "length" });
  // Completions greedy, chat sampled (top_k keeps the sampler off a full-vocabulary sort).
  const request = (i, stream) => {
    const common = { model: MODEL, max_tokens: MAX, ignore_eos: true, stream,
                     ...(stream ? { stream_options: { include_usage: true } } : {}),
                     ...(i % 2 ? { temperature: 1, top_k: 40, seed: i } : { temperature: 0 }) };
    return i % 2
      ? client.chat.completions.create({ ...common, messages: [{ role: "user", content: `Request ${i}` }], logprobs: true })
      : client.completions.create({ ...common, prompt: `Request ${i}:`, logprobs: 0 });
  };
  const one = async (i) => {
    const chat = i % 2 === 1;
    const stream = await request(i, true);
    let chunks = 0, tokens = 0, usage = null, finish = null, text = "";
    for await (const ch of stream) {
      if (ch.usage) {
        usage = ch.usage;
        continue;
      }
      const c = ch.choices[0];
      assert.equal(c.index, 0);
      assert.equal(finish, null, "nothing after finish_reason");
      if (chat) {
        if (c.delta?.role) continue;  // the opening role chunk carries no token
        text += c.delta?.content ?? "";
        tokens += c.logprobs?.content?.length ?? 0;
      } else {
        text += c.text;
        tokens += c.logprobs?.tokens?.length ?? 0;
      }
      ++chunks;
      finish = c.finish_reason ?? null;
    }
    return { i, chunks, tokens, usage, finish, text };
  };
  const settled = await Promise.allSettled(Array.from({ length: N }, (_, i) => one(i)));
  const errors = settled.filter((s) => s.status === "rejected").map((s) => String(s.reason?.message ?? s.reason));
  assert.deepEqual(errors.slice(0, 5), [], `${errors.length} of ${N} requests failed`);
  const res = settled.map((s) => s.value);
  let totalChunks = 0;
  for (const r of res) {
    assert.equal(r.finish, "length", `request ${r.i}: finish_reason`);
    assert.ok(r.usage, `request ${r.i}: no usage chunk`);
    assert.equal(r.usage.completion_tokens, MAX, `request ${r.i}: usage.completion_tokens`);
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + MAX);
    assert.equal(r.tokens, MAX, `request ${r.i}: tokens streamed (per-chunk logprobs)`);
    // One chunk per token or fewer: the server folds the tokens that arrived since its
    // last write into one chunk.
    assert.ok(r.chunks >= 1 && r.chunks <= MAX, `request ${r.i}: ${r.chunks} content chunks`);
    totalChunks += r.chunks;
  }
  const m = await waitIdle(o.url);
  const peak = m.get("ridge:num_requests_peak");
  console.log(`     peak running+waiting ${peak}; ${(totalChunks / N).toFixed(1)} content chunks per request ` +
              `for ${MAX} tokens; ${m.get("ridge:num_preemptions_total")} preemptions`);
  assert.ok(peak >= N, `ridge:num_requests_peak ${peak} < ${N}: the requests did not all overlap`);
  checkIdleKv(m);
  assert.equal(m.get("ridge:request_success_total", { finished_reason: "length" }) - lengthBefore, N);
  // Batching and preemption under load change nothing: a few requests again, alone.
  for (const i of [0, 1, N >> 1, N - 1]) {
    const r = await request(i, false);
    const alone = i % 2 ? r.choices[0].message.content : r.choices[0].text;
    assert.equal(res[i].text, alone, `request ${i}: the text under load differs from the text alone`);
  }
});

// One HTTP request over a raw socket; destroys it per `how`.
function rawSocketRequest(body, how) {
  return new Promise((resolve) => {
    const u = new URL(o.url);
    const s = net.connect(Number(u.port), u.hostname);
    const payload = Buffer.from(JSON.stringify(body));
    const head = `POST /v1/completions HTTP/1.1\r\nHost: ${u.host}\r\nContent-Type: application/json\r\n` +
                 `Content-Length: ${payload.length}\r\n\r\n`;
    let got = 0;
    s.on("error", () => resolve());
    s.on("close", () => resolve());
    s.on("connect", () => {
      if (how.partialBody) {
        // Headers and half the body, then gone.
        s.write(head + payload.subarray(0, payload.length >> 1).toString(), () => setTimeout(() => s.destroy(), how.delay));
        return;
      }
      s.write(head);
      s.write(payload);
      if (how.afterBytes === 0) setTimeout(() => s.destroy(), how.delay);
    });
    s.on("data", (d) => {
      got += d.length;
      if (how.afterBytes > 0 && got >= how.afterBytes) s.destroy();
    });
  });
}

test(`${D} clients disconnecting at random points leave the server healthy`, async () => {
  const before = await metrics(o.url);
  const abortsBefore = before.get("ridge:request_success_total", { finished_reason: "abort" });
  const kinds = { chunks: 0, early: 0, socket: 0, partial: 0, nonstream: 0 };
  const one = async (i) => {
    const body = { model: MODEL, prompt: `Disconnect ${i}`, max_tokens: 200, ignore_eos: true, temperature: 1 };
    const kind = ["chunks", "early", "socket", "partial", "nonstream"][i % 5];
    ++kinds[kind];
    const ac = new AbortController();
    try {
      if (kind === "chunks") {
        // Abort after a random number of chunks.
        const stream = await client.completions.create({ ...body, stream: true }, { signal: ac.signal });
        const k = randInt(1, 12);
        let n = 0;
        for await (const _ of stream) if (++n >= k) ac.abort();
      } else if (kind === "early") {
        // Abort before the first chunk: right away or a moment later.
        const p = client.completions.create({ ...body, stream: true }, { signal: ac.signal });
        const d = randInt(0, 20);
        if (d === 0) ac.abort();
        else setTimeout(() => ac.abort(), d);
        const stream = await p;
        for await (const _ of stream) ac.abort();
      } else if (kind === "socket") {
        // Raw socket destroyed after some bytes of the response, or after a delay.
        const afterBytes = rand() < 0.5 ? 0 : randInt(1, 2000);
        await rawSocketRequest({ ...body, stream: rand() < 0.8 }, { afterBytes, delay: randInt(0, 100) });
      } else if (kind === "partial") {
        await rawSocketRequest({ ...body, stream: true }, { partialBody: true, delay: randInt(0, 50) });
      } else {
        const p = client.completions.create(body, { signal: ac.signal });
        setTimeout(() => ac.abort(), randInt(0, 300));
        await p;
      }
    } catch (e) {
      if (!(e instanceof OpenAI.APIUserAbortError) && e?.name !== "AbortError") throw e;
    }
  };
  const settled = await Promise.allSettled(Array.from({ length: D }, (_, i) => one(i)));
  const errors = settled.filter((s) => s.status === "rejected").map((s) => String(s.reason?.stack ?? s.reason));
  assert.deepEqual(errors.slice(0, 3), [], `${errors.length} clients saw an unexpected error`);

  assert.equal((await raw(`${o.url}/health`)).status, 200, "/health after the disconnects");
  const ok = await client.completions.create({ model: MODEL, prompt: "still there?", max_tokens: 5, ignore_eos: true });
  assert.equal(ok.usage.completion_tokens, 5, "a normal request after the disconnects");
  const m = await waitIdle(o.url);
  checkIdleKv(m);
  console.log(`     kinds ${JSON.stringify(kinds)}; ${m.get("ridge:request_success_total", { finished_reason: "abort" }) - abortsBefore} ` +
              "requests counted as aborted");
  const s = await client.completions.create({ model: MODEL, prompt: "and again", max_tokens: 5, ignore_eos: true, stream: true });
  let text = "";
  for await (const ch of s) text += ch.choices[0]?.text ?? "";
  assert.ok(text.length > 0);
});

await run("server load");
