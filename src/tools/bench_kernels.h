// `ridge bench kernels`: each matrix kernel on a model's shapes, timed, with its achieved
// GB/s and GFLOP/s and the percentage of the ceiling that bounds it (from `ridge peaks`).
//
// The bound of a run is the roofline's: t_mem = bytes / DRAM bandwidth, t_compute = FLOPs
// / peak of the instruction class the kernel uses (fp32 FMA for float weights, int8 VNNI
// for 8-bit dots); the larger one is the floor, and "% of bound" = floor / measured.
// Decode shapes (m = 1) stream a ring of copies of the matrix larger than `ring_bytes`
// so that no call finds its weights in cache, as in a real decode step; larger m
// reuse one matrix, as prefill does (its weights do get reused from cache).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/kv_view.h"
#include "perf/peaks.h"

namespace ridge {

class ThreadPool;

struct KernelShape {
  std::string name;  // e.g. "ffn_up"
  int64_t k, n_out;
};

// The matrices of one layer plus the output head of a mkmodel preset.
std::vector<KernelShape> preset_shapes(const std::string& preset);

// n_out rows of k valid weights of type t (GGUF row layout): random codes, scales of a
// plausible size, no NaN (the kernels' time does not depend on the values).
std::vector<uint8_t> random_rows(DType t, int64_t k, int64_t n_out, uint64_t seed);

struct KernelBenchOptions {
  std::vector<DType> types;
  std::vector<int64_t> ms{1, 16, 512};
  std::vector<KernelShape> shapes;
  int threads = 0;
  int64_t ring_bytes = int64_t(1) << 30;
  double seconds = 0.3;  // minimum measured time per case
  // Decode attention: attn_seqs sequences of attn_ctx tokens, one layer of K/V in
  // shuffled cache blocks, the preset's heads (0 sequences: skip).
  std::string preset = "tinyllama-1.1b";
  int64_t attn_seqs = 16, attn_ctx = 4096;
  int32_t attn_block = 16;       // tokens per KV block (the engine's --block-size)
  DType attn_dtype = DType::F16;  // the cache's (the engine's --kv-cache-dtype)
  // Where each sequence's blocks lie: shuffled over the pool (a long-running pool with no
  // placement), ascending (a fresh pool, or tables grown into the next block), or
  // descending (a table re-made from a stack of blocks freed first to last), or as the
  // engine's BlockManager places them when the sequences take a block each in turns, as
  // a decode batch does (turns).
  enum class AttnOrder { Shuffled, Ordered, Reversed, Turns };
  AttnOrder attn_order = AttnOrder::Shuffled;
};

struct KernelResult {
  std::string kernel, shape;
  DType type;
  int64_t m, k, n_out;
  std::string path;  // "packed-avx512" or the dot path
  double us;          // median time per call
  double bytes, flops;
  double gbs, gflops;
  std::string bound;  // "dram" | "fp32_fma" | "int8_vnni"
  double pct;         // % of the bound
};

// One decode step's attention as forward.cpp runs it (tasks of a sequence and a run of
// KV heads over the pool): opt's sequences, context, block size, dtype and order, the
// preset's heads, one layer of K/V with finite values written as the engine writes them.
class AttnDecodeStep {
 public:
  AttnDecodeStep(const KernelBenchOptions& opt, ThreadPool& pool);
  ~AttnDecodeStep();
  void run();
  double bytes() const;  // K and V (and their scales) read once
  double flops() const;  // q.k and p.V
  const KVLayout& layout() const;
  const char* plan() const;  // the last run's (kernels/cpu/attention_step.h)
 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

std::vector<KernelResult> bench_kernels(const KernelBenchOptions& opt, const Peaks& peaks);
// The decode-attention case alone (bench_kernels calls it last).
KernelResult bench_attention(const KernelBenchOptions& opt, const Peaks& peaks);
std::string kernel_results_json(const std::vector<KernelResult>& r, const Peaks& peaks);

}  // namespace ridge
