#!/usr/bin/env node
// Same-run baseline for batched decode: llama.cpp (node-llama-cpp 3.21.1) with B
// sequences in one context, each step one token per sequence evaluated together (the
// library gathers concurrent evaluations into one llama_decode).
//   node bench/llama_cpp_batch.mjs --model M.gguf --batch B --prompt-len P -n N [--threads T] [--vocab V]
//        [--kv-type f16|q8_0|q4_0] [--flash-attention]
// A quantized KV type (K and V both) needs llama.cpp's flash attention, which it turns on.
// Prompts are random ids in [3, V) (seeded), different per sequence, like
// `ridge bench throughput`. Prints one JSON line: {batch, prefill_tps, decode_tps, ...}.
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const args = process.argv.slice(2);
const opt = (name, dflt) => {
    const i = args.indexOf(name);
    return i >= 0 && i + 1 < args.length ? args[i + 1] : dflt;
};
const modelPath = opt("--model");
const B = Number(opt("--batch", "16"));
const P = Number(opt("--prompt-len", "128"));
const n = Number(opt("-n", "128"));
const threads = Number(opt("--threads", "2"));
const vocab = Number(opt("--vocab", "32000"));
const kvType = opt("--kv-type", "f16").toUpperCase();
const flash = args.includes("--flash-attention") || kvType !== "F16";
if (!["F16", "Q8_0", "Q4_0"].includes(kvType)) {
    console.error(`--kv-type ${kvType}: f16, q8_0 or q4_0`);
    process.exit(2);
}
if (!modelPath || !(B >= 1) || !(P >= 1) || !(n >= 2)) {
    console.error("usage: llama_cpp_batch.mjs --model M.gguf --batch B --prompt-len P -n N [--threads T] [--vocab V]");
    process.exit(2);
}
let seed = 12345;
const rnd = () => (seed = (seed * 1103515245 + 12345) % 2147483648);

const llama = await getLlama({gpu: false, build: "never", skipDownload: true, usePrebuiltBinaries: true,
                              progressLogs: false, logLevel: LlamaLogLevel.error, maxThreads: threads});
const model = await llama.loadModel({modelPath, gpuLayers: 0});
const perSeq = P + n + 8;
const context = await model.createContext({contextSize: perSeq * B, batchSize: Math.max(512, B), sequences: B,
                                           threads, flashAttention: flash,
                                           experimentalKvCacheKeyType: kvType, experimentalKvCacheValueType: kvType});
const seqs = Array.from({length: B}, () => context.getSequence());
const next = {generateNext: {token: true, options: {temperature: 0}}};
const prompts = seqs.map(() => Array.from({length: P}, () => 3 + (rnd() % (vocab - 3))));

let t0 = performance.now();
let toks = await Promise.all(seqs.map(async (s, i) => {
    const ids = prompts[i];
    const out = await s.controlledEvaluate(ids.map((t, j) => (j === ids.length - 1 ? [t, next] : t)));
    return out[ids.length - 1].next.token;
}));
const prefillS = (performance.now() - t0) / 1000;
t0 = performance.now();
for (let step = 1; step < n; step++) {
    toks = await Promise.all(seqs.map(async (s, i) => {
        const out = await s.controlledEvaluate([[toks[i], next]]);
        return out[0].next.token;
    }));
}
const decodeS = (performance.now() - t0) / 1000;
// output_tps: every sequence's n tokens over the whole run (prefill included), what a
// serving benchmark calls output throughput when B requests arrive together.
console.log(JSON.stringify({batch: B, prompt_len: P, kv_type: kvType, flash_attention: flash, prefill_tps: (B * P) / prefillS,
                            decode_tps: (B * (n - 1)) / decodeS, decode_steps: n - 1, threads,
                            prefill_s: prefillS, output_tps: (B * n) / (prefillS + decodeS)}));
await context.dispose();
await model.dispose();
await llama.dispose();
