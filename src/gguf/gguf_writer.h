// GGUF v3 writer. Metadata is serialized as it is set (so values copied from another
// file need not outlive the call); tensor data comes from a callback invoked while the
// file is written, so a multi-GB model is produced tensor by tensor, never held whole.
#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf.h"

namespace ridge::gguf {

class Writer {
 public:
  void set_u32(std::string_view key, uint32_t v);
  void set_i32(std::string_view key, int32_t v);
  void set_u64(std::string_view key, uint64_t v);
  void set_f32(std::string_view key, float v);
  void set_bool(std::string_view key, bool v);
  void set_str(std::string_view key, std::string_view v);
  void set_str_array(std::string_view key, const std::vector<std::string>& v);
  void set_f32_array(std::string_view key, const std::vector<float>& v);
  void set_i32_array(std::string_view key, const std::vector<int32_t>& v);
  void set_value(std::string_view key, const Value& v);  // any value, e.g. from a File
  void set_alignment(uint32_t a);  // also writes general.alignment
  bool has(std::string_view key) const;

  // fill(dst) writes exactly row_bytes(type, ne[0]) * rows bytes.
  using Fill = std::function<void(uint8_t* dst)>;
  void add_tensor(std::string_view name, DType type, std::vector<int64_t> ne, Fill fill);
  void add_tensor(std::string_view name, DType type, std::vector<int64_t> ne, std::vector<uint8_t> data);

  // Writes to path (through a temporary file renamed into place).
  void write(const std::string& path) const;
  // Writes at fd's position (an anonymous in-memory file, say); name is for messages.
  void write_fd(int fd, const std::string& name) const;

 private:
  struct Kv {
    std::string key;
    std::vector<uint8_t> bytes;  // type + value, serialized
  };
  struct Tensor {
    std::string name;
    DType type;
    std::vector<int64_t> ne;
    uint64_t nbytes;
    Fill fill;
  };
  void put(std::string_view key, std::vector<uint8_t> bytes);
  std::vector<uint8_t> header(uint64_t& data_bytes) const;  // through the tensor infos, padded
  void emit(const std::vector<uint8_t>& head, uint64_t data_bytes, std::FILE* f, const std::string& where,
            const std::string& shown) const;

  uint32_t alignment_ = 32;
  std::vector<Kv> kv_;
  std::vector<Tensor> tensors_;
};

}  // namespace ridge::gguf
