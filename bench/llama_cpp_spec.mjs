#!/usr/bin/env node
// Same-run baseline for `ridge bench spec`: llama.cpp (node-llama-cpp 3.21.1, prebuilt
// CPU binary) decoding the same prompt ids greedily without a token predictor, with its
// input lookup predictor (prompt lookup) and with its draft sequence predictor (a draft
// model), interleaved run by run.
//   node bench/llama_cpp_spec.mjs --model M.gguf --ids-from DUMP.json -n 128 [--threads T]
//        [--draft D.gguf] [--k 4] [--runs 3]
// DUMP.json is `ridge generate --dump-json` output (prompt_ids are reused exactly).
// Prints one JSON line per predictor: median decode tok/s (first generated token to
// last), the speedup over no predictor, and the predictions validated and refuted.
import {getLlama, LlamaLogLevel, InputLookupTokenPredictor, DraftSequenceTokenPredictor} from "node-llama-cpp";
import fs from "node:fs";

const args = process.argv.slice(2);
const opt = (name, dflt) => {
    const i = args.indexOf(name);
    return i >= 0 && i + 1 < args.length ? args[i + 1] : dflt;
};
const modelPath = opt("--model"), dump = opt("--ids-from"), draftPath = opt("--draft");
const n = Number(opt("-n", "128")), threads = Number(opt("--threads", "2"));
const k = Number(opt("--k", "4")), runs = Number(opt("--runs", "3"));
if (!modelPath || !dump || !(n >= 2) || !(k >= 1) || !(runs >= 1)) {
    console.error("usage: llama_cpp_spec.mjs --model M.gguf --ids-from DUMP.json -n N [--threads T] [--draft D.gguf] [--k K] [--runs R]");
    process.exit(2);
}
const ids = JSON.parse(fs.readFileSync(dump, "utf8")).prompt_ids;

const llama = await getLlama({gpu: false, build: "never", skipDownload: true, usePrebuiltBinaries: true,
                              progressLogs: false, logLevel: LlamaLogLevel.error, maxThreads: threads});
const model = await llama.loadModel({modelPath, gpuLayers: 0});
const draftModel = draftPath ? await llama.loadModel({modelPath: draftPath, gpuLayers: 0}) : null;
const ctxSize = ids.length + n + k + 16;
const ctxOpts = {contextSize: ctxSize, batchSize: Math.min(512, ctxSize), sequences: 1, threads, flashAttention: false};

async function once(kind) {
    const context = await model.createContext(ctxOpts);
    let draftContext = null, tokenPredictor;
    if (kind === "lookup")
        tokenPredictor = new InputLookupTokenPredictor({patternLength: {min: 2, max: 4}, predictionLength: {min: 1, max: k}});
    if (kind === "draft") {
        draftContext = await draftModel.createContext(ctxOpts);
        tokenPredictor = new DraftSequenceTokenPredictor(draftContext.getSequence(), {minTokens: 0, maxTokens: k});
    }
    const seq = context.getSequence(tokenPredictor ? {tokenPredictor} : {});
    const out = [];
    let t0 = 0;
    for await (const tok of seq.evaluate(ids, {temperature: 0})) {
        if (out.length === 0) t0 = performance.now();
        out.push(tok);
        if (out.length >= n) break;
    }
    const s = (performance.now() - t0) / 1000;
    const stats = seq.tokenPredictions;
    await context.dispose();
    if (draftContext) await draftContext.dispose();
    return {tps: (out.length - 1) / s, out, validated: stats.validated, refuted: stats.refuted};
}

const kinds = ["none", "lookup", ...(draftModel ? ["draft"] : [])];
const res = Object.fromEntries(kinds.map((x) => [x, []]));
for (let r = 0; r < runs; ++r)
    for (const kind of kinds) res[kind].push(await once(kind));
const median = (v) => {
    const a = [...v].sort((x, y) => x - y);
    return a.length % 2 ? a[(a.length - 1) / 2] : (a[a.length / 2 - 1] + a[a.length / 2]) / 2;
};
const base = median(res.none.map((x) => x.tps));
for (const kind of kinds) {
    const tps = median(res[kind].map((x) => x.tps));
    const last = res[kind][res[kind].length - 1];
    const same = res[kind].every((x) => JSON.stringify(x.out) === JSON.stringify(res.none[0].out));
    console.log(JSON.stringify({predictor: kind, decode_tps: tps, speedup: tps / base, validated: last.validated,
                                refuted: last.refuted, tokens: last.out.length, same_output: same, threads, k, runs}));
}
if (draftModel) await draftModel.dispose();
await model.dispose();
await llama.dispose();
