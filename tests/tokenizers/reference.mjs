// The reference side of the HF tokenizer test: encodes and decodes a corpus with
// @huggingface/tokenizers (a JS port of the Rust `tokenizers` pipelines, Oniguruma regex
// semantics included), offline, from a model's tokenizer.json + tokenizer_config.json.
//
//   node reference.mjs MODEL_DIR CORPUS.jsonl OUT.jsonl
//
// OUT has one JSON object per corpus line:
//   ids           encode(text, add_special_tokens=false)
//   ids_special   encode(text, add_special_tokens=true), BOS/EOS as transformers adds them
//   text          decode(ids), special tokens skipped, no clean-up of spaces
//   text_special  decode(ids_special), likewise
// and OUT.ids / OUT.ids_special: the two id lists alone, one JSON array per line.
//
// Two deliberate choices, matching what ridge implements (see src/tokenizer/hf_tokenizer.h):
// - No special-token parsing: a special added token's text in the input stays text (the
//   Rust library's encode_special_tokens=true; prompts from users must not smuggle control
//   tokens in). The JS library always matches added tokens, so every special added token's
//   content is replaced by a string no corpus line contains before loading; ids, the
//   "special" flag (decode skips them) and the model vocabulary stay as they were.
//   Non-special added tokens (Gemma's "<table>", Qwen's "<think>") are still split out.
// - BOS/EOS: when tokenizer_config.json sets add_bos_token / add_eos_token, transformers'
//   Llama/Gemma fast tokenizers rebuild the post-processor as "[BOS] $A [EOS]" from those
//   flags (DeepSeek-V3 ships a ByteLevel post-processor but add_bos_token: true); without
//   them the tokenizer.json post-processor decides. The JS library only knows the latter.
import { readFileSync, writeFileSync } from "node:fs";
import path from "node:path";

import { Tokenizer } from "@huggingface/tokenizers";  // resolved from the repository's node_modules

export function loadReference(dir) {
  const tj = JSON.parse(readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
  let cfg = {};
  try {
    cfg = JSON.parse(readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
  } catch {}
  const original = new Map((tj.added_tokens ?? []).map((t) => [t.content, t.id]));
  for (const t of tj.added_tokens ?? []) if (t.special) t.content = `\uE000special-${t.id}\uE001`;
  const tok = new Tokenizer(tj, cfg);
  const name = (t) => (t === null || t === undefined ? null : typeof t === "string" ? t : t.content);
  const idOf = (t) => {
    const n = name(t);
    if (n === null) return null;
    return original.get(n) ?? tj.model.vocab[n] ?? null;
  };
  const flags = typeof cfg.add_bos_token === "boolean" || typeof cfg.add_eos_token === "boolean";
  const bos = cfg.add_bos_token === true ? idOf(cfg.bos_token) : null;
  const eos = cfg.add_eos_token === true ? idOf(cfg.eos_token) : null;
  const encode = (text, special) => {
    const ids = tok.encode(text, { add_special_tokens: special && !flags }).ids;
    if (!special || !flags) return ids;
    return [...(bos !== null ? [bos] : []), ...ids, ...(eos !== null ? [eos] : [])];
  };
  const decode = (ids) =>
    ids.length === 0 ? "" : tok.decode(ids, { skip_special_tokens: true, clean_up_tokenization_spaces: false });
  return { encode, decode };
}

if (process.argv[1] === new URL(import.meta.url).pathname) {
  const [dir, corpus, out] = process.argv.slice(2);
  if (!out) {
    console.error("usage: node reference.mjs MODEL_DIR CORPUS.jsonl OUT.jsonl");
    process.exit(2);
  }
  const ref = loadReference(dir);
  const lines = readFileSync(corpus, "utf8").split("\n").filter((l) => l.length > 0);
  const res = lines.map((l) => {
    const s = JSON.parse(l);
    const ids = ref.encode(s, false);
    const ids_special = ref.encode(s, true);
    return JSON.stringify({ ids, ids_special, text: ref.decode(ids), text_special: ref.decode(ids_special) });
  });
  writeFileSync(out, res.join("\n") + "\n");
  // The ids alone, one JSON array per line, for `ridge tokenize --decode` to decode.
  const ids = res.map((r) => JSON.parse(r));
  writeFileSync(out + ".ids", ids.map((r) => JSON.stringify(r.ids)).join("\n") + "\n");
  writeFileSync(out + ".ids_special", ids.map((r) => JSON.stringify(r.ids_special)).join("\n") + "\n");
}
