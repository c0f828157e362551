// Reference renders for the chat-template test: expands tests/chat/conversations.json
// (templates x conversations x options) into explicit cases, renders each with
// @huggingface/jinja (the implementation ridge must match byte for byte), and writes
//   OUT/cases.json       [{name, template_name, template, context}]  (ridge --batch input)
//   OUT/reference.jsonl  one {name, output} or {name, error} per case
// usage: node tests/chat/render_reference.mjs tests/chat/conversations.json OUT_DIR
import { Template } from "@huggingface/jinja";
import fs from "node:fs";
import path from "node:path";

const [specPath, outDir] = process.argv.slice(2);
if (!specPath || !outDir) {
  console.error("usage: node render_reference.mjs conversations.json OUT_DIR");
  process.exit(2);
}
const spec = JSON.parse(fs.readFileSync(specPath, "utf8"));
const root = process.cwd();

// Minimal GGUF metadata reader: the chat template and the bos/eos token strings, read
// independently of ridge's own reader.
function readGguf(file) {
  const b = fs.readFileSync(file);
  let o = 0;
  const u32 = () => { const v = b.readUInt32LE(o); o += 4; return v; };
  const u64 = () => { const v = Number(b.readBigUInt64LE(o)); o += 8; return v; };
  const str = () => { const n = u64(); const s = b.toString("utf8", o, o + n); o += n; return s; };
  const sizes = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
  const scalar = (t) => {
    switch (t) {
      case 0: return b.readUInt8(o++);
      case 1: return b.readInt8(o++);
      case 2: { const v = b.readUInt16LE(o); o += 2; return v; }
      case 3: { const v = b.readInt16LE(o); o += 2; return v; }
      case 4: return u32();
      case 5: { const v = b.readInt32LE(o); o += 4; return v; }
      case 6: { const v = b.readFloatLE(o); o += 4; return v; }
      case 7: return b.readUInt8(o++) !== 0;
      case 8: return str();
      case 10: return u64();
      case 11: { const v = Number(b.readBigInt64LE(o)); o += 8; return v; }
      case 12: { const v = b.readDoubleLE(o); o += 8; return v; }
      default: throw new Error(`${file}: GGUF type ${t}`);
    }
  };
  const value = (t) => {
    if (t !== 9) return scalar(t);
    const et = u32(), n = u64();
    if (et === 8) { const a = []; for (let i = 0; i < n; ++i) a.push(str()); return a; }
    if (et === 9) throw new Error("nested GGUF arrays not needed here");
    o += n * sizes[et];
    return null;
  };
  if (b.toString("latin1", 0, 4) !== "GGUF") throw new Error(`${file}: not a GGUF`);
  o = 4;
  u32();
  u64();
  const nkv = u64();
  const kv = {};
  for (let i = 0; i < nkv; ++i) { const k = str(); kv[k] = value(u32()); }
  return kv;
}

function loadTemplate(name, t) {
  const abs = (p) => path.resolve(root, p);
  if (t.source !== undefined) return { src: t.source, bos: t.bos_token ?? "", eos: t.eos_token ?? "" };
  if (t.config) {
    if (!fs.existsSync(abs(t.config))) return { skip: `${t.config} not found` };
    const c = JSON.parse(fs.readFileSync(abs(t.config), "utf8"));
    const tok = (x) => (typeof x === "string" ? x : x && typeof x.content === "string" ? x.content : "");
    let src = c.chat_template;
    if (Array.isArray(src)) src = (src.find((x) => x.name === "default") ?? {}).template;
    if (typeof src !== "string") return { skip: `${t.config} has no chat_template` };
    return { src, bos: tok(c.bos_token), eos: tok(c.eos_token), config: t.config };
  }
  if (t.gguf) {
    if (!fs.existsSync(abs(t.gguf))) return { skip: `${t.gguf} not found` };
    const kv = readGguf(abs(t.gguf));
    const src = kv["tokenizer.chat_template"];
    if (typeof src !== "string") return { skip: `${t.gguf} has no tokenizer.chat_template` };
    const toks = kv["tokenizer.ggml.tokens"] ?? [];
    const tk = (k) => (kv[k] !== undefined && toks[kv[k]] !== undefined ? toks[kv[k]] : "");
    return { src, bos: tk("tokenizer.ggml.bos_token_id"), eos: tk("tokenizer.ggml.eos_token_id"), gguf: t.gguf };
  }
  throw new Error(`template ${name}: needs source, config or gguf`);
}

const templates = {};
for (const [name, t] of Object.entries(spec.templates)) {
  templates[name] = loadTemplate(name, t);
  if (templates[name].skip) console.error(`chat templates: skipping ${name}: ${templates[name].skip}`);
}

const asList = (x) => (Array.isArray(x) ? x : [x]);
const cases = [];
for (const group of spec.cases) {
  for (const tname of group.templates) {
    const t = templates[tname];
    if (!t || t.skip) continue;
    for (const conv of asList(group.messages)) {
      for (const gen of asList(group.add_generation_prompt ?? true)) {
        for (const vars of asList(group.vars ?? {})) {
          const context = { messages: spec.conversations[conv], add_generation_prompt: gen, bos_token: t.bos, eos_token: t.eos };
          if (!context.messages) throw new Error(`unknown conversation ${conv}`);
          if (group.tools) context.tools = spec.tools[group.tools];
          Object.assign(context, vars);
          const varText = Object.entries(vars).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(",");
          const name = `${tname}/${conv}${group.tools ? "+tools" : ""}/gen=${gen}${varText ? "/" + varText : ""}`;
          cases.push({ name, template_name: tname, template: t.src, context, expect_error: group.expect_error ?? null,
                       source: t.config ?? t.gguf ?? "inline" });
        }
      }
    }
  }
}

fs.mkdirSync(outDir, { recursive: true });
const lines = cases.map((c) => {
  try {
    return JSON.stringify({ name: c.name, output: new Template(c.template).render(c.context) });
  } catch (e) {
    return JSON.stringify({ name: c.name, error: String(e.message ?? e) });
  }
});
fs.writeFileSync(path.join(outDir, "cases.json"), JSON.stringify(cases, null, 1));
fs.writeFileSync(path.join(outDir, "reference.jsonl"), lines.join("\n") + "\n");
console.error(`chat templates: ${cases.length} reference renders written to ${outDir}`);
