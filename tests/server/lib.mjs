// Shared helpers for the server tests: a tiny sequential test runner, assertions, raw
// HTTP / SSE helpers and a Prometheus text scraper. Node built-ins only.
import assert from "node:assert/strict";
import { parseArgs } from "node:util";

export { assert };

// --name value options, all strings.
export function options(names) {
  const { values } = parseArgs({
    options: Object.fromEntries(names.map((n) => [n, { type: "string" }])),
    strict: true,
  });
  for (const n of names)
    if (values[n] === undefined) throw new Error(`missing --${n}`);
  return values;
}

// Sequential tests: test(name, fn) queues, run(title) runs them, prints one line each and
// exits 1 if any failed.
const tests = [];
export const SKIP = Symbol("skip");  // a test function returns SKIP when it did not run
export function test(name, fn) {
  tests.push({ name, fn });
}

export async function run(title) {
  const only = process.env.SERVER_TESTS_ONLY ? new RegExp(process.env.SERVER_TESTS_ONLY) : null;
  let passed = 0, skipped = 0;
  const failed = [];
  const t0 = Date.now();
  for (const t of tests) {
    if (only && !only.test(t.name)) continue;
    const s = Date.now();
    try {
      if ((await t.fn()) === SKIP) {
        ++skipped;
        console.log(`skip ${t.name}`);
      } else {
        ++passed;
        console.log(`ok   ${t.name} (${Date.now() - s} ms)`);
      }
    } catch (e) {
      failed.push(t.name);
      console.log(`FAIL ${t.name} (${Date.now() - s} ms)\n     ${String(e?.stack ?? e).split("\n").slice(0, 8).join("\n     ")}`);
    }
  }
  console.log(`${title}: ${passed} passed, ${failed.length} failed, ${skipped} skipped (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
  if (failed.length) console.log(`failed: ${failed.join("; ")}`);
  process.exit(failed.length ? 1 : 0);
}

// Raw request; the body is returned as text (never parsed here).
export async function raw(url, { method = "GET", body, headers = {}, signal } = {}) {
  const r = await fetch(url, {
    method,
    body: body === undefined ? undefined : typeof body === "string" || body instanceof Uint8Array ? body : JSON.stringify(body),
    headers: { "content-type": "application/json", ...headers },
    signal,
  });
  return { status: r.status, headers: r.headers, text: await r.text() };
}

export async function postJson(url, body, headers = {}) {
  const r = await raw(url, { method: "POST", body, headers });
  let json;
  try {
    json = JSON.parse(r.text);
  } catch (e) {
    throw new Error(`${url}: status ${r.status}, body is not JSON: ${r.text.slice(0, 300)}`);
  }
  return { status: r.status, json, headers: r.headers };
}

// Streams a request and returns its SSE events: {data: [parsed objects], done: saw [DONE],
// lines: raw data payloads}. The bytes are decoded with a fatal UTF-8 decoder, so invalid
// UTF-8 on the wire throws.
export async function sse(url, body, headers = {}) {
  const r = await fetch(url, {
    method: "POST",
    body: JSON.stringify(body),
    headers: { "content-type": "application/json", ...headers },
  });
  const bytes = new Uint8Array(await r.arrayBuffer());
  const text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  if (r.status !== 200) throw new Error(`status ${r.status}: ${text.slice(0, 300)}`);
  assert.match(r.headers.get("content-type") ?? "", /^text\/event-stream/);
  return parseSse(text);
}

export function parseSse(text) {
  const events = text.split("\n\n");
  assert.equal(events.pop(), "", "the stream ends with a blank line");
  const out = { data: [], done: false, lines: [] };
  for (const ev of events) {
    assert.ok(ev.startsWith("data: "), `an SSE event that is not 'data: ': ${JSON.stringify(ev.slice(0, 100))}`);
    const payload = ev.slice(6);
    assert.ok(!out.done, "nothing after data: [DONE]");
    out.lines.push(payload);
    if (payload === "[DONE]") out.done = true;
    else out.data.push(JSON.parse(payload));
  }
  return out;
}

// Prometheus text: value of name{labels ⊇ filter}; undefined when absent.
export function scrape(text, name, filter = {}) {
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = /^([^{\s]+)(?:\{([^}]*)\})?\s+(\S+)/.exec(line);
    if (!m || m[1] !== name) continue;
    const labels = {};
    for (const [, k, v] of (m[2] ?? "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[k] = v;
    if (Object.entries(filter).every(([k, v]) => labels[k] === v)) return Number(m[3]);
  }
  return undefined;
}

export async function metrics(base) {
  const r = await raw(`${base}/metrics`);
  assert.equal(r.status, 200);
  const get = (n, f) => {
    const v = scrape(r.text, n, f);
    assert.notEqual(v, undefined, `/metrics has no ${n}`);
    return v;
  };
  return { text: r.text, get };
}

export const sleep = (ms) => new Promise((res) => setTimeout(res, ms));

// Polls /metrics until nothing runs or waits (the engine then goes idle and checks its
// invariants); returns the final scrape. Gives up after limit_ms (a hang, not a timing
// assertion).
export async function waitIdle(base, limit_ms = 60000) {
  const t0 = Date.now();
  for (;;) {
    const m = await metrics(base);
    if (m.get("ridge:num_requests_running") === 0 && m.get("ridge:num_requests_waiting") === 0) {
      // The gauges settle on the loop's next pass; the invariant check follows idleness.
      await sleep(200);
      const m2 = await metrics(base);
      if (m2.get("ridge:num_requests_running") === 0 && m2.get("ridge:num_requests_waiting") === 0) return m2;
    }
    if (Date.now() - t0 > limit_ms) throw new Error(`the server never went idle:\n${m.text.split("\n").filter((l) => /num_requests|kv_blocks/.test(l)).join("\n")}`);
    await sleep(100);
  }
}

// The block accounting once idle: nothing held by requests, the invariants hold.
export function checkIdleKv(m) {
  const g = (n) => m.get(n);
  assert.equal(g("ridge:kv_blocks_in_use"), 0, "kv_blocks_in_use once idle");
  assert.equal(g("ridge:kv_cache_usage_perc"), 0, "kv_cache_usage_perc once idle");
  assert.equal(g("ridge:kv_blocks_free") + g("ridge:kv_blocks_evictable"), g("ridge:kv_blocks_total"),
               "free + evictable == total once idle");
  assert.equal(g("ridge:engine_invariant_failures_total"), 0, "engine invariant failures");
  assert.ok(g("ridge:engine_invariant_checks_total") >= 1, "the engine checked its invariants at least once");
}

// A lone surrogate means text was cut inside a UTF-16 pair (or came from bad bytes).
export function assertWellFormed(s, what) {
  assert.equal(typeof s, "string", `${what} is a string`);
  assert.ok(!/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/.test(s),
            `${what} has a lone surrogate: ${JSON.stringify(s)}`);
}
