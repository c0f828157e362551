// ridge peaks: a quick measurement gives plausible ceilings (no timing assertions beyond
// loose bounds: the machine may be shared), and the JSON file reads back unchanged.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <span>
#include <fstream>
#include <string>

#include "core/arena.h"
#include "core/cpu.h"
#include "core/error.h"
#include "perf/peaks.h"

namespace ridge {
namespace {

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "ridge_peaks_" + std::to_string(::getpid()) + "_" + name;
}

void write_file(const std::string& path, const std::string& s) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << s;
}

// One quick measurement shared by the tests (it takes about a second).
const Peaks& quick_peaks() {
  static const Peaks p = [] {
    PeaksOptions o;
    o.quick = true;
    o.dram_bytes = int64_t(64) << 20;  // smaller still: the suite also runs under ASan
    return measure_peaks(o);
  }();
  return p;
}

void expect_plausible(const std::optional<ComputePeak>& c, const char* name) {
  ASSERT_TRUE(c) << name;
  EXPECT_GT(c->per_core, 1.0) << name;
  EXPECT_LT(c->per_core, 1e5) << name;
  EXPECT_GE(c->all, c->per_core * 0.5) << name;
}

TEST(Peaks, QuickMeasurementIsPlausible) {
  const Peaks& p = quick_peaks();
  EXPECT_FALSE(p.cpu.empty());
  EXPECT_GE(p.threads, 1);
  EXPECT_GE(p.cores, 1);
  EXPECT_EQ(p.isa, std::string(isa_name(active_isa())));
  EXPECT_TRUE(p.quick);
  EXPECT_LE(p.dram_bytes, int64_t(64) << 20);  // whole pages per thread, so maybe a bit less
  EXPECT_GE(p.dram_bytes, (int64_t(64) << 20) - int64_t(4096) * p.threads);
  ASSERT_TRUE(p.dram_read_gbs.count(1));
  ASSERT_TRUE(p.dram_read_gbs.count(p.threads));
  for (const auto& [t, g] : p.dram_read_gbs) {
    EXPECT_GT(g, 1.0) << t << " threads";
    EXPECT_LT(g, 1000.0) << t << " threads";
    EXPECT_LE(g, p.dram_read_gbs_max);
  }
  EXPECT_GT(p.dram_scattered_gbs, 0.1);
  EXPECT_LT(p.dram_scattered_gbs, 1000.0);
  expect_plausible(p.fp32_fma, "fp32_fma");
  const CpuFeatures& f = cpu_features();
  if (active_isa() == Isa::Avx512) {
    EXPECT_EQ(p.bf16_dot.has_value(), f.avx512bf16);
    if (p.bf16_dot) expect_plausible(p.bf16_dot, "bf16_dot");
    expect_plausible(p.int8_vnni, "int8_vnni");
  }
  if (active_isa() == Isa::Scalar) {
    EXPECT_FALSE(p.int8_vnni);
    EXPECT_FALSE(p.bf16_dot);
  }
  if (p.fp16_fma) expect_plausible(p.fp16_fma, "fp16_fma");
  EXPECT_GT(p.seconds, 0.0);
  EXPECT_LT(p.seconds, 60.0);
}

TEST(Peaks, JsonRoundTrip) {
  const Peaks& p = quick_peaks();
  const std::string path = temp_path("roundtrip.json");
  save_peaks(p, path);
  const Peaks q = load_peaks(path);
  std::remove(path.c_str());
  EXPECT_EQ(q.cpu, p.cpu);
  EXPECT_EQ(q.cores, p.cores);
  EXPECT_EQ(q.threads, p.threads);
  EXPECT_EQ(q.isa, p.isa);
  EXPECT_EQ(q.l1d, p.l1d);
  EXPECT_EQ(q.l2, p.l2);
  EXPECT_EQ(q.l3, p.l3);
  EXPECT_EQ(q.dram_read_gbs, p.dram_read_gbs);  // doubles print round-trip exact
  EXPECT_EQ(q.dram_read_gbs_max, p.dram_read_gbs_max);
  EXPECT_EQ(q.dram_bytes, p.dram_bytes);
  EXPECT_EQ(q.dram_scattered_gbs, p.dram_scattered_gbs);
  auto same = [](const std::optional<ComputePeak>& a, const std::optional<ComputePeak>& b, const char* name) {
    ASSERT_EQ(a.has_value(), b.has_value()) << name;
    if (!a) return;
    EXPECT_EQ(a->per_core, b->per_core) << name;
    EXPECT_EQ(a->all, b->all) << name;
  };
  same(q.fp32_fma, p.fp32_fma, "fp32_fma");
  same(q.bf16_dot, p.bf16_dot, "bf16_dot");
  same(q.int8_vnni, p.int8_vnni, "int8_vnni");
  same(q.fp16_fma, p.fp16_fma, "fp16_fma");
  EXPECT_EQ(q.quick, p.quick);
  EXPECT_EQ(q.seconds, p.seconds);
  EXPECT_EQ(q.dram_read_streams, p.dram_read_streams);
  EXPECT_EQ(q.dram_read_prefetch, p.dram_read_prefetch);
  EXPECT_EQ(q.measured_at, p.measured_at);
}

// The ceiling is the best of the access patterns, and says which one it was and when.
TEST(Peaks, RecordsTheBestPatternAndWhen) {
  const Peaks& p = quick_peaks();
  EXPECT_TRUE(p.dram_read_streams == 1 || p.dram_read_streams == 4 || p.dram_read_streams == 8)
      << p.dram_read_streams;
  EXPECT_GE(p.dram_read_prefetch, 0);
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_GT(p.measured_at, now - 600);
  EXPECT_LE(p.measured_at, now);
}

// The multi-stream read kernels touch every byte of every stream once: their sums equal
// a scalar sum of the same 64-bit words, whatever the prefetch distance.
TEST(Peaks, StreamReadKernelsSumEveryWord) {
  const Isa isa = active_isa();
  if (isa == Isa::Scalar) GTEST_SKIP() << "no SIMD read kernel on the scalar path";
  constexpr int kStreams = 8;
  constexpr int64_t kBytes = 4096 * 3;
  // 64-byte aligned, with room past the end for the prefetches (which never fault anyway).
  Arena mem(size_t(kStreams * kBytes + 8192));
  const std::span<uint64_t> buf(reinterpret_cast<uint64_t*>(mem.data()), mem.size() / 8);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = i * 0x9e3779b97f4a7c15ull;
  for (int n : {1, 4, 8})
    for (int64_t ahead : {0, 1024, 2048}) {
      const char* ptr[kStreams];
      uint64_t want = 0;
      for (int k = 0; k < n; ++k) {
        ptr[k] = reinterpret_cast<const char*>(buf.data()) + k * kBytes;
        for (int64_t w = 0; w < kBytes / 8; ++w) want += buf[size_t(k * kBytes / 8 + w)];
      }
      const uint64_t got = isa == Isa::Avx512 ? peaks_detail::read_streams_avx512(ptr, n, kBytes, ahead)
                                              : peaks_detail::read_streams_avx2(ptr, n, kBytes, ahead);
      EXPECT_EQ(got, want) << n << " streams, prefetch " << ahead;
    }
}

TEST(Peaks, HandWrittenFileWithNullEntries) {
  const std::string json = R"({"cpu": "x", "cores": 4, "threads": 8, "isa": "avx2",
    "caches": {"l1d": 32768, "l2": 262144, "l3": 8388608},
    "dram_read_gbs": {"1": 10.5, "8": 40}, "dram_read_gbs_max": 40, "dram_bytes": 1073741824,
    "compute": {"fp32_fma": {"per_core_gflops": 100, "all_gflops": 700}, "bf16_dot": null,
                "int8_vnni": null, "fp16_fma": null},
    "quick": false, "seconds": 9.5})";
  const Peaks p = peaks_from_json(json, "inline");
  EXPECT_EQ(p.threads, 8);
  EXPECT_EQ(p.l3, 8388608);
  EXPECT_DOUBLE_EQ(p.dram_read_gbs.at(1), 10.5);
  EXPECT_DOUBLE_EQ(p.dram_read_gbs.at(8), 40.0);
  EXPECT_EQ(p.dram_scattered_gbs, 0.0);  // a file from before the key existed
  ASSERT_TRUE(p.fp32_fma);
  EXPECT_DOUBLE_EQ(p.fp32_fma->all, 700.0);
  EXPECT_FALSE(p.bf16_dot);
  EXPECT_FALSE(p.int8_vnni);
  EXPECT_FALSE(p.fp16_fma);
}

// The message must name the file and what is wrong with it.
void expect_load_error(const std::string& path, const std::string& needle) {
  try {
    load_peaks(path);
    ADD_FAILURE() << "no error for " << path;
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(path), std::string::npos) << m;
    EXPECT_NE(m.find(needle), std::string::npos) << m;
  }
}

TEST(Peaks, LoadErrors) {
  expect_load_error(temp_path("missing.json"), "no such file");
  expect_load_error(::testing::TempDir(), "not a regular file");

  const std::string bad = temp_path("bad.json");
  write_file(bad, "{\"cpu\": \"x\", ");
  expect_load_error(bad, "not valid JSON");
  write_file(bad, "[1, 2]");
  expect_load_error(bad, "expected a JSON object");
  write_file(bad, "{\"cpu\": \"x\"}");
  expect_load_error(bad, "'cores'");

  // A valid file with one key broken at a time.
  std::string good = peaks_to_json(quick_peaks());
  auto broken = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) s.replace(at, from.size(), to);
    return s;
  };
  write_file(bad, broken("\"threads\"", "\"thread_count\""));
  expect_load_error(bad, "'threads'");
  write_file(bad, broken("\"isa\": \"", "\"isa\": 3, \"x\": \""));
  expect_load_error(bad, "'isa' must be a string");
  write_file(bad, broken("\"dram_read_gbs\": {", "\"dram_read_gbs\": {\"two\": 1, "));
  expect_load_error(bad, "'two' is not a thread count");
  write_file(bad, broken("\"per_core_gflops\"", "\"per_core\""));
  expect_load_error(bad, "per_core_gflops");
  std::remove(bad.c_str());
}

}  // namespace
}  // namespace ridge
