#!/usr/bin/env node
// Checks ridge's greedy decoding against llama.cpp, step by step.
//
//   node tests/oracle/check_greedy.mjs --ridge RIDGE --model M.gguf --prompt "text" -n 32
//        [--min-margin 1e-3] [--threads T] [--timeout 600] [--keep]
//
// Runs `RIDGE generate -m M.gguf -p TEXT -n N --temp 0 --ignore-eos --dump-json OUT.json`,
// which writes {"prompt_ids":[...], "ids":[...], "margins":[...]} (prompt_ids with BOS if ridge
// added one; margins[i] = ridge's top-1 minus top-2 logit at the step that produced ids[i]).
// Then llama.cpp is teacher-forced with prompt_ids+ids (llama_ref.mjs): at every step it sees
// exactly ridge's prefix, so one divergence does not cascade and every step is judged on its own.
// A step is compared only if both margins exceed --min-margin: near ties may flip on rounding
// differences that say nothing about correctness.
// Exit: 0 agree; 1 a mismatch, a short output, or fewer than half the steps comparable;
// 2 usage, launch or malformed-output errors.
import {spawnSync} from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {openModel, teacherForce, DEFAULT_THREADS} from "./llama_ref.mjs";

const USAGE = "usage: check_greedy.mjs --ridge RIDGE --model M.gguf --prompt TEXT -n N [--min-margin 1e-3] [--threads T] [--timeout SECONDS] [--keep] [--ridge-arg ARG]...";
function fail(code, msg) { console.error(`check_greedy: ${msg}`); process.exit(code); }

function parseArgs(argv) {
    const a = {minMargin: 1e-3, threads: DEFAULT_THREADS, timeout: 600, keep: false, ridgeArgs: []};
    for (let i = 0; i < argv.length; i++) {
        const k = argv[i];
        const v = () => { if (i + 1 >= argv.length) fail(2, `${k} needs a value\n${USAGE}`); return argv[++i]; };
        const num = (x) => { const n = Number(x); if (!Number.isFinite(n)) fail(2, `${k}: not a number: ${x}`); return n; };
        if (k === "--ridge") a.ridge = v();
        else if (k === "--model" || k === "-m") a.model = v();
        else if (k === "--prompt" || k === "-p") a.prompt = v();
        else if (k === "-n" || k === "--n-predict") a.n = num(v());
        else if (k === "--min-margin") a.minMargin = num(v());
        else if (k === "--threads") a.threads = num(v());
        else if (k === "--timeout") a.timeout = num(v());
        else if (k === "--keep") a.keep = true;
        else if (k === "--ridge-arg") a.ridgeArgs.push(v());  // passed on to ridge generate
        else fail(2, `unknown argument ${k}\n${USAGE}`);
    }
    if (!a.ridge || !a.model || a.prompt == null || a.n == null) fail(2, `missing arguments\n${USAGE}`);
    if (!Number.isInteger(a.n) || a.n < 1) fail(2, `-n must be a positive integer`);
    if (!fs.existsSync(a.model)) fail(2, `model not found: ${a.model}`);
    if (!fs.existsSync(a.ridge)) fail(2, `ridge binary not found: ${a.ridge}`);
    return a;
}

function runRidge(a, outPath) {
    const argv = ["generate", "-m", a.model, "-p", a.prompt, "-n", String(a.n), "--temp", "0", "--ignore-eos", "--dump-json", outPath, ...a.ridgeArgs];
    const t0 = performance.now();
    const r = spawnSync(a.ridge, argv, {encoding: "utf8", timeout: a.timeout * 1000, maxBuffer: 64 << 20});
    const secs = (performance.now() - t0) / 1000;
    const cmd = [a.ridge, ...argv].map((s) => JSON.stringify(s)).join(" ");
    if (r.error) fail(2, `could not run ${cmd}: ${r.error.message}`);
    if (r.status !== 0) fail(2, `ridge exited with ${r.signal ?? r.status}: ${cmd}\n${(r.stderr ?? "").slice(-4000)}`);
    let d;
    try { d = JSON.parse(fs.readFileSync(outPath, "utf8")); } catch (e) { fail(2, `ridge wrote no readable ${outPath}: ${e.message}`); }
    const ints = (x) => Array.isArray(x) && x.every(Number.isInteger);
    if (!ints(d.prompt_ids) || d.prompt_ids.length === 0 || !ints(d.ids) || !Array.isArray(d.margins) || d.margins.length !== d.ids.length)
        fail(2, `malformed dump ${outPath}: need integer prompt_ids (non-empty), integer ids, margins with ids.length entries`);
    // JSON has no Infinity: a null margin means "no second candidate", i.e. no tie.
    d.margins = d.margins.map((m) => (m == null ? Infinity : m));
    return {dump: d, secs};
}

const a = parseArgs(process.argv.slice(2));
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "ridge-oracle-"));
process.on("exit", () => (a.keep ? console.error(`check_greedy: kept ${tmp}`) : fs.rmSync(tmp, {recursive: true, force: true})));
const {dump, secs: ridgeSecs} = runRidge(a, path.join(tmp, "out.json"));

let h;
try { h = await openModel(a.model, {threads: a.threads}); } catch (e) { fail(2, `llama.cpp could not load ${a.model}: ${e.message}`); }
const t0 = performance.now();
let ref;
try { ref = await teacherForce(h, [...dump.prompt_ids, ...dump.ids], dump.prompt_ids.length); } catch (e) { fail(2, `llama.cpp teacher forcing failed: ${e.message}`); }
const evalSecs = (performance.now() - t0) / 1000;
await h.close();

let compared = 0, skipped = 0, mismatches = 0;
const fmt = (m) => (Number.isFinite(m) ? m.toFixed(4) : "inf");
for (let i = 0; i < dump.ids.length; i++) {
    const r = ref[i];  // llama.cpp's prediction for ids[i] given prompt_ids + ids[0..i-1]
    if (!(dump.margins[i] > a.minMargin && r.margin > a.minMargin)) { skipped++; continue; }
    compared++;
    if (r.argmax !== dump.ids[i]) {
        mismatches++;
        console.log(`mismatch step=${i} pos=${r.pos + 1} ridge=${dump.ids[i]} llama=${r.argmax} ridge_margin=${fmt(dump.margins[i])} llama_margin=${fmt(r.margin)} llama_second=${r.second}`);
    }
}
const steps = dump.ids.length;
console.log(`oracle: model=${path.basename(a.model)} steps=${steps} compared=${compared} skipped_near_tie=${skipped} mismatches=${mismatches}`);
console.error(`check_greedy: ridge ${ridgeSecs.toFixed(2)} s, llama.cpp load ${(h.loadMs / 1000).toFixed(2)} s + teacher forcing ${evalSecs.toFixed(2)} s (threads=${a.threads})`);
let bad = mismatches > 0;
if (steps !== a.n) { console.log(`oracle: ridge generated ${steps} ids, asked for ${a.n} (with --ignore-eos)`); bad = true; }
if (compared * 2 < a.n) { console.log(`oracle: only ${compared} of ${a.n} steps comparable (need half)`); bad = true; }
process.exit(bad ? 1 : 0);
