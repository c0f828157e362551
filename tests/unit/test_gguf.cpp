#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "test_util.h"

namespace ridge::gguf {
namespace {

std::vector<uint8_t> read_all(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

std::string write_sample(const std::string& path) {
  Writer w;
  w.set_str("general.architecture", "llama");
  w.set_u32("llama.block_count", 3);
  w.set_i32("i", -5);
  w.set_f32("f", 1.5f);
  w.set_bool("b", true);
  w.set_str_array("tokens", {"a", "bb", ""});
  w.set_f32_array("scores", {0.5f, -1.f, 2.f});
  std::vector<uint8_t> data(4 * 8);
  for (int i = 0; i < 8; ++i) {
    float v = float(i);
    std::memcpy(data.data() + 4 * i, &v, 4);
  }
  w.add_tensor("t0", DType::F32, {4, 2}, data);
  w.add_tensor("t1", DType::F32, {8}, data);
  w.write(path);
  return path;
}

TEST(Gguf, RoundTrip) {
  const auto path = testing::TempDir() + "/rt.gguf";
  write_sample(path);
  auto f = File::open(path);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->require_str("general.architecture"), "llama");
  EXPECT_EQ(f->require_uint("llama.block_count"), 3u);
  EXPECT_EQ(*f->get_int("i"), -5);
  EXPECT_FLOAT_EQ(float(*f->get_float("f")), 1.5f);
  EXPECT_TRUE(*f->get_bool("b"));
  const Value* toks = f->get_array("tokens", ValueType::STRING);
  ASSERT_NE(toks, nullptr);
  ASSERT_EQ(toks->count, 3u);
  EXPECT_EQ(toks->strs[1], "bb");
  const Value* sc = f->get_array("scores", ValueType::F32);
  ASSERT_NE(sc, nullptr);
  EXPECT_FLOAT_EQ(float(sc->num_at(1)), -1.f);
  ASSERT_EQ(f->tensors().size(), 2u);
  const TensorInfo* t0 = f->find_tensor("t0");
  ASSERT_NE(t0, nullptr);
  EXPECT_EQ(t0->ne[0], 4);
  EXPECT_EQ(t0->ne[1], 2);
  EXPECT_EQ(t0->nbytes, 32u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t0->data) % 32, 0u);
  float v;
  std::memcpy(&v, t0->data + 4 * 5, 4);
  EXPECT_EQ(v, 5.f);
  EXPECT_THROW(f->get_str("llama.block_count"), Error);
  EXPECT_THROW(f->require_uint("missing.key"), Error);
}

// Every truncation of a valid file must end in a clean Error (never a crash).
TEST(Gguf, EveryTruncationIsACleanError) {
  const auto path = testing::TempDir() + "/tr.gguf";
  write_sample(path);
  const auto bytes = read_all(path);
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + n);
    EXPECT_THROW(File::parse(cut.data(), cut.size(), "cut"), Error) << "length " << n;
  }
}

TEST(Gguf, HostileCountsAreCleanErrors) {
  const auto path = testing::TempDir() + "/ho.gguf";
  write_sample(path);
  const auto bytes = read_all(path);
  // Overwrite each 8-byte window with huge values: every parse must either succeed or
  // throw Error, and never allocate absurdly (ASan would catch a bad read).
  for (uint64_t pat : {~uint64_t(0), uint64_t(1) << 62, uint64_t(0x7fffffff)}) {
    for (size_t at = 4; at + 8 <= bytes.size(); at += 1) {
      auto b = bytes;
      std::memcpy(b.data() + at, &pat, 8);
      try {
        File::parse(b.data(), b.size(), "hostile");
      } catch (const Error&) {
      }
    }
  }
  SUCCEED();
}

TEST(Gguf, Messages) {
  std::vector<uint8_t> junk = {'G', 'G', 'U', 'F', 9, 0, 0, 0};
  try {
    File::parse(junk.data(), junk.size(), "j");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown GGUF version 9 at byte 4"), std::string::npos) << e.what();
  }
  std::vector<uint8_t> notg = {'G', 'G', 'M', 'L', 1, 0, 0, 0};
  EXPECT_THROW(File::parse(notg.data(), notg.size(), "n"), Error);
  EXPECT_THROW(File::open("/nonexistent/x.gguf"), Error);
}

}  // namespace
}  // namespace ridge::gguf
