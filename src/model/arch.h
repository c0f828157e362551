// An architecture as a unit, in the manner of llama.cpp's per-architecture loaders: its
// name as GGUF writes it (general.architecture), the tensors it reads (required ones
// fail the load by name when missing or misshapen), and the places where its forward
// differs from the family's. The forward asks the architecture, never which weights
// happen to exist. One file per architecture (model/arch_*.cpp) defines one ArchSpec;
// adding an architecture is adding such a file, its line in find_arch(), a mkmodel preset
// and an oracle test against llama.cpp (tests/oracle/).
#pragma once
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf.h"
#include "kernels/tensors.h"
#include "model/hparams.h"

namespace ridge {

struct Weights;
struct LayerWeights;

// What an architecture's loader reads the file through: every tensor checked for shape
// and type, its bytes counted, f32 vectors converted once (and their file pages given back).
class TensorLoader {
 public:
  TensorLoader(const gguf::File& f, int64_t& weight_bytes, int64_t& vector_bytes)
      : f_(f), bytes_(weight_bytes), vec_bytes_(vector_bytes) {}

  const gguf::File& file() const { return f_; }
  const gguf::TensorInfo* find(const std::string& name) const { return f_.find_tensor(name); }
  // [n_out][k] in its stored type, in place in the mapping. Throws ridge::Error naming
  // the tensor when it is missing, misshapen or of a type ridge cannot compute with.
  kernels::WeightView matrix(const std::string& name, int64_t k, int64_t n_out);
  // [n_expert][n_out][k]: one [n_out][k] matrix per expert, each a view into the tensor.
  std::vector<kernels::WeightView> experts(const std::string& name, int64_t k, int64_t n_out, int64_t n_expert);
  // [n_out][k] cut by rows into consecutive matrices of parts[i] rows each (they sum to
  // n_out): views into the one tensor.
  std::vector<kernels::WeightView> row_parts(const std::string& name, int64_t k, std::initializer_list<int64_t> parts);
  // [n] as f32.
  std::vector<float> vec(const std::string& name, int64_t n);
  // [rows][k] as f32, row after row (a table the forward reads rows of, not multiplies).
  std::vector<float> table(const std::string& name, int64_t k, int64_t rows);

 private:
  const gguf::TensorInfo& need(const std::string& name, std::initializer_list<int64_t> shape);
  void check_fp8(const gguf::TensorInfo& t) const;
  void check_mxfp4(const gguf::TensorInfo& t) const;

  const gguf::File& f_;
  int64_t& bytes_;
  int64_t& vec_bytes_;
};

// The FFN's form: SwiGLU down(silu(gate x) * up x), GELU's ungated down(gelu(up x)),
// GeGLU down(gelu(gate x) * up x) (Gemma), or gpt-oss's mixture of experts with biases on
// the router and every expert matrix and the clamped SwiGLU (kernels/cpu/ops.h swiglu_oai).
enum class Ffn : uint8_t { SwiGlu, Gelu, GeGlu, SwiGluOai };

struct ArchSpec {
  const char* name;
  // Where the forward differs from the llama family's.
  bool rope_neox;   // rotate halves (GPT-NeoX style) rather than adjacent pairs
  bool qkv_bias;    // q, k and v get biases (attn_q/k/v.bias)
  bool qk_norm;     // per-head RMSNorm of q and k before RoPE (attn_q_norm / attn_k_norm)
  // Reads the architecture's tensors into w; h is complete, n_vocab included.
  void (*load)(TensorLoader& ld, const HParams& h, Weights& w);
  // Always a mixture of experts (router ffn_gate_inp, experts ffn_*_exps); the llama
  // family is one when its metadata counts experts (Mixtral). The forward asks
  // HParams::moe().
  bool moe = false;
  // Reads the metadata only this architecture has into h (after the family's keys).
  void (*read_hparams)(const gguf::File& f, HParams& h) = nullptr;
  // Takes rope.scaling.type yarn (its loader folds the factors into rope_freqs).
  bool yarn = false;
  // The file holds q, k and v as one attn_qkv tensor, and the gate's and up's rows as one
  // ffn_up (what mkmodel writes; the loader cuts them into views).
  bool fused_qkv = false;
  bool fused_gate_up = false;
  // GPT-2's block (gpt2): every norm a LayerNorm with a bias (eps from
  // attention.layer_norm_epsilon), learned absolute positions added to the embeddings
  // (position_embd; no RoPE), biases on attention's output and on the FFN's matrices, and
  // the FFN ungated: down(act(up x)).
  bool layer_norm = false;
  bool learned_pos = false;
  bool proj_bias = false;
  Ffn ffn = Ffn::SwiGlu;
  // Gemma's sandwich: attention's and the FFN's outputs RMS-normed (post_attention_norm,
  // post_ffw_norm) before their residual adds.
  bool post_norms = false;
  // Gemma: the token embeddings scaled by sqrt(n_embd) on the way in (HParams::embd_scale).
  bool embd_scale_sqrt = false;
};

// The llama family's tensors, which every architecture here starts from: token_embd,
// output_norm, output (tied to token_embd when absent), and per layer attn_norm,
// attn_q/k/v, attn_output, ffn_norm, ffn_gate/up/down (dense_ffn; without it, a mixture
// of experts' ffn_gate_inp and ffn_gate/up/down_exps instead).
void load_llama_family(TensorLoader& ld, const HParams& h, Weights& w, bool dense_ffn = true);
// Its parts, for an architecture whose attention differs (deepseek2): token_embd,
// output_norm, output (or tied) and w.layers sized; a layer's dense SwiGLU
// (ffn_gate/up/down of feed_forward_length); a layer's router and experts
// (ffn_gate_inp, ffn_gate/up/down_exps of expert_feed_forward_length).
void load_embeddings(TensorLoader& ld, const HParams& h, Weights& w);
void load_dense_ffn(TensorLoader& ld, const HParams& h, LayerWeights& L, const std::string& prefix);
void load_experts(TensorLoader& ld, const HParams& h, LayerWeights& L, const std::string& prefix);
// fn(layer, "blk.N.") for every layer of w (sized by load_llama_family): the GGUF prefix
// of a layer's tensor names, spelled in one place.
void for_each_layer(const HParams& h, Weights& w, const std::function<void(LayerWeights&, const std::string&)>& fn);

const ArchSpec& arch_llama();
const ArchSpec& arch_qwen2();
const ArchSpec& arch_qwen3();
const ArchSpec& arch_qwen3moe();
const ArchSpec& arch_deepseek2();
const ArchSpec& arch_phi3();
const ArchSpec& arch_gpt2();
const ArchSpec& arch_gemma3();
const ArchSpec& arch_gpt_oss();
const ArchSpec* find_arch(std::string_view name);  // nullptr if unsupported
std::string arch_names();                          // "llama, qwen2, qwen3, ..."

}  // namespace ridge
