#!/usr/bin/env node
// Stand-in for `ridge generate ... --dump-json OUT` so check_greedy.mjs can be tested before
// (or without) the real binary. It answers with llama.cpp's own greedy ids and margins, so
// check_greedy must report 0 mismatches; environment knobs break it on purpose:
//   FAKE_RIDGE_CORRUPT=3,7   replace ids[3] and ids[7] by llama.cpp's second choice -> mismatches
//   FAKE_RIDGE_TIE=0,1       ridge margin 0 at those steps -> skipped_near_tie
//   FAKE_RIDGE_SHORT=1       drop the last id -> "generated N-1 ids" failure
//   FAKE_RIDGE_EXIT=3        exit with that status without writing anything -> launch error (2)
// Example:
//   node tests/oracle/check_greedy.mjs --ridge tests/oracle/fake_ridge.mjs \
//        --model /work/shared/models/stories260K.gguf --prompt "Once upon a time" -n 32
import fs from "node:fs";
import {openModel, teacherForce, greedyGenerate} from "./llama_ref.mjs";

const argv = process.argv.slice(2);
if (argv[0] !== "generate") { console.error("fake_ridge: only `generate` is supported"); process.exit(2); }
const opt = (name) => { const i = argv.indexOf(name); return i >= 0 ? argv[i + 1] : undefined; };
const model = opt("-m"), prompt = opt("-p"), n = Number(opt("-n")), out = opt("--dump-json");
if (!model || prompt == null || !(n > 0) || !out || opt("--temp") !== "0" || !argv.includes("--ignore-eos")) {
    console.error(`fake_ridge: unexpected arguments: ${argv.join(" ")}`); process.exit(2);
}
if (process.env.FAKE_RIDGE_EXIT) { console.error("fake_ridge: failing on purpose"); process.exit(Number(process.env.FAKE_RIDGE_EXIT)); }
const list = (v) => new Set((v ?? "").split(",").filter(Boolean).map(Number));

const h = await openModel(model);
const m = h.model;
const promptIds = [...(m.tokens.shouldPrependBosToken && m.tokens.bos != null ? [m.tokens.bos] : []), ...m.tokenize(prompt)];
const ids = await greedyGenerate(h, promptIds, n);  // no EOS stop: --ignore-eos
const ref = await teacherForce(h, [...promptIds, ...ids], promptIds.length);
const text = m.detokenize(ids);
await h.close();

const corrupt = list(process.env.FAKE_RIDGE_CORRUPT), tie = list(process.env.FAKE_RIDGE_TIE);
const dump = {
    prompt_ids: promptIds,
    ids: ids.map((t, i) => (corrupt.has(i) ? ref[i].second : t)),
    margins: ids.map((_, i) => (tie.has(i) ? 0 : ref[i].margin)),  // Infinity -> null in JSON
};
if (process.env.FAKE_RIDGE_SHORT) { dump.ids.pop(); dump.margins.pop(); }
fs.writeFileSync(out, JSON.stringify(dump));
process.stdout.write(text + "\n");
