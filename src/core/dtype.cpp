#include "core/dtype.h"

#include <array>
#include <cctype>
#include <string>

#include "core/error.h"

namespace ridge {
namespace {

struct Entry {
  uint32_t id;
  DTypeInfo info;
};

// Layouts from GGUF / ggml: Q4_0 {f16 d; u8 qs[16]}, Q8_0 {f16 d; i8 qs[32]}, the K
// types are 256-element super-blocks.
constexpr uint32_t kOwn = 1000;  // ids from here on are ridge's, not GGUF's
constexpr std::array<Entry, 24> kTypes{{
    {0, {"f32", 1, 4, true}},     {1, {"f16", 1, 2, true}},
    {2, {"q4_0", 32, 18, true}},  {3, {"q4_1", 32, 20, true}},
    {6, {"q5_0", 32, 22, true}},  {7, {"q5_1", 32, 24, true}},
    {8, {"q8_0", 32, 34, true}},  {9, {"q8_1", 32, 36, false}},
    {10, {"q2_k", 256, 84, false}}, {11, {"q3_k", 256, 110, false}},
    {12, {"q4_k", 256, 144, true}}, {13, {"q5_k", 256, 176, true}},
    {14, {"q6_k", 256, 210, true}}, {15, {"q8_k", 256, 292, false}},
    {24, {"i8", 1, 1, false}},    {25, {"i16", 1, 2, false}},
    {26, {"i32", 1, 4, false}},   {27, {"i64", 1, 8, false}},
    {28, {"f64", 1, 8, false}},   {30, {"bf16", 1, 2, true}},
    {39, {"mxfp4", 32, 17, true}},
    {1000, {"fp8_e4m3", 1, 1, false}}, {1001, {"fp8_e5m2", 1, 1, false}},
    {1002, {"fp8", 128, 132, true}},
}};
constexpr uint32_t kOwnInFiles = 1002;  // F8_E4M3_B128: the one own type files may hold

}  // namespace

std::optional<DTypeInfo> dtype_info(uint32_t raw) {
  if (raw >= kOwn && raw != kOwnInFiles) return std::nullopt;
  for (const auto& e : kTypes)
    if (e.id == raw) return e.info;
  return std::nullopt;
}

const DTypeInfo& dtype_info(DType t) {
  for (const auto& e : kTypes)
    if (e.id == uint32_t(t)) return e.info;
  fail("unknown tensor type id {}", uint32_t(t));
}

std::optional<DType> dtype_from_name(std::string_view name) {
  std::string lower(name);
  for (auto& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  for (const auto& e : kTypes)
    if (e.info.name == lower) return DType(e.id);
  return std::nullopt;
}

}  // namespace ridge
