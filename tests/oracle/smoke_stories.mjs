#!/usr/bin/env node
// Checks the oracle harness itself: llama.cpp (via llama_ref.mjs) must reproduce the reference
// greedy continuations of stories260K. Then "ridge == llama.cpp" (check_greedy.mjs) together
// with this test gives "ridge == llama.cpp == reference".
//
//   node tests/oracle/smoke_stories.mjs [--model M.gguf] [--tsv M.greedy.tsv] [--threads T]
//
// TSV: prompt<TAB>n_predict<TAB>expected continuation ("\n" written as backslash-n). The prompt
// is tokenized with BOS and SentencePiece's leading space (llama.cpp's own tokenizer); fewer
// tokens than n_predict in the expectation means the model emitted EOS.
// Each prompt is also teacher-forced through teacherForce(), whose argmax must equal the
// incrementally generated ids: batch evaluation and step-by-step decoding agree, so the
// oracle used by check_greedy.mjs sees the same model as plain generation.
import fs from "node:fs";
import {openModel, teacherForce, greedyGenerate, DEFAULT_THREADS} from "./llama_ref.mjs";

const args = {model: "/work/shared/models/stories260K.gguf", tsv: null, threads: DEFAULT_THREADS};
for (let i = 2; i < process.argv.length; i += 2) {
    const k = process.argv[i].replace(/^--/, ""), v = process.argv[i + 1];
    if (!(k in args) || v == null) { console.error(`smoke_stories: bad argument ${process.argv[i]}`); process.exit(2); }
    args[k] = k === "threads" ? Number(v) : v;
}
args.tsv ??= args.model.replace(/\.gguf$/, ".greedy.tsv");

const cases = fs.readFileSync(args.tsv, "utf8").split("\n").filter((l) => l.trim() !== "").map((l) => {
    const [prompt, n, expected] = l.split("\t");
    return {prompt, n: Number(n), expected: (expected ?? "").replaceAll("\\n", "\n")};
});

const h = await openModel(args.model, {threads: args.threads});
console.log(`llama.cpp load (getLlama + loadModel): ${h.loadMs.toFixed(0)} ms, threads=${args.threads}`);
const m = h.model;
let failures = 0;
const t0 = performance.now();
for (const c of cases) {
    const promptIds = [...(m.tokens.shouldPrependBosToken && m.tokens.bos != null ? [m.tokens.bos] : []), ...m.tokenize(c.prompt)];
    const gen = await greedyGenerate(h, promptIds, c.n, {stopAtEog: true});
    // Detokenize prompt+continuation and strip the prompt's text: detokenizing the continuation
    // alone would drop its leading space (SentencePiece strips it from the first piece).
    const promptText = m.detokenize(promptIds);
    const fullText = m.detokenize([...promptIds, ...gen]);
    const got = fullText.startsWith(promptText) ? fullText.slice(promptText.length) : `<prefix mismatch> ${fullText}`;
    const problems = [];
    if (got !== c.expected) problems.push(`text differs\n  expected: ${JSON.stringify(c.expected)}\n  got:      ${JSON.stringify(got)}`);
    if (gen.length > 0) {
        const steps = await teacherForce(h, [...promptIds, ...gen], promptIds.length);
        const bad = gen.findIndex((t, j) => steps[j].argmax !== t);
        if (bad >= 0) problems.push(`teacher forcing disagrees with generation at step ${bad}: ${steps[bad].argmax} vs ${gen[bad]}`);
    }
    const label = `${JSON.stringify(c.prompt)} n=${c.n} generated=${gen.length}`;
    if (problems.length === 0) console.log(`OK   ${label}`);
    else { failures++; console.log(`FAIL ${label}\n  ${problems.join("\n  ")}`); }
}
console.log(`smoke_stories: ${cases.length - failures}/${cases.length} OK, ${(performance.now() - t0).toFixed(0)} ms for generation+teacher forcing`);
await h.close();
process.exit(failures === 0 && cases.length > 0 ? 0 : 1);
