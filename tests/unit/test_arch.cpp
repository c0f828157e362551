// Architectures as units: each reads its own tensors (a missing one fails the load by
// name) and the forward asks the architecture where it differs, not which weights exist.
#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "gguf/gguf_writer.h"
#include "model/mkmodel.h"
#include "model/model.h"

namespace ridge {
namespace {

std::string made(const std::string& arch) {
  const std::string path = testing::TempDir() + "/arch-" + arch + ".gguf";
  make_model({arch, "tiny", DType::F32, 11, "", 0, 2}, path);
  return path;
}

// The file at `path` without the tensor `drop`, written to a new file.
std::string without(const std::string& path, const std::string& drop) {
  auto f = gguf::File::open(path);
  gguf::Writer w;
  for (const auto& [k, v] : f->kv())
    if (k != "general.alignment") w.set_value(k, v);
  for (const auto& t : f->tensors()) {
    if (t.name == drop) continue;
    const gguf::TensorInfo* src = &t;
    w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims),
                 [src](uint8_t* dst) { std::memcpy(dst, src->data, src->nbytes); });
  }
  const std::string out = path + ".without.gguf";
  w.write(out);
  return out;
}

std::string load_error(const std::string& path) {
  try {
    Model::load(path);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

TEST(Arch, EachArchitectureLoadsItsOwnTensors) {
  for (const char* name : {"llama", "qwen2", "qwen3"}) {
    auto m = Model::load(made(name));
    EXPECT_STREQ(m->arch().name, name);
    EXPECT_EQ(&m->arch(), find_arch(name));
    const LayerWeights& L = m->weights().layers[0];
    EXPECT_EQ(!L.bq.empty(), m->arch().qkv_bias) << name;
    EXPECT_EQ(!L.bk.empty() && !L.bv.empty(), m->arch().qkv_bias) << name;
    EXPECT_EQ(!L.q_norm.empty() && !L.k_norm.empty(), m->arch().qk_norm) << name;
  }
  EXPECT_EQ(find_arch("gpt2"), nullptr);
  EXPECT_EQ(arch_names(), "llama, qwen2, qwen3");
}

TEST(Arch, AnArchitecturesOwnTensorIsRequired) {
  for (const auto& [arch, tensor] : {std::pair{"qwen2", "blk.1.attn_k.bias"}, std::pair{"qwen3", "blk.0.attn_q_norm.weight"},
                                     std::pair{"llama", "blk.1.ffn_up.weight"}}) {
    const std::string msg = load_error(without(made(arch), tensor));
    EXPECT_NE(msg.find(std::string("required tensor '") + tensor + "' is missing"), std::string::npos)
        << arch << ": " << msg;
  }
}

}  // namespace
}  // namespace ridge
