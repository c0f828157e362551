#!/usr/bin/env node
// Independent writer of Hugging Face-style checkpoints, for testing ridge's safetensors loader.
//
// Converts a GGUF model (llama.cpp format, e.g. from `ridge mkmodel`) into a directory laid out
// the way Hugging Face transformers saves one: config.json plus model.safetensors, or with
// --shards N > 1, model-0000i-of-0000N.safetensors files and model.safetensors.index.json.
// Written from the GGUF and safetensors specifications only (it shares no code with ridge), so
// a loader bug cannot hide behind the same bug in the writer. Tensor bytes are copied verbatim;
// llama's q/k rows are put back into Hugging Face order (llama.cpp's converter permutes them).
//
// Usage: node tests/hf/write_hf_checkpoint.mjs --gguf IN.gguf --out DIR [--shards N] [--rope-scaling JSON]
// --rope-scaling: config.json's rope_scaling (e.g. Llama 3.1's), which is what a GGUF's
// rope_freqs.weight was made from; the tensor itself is then not written (Hugging Face
// checkpoints have none). Without it, rope_freqs.weight is an error.
// Exit codes: 0 ok (prints nothing), 1 unsupported or malformed input (`error: ...` on
// stderr), 2 bad arguments. Supports llama, qwen2, qwen3 with F32/F16/BF16 tensors.
import fs from "node:fs";
import path from "node:path";
import process from "node:process";

const USAGE = "usage: node tests/hf/write_hf_checkpoint.mjs --gguf IN.gguf --out DIR [--shards N] [--rope-scaling JSON]";
class InputError extends Error {}
const fail = (msg) => { throw new InputError(msg); };

// ggml type id -> [name, bytes per element, safetensors dtype]; anything else is rejected.
const GGML_TYPES = {0: ["f32", 4, "F32"], 1: ["f16", 2, "F16"], 30: ["bf16", 2, "BF16"]};
const TORCH_DTYPE = {F32: "float32", F16: "float16", BF16: "bfloat16"};
const ARCHS = {llama: "LlamaForCausalLM", qwen2: "Qwen2ForCausalLM", qwen3: "Qwen3ForCausalLM"};

function parseArgs(argv) {
  const usage = (why) => { process.stderr.write(`${why}\n${USAGE}\n`); process.exit(2); };
  const opts = {shards: 1};
  for (let i = 0; i < argv.length; i += 2) {
    const [flag, val] = [argv[i], argv[i + 1]];
    if (val === undefined) usage(`missing value for ${flag}`);
    if (flag === "--gguf") opts.gguf = val;
    else if (flag === "--out") opts.out = val;
    else if (flag === "--rope-scaling") {
      try { opts.ropeScaling = JSON.parse(val); } catch { usage(`--rope-scaling is not JSON: '${val}'`); }
    } else if (flag === "--shards") {
      if (!/^[1-9][0-9]*$/.test(val)) usage(`--shards must be a positive integer, got '${val}'`);
      opts.shards = Number(val);
    } else usage(`unknown argument '${flag}'`);
  }
  if (!opts.gguf || !opts.out) usage("--gguf and --out are required");
  return opts;
}

// Sequential little-endian reader over the whole file; Buffer's reads throw on overrun.
class Reader {
  constructor(buf) { this.buf = buf; this.pos = 0; }
  take(n) { const p = this.pos; this.pos += n; if (this.pos > this.buf.length) fail("truncated GGUF"); return p; }
  u8() { return this.buf.readUInt8(this.take(1)); }
  u32() { return this.buf.readUInt32LE(this.take(4)); }
  u64() { return Number(this.buf.readBigUInt64LE(this.take(8))); }
  str() { const n = this.u64(), p = this.take(n); return this.buf.toString("utf8", p, p + n); }
  // One metadata value of GGUF value type `t` (arrays recurse; 64-bit ints become Numbers).
  value(t) {
    const b = this.buf;
    switch (t) {
      case 0: return this.u8();
      case 1: return b.readInt8(this.take(1));
      case 2: return b.readUInt16LE(this.take(2));
      case 3: return b.readInt16LE(this.take(2));
      case 4: return this.u32();
      case 5: return b.readInt32LE(this.take(4));
      case 6: return b.readFloatLE(this.take(4)); // exact f32 value as a double
      case 7: return this.u8() !== 0;
      case 8: return this.str();
      case 9: { const et = this.u32(), n = this.u64(); return Array.from({length: n}, () => this.value(et)); }
      case 10: return this.u64();
      case 11: return Number(b.readBigInt64LE(this.take(8)));
      case 12: return b.readDoubleLE(this.take(8));
      default: return fail(`unknown GGUF metadata value type ${t}`);
    }
  }
}

// Parse header, metadata and tensor infos; returns {meta, tensors: Map name -> info with bytes}.
function parseGguf(buf) {
  const r = new Reader(buf);
  if (buf.length < 4 || buf.toString("latin1", 0, 4) !== "GGUF") fail("not a GGUF file (bad magic)");
  r.take(4);
  const version = r.u32();
  if (version !== 2 && version !== 3) fail(`unsupported GGUF version ${version}`);
  const nTensors = r.u64(), nKv = r.u64();
  const meta = {};
  for (let i = 0; i < nKv; i++) { const key = r.str(); meta[key] = r.value(r.u32()); }
  const infos = [];
  for (let i = 0; i < nTensors; i++) {
    const name = r.str(), nDims = r.u32();
    const ne = Array.from({length: nDims}, () => r.u64());
    const type = r.u32(), offset = r.u64();
    if (!GGML_TYPES[type]) fail(`tensor ${name} has unsupported ggml type ${type} (only f32, f16, bf16)`);
    infos.push({name, ne, type, offset});
  }
  const align = meta["general.alignment"] ?? 32;
  const dataStart = Math.ceil(r.pos / align) * align;
  const tensors = new Map();
  for (const t of infos) {
    const [, esize, dtype] = GGML_TYPES[t.type];
    const nbytes = t.ne.reduce((a, b) => a * b, 1) * esize;
    const begin = dataStart + t.offset;
    if (begin + nbytes > buf.length) fail(`tensor ${t.name} data runs past the end of the file`);
    tensors.set(t.name, {...t, esize, dtype, bytes: buf.subarray(begin, begin + nbytes)});
  }
  return {meta, tensors};
}

// Build config.json's object from GGUF metadata, in transformers' key names.
function makeConfig(meta, tensors) {
  const arch = meta["general.architecture"];
  if (!ARCHS[arch]) fail(`unsupported general.architecture '${arch}' (llama, qwen2, qwen3)`);
  const get = (k, dflt) => {
    const v = meta[`${arch}.${k}`] ?? dflt;
    if (v === undefined) fail(`missing metadata key ${arch}.${k}`);
    return v;
  };
  const embd = tensors.get("token_embd.weight");
  if (!embd || embd.ne.length !== 2) fail("missing or non-2-D token_embd.weight");
  const hidden = get("embedding_length"), heads = get("attention.head_count");
  return {
    architectures: [ARCHS[arch]],
    model_type: arch,
    hidden_size: hidden,
    intermediate_size: get("feed_forward_length"),
    num_attention_heads: heads,
    num_key_value_heads: get("attention.head_count_kv", heads),
    num_hidden_layers: get("block_count"),
    rms_norm_eps: get("attention.layer_norm_rms_epsilon"),
    rope_theta: get("rope.freq_base", 10000),
    max_position_embeddings: get("context_length"),
    vocab_size: embd.ne[1],
    head_dim: get("attention.key_length", hidden / heads),
    hidden_act: "silu",
    tie_word_embeddings: !tensors.has("output.weight"),
    torch_dtype: TORCH_DTYPE[embd.dtype],
    bos_token_id: 1,
    eos_token_id: 2,
    attention_bias: arch === "qwen2",
  };
}

// JSON text of config, with the float fields written as Python's json does (10000.0, not 10000),
// as in real transformers configs; a loader must accept that. Values are exact f32s either way.
function configJson(config) {
  const floats = new Set(["rms_norm_eps", "rope_theta"]);
  const text = JSON.stringify(config, (k, v) => (floats.has(k) && Number.isInteger(v) ? `@float:${v}.0` : v), 2);
  return text.replace(/"@float:([^"]*)"/g, "$1") + "\n";
}

// GGUF tensor name -> Hugging Face name; unknown names are an error rather than silently dropped.
function hfName(name) {
  const top = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight"};
  if (top[name]) return top[name];
  const blk = {attn_norm: "input_layernorm", ffn_norm: "post_attention_layernorm",
    attn_q: "self_attn.q_proj", attn_k: "self_attn.k_proj", attn_v: "self_attn.v_proj",
    attn_output: "self_attn.o_proj", attn_q_norm: "self_attn.q_norm", attn_k_norm: "self_attn.k_norm",
    ffn_gate: "mlp.gate_proj", ffn_up: "mlp.up_proj", ffn_down: "mlp.down_proj"};
  const m = /^blk\.(\d+)\.([a-z_]+)\.(weight|bias)$/.exec(name);
  const ok = m && blk[m[2]] && (m[3] === "weight" || ["attn_q", "attn_k", "attn_v"].includes(m[2]));
  if (!ok) fail(`tensor ${name} has no Hugging Face counterpart`);
  return `model.layers.${m[1]}.${blk[m[2]]}.${m[3]}`;
}

// Undo llama.cpp's q/k row permutation: GGUF row h*hd + 2*j + s is HF row h*hd + s*half + j.
// Works on whole rows (a 1-D bias is one element per row), so bytes are never reinterpreted.
function unpermuteRows(t, nHead) {
  const rows = t.ne.length === 1 ? t.ne[0] : t.ne[1];
  const rowBytes = t.bytes.length / rows;
  const hd = rows / nHead, half = hd / 2;
  if (!Number.isInteger(half)) fail(`tensor ${t.name}: ${rows} rows do not split into ${nHead} heads of even size`);
  const out = Buffer.alloc(t.bytes.length);
  for (let h = 0; h < nHead; h++)
    for (let j = 0; j < half; j++)
      for (let s = 0; s < 2; s++) {
        const src = (h * hd + 2 * j + s) * rowBytes, dst = (h * hd + s * half + j) * rowBytes;
        t.bytes.copy(out, dst, src, src + rowBytes);
      }
  return out;
}

// Serialize tensors [{name, dtype, shape, bytes}] (already in file order) as one safetensors file.
function safetensorsBytes(list) {
  const header = {__metadata__: {format: "pt"}};
  let off = 0;
  for (const t of list) { header[t.name] = {dtype: t.dtype, shape: t.shape, data_offsets: [off, off + t.bytes.length]}; off += t.bytes.length; }
  let json = JSON.stringify(header);
  json += " ".repeat((8 - (Buffer.byteLength(json) % 8)) % 8); // 8 + N stays a multiple of 8
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(Buffer.byteLength(json)));
  return Buffer.concat([len, Buffer.from(json, "utf8"), ...list.map((t) => t.bytes)]);
}

// Split the sorted list into `n` consecutive non-empty runs of roughly equal byte size.
function splitShards(list, n) {
  if (n > list.length) fail(`cannot split ${list.length} tensors into ${n} non-empty shards`);
  const total = list.reduce((a, t) => a + t.bytes.length, 0);
  const shards = [[]];
  let cum = 0;
  list.forEach((t, i) => {
    const s = shards.length - 1;
    shards[s].push(t);
    cum += t.bytes.length;
    const left = list.length - 1 - i, need = n - 1 - s;
    if (need > 0 && (left === need || cum >= (total * (s + 1)) / n)) shards.push([]);
  });
  return shards;
}

function main() {
  const opts = parseArgs(process.argv.slice(2));
  if (!fs.existsSync(opts.gguf)) fail(`cannot read ${opts.gguf}`);
  const {meta, tensors} = parseGguf(fs.readFileSync(opts.gguf));
  if (opts.ropeScaling) tensors.delete("rope_freqs.weight");
  const config = makeConfig(meta, tensors);
  if (opts.ropeScaling) config.rope_scaling = opts.ropeScaling;
  const list = [];
  for (const t of tensors.values()) {
    let bytes = t.bytes;
    const m = /^blk\.\d+\.attn_(q|k)\.(weight|bias)$/.exec(t.name);
    if (config.model_type === "llama" && m)
      bytes = unpermuteRows(t, m[1] === "q" ? config.num_attention_heads : config.num_key_value_heads);
    list.push({name: hfName(t.name), dtype: t.dtype, shape: [...t.ne].reverse(), bytes});
  }
  list.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));

  fs.mkdirSync(opts.out, {recursive: true});
  // Remove a previous run's weight files so a loader never sees a mix of layouts.
  for (const f of fs.readdirSync(opts.out))
    if (/^model(-\d{5}-of-\d{5})?\.safetensors(\.index\.json)?$/.test(f)) fs.rmSync(path.join(opts.out, f));
  fs.writeFileSync(path.join(opts.out, "config.json"), configJson(config));
  if (opts.shards === 1) {
    fs.writeFileSync(path.join(opts.out, "model.safetensors"), safetensorsBytes(list));
    return;
  }
  const shards = splitShards(list, opts.shards);
  const pad = (i) => String(i).padStart(5, "0");
  const weightMap = {};
  shards.forEach((shard, i) => {
    const file = `model-${pad(i + 1)}-of-${pad(shards.length)}.safetensors`;
    fs.writeFileSync(path.join(opts.out, file), safetensorsBytes(shard));
    for (const t of shard) weightMap[t.name] = file;
  });
  const totalSize = list.reduce((a, t) => a + t.bytes.length, 0);
  const index = {metadata: {total_size: totalSize}, weight_map: weightMap};
  fs.writeFileSync(path.join(opts.out, "model.safetensors.index.json"), JSON.stringify(index, null, 2) + "\n");
}

try {
  main();
} catch (e) {
  process.stderr.write(`error: ${e instanceof InputError ? e.message : String(e.message ?? e).split("\n")[0]}\n`);
  process.exit(1);
}
