"""Hugging Face transformers `generate` on a random-weight Llama of the given shape: the
baseline of `ridge bench throughput --device cuda` (docs/BENCHMARKS.md). bf16, SDPA,
greedy, every sequence exactly --output-len new tokens. Prints one JSON line."""
import argparse, json, time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SHAPES = {  # mkmodel's presets (src/model/mkmodel.cpp)
    "llama3.2-1b": dict(vocab_size=128256, hidden_size=2048, num_hidden_layers=16, num_attention_heads=32,
                        num_key_value_heads=8, head_dim=64, intermediate_size=8192, tie_word_embeddings=True),
    "llama3-8b": dict(vocab_size=128256, hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                      num_key_value_heads=8, head_dim=128, intermediate_size=14336, tie_word_embeddings=False),
}

ap = argparse.ArgumentParser()
ap.add_argument("--preset", default="llama3.2-1b", choices=SHAPES)
ap.add_argument("--num-prompts", type=int, default=64)
ap.add_argument("--input-len", type=int, default=128)
ap.add_argument("--output-len", type=int, default=128)
a = ap.parse_args()

torch.manual_seed(0)
cfg = LlamaConfig(**SHAPES[a.preset], rope_theta=500000.0, max_position_embeddings=8192,
                  attn_implementation="sdpa", torch_dtype=torch.bfloat16)
torch.set_default_dtype(torch.bfloat16)
with torch.device("cuda"):
    model = LlamaForCausalLM(cfg).eval()
ids = torch.randint(3, cfg.vocab_size, (a.num_prompts, a.input_len), device="cuda")
mask = torch.ones_like(ids)
kw = dict(attention_mask=mask, do_sample=False, pad_token_id=0, eos_token_id=None)
with torch.no_grad():
    model.generate(ids, max_new_tokens=4, min_new_tokens=4, **kw)  # warm-up
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = model.generate(ids, max_new_tokens=a.output_len, min_new_tokens=a.output_len, **kw)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
new = (out.shape[1] - a.input_len) * a.num_prompts
print(json.dumps({"baseline": "transformers " + __import__("transformers").__version__, "preset": a.preset,
                  "num_prompts": a.num_prompts, "input_len": a.input_len, "output_len": a.output_len,
                  "seconds": dt, "output_tok_s": new / dt}))
