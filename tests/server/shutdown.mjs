// Graceful shutdown: SIGTERM while streams run. Every stream must end properly (each
// choice with a finish_reason, then data: [DONE]); new connections are refused or
// answered 503. The caller checks that the server then exits 0.
// usage: node tests/server/shutdown.mjs --url http://127.0.0.1:PORT --model NAME --pid PID
// The server should run with a short --shutdown-timeout, so the long stream is cut.
import { assert, options, parseSse, run, test } from "./lib.mjs";

const o = options(["url", "model", "pid"]);

// Streams over fetch and returns the raw SSE text; `onFirst` runs at the first bytes.
async function stream(body, onFirst) {
  const r = await fetch(`${o.url}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ ...body, stream: true }),
  });
  assert.equal(r.status, 200);
  const dec = new TextDecoder("utf-8", { fatal: true });
  let text = "";
  for await (const part of r.body) {
    text += dec.decode(part, { stream: true });
    if (onFirst && text.includes("data: {")) {
      onFirst();
      onFirst = null;
    }
  }
  return text + dec.decode();
}

function checkEnded(text, n, what) {
  const ev = parseSse(text);
  assert.ok(ev.done, `${what}: the stream ends with data: [DONE]`);
  assert.equal(ev.lines.at(-1), "[DONE]");
  const reasons = new Map();
  for (const d of ev.data) {
    assert.ok(!d.error, `${what}: an error event: ${JSON.stringify(d.error)}`);
    for (const c of d.choices) if (c.finish_reason) reasons.set(c.index, c.finish_reason);
  }
  assert.equal(reasons.size, n, `${what}: ${reasons.size} of ${n} choices got a finish_reason`);
  return [...reasons.values()];
}

test("SIGTERM during streams: every stream ends with finish_reason and [DONE]", async () => {
  const body = { model: o.model, prompt: "Shutdown", temperature: 0, ignore_eos: true };
  let signalled = false;
  const short = stream({ ...body, max_tokens: 20 });
  // n choices of 240 tokens: far more work than the grace period allows.
  const long = stream({ ...body, max_tokens: 240, n: 64 }, () => {
    process.kill(Number(o.pid), "SIGTERM");
    signalled = true;
  });
  const [s, l] = await Promise.all([short, long]);
  assert.ok(signalled, "the long stream produced a chunk before ending");
  checkEnded(s, 1, "short stream");
  const reasons = checkEnded(l, 64, "long stream");
  const counts = {};
  for (const r of reasons) counts[r] = (counts[r] ?? 0) + 1;
  console.log(`     long stream finish reasons: ${JSON.stringify(counts)}`);
  for (const r of reasons) assert.ok(["length", "abort"].includes(r), `finish_reason ${r}`);
  // After SIGTERM the server takes no new work.
  let refused = false;
  try {
    const r = await fetch(`${o.url}/v1/completions`, { method: "POST", body: JSON.stringify({ ...body, max_tokens: 1 }) });
    refused = r.status === 503;
    await r.text();
  } catch {
    refused = true;  // connection refused: the listener is closed
  }
  assert.ok(refused, "a request after SIGTERM was served");
});

await run("server shutdown");
