#include "core/cpu.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>

#include "core/error.h"

namespace ridge {
namespace {

uint64_t xgetbv0() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & bit_OSXSAVE;
  const bool avx = c & bit_AVX;
  if (!osxsave || !avx) return f;
  const uint64_t xcr0 = xgetbv0();
  const bool ymm_os = (xcr0 & 0x6) == 0x6;
  const bool zmm_os = (xcr0 & 0xe6) == 0xe6;
  f.fma = (c & bit_FMA) && ymm_os;
  f.f16c = (c & bit_F16C) && ymm_os;
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  f.avx2 = (b & bit_AVX2) && ymm_os;
  f.avx512f = (b & bit_AVX512F) && zmm_os;
  f.avx512bw = (b & bit_AVX512BW) && zmm_os;
  f.avx512vl = (b & bit_AVX512VL) && zmm_os;
  f.avx512dq = (b & bit_AVX512DQ) && zmm_os;
  f.avx512vnni = (c & bit_AVX512VNNI) && zmm_os;
  f.avx512vbmi = (c & (1u << 1)) && zmm_os;  // CPUID.(7,0):ECX[1]
  f.avx512fp16 = (d & (1u << 23)) && zmm_os;  // CPUID.(7,0):EDX[23]
  // AMX-TILE EDX[24], AMX-INT8 EDX[25]; XCR0 bits 17 (XTILECFG) and 18 (XTILEDATA).
  f.amx_int8 = (d & (1u << 24)) && (d & (1u << 25)) && (xcr0 & (3ull << 17)) == (3ull << 17);
  f.amx_bf16 = (d & (1u << 24)) && (d & (1u << 22)) && (xcr0 & (3ull << 17)) == (3ull << 17);  // AMX-BF16 EDX[22]
  __cpuid_count(7, 1, a, b, c, d);
  f.avx512bf16 = (a & (1u << 5)) && zmm_os;
  f.avxvnni = (a & (1u << 4)) && ymm_os;
  return f;
}

Isa detect_best() {
  const auto& f = cpu_features();
  if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512vnni && f.fma && f.f16c)
    return Isa::Avx512;
  if (f.avx2 && f.fma && f.f16c) return Isa::Avx2;
  return Isa::Scalar;
}

Isa from_env() {
  const Isa best = best_isa();
  const char* e = std::getenv("RIDGE_ISA");
  if (!e || !*e) return best;
  const std::string s(e);
  Isa want;
  if (s == "scalar") want = Isa::Scalar;
  else if (s == "avx2") want = Isa::Avx2;
  else if (s == "avx512") want = Isa::Avx512;
  else fail("RIDGE_ISA={} is not one of scalar, avx2, avx512", s);
  if (int(want) > int(best))
    fail("RIDGE_ISA={} but this CPU supports at most {}", s, isa_name(best));
  return want;
}

std::atomic<int> g_isa{-1};

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

Isa best_isa() {
  static const Isa b = detect_best();
  return b;
}

Isa active_isa() {
  int v = g_isa.load(std::memory_order_relaxed);
  if (v < 0) {
    v = int(from_env());
    g_isa.store(v, std::memory_order_relaxed);
  }
  return Isa(v);
}

void set_isa(Isa isa) {
  g_isa.store(int(isa) > int(best_isa()) ? int(best_isa()) : int(isa));
}

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "?";
}

bool fp8_bf16_available() {
  const auto& f = cpu_features();
  return active_isa() == Isa::Avx512 && f.avx512bf16 && f.avx512vbmi;
}

namespace {
Fp8Path initial_fp8_path() {
  const char* e = std::getenv("RIDGE_FP8_PATH");
  if (e && std::string_view(e) == "f16c") return Fp8Path::F16c;
  if (e && *e && std::string_view(e) != "bf16") fail("RIDGE_FP8_PATH={} is not one of f16c, bf16", e);
  if (e && *e && !fp8_bf16_available())
    fail("RIDGE_FP8_PATH=bf16 but this CPU path lacks AVX512-BF16 with VBMI (or RIDGE_ISA is below avx512)");
  return fp8_bf16_available() ? Fp8Path::Bf16 : Fp8Path::F16c;
}
std::atomic<int> g_fp8_path{-1};
}  // namespace

Fp8Path fp8_path() {
  int p = g_fp8_path.load(std::memory_order_relaxed);
  if (p < 0) g_fp8_path.store(p = int(initial_fp8_path()), std::memory_order_relaxed);
  if (Fp8Path(p) == Fp8Path::Bf16 && !fp8_bf16_available()) return Fp8Path::F16c;  // RIDGE_ISA lowered later
  return Fp8Path(p);
}

void set_fp8_path(Fp8Path p) { g_fp8_path.store(int(p)); }  // fp8_path() caps it when read

const char* fp8_path_name(Fp8Path p) { return p == Fp8Path::Bf16 ? "bf16" : "f16c"; }

namespace {
// Linux hands a process the AMX tile data state only when asked (the 8 KiB of it per
// thread would otherwise enlarge every signal frame); the request covers every thread.
bool request_amx_permission() {
#if defined(__linux__) && defined(SYS_arch_prctl)
  constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, static_cast<unsigned long>(kArchReqXcompPerm),
                 static_cast<unsigned long>(kXfeatureXtiledata)) == 0;
#else
  return false;
#endif
}

bool amx_from_env() {
  const char* e = std::getenv("RIDGE_AMX");
  if (!e || !*e) return true;
  const std::string_view s(e);
  if (s == "off" || s == "0") return false;
  if (s != "on" && s != "1") fail("RIDGE_AMX={} is not one of on, off", s);
  if (!amx_supported()) fail("RIDGE_AMX={} but this CPU (or its OS) offers no AMX-INT8", s);
  if (active_isa() != Isa::Avx512) fail("RIDGE_AMX={} needs the avx512 path, and RIDGE_ISA lowers it", s);
  return true;
}
std::atomic<int> g_amx{-1};
}  // namespace

bool amx_supported() {
  static const bool ok = cpu_features().amx_int8 && best_isa() == Isa::Avx512 && request_amx_permission();
  return ok;
}

void check_amx_env() {
  if (g_amx.load() < 0) g_amx.store(amx_from_env() ? 1 : 0);
}

bool amx_active() {
  int v = g_amx.load(std::memory_order_relaxed);
  if (v < 0) {
    // First read on a worker thread (an entry point that did not call check_amx_env):
    // a bad value turns the tiles off here instead of throwing through the pool.
    try {
      v = amx_from_env() ? 1 : 0;
    } catch (const Error&) {
      v = 0;
    }
    g_amx.store(v, std::memory_order_relaxed);
  }
  return v == 1 && amx_supported() && active_isa() == Isa::Avx512;
}

void set_amx(bool on) { g_amx.store(on ? 1 : 0); }

bool amx_bf16_active() {
  const auto& f = cpu_features();
  return f.amx_bf16 && f.avx512bf16 && f.avx512vbmi && amx_active();
}

}  // namespace ridge
