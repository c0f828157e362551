// What a loaded model holds in RAM: the repacked panels, the bytes the forward still
// reads through the mapping (token_embd, unpacked matrices) and the f32 vectors, never
// the file's copy of a matrix that was repacked as well. Measured as deltas of this
// process's resident memory (/proc/self/status), so earlier tests do not matter.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "core/cpu.h"
#include "core/error.h"
#include "engine/engine.h"
#include "kernels/cpu/gemm.h"
#include "model/mkmodel.h"
#include "model/model.h"

namespace ridge {
namespace {

struct Rss {
  int64_t anon = 0, file = 0, total = 0;  // bytes
};

Rss rss() {
  std::ifstream f("/proc/self/status");
  Rss r;
  std::string key;
  int64_t kb;
  std::string unit;
  while (f >> key) {
    if (key == "RssAnon:" && f >> kb >> unit) r.anon = kb * 1024;
    else if (key == "RssFile:" && f >> kb >> unit) r.file = kb * 1024;
    else if (key == "VmRSS:" && f >> kb >> unit) r.total = kb * 1024;
    else f.ignore(1 << 20, '\n');
  }
  return r;
}

constexpr int64_t kMiB = int64_t(1) << 20;

// ASan's shadow memory and redzones grow the process with every byte it touches: the
// bounds below are about ridge's own memory, so they hold in the release build only.
#ifdef __SANITIZE_ADDRESS__
#define RIDGE_SKIP_UNDER_ASAN() GTEST_SKIP() << "resident-memory bounds do not hold under ASan (shadow memory)"
#else
#define RIDGE_SKIP_UNDER_ASAN() (void)0
#endif

std::string tinyllama_two_layers() {
  // TinyLlama's widths, two layers: about 130 MiB of q8_0 matrices, far above the noise.
  static const std::string path = [] {
    const std::string p = testing::TempDir() + "/memory-tl2-q8_0.gguf";
    MkModelOptions o;
    o.preset = "tinyllama-1.1b";
    o.dtype = DType::Q8_0;
    o.layers = 2;
    make_model(o, p);
    return p;
  }();
  return path;
}

TEST(ModelMemory, RepackedMatricesLeaveTheirFilePagesBehind) {
  RIDGE_SKIP_UNDER_ASAN();
  if (!kernels::gemm_available(DType::Q8_0)) GTEST_SKIP() << "no packed GEMM for q8_0 on this CPU path";
  const std::string path = tinyllama_two_layers();
  const Rss before = rss();
  auto m = Model::load(path);
  const Rss after = rss();
  const int64_t file = after.file - before.file, anon = after.anon - before.anon;
  std::printf("weights %.1f MiB: packed %.1f, mapped %.1f, vectors %.2f; RSS +%.1f MiB anon, +%.1f MiB file\n",
              double(m->weight_bytes()) / kMiB, double(m->packed_bytes()) / kMiB, double(m->mapped_bytes()) / kMiB,
              double(m->resident_weight_bytes() - m->packed_bytes() - m->mapped_bytes()) / kMiB, double(anon) / kMiB,
              double(file) / kMiB);
  ASSERT_GT(m->packed_bytes(), 64 * kMiB);
  // The file's pages: at most what the forward still reads (token_embd, not touched by
  // a load) plus the header and two boundary pages per tensor; never the repacked copy.
  EXPECT_LE(file, m->mapped_bytes() + 4 * kMiB);
  EXPECT_LT(file, m->packed_bytes() / 4);
  // Anonymous: the panels, the vectors and the load's thread stacks.
  EXPECT_LE(anon, m->packed_bytes() + 16 * kMiB);
}

// Loaded, then an engine with a fixed pool runs a few requests: the process grows by
// the weights' resident bytes, the KV blocks the requests touched and the activations,
// plus a small overhead (thread stacks, allocator slack).
TEST(ModelMemory, ServingStaysWithinWeightsTouchedKvAndActivations) {
  RIDGE_SKIP_UNDER_ASAN();
  const std::string path = tinyllama_two_layers();
  const Rss before = rss();
  auto m = Model::load(path);
  EngineConfig c;
  c.threads = 2;
  c.kv_cache_bytes = 256 * kMiB;  // far more than the requests touch: untouched pages cost nothing
  c.max_num_batched_tokens = 256;
  Engine e(*m, nullptr, c);
  RequestParams p;
  p.sampling.temperature = 0;
  p.ignore_eos = true;
  p.max_tokens = 8;
  int64_t tokens = 0;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> prompt(40, 0);
    for (size_t j = 0; j < prompt.size(); ++j) prompt[j] = int32_t(1 + (i * 131 + j * 17) % 30000);
    e.add_request(prompt, p);
    tokens += int64_t(prompt.size()) + p.max_tokens;
  }
  while (e.has_work()) e.step();
  const Rss after = rss();
  const HParams& h = m->hparams();
  KVLayout kl{h.n_layer, h.n_head_kv, h.head_dim_k, h.head_dim_v, c.block_size, 0, c.kv_dtype};
  const int64_t blocks = (tokens + c.block_size - 1) / c.block_size + 4;
  // Each layer's K and V tiles of a block are apart: a touched block may commit a page
  // per tile.
  const int64_t kv_touched = blocks * std::max<int64_t>(kl.bytes_per_token() * c.block_size, 2 * h.n_layer * 4096);
  // Through the mapping: the gathered embedding rows of the prompts' tokens (a page each
  // at most), or every matrix where none was repacked.
  const int64_t mapped = m->packed_bytes() > 0 ? std::min(tokens * 4096, m->mapped_bytes()) : m->mapped_bytes();
  const int64_t bound = m->resident_weight_bytes() - m->mapped_bytes() + mapped + kv_touched +
                        e.activation_bytes() + 32 * kMiB;
  const int64_t grew = after.total - before.total;
  std::printf("RSS +%.1f MiB; bound %.1f MiB (weights %.1f resident of which mapped %.1f, KV touched %.1f, "
              "activations %.1f, overhead 32)\n",
              double(grew) / kMiB, double(bound) / kMiB, double(m->resident_weight_bytes()) / kMiB,
              double(m->mapped_bytes()) / kMiB, double(kv_touched) / kMiB, double(e.activation_bytes()) / kMiB);
  EXPECT_LE(grew, bound);
}

// --mlock pins what the forward reads, not the whole file: the repacked copy's pages
// stay released.
TEST(ModelMemory, LockPinsOnlyWhatIsUsed) {
  RIDGE_SKIP_UNDER_ASAN();
  if (!kernels::gemm_available(DType::Q8_0)) GTEST_SKIP() << "no packed GEMM for q8_0 on this CPU path";
  const std::string path = tinyllama_two_layers();
  auto m = Model::load(path);
  const Rss before = rss();
  try {
    m->lock_in_memory();
  } catch (const Error& err) {
    GTEST_SKIP() << "mlock not permitted here: " << err.what();
  }
  const Rss after = rss();
  std::printf("mlock: RSS file +%.1f MiB (mapped %.1f MiB)\n", double(after.file - before.file) / kMiB,
              double(m->mapped_bytes()) / kMiB);
  EXPECT_LE(after.file - before.file, m->mapped_bytes() + 4 * kMiB);
}

}  // namespace
}  // namespace ridge
