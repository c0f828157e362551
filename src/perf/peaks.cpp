// Measuring the machine's ceilings (see peaks.h): what the CPU is, its caches, DRAM read
// bandwidth at several thread counts, and the multiply-add throughput of the active SIMD
// path; plus the JSON file the roofline tools read back.
#include "perf/peaks.h"

#include <cpuid.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "core/cpu.h"
#include "core/meminfo.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/threadpool.h"

namespace ridge {
namespace {

using Clock = std::chrono::steady_clock;
namespace pd = peaks_detail;

// Results go here so the compiler must compute them; the seed is read at run time so no
// kernel can be evaluated at compile time.
volatile double g_sink = 0;
volatile float g_seed = 0.999f;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// ---- what the machine is ----------------------------------------------------------

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        const size_t b = line.find_first_not_of(" \t", colon + 1);
        if (b != std::string::npos) return line.substr(b);
      }
    }
  return "unknown";
}

int64_t parse_cache_size(const std::string& s) {  // sysfs writes "48K", "2048K", "1M"
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  const int shift = *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
  return v > 0 ? int64_t(v) << shift : 0;
}

void read_caches(Peaks& p) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir = "/sys/devices/system/cpu/cpu0/cache";
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("index", 0) != 0) continue;
    const std::string level = read_text(it->path() / "level"), type = read_text(it->path() / "type");
    const int64_t size = parse_cache_size(read_text(it->path() / "size"));
    if (level.rfind("1", 0) == 0 && type.rfind("Data", 0) == 0) p.l1d = size;
    else if (level.rfind("2", 0) == 0 && type.rfind("Instruction", 0) != 0) p.l2 = size;
    else if (level.rfind("3", 0) == 0 && type.rfind("Instruction", 0) != 0) p.l3 = size;
  }
}

// Where sysfs has no cache entries (some VMs): the deterministic cache parameters leaf
// (Intel 4, AMD 0x8000001D; the same layout) gives each level's size.
void read_caches_cpuid(Peaks& p) {
  unsigned a, b, c, d;
  if (!__get_cpuid(0x80000000, &a, &b, &c, &d)) return;
  __get_cpuid(0, &a, &b, &c, &d);
  const bool amd = b == 0x68747541;  // "Auth"enticAMD
  const unsigned leaf = amd ? 0x8000001D : 4;
  for (unsigned i = 0; i < 8; ++i) {
    if (!__get_cpuid_count(leaf, i, &a, &b, &c, &d)) break;
    const unsigned type = a & 31, level = (a >> 5) & 7;
    if (type == 0) break;  // no more caches
    if (type == 2) continue;  // instruction cache
    const int64_t size = int64_t((b >> 22) + 1) * (((b >> 12) & 0x3ff) + 1) * ((b & 0xfff) + 1) * (int64_t(c) + 1);
    if (level == 1 && !p.l1d) p.l1d = size;
    else if (level == 2 && !p.l2) p.l2 = size;
    else if (level == 3 && !p.l3) p.l3 = size;
  }
  // Hypervisors may zero that leaf; AMD's older ones still say L1d in KiB, L2 in KiB and
  // L3 in 512 KiB units.
  if (amd && __get_cpuid(0x80000005, &a, &b, &c, &d) && !p.l1d) p.l1d = int64_t(c >> 24) << 10;
  if (amd && __get_cpuid(0x80000006, &a, &b, &c, &d)) {
    if (!p.l2) p.l2 = int64_t(c >> 16) << 10;
    if (!p.l3) p.l3 = int64_t(d >> 18) * (int64_t(512) << 10);
  }
}

int physical_cores() {  // distinct (package, core) pairs; SMT siblings share one
  std::set<std::pair<std::string, std::string>> cores;
  for (int cpu = 0; cpu < 4096; ++cpu) {
    const std::string t = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    if (!std::filesystem::exists(t)) break;
    cores.emplace(read_text(t + "physical_package_id"), read_text(t + "core_id"));
  }
  return cores.empty() ? default_thread_count() : int(cores.size());
}

// ---- threads ----------------------------------------------------------------------

// Runs fn(i) on n fresh threads released together; returns the seconds from the release
// to the last thread's end, so thread start-up is not timed.
template <typename F>
double run_threads(int n, F fn) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<Clock::time_point> end(static_cast<size_t>(n));
  std::vector<std::thread> ts;
  try {
    for (int i = 0; i < n; ++i)
      ts.emplace_back([&, i] {
        ready.fetch_add(1);
        while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
        fn(i);
        end[size_t(i)] = Clock::now();
      });
  } catch (const std::system_error& e) {
    go.store(true);
    for (auto& t : ts) t.join();
    fail("cannot start {} threads: {}", n, e.what());
  }
  while (ready.load() < n) std::this_thread::yield();
  const auto t0 = Clock::now();
  go.store(true, std::memory_order_release);
  for (auto& t : ts) t.join();
  return std::chrono::duration<double>(*std::max_element(end.begin(), end.end()) - t0).count();
}

// ---- DRAM read bandwidth ----------------------------------------------------------

struct Mapping {  // anonymous memory, 2 MiB aligned so transparent huge pages can back it
  void* p = MAP_FAILED;
  size_t n = 0;
  explicit Mapping(size_t bytes) : n(bytes) {
    p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) fail("cannot map {} MiB for the bandwidth test: {}", n >> 20, std::strerror(errno));
    madvise(p, n, MADV_HUGEPAGE);  // fewer TLB misses while streaming; advisory only
  }
  ~Mapping() { munmap(p, n); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
};

uint64_t read_scalar(const void* q, int64_t n) {
  const uint64_t* v = static_cast<const uint64_t*>(q);
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (int64_t i = 0; i < n / 8; i += 4) s0 += v[i], s1 += v[i + 1], s2 += v[i + 2], s3 += v[i + 3];
  return s0 + s1 + s2 + s3;
}

// The working set: n equal segments, segment k at base + k * stride, len bytes each (a
// multiple of 4 KiB). Segment k was first touched by thread k of the all-thread run.
struct Region {
  char* base;
  int64_t stride, len;
  int n;
};

// Reads bytes [b, e) of the segments laid end to end (b, e multiples of 4 KiB).
uint64_t read_range(uint64_t (*read)(const void*, int64_t), const Region& g, int64_t b, int64_t e) {
  uint64_t s = 0;
  while (b < e) {
    const int64_t k = b / g.len, off = b % g.len, n = std::min(e - b, g.len - off);
    s += read(g.base + k * g.stride + off, n);
    b += n;
  }
  return s;
}

// `streams` streams of `len` bytes from byte b of the segments laid end to end, read
// 4 KiB of each in turn (a 4 KiB piece never straddles two segments).
uint64_t read_streams_range(Isa isa, const Region& g, int64_t b, int64_t len, int streams, int64_t ahead) {
  auto at = [&](int64_t x) { return g.base + (x / g.len) * g.stride + x % g.len; };
  const char* ptr[8];
  uint64_t s = 0;
  for (int64_t off = 0; off < len; off += 4096) {
    for (int k = 0; k < streams; ++k) ptr[k] = at(b + k * len + off);
    s += isa == Isa::Avx512 ? pd::read_streams_avx512(ptr, streams, 4096, ahead)
                            : pd::read_streams_avx2(ptr, streams, 4096, ahead);
  }
  return s;
}

// Median GB/s of `reps` runs (after one warm-up) of t threads, thread i reading `share`
// bytes through read_share(i), which returns a sum the optimizer cannot drop.
template <typename F>
double median_read_gbs(int t, int reps, int64_t share, F read_share) {
  std::vector<double> gbs;
  for (int r = 0; r <= reps; ++r) {  // r == 0 warms up and is not counted
    std::vector<uint64_t> sums(static_cast<size_t>(t));
    const double s = run_threads(t, [&](int i) { sums[size_t(i)] = read_share(i); });
    for (uint64_t v : sums) g_sink = g_sink + double(v);
    if (r > 0) gbs.push_back(double(share) * t / std::max(s, 1e-9) / 1e9);
  }
  return median(gbs);
}

// `want` bytes if the first touch allows: fresh pages cost a fault each, and some VMs
// fault at a few hundred MB/s, so past `floor` bytes the touch stops after ~4 s.
void measure_dram(Peaks& p, int n_threads, int64_t want, int64_t floor, bool quick, Progress& progress) {
  const Isa isa = active_isa();
  uint64_t (*read)(const void*, int64_t) = read_scalar;
  if (isa == Isa::Avx512) read = pd::read_avx512;
  else if (isa == Isa::Avx2) read = pd::read_avx2;
  const int64_t slice = std::max<int64_t>(want / n_threads / 4096 * 4096, 4096);
  Mapping m(static_cast<size_t>(slice * n_threads));
  Region g{static_cast<char*>(m.p), slice, 0, n_threads};
  // First touch in rounds, every thread on its own slice, so that pages land near the
  // thread that streams them in the all-thread run (on NUMA machines).
  const int64_t chunk = int64_t(32) << 20;
  const auto t0 = Clock::now();
  while (g.len < slice && (g.len * n_threads < floor || seconds_since(t0) < 4.0)) {
    const int64_t n = std::min(chunk, slice - g.len);
    run_threads(n_threads, [&](int i) { std::memset(g.base + slice * i + g.len, 1 + i, size_t(n)); });
    g.len += n;
  }
  const int64_t total = g.len * n_threads;
  p.dram_bytes = total;
  std::vector<int> counts;
  for (int t = 1; t < n_threads; t *= 2) counts.push_back(t);
  counts.push_back(n_threads);
  const int reps = quick ? 3 : 5;
  // The access patterns: a plain single stream, and the decode kernels' several panel
  // streams side by side, each with and without a software prefetch ahead. Each thread
  // count keeps its best median: the ceiling is what the machine can give.
  struct Pattern {
    int streams;
    int64_t ahead;
  };
  std::vector<Pattern> patterns{{1, 0}};
  if (isa != Isa::Scalar) {
    patterns.push_back({1, 1024});
    patterns.push_back({4, 0});
    patterns.push_back({4, 1024});
    patterns.push_back({8, 1024});
    if (!quick) patterns.push_back({4, 2048});
  }
  for (int t : counts) {
    const int64_t share = total / t / 4096 * 4096;  // each thread's disjoint part
    double best = 0;
    for (const Pattern& pt : patterns) {
      progress.set_detail(fmt::format("DRAM read: {} thread{}, {} stream{}, prefetch {}", t, t == 1 ? "" : "s",
                                      pt.streams, pt.streams == 1 ? "" : "s", pt.ahead));
      progress.add(1);
      double gbs;
      if (pt.streams == 1 && pt.ahead == 0) {
        gbs = median_read_gbs(t, reps, share, [&](int i) { return read_range(read, g, share * i, share * (i + 1)); });
      } else {
        const int64_t len = share / pt.streams / 4096 * 4096;  // one stream's contiguous part
        gbs = median_read_gbs(t, reps, len * pt.streams, [&](int i) {
          return read_streams_range(isa, g, share * i, len, pt.streams, pt.ahead);
        });
      }
      if (std::getenv("RIDGE_PEAKS_PATTERNS"))  // every pattern's median, for docs/ROOFLINE.md
        std::fprintf(stderr, "peaks: %d threads, %d streams, prefetch %lld: %.1f GB/s\n", t, pt.streams,
                     (long long)pt.ahead, gbs);
      if (gbs > best) {
        best = gbs;
        if (t == n_threads) p.dram_read_streams = pt.streams, p.dram_read_prefetch = pt.ahead;
      }
    }
    p.dram_read_gbs[t] = best;
    p.dram_read_gbs_max = std::max(p.dram_read_gbs_max, best);
  }
  // The same bytes in kScatterPiece pieces, each thread its share in a shuffled order:
  // what a paged cache's scattered blocks allow, with no arithmetic in the way.
  const int64_t pieces = total / n_threads / kScatterPiece;
  std::vector<std::vector<uint32_t>> order(static_cast<size_t>(n_threads));
  std::mt19937 rng(1);
  for (auto& o : order) {
    o.resize(static_cast<size_t>(pieces));
    std::iota(o.begin(), o.end(), 0u);
    std::shuffle(o.begin(), o.end(), rng);
  }
  const int64_t share = pieces * kScatterPiece;
  p.dram_scattered_gbs = median_read_gbs(n_threads, reps, share, [&](int i) {
    uint64_t acc = 0;
    for (uint32_t k : order[size_t(i)]) {
      const int64_t b = share * i + int64_t(k) * kScatterPiece;
      acc += read_range(read, g, b, b + kScatterPiece);
    }
    return acc;
  });
}

// Every thread re-reads its own buffer of half its L2 (256 KiB where unknown), so the
// lines come from the core's caches: the roof of ops on activations the step just made.
void measure_cache(Peaks& p, int n_threads, bool quick) {
  const Isa isa = active_isa();
  uint64_t (*read)(const void*, int64_t) = read_scalar;
  if (isa == Isa::Avx512) read = pd::read_avx512;
  else if (isa == Isa::Avx2) read = pd::read_avx2;
  const int64_t bytes = std::max<int64_t>(p.l2 > 0 ? p.l2 / 2 : 0, 64 << 10) / 4096 * 4096;
  Mapping m(static_cast<size_t>(bytes * n_threads));
  std::memset(m.p, 1, m.n);
  const int passes = quick ? 64 : 512;
  p.cache_bytes = bytes;
  p.cache_read_gbs = median_read_gbs(n_threads, quick ? 3 : 5, bytes * passes, [&](int i) {
    uint64_t s = 0;
    for (int k = 0; k < passes; ++k) s += read(static_cast<char*>(m.p) + bytes * i, bytes);
    return s;
  });
}

// ---- compute peaks ----------------------------------------------------------------

using KernelFn = double (*)(int64_t, float);

double fp32_fma_scalar(int64_t iters, float seed) {
  // The scalar path's ceiling: plain C++ at the baseline ISA, as ridge's scalar kernels.
  // Eight named chains, not an array: they stay in registers even in sanitizer builds.
  const float b = 1.0f - seed;
  float c0 = 0, c1 = seed, c2 = 2 * seed, c3 = 3 * seed, c4 = 4 * seed, c5 = 5 * seed, c6 = 6 * seed, c7 = 7 * seed;
  for (int64_t it = 0; it < iters; ++it) {
    c0 = c0 * seed + b, c1 = c1 * seed + b, c2 = c2 * seed + b, c3 = c3 * seed + b;
    c4 = c4 * seed + b, c5 = c5 * seed + b, c6 = c6 * seed + b, c7 = c7 * seed + b;
  }
  return double(c0 + c1 + c2 + c3 + c4 + c5 + c6 + c7);
}

ComputePeak measure_compute(KernelFn fn, double ops_per_iter, int n_threads, bool quick) {
  const float seed = g_seed;
  // Calibrate the iteration count to a target run time, so a fast or slow CPU both give
  // runs long enough to time yet keep the whole command within its budget.
  const double target = quick ? 0.02 : 0.1;
  int64_t iters = 1 << 14;
  for (;;) {
    const auto t0 = Clock::now();
    g_sink = g_sink + fn(iters, seed);
    const double s = seconds_since(t0);
    if (s >= target / 4 || iters > (int64_t(1) << 40)) {
      iters = std::max<int64_t>(1, int64_t(double(iters) * target / std::max(s, 1e-9)));
      break;
    }
    iters *= 4;
  }
  // The best of three runs: interference (other processes, interrupts) only ever
  // lowers throughput, so the fastest run is the closest to the ceiling.
  const int reps = 3;
  auto rate = [&](int t) {
    std::vector<double> r;
    for (int k = 0; k < reps; ++k) {
      std::vector<double> out(static_cast<size_t>(t));
      const double s = run_threads(t, [&](int i) { out[size_t(i)] = fn(iters, seed); });
      for (double v : out) g_sink = g_sink + v;
      r.push_back(double(iters) * ops_per_iter * t / std::max(s, 1e-9) / 1e9);
    }
    return *std::max_element(r.begin(), r.end());
  };
  ComputePeak cp;
  cp.per_core = rate(1);
  cp.all = n_threads == 1 ? cp.per_core : rate(n_threads);
  return cp;
}

// ---- JSON -------------------------------------------------------------------------

using ojson = nlohmann::ordered_json;

ojson peak_json(const std::optional<ComputePeak>& c) {
  if (!c) return nullptr;
  return ojson{{"per_core_gflops", c->per_core}, {"all_gflops", c->all}};
}

const nlohmann::json& field(const nlohmann::json& o, const char* key, const std::string& where) {
  if (!o.is_object() || !o.contains(key)) fail("{}: key '{}' is missing", where, key);
  return o.at(key);
}

double num(const nlohmann::json& o, const char* key, const std::string& where) {
  const auto& v = field(o, key, where);
  if (!v.is_number()) fail("{}: key '{}' must be a number", where, key);
  return v.get<double>();
}

int64_t integer(const nlohmann::json& o, const char* key, const std::string& where) {
  const auto& v = field(o, key, where);
  if (!v.is_number_integer() || v.get<int64_t>() < 0) fail("{}: key '{}' must be a non-negative integer", where, key);
  return v.get<int64_t>();
}

std::string text(const nlohmann::json& o, const char* key, const std::string& where) {
  const auto& v = field(o, key, where);
  if (!v.is_string()) fail("{}: key '{}' must be a string", where, key);
  return v.get<std::string>();
}

std::optional<ComputePeak> peak_from(const nlohmann::json& compute, const char* key, const std::string& where) {
  const auto& v = field(compute, key, where);
  if (v.is_null()) return std::nullopt;
  const std::string w = where + ": compute." + key;
  if (!v.is_object()) fail("{} must be an object or null", w);
  return ComputePeak{num(v, "per_core_gflops", w), num(v, "all_gflops", w)};
}

}  // namespace

std::string cpu_model_name() { return cpu_model(); }

void read_cache_sizes(Peaks& p) {
  read_caches(p);
  read_caches_cpuid(p);
}

Peaks measure_peaks(const PeaksOptions& opt) {
  RIDGE_CHECK(opt.threads >= 0, "peaks: thread count {} must be >= 0", opt.threads);
  RIDGE_CHECK(opt.dram_bytes >= 0, "peaks: working set {} must be >= 0", opt.dram_bytes);
  const auto t0 = Clock::now();
  Peaks p;
  p.cpu = cpu_model();
  p.cores = physical_cores();
  p.threads = opt.threads > 0 ? opt.threads : default_thread_count();
  const Isa isa = active_isa();
  p.isa = std::string(isa_name(isa));
  p.quick = opt.quick;
  read_cache_sizes(p);

  // Far beyond the last-level cache, so the streamed lines come from DRAM: 4 x L3 (an L3
  // that neither sysfs nor CPUID names is taken as 128 MiB), at
  // least 1 GiB (less only if the first touch is slow), at most half the available RAM
  // (the test must not swap). --quick: 256 MiB, which may sit in a large L3.
  const int64_t gib = int64_t(1) << 30;
  const int64_t l3 = p.l3 > 0 ? p.l3 : int64_t(128) << 20;
  int64_t want = opt.dram_bytes > 0 ? opt.dram_bytes : opt.quick ? gib / 4 : std::max(gib, 4 * l3);
  int64_t floor = opt.dram_bytes > 0 || opt.quick ? want : gib;
  if (const int64_t avail = mem_available_bytes(); avail > 0 && opt.dram_bytes == 0) {
    want = std::min(want, avail / 2);
    floor = std::min(floor, want);
  }
  Progress progress("measuring this machine's ceilings", 0, "tests");
  measure_dram(p, p.threads, want, floor, opt.quick, progress);
  progress.set_detail("cache read");
  progress.add(1);
  measure_cache(p, p.threads, opt.quick);
  progress.set_detail("compute peaks");
  progress.add(1);

  const CpuFeatures& f = cpu_features();
  if (isa == Isa::Avx512) {
    p.fp32_fma = measure_compute(pd::fp32_fma_avx512, pd::kFp32Avx512Ops, p.threads, opt.quick);
    if (f.avx512bf16) p.bf16_dot = measure_compute(pd::bf16_dot_avx512, pd::kBf16Avx512Ops, p.threads, opt.quick);
    if (f.avx512vnni) p.int8_vnni = measure_compute(pd::int8_vnni_avx512, pd::kInt8Avx512Ops, p.threads, opt.quick);
    if (f.avx512fp16 && f.avx512bw)
      p.fp16_fma = measure_compute(pd::fp16_fma_avx512, pd::kFp16Avx512Ops, p.threads, opt.quick);
  } else if (isa == Isa::Avx2) {
    p.fp32_fma = measure_compute(pd::fp32_fma_avx2, pd::kFp32Avx2Ops, p.threads, opt.quick);
    p.int8_vnni = f.avxvnni ? measure_compute(pd::int8_vnni_avxvnni, pd::kInt8AvxVnniOps, p.threads, opt.quick)
                            : measure_compute(pd::int8_maddubs_avx2, pd::kInt8Avx2Ops, p.threads, opt.quick);
  } else {
    p.fp32_fma = measure_compute(fp32_fma_scalar, 8 * 2, p.threads, opt.quick);
  }
  p.seconds = seconds_since(t0);
  p.measured_at = std::chrono::duration_cast<std::chrono::seconds>(
                      std::chrono::system_clock::now().time_since_epoch()).count();
  return p;
}

std::string peaks_to_json(const Peaks& p) {
  ojson dram = ojson::object();
  for (const auto& [t, g] : p.dram_read_gbs) dram[std::to_string(t)] = g;
  ojson j{{"cpu", p.cpu},
          {"cores", p.cores},
          {"threads", p.threads},
          {"isa", p.isa},
          {"caches", ojson{{"l1d", p.l1d}, {"l2", p.l2}, {"l3", p.l3}}},
          {"dram_read_gbs", dram},
          {"dram_read_gbs_max", p.dram_read_gbs_max},
          {"dram_read_streams", p.dram_read_streams},
          {"dram_read_prefetch", p.dram_read_prefetch},
          {"dram_bytes", p.dram_bytes},
          {"dram_scattered_gbs", p.dram_scattered_gbs},
          {"dram_scattered_piece", kScatterPiece},
          {"cache_read_gbs", p.cache_read_gbs},
          {"cache_bytes", p.cache_bytes},
          {"compute", ojson{{"fp32_fma", peak_json(p.fp32_fma)},
                            {"bf16_dot", peak_json(p.bf16_dot)},
                            {"int8_vnni", peak_json(p.int8_vnni)},
                            {"fp16_fma", peak_json(p.fp16_fma)}}},
          {"quick", p.quick},
          {"seconds", p.seconds},
          {"measured_at", p.measured_at}};
  return j.dump(2) + "\n";
}

Peaks peaks_from_json(const std::string& s, const std::string& where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(s);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON ({})", where, e.what());
  }
  if (!j.is_object()) fail("{}: expected a JSON object of machine peaks (ridge peaks --json)", where);
  Peaks p;
  p.cpu = text(j, "cpu", where);
  p.cores = int(integer(j, "cores", where));
  p.threads = int(integer(j, "threads", where));
  p.isa = text(j, "isa", where);
  const auto& c = field(j, "caches", where);
  p.l1d = integer(c, "l1d", where + ": caches");
  p.l2 = integer(c, "l2", where + ": caches");
  p.l3 = integer(c, "l3", where + ": caches");
  const auto& d = field(j, "dram_read_gbs", where);
  if (!d.is_object() || d.empty()) fail("{}: dram_read_gbs must be a non-empty object", where);
  for (const auto& [k, v] : d.items()) {
    char* end = nullptr;
    const long t = std::strtol(k.c_str(), &end, 10);
    if (k.empty() || *end || t < 1 || t > 1 << 20) fail("{}: dram_read_gbs key '{}' is not a thread count", where, k);
    if (!v.is_number()) fail("{}: dram_read_gbs.{} must be a number", where, k);
    p.dram_read_gbs[int(t)] = v.get<double>();
  }
  p.dram_read_gbs_max = num(j, "dram_read_gbs_max", where);
  p.dram_bytes = integer(j, "dram_bytes", where);
  // Added later, and measured in 2 KiB pieces before the piece size was stored: a figure
  // for another piece size than this build's is not this build's ceiling.
  if (j.contains("dram_scattered_gbs") && j.contains("dram_scattered_piece") &&
      integer(j, "dram_scattered_piece", where) == kScatterPiece)
    p.dram_scattered_gbs = num(j, "dram_scattered_gbs", where);
  const auto& comp = field(j, "compute", where);
  p.fp32_fma = peak_from(comp, "fp32_fma", where);
  p.bf16_dot = peak_from(comp, "bf16_dot", where);
  p.int8_vnni = peak_from(comp, "int8_vnni", where);
  p.fp16_fma = peak_from(comp, "fp16_fma", where);
  const auto& q = field(j, "quick", where);
  if (!q.is_boolean()) fail("{}: key 'quick' must be true or false", where);
  p.quick = q.get<bool>();
  p.seconds = num(j, "seconds", where);
  // Added later: files without them keep the defaults (one stream, age unknown).
  if (j.contains("dram_read_streams")) p.dram_read_streams = int(integer(j, "dram_read_streams", where));
  if (j.contains("dram_read_prefetch")) p.dram_read_prefetch = integer(j, "dram_read_prefetch", where);
  if (j.contains("measured_at")) p.measured_at = integer(j, "measured_at", where);
  if (j.contains("cache_read_gbs")) p.cache_read_gbs = num(j, "cache_read_gbs", where);
  if (j.contains("cache_bytes")) p.cache_bytes = integer(j, "cache_bytes", where);
  return p;
}

void save_peaks(const Peaks& p, const std::string& path) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) fail("cannot write peaks file {}: {}", path, std::strerror(errno));
  f << peaks_to_json(p);
  f.close();
  if (!f) fail("cannot write peaks file {}: write failed", path);
}

Peaks load_peaks(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    fail("cannot read peaks file {}: {} (make one with ridge peaks --json FILE)", path,
         std::filesystem::exists(path, ec) ? "not a regular file" : "no such file");
  if (!std::ifstream(path)) fail("cannot read peaks file {}: {}", path, std::strerror(errno));
  return peaks_from_json(read_text(path), path);
}

}  // namespace ridge
