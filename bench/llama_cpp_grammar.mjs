#!/usr/bin/env node
// Same-run baseline for structured output's cost: llama.cpp (node-llama-cpp 3.21.1,
// prebuilt CPU binary) decoding with and without its JSON-schema grammar
// (LlamaJsonSchemaGrammar) on the same GGUF, prompt and schema.
//   node bench/llama_cpp_grammar.mjs --model M.gguf --schema S.json [-p PROMPT] [-n N] [--threads T] [--runs R]
// Prints one JSON line per run and mode: {mode, tokens, decode_tps} (tokens: as generated,
// counted by the onToken callback; the prompt's evaluation is timed apart).
import {getLlama, LlamaLogLevel, LlamaCompletion} from "node-llama-cpp";
import fs from "node:fs";

const args = process.argv.slice(2);
const opt = (name, dflt) => {
    const i = args.indexOf(name);
    return i >= 0 && i + 1 < args.length ? args[i + 1] : dflt;
};
const modelPath = opt("--model"), schemaPath = opt("--schema");
const prompt = opt("-p", "Hello"), n = Number(opt("-n", "96")), threads = Number(opt("--threads", "2"));
const runs = Number(opt("--runs", "2"));
if (!modelPath || !schemaPath) {
    console.error("usage: llama_cpp_grammar.mjs --model M.gguf --schema S.json [-p PROMPT] [-n N] [--threads T] [--runs R]");
    process.exit(2);
}
const llama = await getLlama({gpu: false, build: "never", skipDownload: true, usePrebuiltBinaries: true,
                              progressLogs: false, logLevel: LlamaLogLevel.error, maxThreads: threads});
const model = await llama.loadModel({modelPath, gpuLayers: 0});
const grammar = await llama.createGrammarForJsonSchema(JSON.parse(fs.readFileSync(schemaPath, "utf8")));
for (let r = 0; r < runs; ++r) {
    for (const mode of ["plain", "schema"]) {
        const context = await model.createContext({contextSize: 512, threads, flashAttention: false});
        const completion = new LlamaCompletion({contextSequence: context.getSequence()});
        // The prompt alone first (one token generated), so the timed call decodes only.
        await completion.generateCompletion(prompt, {maxTokens: 1, temperature: 0});
        let tokens = 0;
        const t0 = performance.now();
        await completion.generateCompletion(prompt, {maxTokens: n, temperature: 0, onToken: (t) => { tokens += t.length; },
                                                     ...(mode === "schema" ? {grammar} : {})});
        const s = (performance.now() - t0) / 1000;
        console.log(JSON.stringify({mode, tokens, decode_tps: tokens / s, run: r}));
        completion.dispose();
        await context.dispose();
    }
}
await model.dispose();
await llama.dispose();
