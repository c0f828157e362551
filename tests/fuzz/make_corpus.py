#!/usr/bin/env python3
"""Writes the seed corpus of tests/fuzz/fuzz_gguf.cpp: small valid GGUF files, by hand.

    python3 tests/fuzz/make_corpus.py [OUT_DIR]     (default: tests/fuzz/corpus)

Deterministic (no randomness, no dependencies): rerunning it reproduces the committed
files byte for byte. Each file stays under 16 KB so the fuzzer mutates it quickly. The
files are named *.seed, not *.gguf, because .gitignore ignores *.gguf (model downloads).

GGUF layout (little-endian): "GGUF", u32 version, u64 n_tensors, u64 n_kv; n_kv x
(string key, u32 type, value); n_tensors x (string name, u32 n_dims, u64 ne[n_dims],
u32 ggml type, u64 offset into the data section); zero padding to the alignment
(general.alignment, default 32); the data section. A string is u64 length + bytes; an
array is u32 element type + u64 count + the elements (nested arrays: type + count + ...).
"""
import os
import struct
import sys

# Metadata value types.
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
SCALAR_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
              BOOL: "<B", U64: "<Q", I64: "<q", F64: "<d"}

# ggml tensor types: id, elements per block, bytes per block.
GGML = {"f32": (0, 1, 4), "f16": (1, 1, 2), "q4_0": (2, 32, 18), "q8_0": (8, 32, 34),
        "q2_k": (10, 256, 84), "i32": (26, 1, 4), "f64": (28, 1, 8), "bf16": (30, 1, 2)}


def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def payload(t, v):
    """The bytes of a value of type t (without the leading type id)."""
    if t == STRING:
        return gstr(v)
    if t == ARRAY:
        et, items = v
        out = struct.pack("<IQ", et, len(items))
        for it in items:
            out += payload(et, it)
        return out
    return struct.pack(SCALAR_FMT[t], v)


class Gguf:
    def __init__(self, version=3, alignment=32):
        self.version = version
        self.alignment = alignment
        self.kv = []        # (key, type, value)
        self.tensors = []   # (name, ne, type name, data bytes)

    def add(self, key, t, v):
        self.kv.append((key, t, v))

    def tensor(self, name, ne, tname, data):
        _, bs, ts = GGML[tname]
        assert ne[0] % bs == 0, name
        rows = 1
        for d in ne[1:]:
            rows *= d
        assert len(data) == rows * (ne[0] // bs) * ts, (name, len(data))
        self.tensors.append((name, ne, tname, data))

    def bytes(self):
        pad = lambda n: (n + self.alignment - 1) // self.alignment * self.alignment
        out = b"GGUF" + struct.pack("<IQQ", self.version, len(self.tensors), len(self.kv))
        for key, t, v in self.kv:
            out += gstr(key) + struct.pack("<I", t) + payload(t, v)
        data = b""
        for name, ne, tname, blob in self.tensors:
            off = pad(len(data))
            data = data.ljust(off, b"\0") + blob
            out += gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
            out += struct.pack("<IQ", GGML[tname][0], off)
        if self.tensors:
            out = out.ljust(pad(len(out)), b"\0") + data
        return out


# Deterministic "weights": a small LCG, values in [-0.5, 0.5).
class Lcg:
    def __init__(self, seed):
        self.s = seed

    def next(self):
        self.s = (self.s * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        return ((self.s >> 40) / float(1 << 24)) - 0.5


def weights(rng, ne, tname, scale=0.1):
    n = 1
    for d in ne:
        n *= d
    vals = [rng.next() * scale for _ in range(n)]
    if tname == "f32":
        return struct.pack("<%df" % n, *vals)
    if tname == "f16":
        return struct.pack("<%de" % n, *vals)
    if tname == "bf16":
        return b"".join(struct.pack("<I", v)[2:] for v in struct.unpack("<%dI" % n, struct.pack("<%df" % n, *vals)))
    if tname == "q8_0":  # {f16 d; i8 qs[32]}
        out = b""
        for b in range(0, n, 32):
            blk = vals[b:b + 32]
            d = max(abs(x) for x in blk) / 127 or 1.0
            out += struct.pack("<e", d) + struct.pack("<32b", *[max(-127, min(127, round(x / d))) for x in blk])
        return out
    if tname == "q4_0":  # {f16 d; u8 qs[16]}: x = d * (q - 8), low nibbles first half
        out = b""
        for b in range(0, n, 32):
            blk = vals[b:b + 32]
            d = max(abs(x) for x in blk) / 8 or 1.0
            q = [max(0, min(15, round(x / d) + 8)) for x in blk]
            out += struct.pack("<e", d) + bytes(q[i] | (q[i + 16] << 4) for i in range(16))
        return out
    if tname == "q2_k":
        return bytes((i * 37) & 0xFF for i in range(n // 256 * 84))
    if tname == "i32":
        return struct.pack("<%di" % n, *range(n))
    if tname == "f64":
        return struct.pack("<%dd" % n, *vals)
    raise ValueError(tname)


def spm_vocab(g, byte_tokens, merges, scores=True, types=True):
    """A SentencePiece-style llama vocabulary: <unk> <s> </s>, byte tokens, then merges."""
    toks = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in byte_tokens] + merges
    g.add("tokenizer.ggml.model", STRING, "llama")
    g.add("tokenizer.ggml.tokens", ARRAY, (STRING, toks))
    if scores:
        sc = [0.0, 0.0, 0.0] + [0.0] * len(byte_tokens) + [-float(i) for i in range(len(merges))]
        g.add("tokenizer.ggml.scores", ARRAY, (F32, sc))
    if types:
        ty = [2, 3, 3] + [6] * len(byte_tokens) + [1] * len(merges)
        g.add("tokenizer.ggml.token_type", ARRAY, (I32, ty))
    g.add("tokenizer.ggml.bos_token_id", U32, 1)
    g.add("tokenizer.ggml.eos_token_id", U32, 2)
    g.add("tokenizer.ggml.unknown_token_id", U32, 0)
    g.add("tokenizer.ggml.padding_token_id", U32, 0xFFFFFFFF)  # "none", as converters write it
    return len(toks)


MERGES = ["\u2581", "e", "t", "a", "o", "n", "h", "\u2581t", "he", "\u2581the", "\u2581a", "in", "re",
          "\u2581o", "er", "on", "\u2581Once", "\u2581upon", "\u2581time", "\u2581there", "was", "!", "."]


def model(arch, n_embd, n_ff, n_head, n_head_kv, n_vocab_bytes, types, tied=False, seed=1, version=3,
          extra_kv=()):
    """A one-layer model of `arch` (llama / qwen2 / qwen3); types maps tensor roles to ggml types."""
    g = Gguf(version=version)
    g.add("general.architecture", STRING, arch)
    g.add("general.name", STRING, "fuzz-seed-" + arch)
    n_vocab = spm_vocab(g, range(n_vocab_bytes), MERGES)
    hd = n_embd // n_head
    g.add(arch + ".context_length", U32, 64)
    g.add(arch + ".embedding_length", U32, n_embd)
    g.add(arch + ".feed_forward_length", U32, n_ff)
    g.add(arch + ".block_count", U32, 1)
    g.add(arch + ".attention.head_count", U32, n_head)
    g.add(arch + ".attention.head_count_kv", U32, n_head_kv)
    g.add(arch + ".rope.dimension_count", U32, hd)
    g.add(arch + ".rope.freq_base", F32, 10000.0)
    g.add(arch + ".attention.layer_norm_rms_epsilon", F32, 1e-5)
    for k, t, v in extra_kv:
        g.add(k, t, v)
    rng = Lcg(seed)
    T = lambda name, ne, role: g.tensor(name, ne, types.get(role, "f32"), weights(rng, ne, types.get(role, "f32")))
    N = lambda name, n: g.tensor(name, [n], "f32", struct.pack("<%df" % n, *([1.0] * n)))
    T("token_embd.weight", [n_embd, n_vocab], "embd")
    N("output_norm.weight", n_embd)
    if not tied:
        T("output.weight", [n_embd, n_vocab], "output")
    N("blk.0.attn_norm.weight", n_embd)
    T("blk.0.attn_q.weight", [n_embd, n_head * hd], "q")
    T("blk.0.attn_k.weight", [n_embd, n_head_kv * hd], "k")
    T("blk.0.attn_v.weight", [n_embd, n_head_kv * hd], "v")
    T("blk.0.attn_output.weight", [n_head * hd, n_embd], "o")
    if arch == "qwen2":
        N("blk.0.attn_q.bias", n_head * hd)
        N("blk.0.attn_k.bias", n_head_kv * hd)
        N("blk.0.attn_v.bias", n_head_kv * hd)
    if arch == "qwen3":
        N("blk.0.attn_q_norm.weight", hd)
        N("blk.0.attn_k_norm.weight", hd)
    N("blk.0.ffn_norm.weight", n_embd)
    T("blk.0.ffn_gate.weight", [n_embd, n_ff], "gate")
    T("blk.0.ffn_up.weight", [n_embd, n_ff], "up")
    T("blk.0.ffn_down.weight", [n_ff, n_embd], "down")
    return g.bytes()


def vocab_only():
    """A tokenizer without tensors: 256 byte tokens, merges, flags; GGUF v2."""
    g = Gguf(version=2)
    g.add("general.architecture", STRING, "llama")
    spm_vocab(g, range(256), MERGES + ["<|im_end|>", ""])
    g.add("tokenizer.ggml.add_bos_token", BOOL, 1)
    g.add("tokenizer.ggml.add_eos_token", BOOL, 0)
    g.add("tokenizer.ggml.add_space_prefix", BOOL, 1)
    g.add("tokenizer.ggml.eot_token_id", I32, -1)
    return g.bytes()


def all_values():
    """Every metadata value type, arrays of each, nested arrays, alignment 64, and tensors of
    unusual ranks and types (q2_k, i32, f64: parsed but not computable)."""
    g = Gguf(version=3, alignment=64)
    g.add("general.alignment", U32, 64)
    g.add("general.architecture", STRING, "llama")
    g.add("v.u8", U8, 200)
    g.add("v.i8", I8, -100)
    g.add("v.u16", U16, 60000)
    g.add("v.i16", I16, -30000)
    g.add("v.u32", U32, 4000000000)
    g.add("v.i32", I32, -2000000000)
    g.add("v.f32", F32, 1.5)
    g.add("v.bool", BOOL, 1)
    g.add("v.string", STRING, "h\u00e9llo \u2581world")
    g.add("v.empty_string", STRING, "")
    g.add("v.u64", U64, (1 << 63) + 5)
    g.add("v.i64", I64, -(1 << 62))
    g.add("v.f64", F64, -2.25)
    for t, vals in ((U8, [0, 255]), (I8, [-128, 127]), (U16, [1, 65535]), (I16, [-1, 2]), (U32, [7, 8, 9]),
                    (I32, [-7, 8]), (F32, [0.5, -0.25]), (BOOL, [0, 1, 1]), (U64, [1 << 40]), (I64, [-(1 << 40)]),
                    (F64, [3.0, 1e300])):
        g.add("arr.t%d" % t, ARRAY, (t, vals))
    g.add("arr.string", ARRAY, (STRING, ["a", "", "\u2581b"]))
    g.add("arr.empty", ARRAY, (U32, []))
    g.add("arr.nested", ARRAY, (ARRAY, [(I32, [1, 2]), (STRING, ["x"]), (ARRAY, [(U8, [3]), (F32, [])])]))
    g.add("arr.nested_empty", ARRAY, (ARRAY, []))
    g.add("llama.embedding_length", U32, 256)
    g.add("llama.context_length", U64, 32)
    g.add("llama.feed_forward_length", I32, 256)
    g.add("llama.block_count", U16, 1)
    g.add("llama.attention.head_count", U8, 2)
    g.add("llama.rope.scaling.type", STRING, "linear")
    g.add("llama.rope.scaling.factor", F64, 2.0)
    rng = Lcg(7)
    g.tensor("token_embd.weight", [256, 4], "q2_k", weights(rng, [256, 4], "q2_k"))
    g.tensor("t.i32.3d", [2, 3, 4], "i32", weights(rng, [2, 3, 4], "i32"))
    g.tensor("t.f64.4d", [2, 1, 2, 1], "f64", weights(rng, [2, 1, 2, 1], "f64"))
    g.tensor("t.f16", [5], "f16", weights(rng, [5], "f16"))
    return g.bytes()


def files():
    return {
        # llama, GQA (4 heads / 2 kv heads), mixed matrix types, separate output matrix.
        "llama_tiny.seed": model("llama", 32, 64, 4, 2, 16,
                                 {"embd": "q8_0", "output": "q4_0", "q": "f16", "k": "bf16", "v": "q8_0",
                                  "o": "q4_0", "gate": "q8_0", "up": "q4_0", "down": "q8_0"}, seed=1),
        # qwen2 (q/k/v biases), f32 throughout, tied output, n_embd 16.
        "qwen2_tiny.seed": model("qwen2", 16, 32, 2, 1, 8, {}, tied=True, seed=2),
        # qwen3 (q/k norms), f16 matrices, explicit key_length, GGUF v2.
        "qwen3_tiny.seed": model("qwen3", 16, 16, 2, 2, 4, {"embd": "f16", "q": "f16", "k": "f16", "v": "f16",
                                                            "o": "f16", "gate": "f16", "up": "f16", "down": "f16"},
                                 tied=True, seed=3, version=2, extra_kv=(("qwen3.attention.key_length", U32, 8),)),
        "vocab_only.seed": vocab_only(),
        "all_values.seed": all_values(),
    }


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
    os.makedirs(out_dir, exist_ok=True)
    for name, data in files().items():
        assert len(data) < 16 * 1024, (name, len(data))
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(data)
        print("%-18s %6d bytes" % (name, len(data)))


if __name__ == "__main__":
    main()
