// tools/kernel_cache: the tuned kernel parameters per CPU in a JSON file. A round trip
// keeps every value and other CPUs' entries; a file that is not JSON, not the expected
// shape, or holds a value outside its parameter's candidates is an error naming the file
// and the key, and applying it leaves the defaults in force.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/cpu.h"
#include "core/error.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/tuning.h"
#include "tools/kernel_cache.h"
#include "tools/kernel_tune.h"

namespace ridge {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / fs::path("ridge-kc-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                                                "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file() const { return (path / "kernels.json").string(); }
};

void write(const std::string& file, const std::string& text) {
  std::ofstream o(file);
  o << text;
}

std::string error_of(const std::string& file, const std::string& cpu) {
  try {
    load_tuned(file, cpu);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

struct KeepTuning {
  kernels::KernelTuning saved = kernels::kernel_tuning();
  Fp8Path fp8 = fp8_path();
  int32_t tile_keys = kernels::attention_tile_keys();
  ~KeepTuning() {
    kernels::set_kernel_tuning(saved);
    set_fp8_path(fp8);
    kernels::set_attention_tile_keys(tile_keys);
  }
};

TEST(KernelCache, RoundTripKeepsValuesAndOtherCpus) {
  TempDir d;
  TunedEntry a, b;
  a.tuning.of(DType::Q4_0).decode_ahead = 2048;
  a.tuning.of(DType::Q8_0).task_panels = 8;
  a.tuning.of(DType::Q5_0).batch_even = 0;
  a.fp8_path = Fp8Path::F16c;
  a.attn_tile_keys = 64;
  a.threads = 2;
  a.measured_at = 1796211416;
  a.seconds = 12.5;
  b.tuning.of(DType::F16).decode_streams = 2;
  save_tuned(d.file(), "cpu A", a);
  save_tuned(d.file(), "cpu B", b);
  const auto ra = load_tuned(d.file(), "cpu A");
  const auto rb = load_tuned(d.file(), "cpu B");
  ASSERT_TRUE(ra && rb);
  EXPECT_EQ(ra->tuning, a.tuning);
  EXPECT_EQ(ra->fp8_path, a.fp8_path);
  EXPECT_EQ(ra->attn_tile_keys, 64);
  EXPECT_EQ(ra->threads, 2);
  EXPECT_EQ(ra->measured_at, 1796211416);
  EXPECT_DOUBLE_EQ(ra->seconds, 12.5);
  EXPECT_EQ(rb->tuning, b.tuning);
  EXPECT_FALSE(rb->fp8_path);
  EXPECT_FALSE(rb->attn_tile_keys);
  EXPECT_FALSE(load_tuned(d.file(), "cpu C"));
  EXPECT_FALSE(load_tuned((d.path / "absent.json").string(), "cpu A"));
  // Rewriting one entry keeps the other.
  a.tuning.of(DType::Q4_0).decode_ahead = 512;
  save_tuned(d.file(), "cpu A", a);
  EXPECT_EQ(load_tuned(d.file(), "cpu A")->tuning.of(DType::Q4_0).decode_ahead, 512);
  EXPECT_EQ(load_tuned(d.file(), "cpu B")->tuning, b.tuning);
}

TEST(KernelCache, BadFilesAreErrorsNamingTheKey) {
  TempDir d;
  const std::string f = d.file();
  const struct {
    const char* text;
    const char* says;
  } cases[] = {
      {"{not json", "not JSON"},
      {"[1, 2]", "no \"cpus\" object"},
      {R"({"cpus": {"x": {"threads": 1e999}}})", "not JSON"},
      {R"({"cpus": {"x": {"types": {"q4_0": {"decode_streams": 3}}}}})", "types.q4_0.decode_streams"},
      {R"({"cpus": {"x": {"types": {"q4_0": {"decode_ahead": "far"}}}}})", "types.q4_0.decode_ahead"},
      {R"({"cpus": {"x": {"types": {"q8_k": {"decode_ahead": 1024}}}}})", "types.q8_k"},
      {R"({"cpus": {"x": {"types": {"q4_0": 7}}}})", "types.q4_0"},
      {R"({"cpus": {"x": {"fp8_path": "fp16", "types": {}}}})", "fp8_path"},
      {R"({"cpus": {"x": {"attn_tile_keys": 96, "types": {}}}})", "attn_tile_keys"},
      {R"({"cpus": {"x": {"attn_tile_keys": "wide", "types": {}}}})", "attn_tile_keys"},
      {R"({"cpus": {"x": {"attn_tile_keys": 4294967360, "types": {}}}})", "attn_tile_keys"},
      {R"({"cpus": {"x": {"threads": 2}}})", "types"},
      {R"({"version": 2, "cpus": {}})", "version 2"},
      {R"({"cpus": {"x": {"tuner": 0, "types": {}}}})", "tuner"},
      {R"({"cpus": {"x": {"tuner": "new", "types": {}}}})", "tuner"},
  };
  for (const auto& c : cases) {
    write(f, c.text);
    const std::string e = error_of(f, "x");
    EXPECT_NE(e.find(f), std::string::npos) << c.text << " -> " << e;
    EXPECT_NE(e.find(c.says), std::string::npos) << c.text << " -> " << e;
  }
  // A parameter this version does not know is skipped (a newer ridge's file).
  write(f, R"({"cpus": {"x": {"types": {"q4_0": {"decode_ahead": 2048, "future_knob": 9}}}}})");
  const auto e = load_tuned(f, "x");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->tuning.of(DType::Q4_0).decode_ahead, 2048);
  EXPECT_EQ(e->tuning.of(DType::Q8_0), kernels::default_tuning().of(DType::Q8_0));
  // A corrupt file is replaced by the next save.
  write(f, "garbage");
  save_tuned(f, "y", TunedEntry{});
  EXPECT_TRUE(load_tuned(f, "y"));
}

TEST(KernelCache, ApplySetsThisCpusEntryOnlyAndSurvivesABadFile) {
  KeepTuning keep;
  TempDir d;
  const std::string dir = d.path.string();
  kernels::set_kernel_tuning(kernels::default_tuning());
  EXPECT_EQ(apply_kernel_cache("").status, KernelCacheUse::Off);
  EXPECT_EQ(apply_kernel_cache(dir).status, KernelCacheUse::NoEntry);
  TunedEntry other;
  other.tuning.of(DType::Q4_0).decode_ahead = 512;
  save_tuned(kernel_cache_file(dir), "some other cpu", other);
  EXPECT_EQ(apply_kernel_cache(dir).status, KernelCacheUse::NoEntry);
  EXPECT_EQ(kernels::kernel_tuning(), kernels::default_tuning());
  TunedEntry mine;
  mine.tuning.of(DType::Q4_0).decode_ahead = 2048;
  mine.tuning.of(DType::Q4_K).task_panels = 4;
  mine.fp8_path = Fp8Path::F16c;
  mine.attn_tile_keys = 64;
  kernels::set_attention_tile_keys(128);
  save_tuned(kernel_cache_file(dir), kernel_cpu_id(), mine);
  const auto use = apply_kernel_cache(dir);
  EXPECT_EQ(use.status, KernelCacheUse::Applied) << use.line;
  EXPECT_EQ(kernels::kernel_tuning(), mine.tuning);
  EXPECT_EQ(kernels::attention_tile_keys(), 64);
  if (!std::getenv("RIDGE_FP8_PATH")) {
    EXPECT_EQ(fp8_path(), Fp8Path::F16c);
  }
  // A broken file: the defaults stay in force and the line says why.
  kernels::set_kernel_tuning(kernels::default_tuning());
  write(kernel_cache_file(dir), R"({"cpus": {")" + kernel_cpu_id() + R"(": {"types": {"q4_0": {"task_panels": 5}}}}})");
  const auto bad = apply_kernel_cache(dir);
  EXPECT_EQ(bad.status, KernelCacheUse::Unusable);
  EXPECT_NE(bad.line.find("task_panels"), std::string::npos) << bad.line;
  EXPECT_EQ(kernels::kernel_tuning(), kernels::default_tuning());
}

// An entry an older tuner measured (no "tuner", or a lower generation) is applied, and
// said to be stale, so that the first command re-times it; the tuner's own entries are
// current.
TEST(KernelCache, AnOlderTunersEntryIsAppliedAndStale) {
  KeepTuning keep;
  TempDir d;
  const std::string dir = d.path.string();
  kernels::set_kernel_tuning(kernels::default_tuning());
  write(kernel_cache_file(dir),
        R"({"cpus": {")" + kernel_cpu_id() + R"(": {"types": {"q4_0": {"task_panels": 8, "decode_ahead": 512}}}}})");
  const auto old = apply_kernel_cache(dir);
  EXPECT_EQ(old.status, KernelCacheUse::Stale) << old.line;
  EXPECT_EQ(kernels::kernel_tuning().of(DType::Q4_0).task_panels, 8);
  EXPECT_EQ(kernels::kernel_tuning().of(DType::Q4_0).decode_ahead, 512);
  EXPECT_EQ(load_tuned(kernel_cache_file(dir), kernel_cpu_id())->tuner, 1);
  TunedEntry now;
  save_tuned(kernel_cache_file(dir), kernel_cpu_id(), now);
  EXPECT_EQ(load_tuned(kernel_cache_file(dir), kernel_cpu_id())->tuner, kTunerGeneration);
  EXPECT_EQ(apply_kernel_cache(dir).status, KernelCacheUse::Applied);
  // A later ridge's generation is not stale here, and its values this ridge has no
  // candidate for keep this ridge's defaults (its others apply); from this generation
  // such a value is a damaged file.
  const std::string next = std::to_string(kTunerGeneration + 1);
  write(kernel_cache_file(dir), R"({"cpus": {")" + kernel_cpu_id() + R"(": {"tuner": )" + next + R"(, "types": {}}}})");
  EXPECT_EQ(apply_kernel_cache(dir).status, KernelCacheUse::Applied);
  const std::string later = R"(": {"tuner": )" + next +
                            R"(, "attn_tile_keys": 256, "types": {"q4_0": {"task_panels": 128, "decode_ahead": 512}}}}})";
  write(kernel_cache_file(dir), R"({"cpus": {")" + kernel_cpu_id() + later);
  kernels::set_kernel_tuning(kernels::default_tuning());
  EXPECT_EQ(apply_kernel_cache(dir).status, KernelCacheUse::Applied);
  EXPECT_EQ(kernels::kernel_tuning().of(DType::Q4_0).task_panels, kernels::default_tuning().of(DType::Q4_0).task_panels);
  EXPECT_EQ(kernels::kernel_tuning().of(DType::Q4_0).decode_ahead, 512);
  EXPECT_FALSE(load_tuned(kernel_cache_file(dir), kernel_cpu_id())->attn_tile_keys);
  write(kernel_cache_file(dir), R"({"cpus": {")" + kernel_cpu_id() + R"(": {"tuner": )" + next +
                                    R"(, "types": {"q4_0": {"task_panels": "x"}}}}})");
  EXPECT_EQ(apply_kernel_cache(dir).status, KernelCacheUse::Unusable);
  write(kernel_cache_file(dir), R"({"cpus": {")" + kernel_cpu_id() + R"(": {"tuner": )" +
                                    std::to_string(kTunerGeneration) + R"(, "types": {"q4_0": {"task_panels": 128}}}}})");
  EXPECT_EQ(apply_kernel_cache(dir).status, KernelCacheUse::Unusable);
}

TEST(KernelCache, UnwritableDirectoryIsAnError) {
  TempDir d;
  write((d.path / "file").string(), "x");
  EXPECT_THROW(check_cache_dir((d.path / "file" / "sub").string()), Error);  // a file in the way
  EXPECT_THROW(save_tuned((d.path / "file" / "kernels.json").string(), "x", TunedEntry{}), Error);
  EXPECT_NO_THROW(check_cache_dir((d.path / "new" / "dir").string()));
}

// A run on some types keeps what an earlier run chose for the others (and its FP8 path
// when the run did not race it).
TEST(KernelCache, APartialRunMergesIntoTheEarlierEntry) {
  TunedEntry old;
  old.tuning.of(DType::Q8_0).decode_ahead = 2048;
  old.tuning.of(DType::Q4_0).decode_ahead = 512;
  old.fp8_path = Fp8Path::F16c;
  TuneResult r;
  r.entry.tuning.of(DType::Q4_0).decode_ahead = 2048;
  r.entry.tuning.of(DType::Q4_1).decode_ahead = 2048;
  r.types = {DType::Q4_0, DType::Q4_1};
  const TunedEntry m = merge_tuned(old, r);
  EXPECT_EQ(m.tuning.of(DType::Q4_0).decode_ahead, 2048);
  EXPECT_EQ(m.tuning.of(DType::Q4_1).decode_ahead, 2048);
  EXPECT_EQ(m.tuning.of(DType::Q8_0).decode_ahead, 2048);
  EXPECT_EQ(m.tuning.of(DType::F16), old.tuning.of(DType::F16));
  EXPECT_EQ(m.fp8_path, Fp8Path::F16c);
  r.entry.fp8_path = Fp8Path::Bf16;
  EXPECT_EQ(merge_tuned(old, r).fp8_path, Fp8Path::Bf16);
  old.attn_tile_keys = 64;  // an earlier run's attention tile stays unless this run raced it
  EXPECT_EQ(merge_tuned(old, r).attn_tile_keys, 64);
  r.entry.attn_tile_keys = 128;
  EXPECT_EQ(merge_tuned(old, r).attn_tile_keys, 128);
  // Kept values of an older tuner keep the entry stale; a run over every type does not.
  EXPECT_EQ(m.tuner, kTunerGeneration);
  old.tuner = 1;
  EXPECT_EQ(merge_tuned(old, r).tuner, 1);
  r.types.assign(kernels::kTunedTypes.begin(), kernels::kTunedTypes.end());
  EXPECT_EQ(merge_tuned(old, r).tuner, kTunerGeneration);
}

// The tuner's task sizes: on 2 threads every candidate gives TinyLlama's ffn_up (352
// panels) its own tasks; on 8, Matmul's 4 tasks per thread cap ffn_up's at 8 panels and
// ffn_down's (128 panels) at 4, so 8 to 64 are one candidate there, timed as the default.
TEST(KernelTune, TaskSizesThatGiveTheSameTasksAreOneCandidate) {
  const auto* tp = kernels::find_tunable("task_panels");
  const auto* bp = kernels::find_tunable("batch_task_panels");
  const auto* ahead = kernels::find_tunable("decode_ahead");
  ASSERT_TRUE(tp && bp && ahead);
  const std::vector<KernelShape> shapes = {{"ffn_up", 2048, 5632}, {"ffn_down", 5632, 2048}};
  EXPECT_EQ(raced_candidates(*tp, 64, shapes, 2), tp->candidates);
  EXPECT_EQ(raced_candidates(*tp, 64, shapes, 8), (std::vector<int32_t>{4, 64}));
  EXPECT_EQ(raced_candidates(*tp, 16, shapes, 8), (std::vector<int32_t>{4, 16}));  // the default stands for its set
  EXPECT_EQ(raced_candidates(*bp, 16, shapes, 8), (std::vector<int32_t>{4, 16}));
  EXPECT_EQ(raced_candidates(*tp, 64, shapes, 64), (std::vector<int32_t>{64}));  // nothing left to race
  EXPECT_EQ(raced_candidates(*ahead, 1024, shapes, 64), ahead->candidates);  // other parameters: all
}

TEST(KernelCache, DirectoryFromFlagThenEnvironment) {
  EXPECT_EQ(kernel_cache_dir("off"), "");
  EXPECT_EQ(kernel_cache_dir("/x/y"), "/x/y");
  EXPECT_EQ(kernel_cache_file("/x/y"), "/x/y/kernels.json");
  EXPECT_NE(kernel_cpu_id().find("family"), std::string::npos);
}

}  // namespace
}  // namespace ridge
