// SIGTERM at random moments: whatever the server is doing (idle, holding a keep-alive
// connection, prefilling, streaming, writing to a client that stopped reading), one
// SIGTERM must end it with exit status 0 within its --shutdown-timeout (plus slack for
// the server's own margin and a loaded machine); a second SIGTERM must end it at once.
// Each run starts its own `ridge serve --port 0`.
// usage: node tests/server/sigterm.mjs --ridge build/ridge --model stories260K.gguf
//          [--runs 20] [--seed 1]
import { spawn } from "node:child_process";
import http from "node:http";
import net from "node:net";
import { parseArgs } from "node:util";
import { assert, parseSse, run, scrape, sleep, test } from "./lib.mjs";

const { values: o } = parseArgs({
  options: { ridge: { type: "string" }, model: { type: "string" }, runs: { type: "string", default: "20" },
             seed: { type: "string", default: "1" } },
  strict: true,
});
if (!o.ridge || !o.model) throw new Error("usage: sigterm.mjs --ridge BIN --model GGUF [--runs N] [--seed S]");
const RUNS = Number(o.runs);

// Deterministic pseudo-random numbers, so a failing run can be repeated with the same seed.
let rng = Number(o.seed) >>> 0 || 1;
const rand = () => {
  rng ^= rng << 13; rng >>>= 0;
  rng ^= rng >>> 17;
  rng ^= rng << 5; rng >>>= 0;
  return rng / 4294967296;
};
const randInt = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));

// The server's graceful deadline is its --shutdown-timeout plus its own margin; this test
// allows 3 s over the timeout for that margin and a busy 2-core machine.
const SLACK_MS = 3000;

// Servers still running when this process ends (a crash of the test itself) go with it.
const live = new Set();
process.on("exit", () => {
  for (const c of live) c.kill("SIGKILL");
});

// Starts `ridge serve --port 0` and resolves once its "serve: ... on http://" line names the
// port. exited resolves with {code, signal, at} when the process ends.
function startServer(shutdownTimeout) {
  const args = ["serve", "--port", "0", "-m", o.model, "-t", "1", "--kv-cache-memory", "1M",
                "--shutdown-timeout", String(shutdownTimeout), "--max-body-size", "128M"];
  const child = spawn(o.ridge, args, { stdio: ["ignore", "ignore", "pipe"] });
  live.add(child);
  let stderr = "";
  const exited = new Promise((res) => child.on("exit", (code, signal) => {
    live.delete(child);
    res({ code, signal, at: Date.now() });
  }));
  const port = new Promise((res, rej) => {
    child.stderr.setEncoding("utf8");
    child.stderr.on("data", (d) => {
      stderr += d;
      const m = /^serve: .* on http:\/\/127\.0\.0\.1:(\d+) /m.exec(stderr);
      if (m) res(Number(m[1]));
    });
    exited.then((e) => rej(new Error(`ridge serve exited (${e.code ?? e.signal}) before listening:\n${stderr}`)));
  });
  return { child, exited, port, stderr: () => stderr };
}

// Sends `sig` and waits up to limitMs for the exit; kill -9 and throws when it does not
// come. Returns the time from the signal to the exit.
async function signalAndWait(srv, limitMs, what, sig = "SIGTERM") {
  const t0 = Date.now();
  srv.child.kill(sig);
  const r = await Promise.race([srv.exited, sleep(limitMs).then(() => null)]);
  if (!r) {
    srv.child.kill("SIGKILL");
    await srv.exited;
    throw new Error(`${what}: still running ${limitMs} ms after ${sig} (killed)\n${srv.stderr()}`);
  }
  const ms = r.at - t0;
  assert.equal(r.code, 0, `${what}: exit status ${r.code ?? r.signal} after ${sig} (${ms} ms)\n${srv.stderr()}`);
  assert.ok(!/invariant violated/.test(srv.stderr()), `${what}: a violated engine invariant\n${srv.stderr()}`);
  return ms;
}

// One request over its own connection (Connection: close, so nothing lingers in a pool and
// "idle" means idle). Resolves {status, body} or {error} for a refused, reset or cut
// connection: during a shutdown these are all allowed outcomes for a request that was not
// yet accepted.
function request(port, method, path, body, onData) {
  return new Promise((resolve) => {
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    const req = http.request({ host: "127.0.0.1", port, method, path, agent: false,
                               headers: payload ? { "content-type": "application/json", "content-length": payload.length } : {} },
                             (res) => {
                               let text = "";
                               res.setEncoding("utf8");
                               res.on("data", (d) => {
                                 text += d;
                                 onData?.(text);
                               });
                               res.on("end", () => resolve({ status: res.statusCode, body: text }));
                               res.on("error", (e) => resolve({ error: e.code ?? e.message, status: res.statusCode, body: text }));
                             });
    req.on("error", (e) => resolve({ error: e.code ?? e.message }));
    req.end(payload);
  });
}

// A request the server accepted before the signal ends with a complete answer; one it did
// not accept yet may be refused (503) or see its connection closed.
function checkCut(r, what) {
  if (r.error !== undefined && r.status === undefined) return "closed";
  assert.equal(r.error, undefined, `${what}: the response was cut (${r.error}) after status ${r.status}: ${r.body?.slice(-200)}`);
  if (r.status === 503) return "503";
  assert.equal(r.status, 200, `${what}: status ${r.status}: ${r.body.slice(0, 300)}`);
  const j = JSON.parse(r.body);
  assert.ok(["length", "abort", "stop"].includes(j.choices[0].finish_reason), `${what}: finish_reason ${j.choices[0].finish_reason}`);
  return j.choices[0].finish_reason;
}

// 97 prompt tokens: with max_tokens 4 it fits the model's 128-token context.
const LONG_PROMPT = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park " +
  "with her friends. One day, she saw a big red ball under a tree. She ran to the ball and kicked it very high. " +
  "The ball flew over the fence and her friend Tom laughed.";

// Keeps a rejection until it is awaited: the signal is sent while these are in flight.
const settle = (p) => p.then((value) => ({ value }), (error) => ({ error }));

// The stalled client: asks for a response far larger than the kernel's socket buffers
// (15 MB of text, where loopback buffers a few MB) and never reads it, so the server's
// write blocks. Resolves once the server has produced the response (its io thread is
// single: a /metrics answer that counts the detokenize's 2xx proves it was handled).
const STALL_IDS = 3_000_000, STALL_BYTES = STALL_IDS * 5;
const stallBody = (() => {
  const ids = `${"403,".repeat(STALL_IDS - 1)}403`;  // "▁Once": 5 bytes of text each
  return Buffer.from(`{"tokens":[${ids}]}`);
})();
async function stalledClient(port) {
  const base = await request(port, "GET", "/metrics");
  const count2xx = (text) => scrape(text, "ridge:http_requests_total", { status: "2xx" });
  const before = count2xx(base.body);
  assert.ok(Number.isFinite(before), `no ridge:http_requests_total{status="2xx"} in /metrics:\n${base.body.slice(0, 2000)}`);
  const s = net.connect(port, "127.0.0.1");
  s.pause();  // never read: the response piles up in the kernel buffers, then the server waits
  s.on("error", () => {});
  await new Promise((res) => s.on("connect", res));
  s.write(`POST /detokenize HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\n` +
          `Content-Length: ${stallBody.length}\r\n\r\n`);
  await new Promise((res) => s.write(stallBody, res));
  // A /metrics answer counts itself after it is rendered: poll i sees the i answers before
  // it (the first scrape included), plus one when the detokenize was answered.
  for (let i = 1; ; ++i) {
    const m = await request(port, "GET", "/metrics");
    if (count2xx(m.body) >= before + i + 1) break;
    assert.ok(i < 300, "the stalled detokenize request was never answered");
    await sleep(50);
  }
  // After the exit: what reached this socket must be less than the whole response, or the
  // server was never blocked and the test proved nothing.
  s.received = async () => {
    let n = 0;
    s.on("data", (d) => (n += d.length));
    const done = new Promise((res) => s.on("close", res));
    s.resume();
    await Promise.race([done, sleep(2000)]);
    s.destroy();
    return n;
  };
  return s;
}

const scenarios = ["idle", "keepalive", "prefill", "stream", "stalled"];

// One run: a fresh server, the scenario, then SIGTERM after `delay` (ms; for "stream" the
// number of chunks to see first). Returns the line to print.
async function oneRun(scenario, delay, timeout) {
  const srv = startServer(timeout);
  let detail = "", pending = null, stalled = null;
  try {
    const port = await srv.port;
    if (scenario === "idle") {
      const r = await request(port, "POST", "/v1/completions", { prompt: "Once upon", max_tokens: 5, temperature: 0 });
      assert.equal(r.status, 200, r.body);
      await sleep(delay);
    } else if (scenario === "keepalive") {
      const s = net.connect(port, "127.0.0.1");
      s.on("error", () => {});
      let got = "";
      s.on("data", (d) => (got += d));
      const closed = new Promise((res) => s.on("close", res));
      s.write(`GET /health HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`);
      for (let i = 0; !/\r\n\r\n/.test(got); ++i) {
        assert.ok(i < 200, "no /health answer");
        await sleep(10);
      }
      assert.match(got, /^HTTP\/1\.1 200/);
      await sleep(delay);
      pending = settle(closed.then(() => "kept-alive connection closed"));
    } else if (scenario === "prefill") {
      const body = { prompt: LONG_PROMPT, max_tokens: 4, temperature: 0 };
      pending = settle(Promise.all([request(port, "POST", "/v1/completions", body),
                                    request(port, "POST", "/v1/completions", { ...body, n: 4 })])
        .then((rs) => rs.map((r, i) => checkCut(r, `prefill request ${i}`)).join(",")));
      await sleep(delay);
    } else if (scenario === "stream") {
      // 16 choices make the stream long enough (hundreds of chunks) for the signal to land
      // inside it on this fast model.
      const N = 16;
      let atSignal = -1, signal;
      const reached = new Promise((res) => (signal = res));
      const chunks = (text) => (text.match(/^data: \{/gm) ?? []).length;
      pending = settle(request(port, "POST", "/v1/completions",
                               { prompt: "Once upon a time", max_tokens: 100, ignore_eos: true, temperature: 0, stream: true, n: N },
                               (text) => {
                                 if (atSignal < 0 && chunks(text) >= delay) {
                                   atSignal = chunks(text);
                                   signal();
                                 }
                               })
        .then((r) => {
          signal();  // a stream of fewer chunks: the signal comes after its end
          // As tests/server/shutdown.mjs: a stream in progress ends properly.
          assert.equal(r.error, undefined, `the stream was cut (${r.error}): ${r.body?.slice(-200)}`);
          assert.equal(r.status, 200);
          const ev = parseSse(r.body);
          assert.ok(ev.done, "the stream ends with data: [DONE]");
          const reasons = new Map();
          for (const d of ev.data) {
            assert.ok(!d.error, `an error event: ${JSON.stringify(d.error)}`);
            for (const c of d.choices) {
              if (!c.finish_reason) continue;
              assert.ok(!reasons.has(c.index), `choice ${c.index}: two finish_reasons`);
              assert.ok(["length", "abort"].includes(c.finish_reason), `choice ${c.index}: finish_reason ${c.finish_reason}`);
              reasons.set(c.index, c.finish_reason);
            }
          }
          assert.equal(reasons.size, N, `${reasons.size} of ${N} choices got a finish_reason`);
          return `signal at chunk ${atSignal < 0 ? "end" : atSignal} of ${ev.data.length}, ${[...new Set(reasons.values())]}`;
        }));
      await reached;
    } else {
      stalled = await stalledClient(port);
      await sleep(delay);
    }
    const ms = await signalAndWait(srv, timeout * 1000 + SLACK_MS, scenario);
    if (pending) {
      const p = await pending;
      if (p.error) throw p.error;
      detail = p.value;
    }
    if (stalled) {
      const n = await stalled.received();
      assert.ok(n < STALL_BYTES, `the stalled client got the whole response (${n} bytes): the write never blocked`);
      detail = `${(n / 1e6).toFixed(1)} of ${STALL_BYTES / 1e6} MB reached the client`;
    }
    return `exit 0 after ${(ms / 1000).toFixed(2)} s${detail ? `  (${detail})` : ""}`;
  } finally {
    srv.child.kill("SIGKILL");  // a no-op once it exited
    stalled?.destroy();
  }
}

test(`${RUNS} runs: SIGTERM at a random moment, exit 0 within --shutdown-timeout + ${SLACK_MS / 1000} s`, async () => {
  const TIMEOUT = 2;
  // Drawn up front, so the runs are the same whatever order the lanes finish them in.
  // Every scenario at least once, then random ones.
  const plan = Array.from({ length: RUNS }, (_, run) => {
    const scenario = run < scenarios.length ? scenarios[run] : scenarios[randInt(0, scenarios.length - 1)];
    const delay = { idle: randInt(0, 200), keepalive: randInt(0, 200), prefill: randInt(0, 15),
                    stream: randInt(1, 400), stalled: randInt(0, 300) }[scenario];
    return { run, scenario, delay };
  });
  const failures = [];
  // Three lanes: a stalled run spends its seconds waiting for the server's deadline, not
  // computing, so the other lanes' runs fill that time.
  let next = 0;
  const lane = async () => {
    while (next < plan.length) {
      const { run, scenario, delay } = plan[next++];
      const head = `run ${String(run).padStart(2)} ${scenario.padEnd(9)} delay ${String(delay).padStart(3)}` +
                   (scenario === "stream" ? " chunks" : " ms    ");
      try {
        console.log(`     ${head}  ${await oneRun(scenario, delay, TIMEOUT)}`);
      } catch (e) {
        console.log(`     ${head}  FAILED: ${String(e.message).split("\n")[0]}`);
        failures.push(`run ${run} (${scenario}, delay ${delay}): ${e.message}`);
      }
    }
  };
  await Promise.all([lane(), lane(), lane()]);
  assert.deepEqual(failures, []);
});

// A second signal means "stop now": a stalled client would otherwise hold the shutdown
// for the whole of a long --shutdown-timeout.
test("stalled client, --shutdown-timeout 60: a second SIGTERM 1 s after the first exits at once", async () => {
  const srv = startServer(60);
  let s = null;
  try {
    s = await stalledClient(await srv.port);
    srv.child.kill("SIGTERM");
    await sleep(1000);
    const first = await Promise.race([srv.exited, sleep(0).then(() => null)]);
    assert.equal(first, null, "the server exited within 1 s of SIGTERM though its client was stalled with 60 s of grace");
    const ms = await signalAndWait(srv, 2000, "second SIGTERM");
    console.log(`     exit 0 ${(ms / 1000).toFixed(2)} s after the second SIGTERM`);
  } finally {
    srv.child.kill("SIGKILL");  // a no-op once it exited
    s?.destroy();
  }
});

test("stalled client, --shutdown-timeout 2: one SIGTERM exits 0 within 5 s", async () => {
  const srv = startServer(2);
  let s = null;
  try {
    s = await stalledClient(await srv.port);
    const ms = await signalAndWait(srv, 5000, "SIGTERM");
    const n = await s.received();
    assert.ok(n < STALL_BYTES, `the stalled client got the whole response (${n} bytes): the write never blocked`);
    console.log(`     exit 0 ${(ms / 1000).toFixed(2)} s after SIGTERM`);
  } finally {
    srv.child.kill("SIGKILL");  // a no-op once it exited
    s?.destroy();
  }
});

await run("SIGTERM at random moments");
