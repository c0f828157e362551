// GGUF (v2, v3) reader: the llama.cpp model format. The file is mmap'd and used in place:
// strings are views into it and tensor data pointers point into it. Parsing validates
// every count, length and offset against the bytes that remain (overflow-safe), so a
// truncated, corrupt or hostile file ends in a ridge::Error naming the field and the
// byte offset, never a crash, a hang or a huge allocation.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "core/mmap.h"

namespace ridge::gguf {

enum class ValueType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};
std::string_view value_type_name(ValueType t);

// One metadata value. Scalars are widened into u / i / f; strings view the file.
// Arrays of scalars stay in the file (raw view, decoded on access), so a hostile count
// can never make the reader allocate more than the file holds.
struct Value {
  ValueType type = ValueType::U8;
  uint64_t u = 0;           // U8..U64, BOOL
  int64_t i = 0;            // I8..I64
  double f = 0;             // F32, F64
  std::string_view str;     // STRING

  // ARRAY: count elements of elem_type, held in exactly one of the three forms.
  ValueType elem_type = ValueType::U8;
  uint64_t count = 0;
  const uint8_t* raw = nullptr;         // scalar elements, little-endian, packed
  std::vector<std::string_view> strs;   // STRING elements
  std::vector<Value> arr;               // nested ARRAY elements

  bool is_int() const;
  bool is_float() const { return type == ValueType::F32 || type == ValueType::F64; }
  // Element k of a scalar array, converted (bool/ints/floats).
  double num_at(uint64_t k) const;
  int64_t int_at(uint64_t k) const;
};

struct TensorInfo {
  std::string_view name;
  DType type;
  int n_dims = 0;
  int64_t ne[4] = {1, 1, 1, 1};  // ne[0] is the contiguous (row) dimension, as in ggml
  uint64_t offset = 0;           // relative to the data section
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  std::string shape_str() const;
};

class File {
 public:
  // Parses an mmap'd file; throws ridge::Error("<path>: <what> at byte <offset>").
  static std::unique_ptr<File> open(const std::string& path);
  // Parses a buffer that the caller keeps alive (tests, fuzzing).
  static std::unique_ptr<File> parse(const uint8_t* data, size_t size, std::string name);

  // Pins the mapped file in RAM (a no-op for parse()d buffers).
  void lock_in_memory() const { map_.lock(); }
  // The same for part of the file, and its inverse (core/mmap.h); no-ops for parse()d
  // buffers.
  void lock_pages(const uint8_t* p, size_t n) const { map_.lock_range(p, n); }
  void release_pages(const uint8_t* p, size_t n) const { map_.release(p, n); }

  uint32_t version() const { return version_; }
  const std::string& name() const { return name_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  size_t file_size() const { return size_; }

  // Metadata in file order, and lookup by key.
  const std::vector<std::pair<std::string_view, Value>>& kv() const { return kv_; }
  const Value* find(std::string_view key) const;

  // Typed getters. The required forms throw an Error naming the key when it is missing
  // or of the wrong type; integers of any width convert when in range.
  std::optional<uint64_t> get_uint(std::string_view key) const;
  std::optional<int64_t> get_int(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string_view> get_str(std::string_view key) const;
  const Value* get_array(std::string_view key, ValueType elem) const;  // nullptr if absent
  uint64_t require_uint(std::string_view key) const;
  double require_float(std::string_view key) const;
  std::string_view require_str(std::string_view key) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;

 private:
  File() = default;
  void parse_all();

  MappedFile map_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string name_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string_view, Value>> kv_;
  std::unordered_map<std::string_view, size_t> kv_index_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string_view, size_t> tensor_index_;
};

}  // namespace ridge::gguf
