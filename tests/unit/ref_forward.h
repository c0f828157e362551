// A deliberately simple reference forward of the llama family (llama, qwen2, qwen3) in
// double precision: full causal attention over the whole token list, no KV cache, no
// paging, no batching, no SIMD, no threads. It shares nothing with src/model or
// src/kernels: it reads hparams and tensors itself through gguf::File and turns weight
// rows into floats with quant::dequantize_row (both tested on their own), then computes
// everything in double. It exists to check the optimized forward, not to be fast.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ridge::test {

// Logits of every position, row-major [tokens.size()][n_vocab] (n_vocab = rows of
// token_embd.weight). Throws std::runtime_error for a file it does not understand.
// round_q8a: the inputs of every matmul ridge runs with 8-bit activations (quantized
// weights: quant::act_kind Q8A) rounded first as ridge rounds them, so that only the
// arithmetic's precision differs: for a mixture of experts, whose routing near-ties the
// activations' rounding would otherwise settle differently on the two sides.
std::vector<double> ref_logits(const std::string& gguf_path, const std::vector<int32_t>& tokens, bool round_q8a = false);

// The metric the forward is held to: max|got - ref| / max|ref| over all logits (INFINITY
// for a size mismatch or a non-finite difference).
double max_rel_err(const std::vector<float>& got, const std::vector<double>& ref);

}  // namespace ridge::test
