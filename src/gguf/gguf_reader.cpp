#include <bit>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "gguf/gguf.h"

namespace ridge::gguf {
namespace {

constexpr int kMaxArrayDepth = 4;
constexpr int kMaxDims = 4;

// Bounds-checked little-endian reads over [data, data+size).
class Cursor {
 public:
  Cursor(const uint8_t* d, size_t n, const std::string& name) : d_(d), n_(n), name_(name) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return n_ - pos_; }

  [[noreturn]] void error(size_t at, std::string_view what) const {
    fail("{}: {} at byte {}", name_, what, at);
  }

  template <typename T>
  T read(std::string_view field) {
    if (remaining() < sizeof(T))
      error(pos_, fmt::format("file ends inside {} ({} bytes needed, {} left)", field, sizeof(T), remaining()));
    T v;
    std::memcpy(&v, d_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  const uint8_t* skip(size_t n, std::string_view field) {
    if (n > remaining()) error(pos_, fmt::format("file ends inside {} ({} bytes needed, {} left)", field, n, remaining()));
    const uint8_t* p = d_ + pos_;
    pos_ += n;
    return p;
  }

  std::string_view read_string(std::string_view field) {
    const size_t at = pos_;
    const uint64_t len = read<uint64_t>(field);
    if (len > remaining())
      error(at, fmt::format("{} has length {} but only {} bytes remain", field, len, remaining()));
    std::string_view s(reinterpret_cast<const char*>(d_ + pos_), size_t(len));
    pos_ += size_t(len);
    return s;
  }

 private:
  const uint8_t* d_;
  size_t n_;
  size_t pos_ = 0;
  const std::string& name_;
};

size_t scalar_size(ValueType t) {
  switch (t) {
    case ValueType::U8: case ValueType::I8: case ValueType::BOOL: return 1;
    case ValueType::U16: case ValueType::I16: return 2;
    case ValueType::U32: case ValueType::I32: case ValueType::F32: return 4;
    case ValueType::U64: case ValueType::I64: case ValueType::F64: return 8;
    case ValueType::STRING: return 8;   // at least its length field
    case ValueType::ARRAY: return 12;   // at least its type and count
  }
  return 0;
}

bool valid_type(uint32_t t) { return t <= uint32_t(ValueType::F64); }

Value read_value(Cursor& c, ValueType type, std::string_view key, int depth) {
  Value v;
  v.type = type;
  switch (type) {
    case ValueType::U8: v.u = c.read<uint8_t>(key); break;
    case ValueType::I8: v.i = c.read<int8_t>(key); break;
    case ValueType::U16: v.u = c.read<uint16_t>(key); break;
    case ValueType::I16: v.i = c.read<int16_t>(key); break;
    case ValueType::U32: v.u = c.read<uint32_t>(key); break;
    case ValueType::I32: v.i = c.read<int32_t>(key); break;
    case ValueType::U64: v.u = c.read<uint64_t>(key); break;
    case ValueType::I64: v.i = c.read<int64_t>(key); break;
    case ValueType::F32: v.f = c.read<float>(key); break;
    case ValueType::F64: v.f = c.read<double>(key); break;
    case ValueType::BOOL: {
      const size_t at = c.pos();
      const uint8_t b = c.read<uint8_t>(key);
      if (b > 1) c.error(at, fmt::format("bool value of '{}' is {}, not 0 or 1", key, b));
      v.u = b;
      break;
    }
    case ValueType::STRING: v.str = c.read_string(key); break;
    case ValueType::ARRAY: {
      const size_t at = c.pos();
      if (depth >= kMaxArrayDepth) c.error(at, fmt::format("arrays of '{}' nest deeper than {}", key, kMaxArrayDepth));
      const uint32_t et = c.read<uint32_t>(key);
      if (!valid_type(et)) c.error(at, fmt::format("array '{}' has unknown element type {}", key, et));
      v.elem_type = ValueType(et);
      const size_t cat = c.pos();
      const uint64_t n = c.read<uint64_t>(key);
      // Every element takes at least scalar_size bytes: a count that cannot fit in the
      // bytes left is corrupt, and checking it first bounds the allocation below.
      if (n > c.remaining() / scalar_size(v.elem_type))
        c.error(cat, fmt::format("array '{}' claims {} elements but only {} bytes remain", key, n, c.remaining()));
      v.count = n;
      if (v.elem_type == ValueType::STRING) {
        v.strs.reserve(size_t(n));
        for (uint64_t k = 0; k < n; ++k) v.strs.push_back(c.read_string(key));
      } else if (v.elem_type == ValueType::ARRAY) {
        // Nested arrays are rare (no real model uses big ones); a Value is ~10x the bytes
        // of its encoding, so cap them to keep memory bounded.
        if (n > 65536) c.error(cat, fmt::format("array '{}' has {} nested arrays (at most 65536)", key, n));
        v.arr.reserve(size_t(n));
        for (uint64_t k = 0; k < n; ++k) {
          Value e = read_value(c, ValueType::ARRAY, key, depth + 1);
          v.arr.push_back(std::move(e));
        }
      } else {
        const size_t es = scalar_size(v.elem_type);
        v.raw = c.skip(size_t(n) * es, key);
        if (v.elem_type == ValueType::BOOL)
          for (uint64_t k = 0; k < n; ++k)
            if (v.raw[k] > 1) c.error(cat + 8 + k, fmt::format("bool element {} of '{}' is not 0 or 1", k, key));
      }
      break;
    }
  }
  return v;
}

}  // namespace

std::string_view value_type_name(ValueType t) {
  static constexpr std::string_view names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                               "bool", "string", "array", "u64", "i64", "f64"};
  return uint32_t(t) <= 12 ? names[uint32_t(t)] : "?";
}

bool Value::is_int() const {
  switch (type) {
    case ValueType::U8: case ValueType::I8: case ValueType::U16: case ValueType::I16:
    case ValueType::U32: case ValueType::I32: case ValueType::U64: case ValueType::I64: return true;
    default: return false;
  }
}

template <typename T>
static T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

double Value::num_at(uint64_t k) const {
  RIDGE_CHECK(type == ValueType::ARRAY && raw && k < count, "metadata array element {} is not a number", k);
  switch (elem_type) {
    case ValueType::F32: return load<float>(raw + 4 * k);
    case ValueType::F64: return load<double>(raw + 8 * k);
    default: return double(int_at(k));
  }
}

int64_t Value::int_at(uint64_t k) const {
  RIDGE_CHECK(type == ValueType::ARRAY && raw && k < count, "metadata array element {} is not an integer", k);
  switch (elem_type) {
    case ValueType::U8: case ValueType::BOOL: return raw[k];
    case ValueType::I8: return int8_t(raw[k]);
    case ValueType::U16: return load<uint16_t>(raw + 2 * k);
    case ValueType::I16: return load<int16_t>(raw + 2 * k);
    case ValueType::U32: return load<uint32_t>(raw + 4 * k);
    case ValueType::I32: return load<int32_t>(raw + 4 * k);
    case ValueType::U64: return int64_t(load<uint64_t>(raw + 8 * k));
    case ValueType::I64: return load<int64_t>(raw + 8 * k);
    case ValueType::F32: return int64_t(load<float>(raw + 4 * k));
    case ValueType::F64: return int64_t(load<double>(raw + 8 * k));
    default: fail("metadata array of {} has no integer elements", value_type_name(elem_type));
  }
}

std::string TensorInfo::shape_str() const {
  std::string s = "[";
  for (int d = 0; d < n_dims; ++d) s += fmt::format("{}{}", d ? ", " : "", ne[d]);
  return s + "]";
}

std::unique_ptr<File> File::open(const std::string& path) {
  std::unique_ptr<File> f(new File());
  f->map_ = MappedFile(path);
  f->data_ = f->map_.data();
  f->size_ = f->map_.size();
  f->name_ = path;
  f->parse_all();
  return f;
}

std::unique_ptr<File> File::parse(const uint8_t* data, size_t size, std::string name) {
  std::unique_ptr<File> f(new File());
  f->data_ = data;
  f->size_ = size;
  f->name_ = std::move(name);
  f->parse_all();
  return f;
}

void File::parse_all() {
  Cursor c(data_, size_, name_);
  if (size_ < 4 || std::memcmp(data_, "GGUF", 4) != 0) c.error(0, "not a GGUF file (magic is not 'GGUF')");
  c.read<uint32_t>("magic");
  version_ = c.read<uint32_t>("version");
  if (version_ == 1) c.error(4, "GGUF version 1 is not supported (convert the file to v2 or v3)");
  if (version_ != 2 && version_ != 3) c.error(4, fmt::format("unknown GGUF version {}", version_));

  const size_t tat = c.pos();
  const uint64_t n_tensors = c.read<uint64_t>("tensor count");
  const uint64_t n_kv = c.read<uint64_t>("metadata count");
  // A tensor info takes at least 8+4+8+4+8 bytes, a key/value pair at least 8+4+1.
  if (n_tensors > c.remaining() / 32)
    c.error(tat, fmt::format("tensor count {} cannot fit in the {} bytes that remain", n_tensors, c.remaining()));
  if (n_kv > c.remaining() / 13)
    c.error(tat + 8, fmt::format("metadata count {} cannot fit in the {} bytes that remain", n_kv, c.remaining()));

  kv_.reserve(size_t(n_kv));
  for (uint64_t k = 0; k < n_kv; ++k) {
    const size_t at = c.pos();
    const std::string_view key = c.read_string(fmt::format("metadata key #{}", k));
    const size_t tpos = c.pos();
    const uint32_t t = c.read<uint32_t>(key);
    if (!valid_type(t)) c.error(tpos, fmt::format("metadata '{}' has unknown value type {}", key, t));
    Value v = read_value(c, ValueType(t), key, 0);
    if (!kv_index_.emplace(key, kv_.size()).second) c.error(at, fmt::format("duplicate metadata key '{}'", key));
    kv_.emplace_back(key, std::move(v));
  }

  if (const Value* a = find("general.alignment")) {
    if (!a->is_int() || a->i < 0) fail("{}: general.alignment must be an unsigned integer", name_);
    const uint64_t al = a->type == ValueType::I32 || a->type == ValueType::I64 ? uint64_t(a->i) : a->u;
    if (al == 0 || !std::has_single_bit(al) || al > (1u << 16))
      fail("{}: general.alignment = {} is not a power of two up to 65536", name_, al);
    alignment_ = al;
  }

  tensors_.reserve(size_t(n_tensors));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    const size_t at = c.pos();
    TensorInfo ti;
    ti.name = c.read_string(fmt::format("name of tensor #{}", k));
    const size_t dpos = c.pos();
    const uint32_t nd = c.read<uint32_t>(ti.name);
    if (nd < 1 || nd > kMaxDims) c.error(dpos, fmt::format("tensor '{}' has {} dimensions (1..{} allowed)", ti.name, nd, kMaxDims));
    ti.n_dims = int(nd);
    int64_t n_el = 1;
    for (uint32_t d = 0; d < nd; ++d) {
      const size_t epos = c.pos();
      const uint64_t ne = c.read<uint64_t>(ti.name);
      if (ne == 0 || ne > uint64_t(std::numeric_limits<int64_t>::max()) / uint64_t(n_el))
        c.error(epos, fmt::format("tensor '{}' dimension {} = {} is zero or overflows", ti.name, d, ne));
      ti.ne[d] = int64_t(ne);
      n_el *= int64_t(ne);
    }
    const size_t typos = c.pos();
    const uint32_t type = c.read<uint32_t>(ti.name);
    const auto info = dtype_info(type);
    if (!info) c.error(typos, fmt::format("tensor '{}' has unknown type id {}", ti.name, type));
    ti.type = DType(type);
    if (ti.ne[0] % info->block_size != 0)
      c.error(dpos, fmt::format("tensor '{}' row length {} is not a multiple of the {} block size {}", ti.name,
                                ti.ne[0], info->name, info->block_size));
    const uint64_t rows = uint64_t(n_el / ti.ne[0]);
    const uint64_t rb = uint64_t(ti.ne[0] / info->block_size) * uint64_t(info->type_size);
    if (rb != 0 && rows > std::numeric_limits<uint64_t>::max() / rb)
      c.error(dpos, fmt::format("tensor '{}' byte size overflows", ti.name));
    ti.nbytes = rows * rb;
    const size_t opos = c.pos();
    ti.offset = c.read<uint64_t>(ti.name);
    if (ti.offset % alignment_ != 0)
      c.error(opos, fmt::format("tensor '{}' offset {} is not a multiple of the alignment {}", ti.name, ti.offset, alignment_));
    if (!tensor_index_.emplace(ti.name, tensors_.size()).second)
      c.error(at, fmt::format("duplicate tensor name '{}'", ti.name));
    tensors_.push_back(ti);
  }

  const uint64_t header_end = c.pos();
  data_offset_ = (header_end + alignment_ - 1) / alignment_ * alignment_;
  if (data_offset_ > size_ && !tensors_.empty())
    c.error(header_end, fmt::format("data section starts at {} past the end of the file ({} bytes)", data_offset_, size_));
  const uint64_t data_size = data_offset_ <= size_ ? size_ - data_offset_ : 0;
  for (auto& ti : tensors_) {
    if (ti.offset > data_size || ti.nbytes > data_size - ti.offset)
      fail("{}: tensor '{}' data [{}, {}) lies past the end of the file (data section is {} bytes from byte {})",
           name_, ti.name, ti.offset, ti.offset + ti.nbytes, data_size, data_offset_);
    ti.data = data_ + data_offset_ + ti.offset;
  }
}

const Value* File::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

std::optional<uint64_t> File::get_uint(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_int()) fail("{}: metadata '{}' is {}, expected an integer", name_, key, value_type_name(v->type));
  if (v->type == ValueType::I8 || v->type == ValueType::I16 || v->type == ValueType::I32 || v->type == ValueType::I64) {
    if (v->i < 0) fail("{}: metadata '{}' = {} must not be negative", name_, key, v->i);
    return uint64_t(v->i);
  }
  return v->u;
}

std::optional<int64_t> File::get_int(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_int()) fail("{}: metadata '{}' is {}, expected an integer", name_, key, value_type_name(v->type));
  if (v->type == ValueType::U64 && v->u > uint64_t(std::numeric_limits<int64_t>::max()))
    fail("{}: metadata '{}' = {} is out of range", name_, key, v->u);
  const bool is_signed = v->type == ValueType::I8 || v->type == ValueType::I16 || v->type == ValueType::I32 || v->type == ValueType::I64;
  return is_signed ? v->i : int64_t(v->u);
}

std::optional<double> File::get_float(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (v->is_float()) return v->f;
  if (v->is_int()) return double(*get_int(key));
  fail("{}: metadata '{}' is {}, expected a number", name_, key, value_type_name(v->type));
}

std::optional<bool> File::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != ValueType::BOOL) fail("{}: metadata '{}' is {}, expected a bool", name_, key, value_type_name(v->type));
  return v->u != 0;
}

std::optional<std::string_view> File::get_str(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != ValueType::STRING) fail("{}: metadata '{}' is {}, expected a string", name_, key, value_type_name(v->type));
  return v->str;
}

const Value* File::get_array(std::string_view key, ValueType elem) const {
  const Value* v = find(key);
  if (!v) return nullptr;
  if (v->type != ValueType::ARRAY || v->elem_type != elem)
    fail("{}: metadata '{}' is {}{}, expected an array of {}", name_, key, value_type_name(v->type),
         v->type == ValueType::ARRAY ? fmt::format(" of {}", value_type_name(v->elem_type)) : "", value_type_name(elem));
  return v;
}

uint64_t File::require_uint(std::string_view key) const {
  auto v = get_uint(key);
  if (!v) fail("{}: required metadata '{}' is missing", name_, key);
  return *v;
}

double File::require_float(std::string_view key) const {
  auto v = get_float(key);
  if (!v) fail("{}: required metadata '{}' is missing", name_, key);
  return *v;
}

std::string_view File::require_str(std::string_view key) const {
  auto v = get_str(key);
  if (!v) fail("{}: required metadata '{}' is missing", name_, key);
  return *v;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace ridge::gguf
