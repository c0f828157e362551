#!/usr/bin/env node
// ridge's tokenizer against llama.cpp's (node-llama-cpp 3.21.1, prebuilt CPU binary, offline)
// on every vocabulary GGUF in ../shared/vocab: ~2000 generated strings per vocabulary (fixed
// seed) of English, code, CJK, emoji, whitespace runs, digit runs and random code points,
// tokenized without BOS and without special-token parsing, plus a few hundred with special
// token texts mixed in, tokenized with parsing on. ridge gets all strings of a vocabulary in
// one process (`ridge tokenize --jsonl`).
//   usage: node tests/oracle/tokenizer_vs_llama.mjs [--ridge build/ridge] [--vocab-dir DIR]
//          [--n 2000] [--seed 1] [--only NAME] [--show 5]
// Prints `tokenizers: N passed, M failed` (N, M: strings) and exits 1 on any mismatch.
import {getLlama, LlamaLogLevel} from "node-llama-cpp";
import {execFileSync} from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {fileURLToPath} from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, "../..");

function parseArgs(argv) {
    const a = {
        ridge: process.env.RIDGE_BIN ?? path.join(repo, "build/ridge"),
        vocabDir: path.join(process.env.RIDGE_SHARED_DIR ?? path.join(repo, "../shared"), "vocab"),
        n: 2000, seed: 1, only: null, show: 5
    };
    for (let i = 0; i < argv.length; i++) {
        const k = argv[i], v = () => { if (i + 1 >= argv.length) throw new Error(`${k} needs a value`); return argv[++i]; };
        if (k === "--ridge") a.ridge = v();
        else if (k === "--vocab-dir") a.vocabDir = v();
        else if (k === "--n") a.n = Number(v());
        else if (k === "--seed") a.seed = Number(v());
        else if (k === "--only") a.only = v();
        else if (k === "--show") a.show = Number(v());
        else throw new Error(`unknown argument ${k}`);
    }
    return a;
}

// mulberry32: a small seeded PRNG, so every run tests the same strings.
function rng(seed) {
    let s = seed >>> 0;
    return () => {
        s = (s + 0x6D2B79F5) >>> 0;
        let t = s;
        t = Math.imul(t ^ (t >>> 15), t | 1);
        t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
        return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
}

const WORDS = ("the quick brown fox jumps over lazy dog Hello World I'm you're we'll they've she'd it's " +
    "DON'T Can't isn't tokenization llama transformer attention café naïve résumé Ωmega straße " +
    "über coöperate Zürich São Paulo Москва Київ Ελληνικά עברית العربية हिन्दी ไทย").split(" ");
const CODE = ["for (int i = 0; i < n; ++i) {", "    x[i] += y[i] * 2;", "}", "def f(x):\n\treturn x**2",
    "if (a && b || !c) return -1;", "const s = `${a}-${b}`;", "#include <stdio.h>", "std::vector<int> v{1,2,3};",
    "x = {'k': [1, 2.5e-3, None]}", "<div class=\"a\">&nbsp;</div>", "SELECT * FROM t WHERE id=42;",
    "$ ls -la | grep '^d' >> out.txt", "a+=b; c-=d; e*=f; g/=h; i%=j; k^=l; m|=n; o~p", "//comment\n/* block */"];
const WS = [" ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\r\n", " \n", "\n ", " \t ", "\u00A0", "\u3000",
    "\u2009", "\u0085", "\u2028", "        ", "\n\n\n"];
const SPECIAL_TEXTS = ["<|endoftext|>", "<s>", "</s>", "<unk>", "<|end|>", "<|user|>", "<|assistant|>",
    "<|im_start|>", "<|im_end|>", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<pad>", "<|padding|>"];

function gen(r, n) {
    const pick = (arr) => arr[Math.floor(r() * arr.length)];
    const int = (lo, hi) => lo + Math.floor(r() * (hi - lo + 1));
    const cp = (lo, hi) => String.fromCodePoint(int(lo, hi));
    const randomCodePoint = () => {
        // Anywhere in Unicode except surrogates (JS strings cannot carry a lone one as UTF-8)
        // and NUL; weighted toward the BMP where the assigned characters are.
        for (;;) {
            const c = r() < 0.8 ? int(1, 0xFFFF) : int(0x10000, 0x10FFFF);
            if (c < 0xD800 || c > 0xDFFF) return String.fromCodePoint(c);
        }
    };
    const parts = {
        english: () => Array.from({length: int(1, 12)}, () => pick(WORDS)).join(pick([" ", " ", " ", ", ", ". ", "  "])),
        code: () => Array.from({length: int(1, 4)}, () => pick(CODE)).join("\n"),
        cjk: () => Array.from({length: int(1, 10)}, () => pick([() => cp(0x4E00, 0x9FFF), () => cp(0x3040, 0x30FF),
            () => cp(0xAC00, 0xD7A3), () => pick(["，", "。", "、", "！", "？", "「", "」", "　"])])()).join(""),
        emoji: () => Array.from({length: int(1, 5)}, () => pick([() => cp(0x1F300, 0x1FAFF), () => "👍🏽",
            () => "👨‍👩‍👧", () => "🇫🇷", () => "❤️", () => "🦙"])()).join(pick(["", " ", ""])),
        ws: () => Array.from({length: int(1, 4)}, () => pick(WS)).join(""),
        digits: () => Array.from({length: int(1, 3)}, () => String(Math.floor(r() * 10 ** int(1, 15)))
            .padStart(int(1, 12), "0")).join(pick([" ", ",", ".", "", "-", "١٢٣"])),
        random: () => Array.from({length: int(1, 8)}, randomCodePoint).join(""),
        punct: () => Array.from({length: int(1, 8)}, () => pick([..."!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~…—–«»¿¡"])).join(""),
        contraction: () => pick(WORDS) + pick(["'s", "'S", "'t", "'re", "'VE", "'m", "'ll", "'d", "'x", "’s"]),
        // Literal special-token texts: without parsing, user-defined ones still split out.
        special: () => pick(SPECIAL_TEXTS),
    };
    const kinds = Object.keys(parts);
    const out = [];
    for (let i = 0; i < n; i++) {
        // Half single-kind strings, half mixtures joined by whitespace or nothing.
        let s;
        if (i % 2 === 0) s = parts[kinds[i / 2 % kinds.length]]();
        else s = Array.from({length: int(2, 6)}, () => parts[pick(kinds)]()).join(pick(["", " ", "\n", "  ", "\t"]));
        if (r() < 0.15) s = pick(WS) + s;
        if (r() < 0.15) s += pick(WS);
        out.push(s);
    }
    return out;
}

function genSpecial(r, n) {
    const base = gen(r, n);
    const pick = (arr) => arr[Math.floor(r() * arr.length)];
    return base.map((s) => {
        const at = Math.floor(r() * (s.length + 1));
        const sp = pick(SPECIAL_TEXTS);
        return s.slice(0, at) + sp + (r() < 0.5 ? " " : "") + s.slice(at) + (r() < 0.3 ? pick(SPECIAL_TEXTS) : "");
    }).filter((s) => !/[\uD800-\uDFFF]/.test(s.replace(/[\uD800-\uDBFF][\uDC00-\uDFFF]/g, "")));
}

function ridgeTokenize(ridge, model, texts, parseSpecial) {
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "ridge-tok-"));
    try {
        const file = path.join(tmp, "in.jsonl");
        fs.writeFileSync(file, texts.map((t) => JSON.stringify(t)).join("\n") + "\n");
        const args = ["tokenize", "-m", model, "--ids", "--no-bos", "--jsonl", "-f", file];
        if (parseSpecial) args.push("--parse-special");
        const out = execFileSync(ridge, args, {encoding: "utf8", maxBuffer: 1 << 28, stdio: ["ignore", "pipe", "pipe"]});
        const lines = out.split("\n");
        lines.pop();  // the text ends with a newline
        if (lines.length !== texts.length) throw new Error(`ridge gave ${lines.length} lines for ${texts.length} texts`);
        return lines.map((l) => (l === "" ? [] : l.split(" ").map(Number)));
    } finally {
        fs.rmSync(tmp, {recursive: true, force: true});
    }
}

async function main() {
    const a = parseArgs(process.argv.slice(2));
    if (!fs.existsSync(a.ridge)) throw new Error(`no ridge binary at ${a.ridge} (pass --ridge)`);
    if (!fs.existsSync(a.vocabDir)) {
        if (process.env.CI === "true") throw new Error(`no vocabulary folder at ${a.vocabDir} (required under CI=true)`);
        console.log(`SKIP: no vocabulary folder at ${a.vocabDir}`);
        return;
    }
    const files = fs.readdirSync(a.vocabDir).filter((f) => /^ggml-vocab-.*\.gguf$/.test(f)).sort()
        .filter((f) => !a.only || f.includes(a.only));
    const llama = await getLlama({
        gpu: false, build: "never", skipDownload: true, usePrebuiltBinaries: true,
        progressLogs: false, logLevel: LlamaLogLevel.error, maxThreads: 1,
        // llama.cpp logs a "missing tensor" error for every vocabulary-only file even with
        // vocabOnly (the tokenizer loads fine); keep any other message.
        logger: (level, message) => { if (!/missing tensor|failed to load model/.test(message)) console.error(message); }
    });
    let pass = 0, fail = 0;
    try {
        for (const f of files) {
            const modelPath = path.join(a.vocabDir, f);
            const model = await llama.loadModel({modelPath, vocabOnly: true});
            const r = rng(a.seed);
            const cases = [
                ...gen(r, a.n).map((t) => ({t, special: false})),
                ...genSpecial(r, Math.ceil(a.n / 10)).map((t) => ({t, special: true}))
            ];
            const results = {};
            for (const special of [false, true]) {
                const texts = cases.filter((c) => c.special === special).map((c) => c.t);
                results[special] = {texts, ridge: ridgeTokenize(a.ridge, modelPath, texts, special),
                    llama: texts.map((t) => Array.from(model.tokenize(t, special)))};
            }
            let p = 0, m = 0;
            const shown = [];
            for (const special of [false, true]) {
                const {texts, ridge, llama: ref} = results[special];
                for (let i = 0; i < texts.length; i++) {
                    const same = ridge[i].length === ref[i].length && ridge[i].every((x, k) => x === ref[i][k]);
                    if (same) { p++; continue; }
                    m++;
                    if (shown.length < a.show)
                        shown.push(`  ${special ? "[special] " : ""}${JSON.stringify(texts[i])}\n` +
                            `    llama.cpp: ${ref[i].join(" ")}\n    ridge:     ${ridge[i].join(" ")}`);
                }
            }
            console.log(`${f}: ${p} passed, ${m} failed`);
            for (const s of shown) console.log(s);
            pass += p;
            fail += m;
            await model.dispose();
        }
    } finally {
        await llama.dispose();
    }
    console.log(`tokenizers: ${pass} passed, ${fail} failed`);
    process.exit(fail === 0 ? 0 : 1);
}

main().catch((e) => { console.error(`tokenizer_vs_llama: ${e.message}`); process.exit(2); });
