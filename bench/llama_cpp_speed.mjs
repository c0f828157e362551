#!/usr/bin/env node
// Same-run baseline for `ridge generate` speed figures: llama.cpp (node-llama-cpp 3.21.1,
// prebuilt CPU binary) on the same GGUF and the same prompt ids.
//   node bench/llama_cpp_speed.mjs --model M.gguf --ids-from DUMP.json -n 64 [--threads T]
// DUMP.json is `ridge generate --dump-json` output (prompt_ids are reused exactly).
// Prints one JSON line: {prompt_tokens, prefill_tps, decode_tps, decode_tokens}.
// Prefill = evaluating the prompt and sampling the first token; decode = each further
// token one at a time, as a decoder runs.
import {getLlama, LlamaLogLevel} from "node-llama-cpp";
import fs from "node:fs";

const args = process.argv.slice(2);
const opt = (name, dflt) => {
    const i = args.indexOf(name);
    return i >= 0 && i + 1 < args.length ? args[i + 1] : dflt;
};
const modelPath = opt("--model");
const dump = opt("--ids-from");
const n = Number(opt("-n", "64"));
const threads = Number(opt("--threads", "1"));
if (!modelPath || !dump || !(n >= 2)) {
    console.error("usage: llama_cpp_speed.mjs --model M.gguf --ids-from DUMP.json -n N [--threads T]");
    process.exit(2);
}
const ids = JSON.parse(fs.readFileSync(dump, "utf8")).prompt_ids;

const llama = await getLlama({gpu: false, build: "never", skipDownload: true, usePrebuiltBinaries: true,
                              progressLogs: false, logLevel: LlamaLogLevel.error, maxThreads: threads});
const model = await llama.loadModel({modelPath, gpuLayers: 0});
const ctxSize = ids.length + n + 8;
const context = await model.createContext({contextSize: ctxSize, batchSize: Math.min(512, ctxSize), sequences: 1,
                                           threads, flashAttention: false});
const seq = context.getSequence();
const next = {generateNext: {token: true, options: {temperature: 0}}};

let t0 = performance.now();
let out = await seq.controlledEvaluate(ids.map((t, i) => (i === ids.length - 1 ? [t, next] : t)));
let tok = out[ids.length - 1].next.token;
const prefillS = (performance.now() - t0) / 1000;
t0 = performance.now();
for (let i = 1; i < n; i++) {
    out = await seq.controlledEvaluate([[tok, next]]);
    tok = out[0].next.token;
}
const decodeS = (performance.now() - t0) / 1000;
console.log(JSON.stringify({prompt_tokens: ids.length, prefill_tps: ids.length / prefillS,
                            decode_tps: (n - 1) / decodeS, decode_tokens: n - 1, threads}));
await context.dispose();
await model.dispose();
await llama.dispose();
