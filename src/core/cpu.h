// Run-time choice of the SIMD path. RIDGE_ISA=scalar|avx2|avx512 forces a path (never
// one the CPU lacks) so that the tests exercise every path on an AVX-512 machine.
#pragma once
#include <string_view>

namespace ridge {

enum class Isa { Scalar = 0, Avx2 = 1, Avx512 = 2 };

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512vnni = false, avx512bf16 = false, avx512fp16 = false, avxvnni = false, avx512vbmi = false;
  bool amx_int8 = false;  // AMX-TILE and AMX-INT8, with the tile state enabled by the OS (XCR0)
  bool amx_bf16 = false;  // AMX-BF16 besides (with the tile state)
};

const CpuFeatures& cpu_features();
Isa best_isa();           // what the CPU supports
Isa active_isa();         // best_isa() capped by RIDGE_ISA / set_isa()
void set_isa(Isa isa);    // for tests; capped at best_isa()
std::string_view isa_name(Isa isa);

// FP8 weights' two arithmetics (kernels/cpu/gemm.h): f16c multiplies the codes (as
// halves, then f32) by f32 activations, exact products; bf16 multiplies them (as bf16,
// exact) by bf16 activations with vdpbf16ps, half the instructions per weight (needs
// AVX512-BF16 and VBMI). RIDGE_FP8_PATH=f16c|bf16 forces one (bf16 on a CPU without it
// is an error, as with RIDGE_ISA); otherwise bf16 where the CPU has it (the faster on
// the machines measured: docs/BENCHMARKS.md). Weights are packed for one path and say
// which (kernels/tensors.h WeightView::fp8_bf16): the GEMM follows the weights. An FP8
// KV cache's attention follows fp8_path() too where the AMX-BF16 tiles do not run (the
// CPU lacks them, or RIDGE_AMX=off): bf16 rounds the query and the weights to bf16
// (kernels/cpu/attention.h AttnDots); so does a BF16 KV cache's.
enum class Fp8Path { F16c, Bf16 };
bool fp8_bf16_available();
Fp8Path fp8_path();
void set_fp8_path(Fp8Path p);  // tests; fp8_path() caps it at what the CPU path has
const char* fp8_path_name(Fp8Path p);

// AMX (Sapphire Rapids and later): the int8 GEMM of 32-block weights at 2 or more rows
// runs its integer dots on the tile unit (kernels/cpu/gemm_amx.cpp) and keeps the
// AVX-512 kernels' float epilogue, so every bit of the result is the same. Available when
// the CPU and OS have it, the AVX-512 path is active and Linux grants the process the
// tile data state (arch_prctl ARCH_REQ_XCOMP_PERM, asked once). RIDGE_AMX=off turns it
// off (on: an error where it cannot run); set_amx() for tests, capped the same way.
bool amx_supported();   // CPU + OS + permission, whatever RIDGE_ISA / RIDGE_AMX say
bool amx_active();      // amx_supported() and the AVX-512 path active and not turned off
void check_amx_env();   // reads RIDGE_AMX now: a bad value is this call's error (main)
void set_amx(bool on);  // tests
// The FP8 KV caches' attention on the tiles (kernels/cpu/attention_avx512.cpp): amx_active()
// and AMX-BF16, AVX512-BF16 and VBMI besides (every CPU with AMX-BF16 has the two).
bool amx_bf16_active();

}  // namespace ridge
