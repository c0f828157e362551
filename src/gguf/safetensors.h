// safetensors (Hugging Face's weight format) reader: an 8-byte little-endian header
// length N, N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end)}, and
// optionally "__metadata__": {string: string}}, then the data the offsets index. The
// file is mmap'd and read in place. Like the GGUF reader, parsing validates everything
// against the bytes that are there: a header over kMaxHeaderBytes, malformed JSON, an
// unknown dtype, a shape whose size disagrees with its offsets, offsets past the end,
// overlapping or leaving gaps between tensors each end in a ridge::Error naming the file
// and the tensor, never a crash or a huge allocation.
//
// A checkpoint directory (Checkpoint) is model.safetensors, or the shards that
// model.safetensors.index.json's weight_map names.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/mmap.h"

namespace ridge::safetensors {

// The format's dtypes that ridge reads (the others are an error naming them).
enum class Dtype { F32, F16, BF16, F8_E4M3, F8_E5M2, I32, I64, U8, I8, BOOL };
std::string_view dtype_name(Dtype t);
int64_t dtype_size(Dtype t);

struct Tensor {
  std::string name;
  Dtype dtype = Dtype::F32;
  std::vector<int64_t> shape;  // outermost first (row-major: the last dimension is contiguous)
  const uint8_t* data = nullptr;
  uint64_t nbytes = 0;
  int64_t n_elements() const;
  std::string shape_str() const;
};

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the Rust library's limit

class File {
 public:
  static std::unique_ptr<File> open(const std::string& path);
  // A buffer the caller keeps alive (tests, fuzzing).
  static std::unique_ptr<File> parse(const uint8_t* data, size_t size, std::string name);

  const std::string& name() const { return name_; }
  const std::vector<Tensor>& tensors() const { return tensors_; }
  const Tensor* find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Gives a tensor's pages back once it is copied (a no-op for parse()d buffers).
  void release(const Tensor& t) const { map_.release(t.data, size_t(t.nbytes)); }

 private:
  File() = default;
  void parse_all();
  MappedFile map_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string name_;
  std::vector<Tensor> tensors_;
  std::unordered_map<std::string_view, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a checkpoint directory, across its shards.
class Checkpoint {
 public:
  explicit Checkpoint(const std::string& dir);
  const std::string& dir() const { return dir_; }
  const Tensor* find(std::string_view name) const;
  const Tensor& require(std::string_view name) const;  // an Error naming the tensor and the directory
  std::vector<const Tensor*> tensors() const;          // every tensor, by name
  void release(const Tensor& t) const;

 private:
  std::string dir_;
  std::vector<std::unique_ptr<File>> files_;
  std::map<std::string, std::pair<const File*, const Tensor*>, std::less<>> by_name_;
};

}  // namespace ridge::safetensors
