// Swap preemption under injected swap I/O faults (run by swap_faults.sh, which starts the
// server with RIDGE_SWAP_FAULTS, a KV pool far smaller than the load and a swap space on
// a full filesystem). A failed swap write or read loses the sequence's KV; the engine must
// recompute it, so no answer may differ from the same request served alone.
// usage: node tests/server/swap_faults.mjs --url http://127.0.0.1:PORT --clients 48 --max-tokens 40 --rounds 3
import { assert, checkIdleKv, metrics, options, postJson, run, test, waitIdle } from "./lib.mjs";

const o = options(["url", "clients", "max-tokens", "rounds"]);
const N = Number(o.clients), MAX = Number(o["max-tokens"]), ROUNDS = Number(o.rounds);

// Greedy and distinct: each request has one right answer, and no two share it by chance.
const body = (i) => ({ prompt: `Request ${i}: once upon a time there was a`, max_tokens: MAX, temperature: 0, ignore_eos: true });

async function complete(i) {
  const r = await postJson(`${o.url}/v1/completions`, body(i));
  assert.equal(r.status, 200, `request ${i}: status ${r.status}: ${JSON.stringify(r.json).slice(0, 300)}`);
  const c = r.json.choices[0];
  assert.equal(c.finish_reason, "length", `request ${i}: finish_reason`);
  assert.equal(r.json.usage.completion_tokens, MAX, `request ${i}: usage.completion_tokens`);
  return c.text;
}

test(`${ROUNDS} rounds of ${N} concurrent greedy completions through swap faults equal the same requests alone`, async () => {
  // Later rounds reuse swap slots whose writes failed before (a bad mark clears when its
  // slot is freed).
  const rounds = [];
  for (let r = 0; r < ROUNDS; ++r) rounds.push(await Promise.all(Array.from({ length: N }, (_, i) => complete(i))));
  const during = await waitIdle(o.url);
  const swaps = during.get("ridge:num_swaps_total"), fallbacks = during.get("ridge:swap_fallbacks_total");
  console.log(`     ${during.get("ridge:num_preemptions_total")} preemptions, ${swaps} swaps, ${fallbacks} swap fallbacks ` +
              `(KV pool ${during.get("ridge:kv_blocks_total")} blocks)`);
  // Without both the test proves nothing: the faults must have hit swapped sequences.
  assert.ok(swaps > 0, "ridge:num_swaps_total is 0: nothing was swapped");
  assert.ok(fallbacks > 0, "ridge:swap_fallbacks_total is 0: no injected fault reached a swapped sequence");
  assert.ok(swaps > fallbacks, "every swap failed: no swapped KV came back to be checked");
  checkIdleKv(during);
  // One at a time nothing is preempted: the reference answers.
  const mismatched = [];
  for (let i = 0; i < N; ++i) {
    const alone = await complete(i);
    rounds.forEach((res, r) => {
      if (res[i] !== alone) mismatched.push(`request ${i}, round ${r}: under load ${JSON.stringify(res[i])}, alone ${JSON.stringify(alone)}`);
    });
  }
  assert.deepEqual(mismatched.slice(0, 5), [], `${mismatched.length} of ${ROUNDS * N} answers under load differ from the same request alone`);
  const after = await metrics(o.url);
  assert.equal(after.get("ridge:engine_invariant_failures_total"), 0, "engine invariant failures");
  assert.equal(after.get("ridge:num_preemptions_total"), during.get("ridge:num_preemptions_total"),
               "a request sent alone was preempted: the answers alone are no reference");
});

await run("swap faults");
