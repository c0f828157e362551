#include "kernels/cpu/tuning.h"

#include <algorithm>

#include "core/cpu.h"
#include "core/error.h"
#include "kernels/cpu/gemm.h"

namespace ridge::kernels {
namespace {

int slot(DType t) {
  for (size_t i = 0; i < kTunedTypes.size(); ++i)
    if (kTunedTypes[i] == t) return int(i);
  return -1;
}

KernelTuning& current() {
  static KernelTuning t = default_tuning();
  return t;
}

}  // namespace

const TypeTuning& KernelTuning::of(DType t) const {
  static const TypeTuning defaults{};
  const int s = slot(t);
  return s < 0 ? defaults : types[size_t(s)];
}

TypeTuning& KernelTuning::of(DType t) {
  const int s = slot(t);
  RIDGE_CHECK(s >= 0, "no tunable kernels for {}", dtype_name(t));
  return types[size_t(s)];
}

const std::vector<TunableParam>& tunable_params() {
  static const std::vector<TunableParam> params = {
      {"decode_ahead", &TypeTuning::decode_ahead, {512, 1024, 2048}, "decode: bytes each weight stream is prefetched ahead"},
      {"decode_streams", &TypeTuning::decode_streams, {2, 4}, "decode: weight streams (panels) a task reads at once"},
      {"task_panels", &TypeTuning::task_panels, {4, 8, 16, 32, 64}, "decode: most panels per task"},
      {"batch_task_panels", &TypeTuning::batch_task_panels, {4, 8, 16}, "decode batches: most panels per task"},
      {"batch_ahead", &TypeTuning::batch_ahead, {1024, 2048, 4096}, "decode batches: bytes the weights are prefetched ahead"},
      {"batch_streams", &TypeTuning::batch_streams, {2, 4}, "decode batches: weight streams (panels) a kernel reads at once"},
      {"batch_even", &TypeTuning::batch_even, {0, 1}, "32-block decode batches: even row tiles (1) or 4s (0)"},
      {"tile_rows", &TypeTuning::tile_rows, {4, 6, 8}, "prefill: activation rows per register tile"},
      {"convert_once", &TypeTuning::convert_once, {0, 1}, "f16/bf16/fp8 prefill: weights converted once for all row tiles (1) or per tile (0)"},
  };
  return params;
}

const TunableParam* find_tunable(std::string_view name) {
  for (const auto& p : tunable_params())
    if (p.name == name) return &p;
  return nullptr;
}

bool tunable_for(const TunableParam& p, DType t) {
  // The AVX2 kernels (gemm_avx2.cpp) read only decode's stream parameters; the task size is
  // Matmul's, on any path.
  if (gemm_on_avx2(t) && p.name != "decode_ahead" && p.name != "decode_streams" && p.name != "task_panels" &&
      p.name != "batch_task_panels")
    return false;
  const bool block32 = t == DType::Q8_0 || t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q5_0 ||
                       t == DType::Q5_1 || t == DType::MXFP4;
  const bool batch = block32 || t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K;
  if (p.name == "batch_ahead" || p.name == "batch_streams") return batch;
  if (p.name == "batch_even") return block32;
  if (p.name == "convert_once")  // FP8's bf16 path converts by table lookups in its tiles
    return t == DType::F16 || t == DType::BF16 || (t == DType::F8_E4M3_B128 && fp8_path() == Fp8Path::F16c);
  return slot(t) >= 0;
}

bool valid_value(const TunableParam& p, int32_t v) {
  return std::find(p.candidates.begin(), p.candidates.end(), v) != p.candidates.end();
}

KernelTuning default_tuning() {
  KernelTuning t;
  // A Q8_0 decode batch spends several times longer on each block than decode does, so
  // the decode distance is too little time ahead there: twice it measured faster at 2 to
  // 9 rows (docs/BENCHMARKS.md, issue 20 session 13). The other batch kernels keep the
  // decode distance, and the K-quants 4-row tiles (even tiles measured no faster there).
  t.of(DType::Q8_0).batch_ahead = 2048;
  for (DType k : {DType::Q4_K, DType::Q5_K, DType::Q6_K}) t.of(k).batch_even = 0;
  // Rows per tile: enough independent accumulator chains to hide the FMA / vpdpbusd
  // latency (a block's 8 vpdpbusd into one int32 accumulator form a 40-cycle chain, so
  // 2 per cycle need >= 10 chains), few enough to stay in 32 registers:
  //   float and FP8: 8 x 2 = 16 accumulators + 2 weight vectors (8 FMAs per weight load);
  //   Q8_0 / Q4_0 / MXFP4: 6 x 2 = 12 int32 + 12 float accumulators (MXFP4's table
  //   stays in a register);
  //   K-quants, Q4_1 and the Q5 types carry per-panel scale, min or fifth-bit vectors
  //   too: 4 x 2.
  for (DType f : {DType::F32, DType::F16, DType::BF16, DType::F8_E4M3_B128}) t.of(f).tile_rows = 8;
  for (DType q : {DType::Q8_0, DType::Q4_0, DType::MXFP4}) t.of(q).tile_rows = 6;
  // A chunk's conversion shared by the row tiles measured faster on an Intel Xeon with
  // AVX512-FP16 (docs/BENCHMARKS.md, issue 22 session 50), where vcvtph2ps takes the
  // FMA ports; not measured elsewhere (a 32 KiB L1 holds less of the chunk): the tuner
  // decides there.
  for (DType f : {DType::F16, DType::BF16, DType::F8_E4M3_B128}) t.of(f).convert_once = 1;
  return t;
}

const KernelTuning& kernel_tuning() { return current(); }

void set_kernel_tuning(const KernelTuning& t) {
  for (const auto& tt : t.types)
    for (const auto& p : tunable_params())
      RIDGE_CHECK(valid_value(p, tt.*p.field), "kernel tuning: {} = {} is not one of its candidates", p.name, tt.*p.field);
  current() = t;
}

}  // namespace ridge::kernels
