#!/usr/bin/env node
// llama.cpp as an outside oracle for ridge, through node-llama-cpp 3.21.1 (prebuilt CPU binary).
//
// Library:
//   const h = await openModel("m.gguf", {threads: 2});
//   const steps = await teacherForce(h, ids, nPrompt);   // [{pos, argmax, second, margin}]
//   const gen = await greedyGenerate(h, ids, k);          // k greedy ids after `ids`
//   await h.close();
// CLI:
//   node tests/oracle/llama_ref.mjs --model M.gguf --ids 1,403,407 [--n-prompt N] [--threads T]
//   node tests/oracle/llama_ref.mjs --model M.gguf --ids 1,403,407 --generate K [--stop-at-eog]
//   (--ids-from DUMP.json takes prompt_ids+ids from a `ridge generate --dump-json` file instead.)
// Prints one JSON object on stdout.
//
// Margins: node-llama-cpp exposes no raw logits, only the softmax of them (the addon computes
// expf(logit - max) / sum in float32 over the whole vocabulary). With temperature 0 the sampler
// chain is just llama.cpp's greedy sampler, which leaves logits untouched, so
// log(p1) - log(p2) == logit1 - logit2 up to float32 rounding (~1e-6). If p2 underflows to 0 the
// margin is Infinity (the gap is > ~87 nats; it serializes to null in JSON).
import {getLlama, LlamaLogLevel} from "node-llama-cpp";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {fileURLToPath} from "node:url";

// Default thread count. ggml's workers spin while they wait; with as many workers as cores,
// node's own threads preempt them and a decode step can take 100x longer (measured on a
// 2-vCPU VM: 1 thread ~1 ms/token on stories260K, 2 threads 3-90 ms/token). So 2 threads only
// when there are cores to spare. Results do not depend on the thread count.
export const DEFAULT_THREADS = os.availableParallelism() >= 4 ? 2 : 1;

// Loads llama.cpp strictly offline: the prebuilt binary only, never a download or a build.
export async function openModel(modelPath, {threads = DEFAULT_THREADS} = {}) {
    const t0 = performance.now();
    const llama = await getLlama({
        gpu: false, build: "never", skipDownload: true, usePrebuiltBinaries: true,
        progressLogs: false, logLevel: LlamaLogLevel.error, maxThreads: threads
    });
    let model;
    try {
        model = await llama.loadModel({modelPath, gpuLayers: 0});
    } catch (e) {
        await llama.dispose();
        throw new Error(`llama.cpp cannot load ${modelPath}: ${e.message}`);
    }
    const loadMs = performance.now() - t0;
    return {
        llama, model, threads, loadMs,
        async close() { await model.dispose(); await llama.dispose(); }
    };
}

// A fresh context per call: a sequence with history would silently reuse/append to it.
// The context is sized so that node-llama-cpp never needs a context shift (which would drop
// the start of `ids`); the caller's ids are evaluated exactly, no BOS is added here.
async function withSequence(h, nTokens, fn) {
    const contextSize = Math.max(64, nTokens + 8);
    const context = await h.model.createContext({
        contextSize, batchSize: Math.min(contextSize, 512), sequences: 1,
        threads: h.threads, flashAttention: false
    });
    try {
        return await fn(context.getSequence());
    } finally {
        await context.dispose();
    }
}

function checkIds(h, ids) {
    // An out-of-range id would make llama.cpp abort the process; reject it with a message.
    const nVocab = h.model.fileInfo.metadata?.tokenizer?.ggml?.tokens?.length ?? Infinity;
    for (const t of ids)
        if (!Number.isInteger(t) || t < 0 || t >= nVocab)
            throw new Error(`token id ${t} is not in the vocabulary (size ${nVocab})`);
}

// From the greedy-sampled token and the sorted probability map, the top-2 margin.
function stepResult(pos, next) {
    const argmax = next.token;
    const p1 = next.probabilities.get(argmax);
    let second = -1, p2 = 0;
    for (const [tok, p] of next.probabilities) {  // sorted by probability, highest first
        if (tok !== argmax) { second = tok; p2 = p; break; }
    }
    const margin = p2 > 0 ? Math.log(p1) - Math.log(p2) : Infinity;
    return {pos, argmax, second, margin};
}

// Teacher forcing: evaluates `ids` in one go and returns, for every position
// i >= nPrompt-1, llama.cpp's greedy choice for ids[i+1] given ids[0..i] and its top-2 margin.
// Entry j (pos = nPrompt-1+j) is the prediction for ids[nPrompt+j]; the last one predicts
// past the end of ids.
export async function teacherForce(h, ids, nPrompt) {
    if (!(nPrompt >= 1 && nPrompt <= ids.length)) throw new Error(`bad nPrompt ${nPrompt} for ${ids.length} ids`);
    checkIds(h, ids);
    return withSequence(h, ids.length, async (seq) => {
        const opts = {generateNext: {token: true, probabilities: true, options: {temperature: 0}}};
        const input = ids.map((t, i) => (i >= nPrompt - 1 ? [t, opts] : t));
        const out = await seq.controlledEvaluate(input);
        if (seq.contextTokens.length !== ids.length || seq.contextTokens.some((t, i) => t !== ids[i]))
            throw new Error("node-llama-cpp did not evaluate exactly the given ids");
        const steps = [];
        for (let i = nPrompt - 1; i < ids.length; i++) {
            if (out[i]?.next?.probabilities == null) throw new Error(`no distribution at position ${i}`);
            steps.push(stepResult(i, out[i].next));
        }
        return steps;
    });
}

// Greedy generation of k tokens after `ids` (evaluated exactly as given), one token at a time
// as a decoder would. Used to check that a GGUF loads and runs, and by the smoke test.
export async function greedyGenerate(h, ids, k, {stopAtEog = false} = {}) {
    checkIds(h, ids);
    return withSequence(h, ids.length + k, async (seq) => {
        const gen = [];
        let input = ids;
        for (let step = 0; step < k; step++) {
            const last = input.length - 1;
            const items = input.map((t, i) => (i === last ? [t, {generateNext: {token: true, options: {temperature: 0}}}] : t));
            const out = await seq.controlledEvaluate(items);
            const tok = out[last]?.next?.token;
            if (tok == null) throw new Error(`no token generated at step ${step}`);
            if (stopAtEog && h.model.isEogToken(tok)) break;
            gen.push(tok);
            input = [tok];
        }
        return gen;
    });
}

// ---- CLI ----
function parseArgs(argv) {
    const a = {threads: DEFAULT_THREADS};
    for (let i = 0; i < argv.length; i++) {
        const k = argv[i], v = () => { if (i + 1 >= argv.length) throw new Error(`${k} needs a value`); return argv[++i]; };
        if (k === "--model" || k === "-m") a.model = v();
        else if (k === "--ids") a.ids = v().split(/[,\s]+/).filter(Boolean).map(Number);
        else if (k === "--ids-from") a.idsFrom = v();
        else if (k === "--n-prompt") a.nPrompt = Number(v());
        else if (k === "--generate") a.generate = Number(v());
        else if (k === "--threads") a.threads = Number(v());
        else if (k === "--stop-at-eog") a.stopAtEog = true;
        else throw new Error(`unknown argument ${k}`);
    }
    if (a.idsFrom) {
        const d = JSON.parse(fs.readFileSync(a.idsFrom, "utf8"));
        a.ids = [...d.prompt_ids, ...d.ids];
        a.nPrompt ??= d.prompt_ids.length;
    }
    if (!a.model || !a.ids?.length) throw new Error("need --model and --ids (or --ids-from)");
    return a;
}

async function main() {
    let a;
    try { a = parseArgs(process.argv.slice(2)); } catch (e) {
        console.error(`llama_ref: ${e.message}\nusage: llama_ref.mjs --model M.gguf (--ids 1,2,3 | --ids-from DUMP.json) [--n-prompt N | --generate K [--stop-at-eog]] [--threads T (default ${DEFAULT_THREADS})]`);
        process.exit(2);
    }
    const h = await openModel(a.model, {threads: a.threads});
    const t0 = performance.now();
    let result;
    if (a.generate != null) result = {ids: await greedyGenerate(h, a.ids, a.generate, {stopAtEog: a.stopAtEog})};
    else result = {n_prompt: a.nPrompt ?? a.ids.length, steps: await teacherForce(h, a.ids, a.nPrompt ?? a.ids.length)};
    result.load_ms = Math.round(h.loadMs);
    result.eval_ms = Math.round(performance.now() - t0);
    console.log(JSON.stringify(result));
    await h.close();
}

if (path.resolve(process.argv[1] ?? "") === fileURLToPath(import.meta.url)) {
    main().catch((e) => { console.error(`llama_ref: ${e.message}`); process.exit(2); });
}
