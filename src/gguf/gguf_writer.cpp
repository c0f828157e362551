#include "gguf/gguf_writer.h"

#include <bit>
#include <cstdio>
#include <cstring>
#include <unistd.h>
#include <memory>

#include "core/error.h"
#include "core/progress.h"

namespace ridge::gguf {
namespace {

struct Buf {
  std::vector<uint8_t> b;
  // resize + memcpy rather than insert: GCC 12 misreports insert at -O3
  // (-Wstringop-overflow false positive).
  void bytes(const void* p, size_t n) {
    if (n == 0) return;
    const size_t at = b.size();
    b.resize(at + n);
    std::memcpy(b.data() + at, p, n);
  }
  template <typename T>
  void put(T v) { bytes(&v, sizeof(T)); }
  void str(std::string_view s) {
    put<uint64_t>(s.size());
    bytes(s.data(), s.size());
  }
};

size_t elem_size(ValueType t) {
  switch (t) {
    case ValueType::U8: case ValueType::I8: case ValueType::BOOL: return 1;
    case ValueType::U16: case ValueType::I16: return 2;
    case ValueType::U32: case ValueType::I32: case ValueType::F32: return 4;
    case ValueType::U64: case ValueType::I64: case ValueType::F64: return 8;
    default: return 0;
  }
}

void serialize_payload(Buf& o, const Value& v) {
  switch (v.type) {
    case ValueType::U8: case ValueType::BOOL: o.put<uint8_t>(uint8_t(v.u)); break;
    case ValueType::I8: o.put<int8_t>(int8_t(v.i)); break;
    case ValueType::U16: o.put<uint16_t>(uint16_t(v.u)); break;
    case ValueType::I16: o.put<int16_t>(int16_t(v.i)); break;
    case ValueType::U32: o.put<uint32_t>(uint32_t(v.u)); break;
    case ValueType::I32: o.put<int32_t>(int32_t(v.i)); break;
    case ValueType::U64: o.put<uint64_t>(v.u); break;
    case ValueType::I64: o.put<int64_t>(v.i); break;
    case ValueType::F32: o.put<float>(float(v.f)); break;
    case ValueType::F64: o.put<double>(v.f); break;
    case ValueType::STRING: o.str(v.str); break;
    case ValueType::ARRAY:
      o.put<uint32_t>(uint32_t(v.elem_type));
      o.put<uint64_t>(v.count);
      if (v.elem_type == ValueType::STRING) {
        for (auto s : v.strs) o.str(s);
      } else if (v.elem_type == ValueType::ARRAY) {
        for (const auto& e : v.arr) serialize_payload(o, e);
      } else {
        o.bytes(v.raw, v.count * elem_size(v.elem_type));
      }
      break;
  }
}

}  // namespace

void Writer::put(std::string_view key, std::vector<uint8_t> bytes) {
  for (auto& kv : kv_)
    if (kv.key == key) {
      kv.bytes = std::move(bytes);
      return;
    }
  kv_.push_back({std::string(key), std::move(bytes)});
}

bool Writer::has(std::string_view key) const {
  for (const auto& kv : kv_)
    if (kv.key == key) return true;
  return false;
}

#define RIDGE_GGUF_SCALAR(fn, T, VT)              \
  void Writer::fn(std::string_view key, T v) {    \
    Buf o;                                        \
    o.put<uint32_t>(uint32_t(ValueType::VT));     \
    o.put<T>(v);                                  \
    put(key, std::move(o.b));                     \
  }
RIDGE_GGUF_SCALAR(set_u32, uint32_t, U32)
RIDGE_GGUF_SCALAR(set_i32, int32_t, I32)
RIDGE_GGUF_SCALAR(set_u64, uint64_t, U64)
RIDGE_GGUF_SCALAR(set_f32, float, F32)
#undef RIDGE_GGUF_SCALAR

void Writer::set_bool(std::string_view key, bool v) {
  Buf o;
  o.put<uint32_t>(uint32_t(ValueType::BOOL));
  o.put<uint8_t>(v ? 1 : 0);
  put(key, std::move(o.b));
}

void Writer::set_str(std::string_view key, std::string_view v) {
  Buf o;
  o.put<uint32_t>(uint32_t(ValueType::STRING));
  o.str(v);
  put(key, std::move(o.b));
}

void Writer::set_str_array(std::string_view key, const std::vector<std::string>& v) {
  Buf o;
  o.put<uint32_t>(uint32_t(ValueType::ARRAY));
  o.put<uint32_t>(uint32_t(ValueType::STRING));
  o.put<uint64_t>(v.size());
  for (const auto& s : v) o.str(s);
  put(key, std::move(o.b));
}

void Writer::set_f32_array(std::string_view key, const std::vector<float>& v) {
  Buf o;
  o.put<uint32_t>(uint32_t(ValueType::ARRAY));
  o.put<uint32_t>(uint32_t(ValueType::F32));
  o.put<uint64_t>(v.size());
  for (float f : v) o.put<float>(f);
  put(key, std::move(o.b));
}

void Writer::set_i32_array(std::string_view key, const std::vector<int32_t>& v) {
  Buf o;
  o.put<uint32_t>(uint32_t(ValueType::ARRAY));
  o.put<uint32_t>(uint32_t(ValueType::I32));
  o.put<uint64_t>(v.size());
  for (int32_t x : v) o.put<int32_t>(x);
  put(key, std::move(o.b));
}

void Writer::set_value(std::string_view key, const Value& v) {
  Buf o;
  o.put<uint32_t>(uint32_t(v.type));
  serialize_payload(o, v);
  put(key, std::move(o.b));
}

void Writer::set_alignment(uint32_t a) {
  RIDGE_CHECK(a > 0 && std::has_single_bit(a), "GGUF alignment {} is not a power of two", a);
  alignment_ = a;
  set_u32("general.alignment", a);
}

void Writer::add_tensor(std::string_view name, DType type, std::vector<int64_t> ne, Fill fill) {
  RIDGE_CHECK(!ne.empty() && ne.size() <= 4, "tensor '{}': 1..4 dimensions", name);
  for (const auto& t : tensors_) RIDGE_CHECK(t.name != name, "duplicate tensor '{}'", name);
  const auto& info = dtype_info(type);
  RIDGE_CHECK(ne[0] % info.block_size == 0, "tensor '{}': row length {} is not a multiple of {}'s block {}", name,
              ne[0], info.name, info.block_size);
  uint64_t rows = 1;
  for (size_t d = 1; d < ne.size(); ++d) rows *= uint64_t(ne[d]);
  const uint64_t nbytes = uint64_t(row_bytes(type, ne[0])) * rows;
  tensors_.push_back({std::string(name), type, std::move(ne), nbytes, std::move(fill)});
}

void Writer::add_tensor(std::string_view name, DType type, std::vector<int64_t> ne, std::vector<uint8_t> data) {
  auto shared = std::make_shared<std::vector<uint8_t>>(std::move(data));
  add_tensor(name, type, std::move(ne), [shared](uint8_t* dst) { std::memcpy(dst, shared->data(), shared->size()); });
  RIDGE_CHECK(tensors_.back().nbytes == shared->size(), "tensor '{}': {} bytes given, {} expected", name,
              shared->size(), tensors_.back().nbytes);
}

std::vector<uint8_t> Writer::header(uint64_t& data_bytes) const {
  Buf h;
  h.bytes("GGUF", 4);
  h.put<uint32_t>(3);
  h.put<uint64_t>(tensors_.size());
  h.put<uint64_t>(kv_.size());
  for (const auto& kv : kv_) {
    h.str(kv.key);
    h.bytes(kv.bytes.data(), kv.bytes.size());
  }
  uint64_t off = 0;
  std::vector<uint64_t> offsets;
  for (const auto& t : tensors_) {
    h.str(t.name);
    h.put<uint32_t>(uint32_t(t.ne.size()));
    for (int64_t d : t.ne) h.put<uint64_t>(uint64_t(d));
    h.put<uint32_t>(uint32_t(t.type));
    h.put<uint64_t>(off);
    offsets.push_back(off);
    off += (t.nbytes + alignment_ - 1) / alignment_ * alignment_;
  }
  while (h.b.size() % alignment_) h.b.push_back(0);
  data_bytes = off;
  return std::move(h.b);
}

void Writer::write(const std::string& path) const {
  uint64_t off = 0;
  const std::vector<uint8_t> head = header(off);
  const std::string tmp = path + ".tmp";
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(tmp.c_str(), "wb"), &std::fclose);
  if (!f) fail("cannot write {}: {}", tmp, std::strerror(errno));
  try {
    emit(head, off, f.get(), tmp, path);
    if (std::fclose(f.release()) != 0) fail("write to {} failed: {}", tmp, std::strerror(errno));
  } catch (...) {
    std::remove(tmp.c_str());  // a full disk leaves no half-written file behind
    throw;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail("cannot rename {} to {}: {}", tmp, path, std::strerror(errno));
}

void Writer::write_fd(int fd, const std::string& name) const {
  uint64_t off = 0;
  const std::vector<uint8_t> head = header(off);
  const int fd2 = dup(fd);
  std::unique_ptr<FILE, int (*)(FILE*)> f(fd2 >= 0 ? fdopen(fd2, "wb") : nullptr, &std::fclose);
  if (!f) {
    const int err = errno;
    if (fd2 >= 0) close(fd2);
    fail("cannot write {}: {}", name, std::strerror(err));
  }
  emit(head, off, f.get(), name, name);
  if (std::fclose(f.release()) != 0) fail("write to {} failed: {}", name, std::strerror(errno));
}

void Writer::emit(const std::vector<uint8_t>& head, uint64_t data_bytes, FILE* f, const std::string& where,
                  const std::string& shown) const {
  auto out = [&](const void* p, size_t n) {
    if (n && std::fwrite(p, 1, n, f) != n) fail("write to {} failed: {}", where, std::strerror(errno));
  };
  out(head.data(), head.size());
  // Filling a tensor (quantizing, generating) is the slow part: count tensors and bytes.
  Progress progress("writing " + shown, int64_t(data_bytes), "B");
  std::vector<uint8_t> buf;
  size_t done = 0;
  for (const auto& t : tensors_) {
    const uint64_t padded = (t.nbytes + alignment_ - 1) / alignment_ * alignment_;
    buf.assign(padded, 0);
    t.fill(buf.data());
    out(buf.data(), buf.size());
    progress.set_detail(fmt::format("{}/{} tensors", ++done, tensors_.size()));
    progress.add(int64_t(padded));
  }
  if (std::fflush(f) != 0) fail("write to {} failed: {}", where, std::strerror(errno));
}

}  // namespace ridge::gguf
