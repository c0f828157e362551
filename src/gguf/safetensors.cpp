#include "gguf/safetensors.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/text_file.h"

namespace ridge::safetensors {
namespace {

using nlohmann::json;

constexpr std::pair<std::string_view, Dtype> kDtypes[] = {
    {"F32", Dtype::F32}, {"F16", Dtype::F16}, {"BF16", Dtype::BF16}, {"F8_E4M3", Dtype::F8_E4M3},
    {"F8_E5M2", Dtype::F8_E5M2}, {"I32", Dtype::I32}, {"I64", Dtype::I64}, {"U8", Dtype::U8},
    {"I8", Dtype::I8}, {"BOOL", Dtype::BOOL}};

// A non-negative integer of a header field that fits int64 (JSON allows any number).
int64_t count(const json& v, const std::string& file, const std::string& tensor, const char* what) {
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
    fail("{}: tensor '{}': {} must be non-negative integers", file, tensor, what);
  const uint64_t u = v.get<uint64_t>();
  if (u > uint64_t(INT64_MAX)) fail("{}: tensor '{}': {} {} is too large", file, tensor, what, u);
  return int64_t(u);
}

}  // namespace

std::string_view dtype_name(Dtype t) {
  for (const auto& [n, d] : kDtypes)
    if (d == t) return n;
  return "?";
}

int64_t dtype_size(Dtype t) {
  switch (t) {
    case Dtype::F32: case Dtype::I32: return 4;
    case Dtype::I64: return 8;
    case Dtype::F16: case Dtype::BF16: return 2;
    default: return 1;
  }
}

int64_t Tensor::n_elements() const {
  // Parsing bounds the product by the data's bytes, unless a dimension is 0 (then the
  // others may be anything): 0 first, so the product never overflows.
  for (int64_t d : shape)
    if (d == 0) return 0;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string Tensor::shape_str() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
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

const Tensor* File::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void File::parse_all() {
  if (size_ < 8) fail("{}: not a safetensors file ({} bytes, no header length)", name_, size_);
  uint64_t n = 0;
  std::memcpy(&n, data_, 8);  // little-endian, as every machine ridge runs on
  if (n > kMaxHeaderBytes) fail("{}: safetensors header of {} bytes (over the {}-byte limit)", name_, n, kMaxHeaderBytes);
  if (n > size_ - 8) fail("{}: safetensors header of {} bytes, but the file has {} after its length", name_, n, size_ - 8);
  if (n < 2 || data_[8] != '{') fail("{}: not a safetensors file (the header is not a JSON object)", name_);
  json h;
  try {
    h = json::parse(reinterpret_cast<const char*>(data_ + 8), reinterpret_cast<const char*>(data_ + 8 + n));
  } catch (const json::exception& e) {
    fail("{}: the safetensors header is not valid JSON: {}", name_, e.what());
  }
  if (!h.is_object()) fail("{}: the safetensors header is not a JSON object", name_);
  const uint8_t* base = data_ + 8 + n;
  const uint64_t data_size = size_ - 8 - n;
  tensors_.reserve(h.size());
  for (const auto& [key, v] : h.items()) {
    if (key == "__metadata__") {
      if (!v.is_object()) fail("{}: __metadata__ is not an object", name_);
      for (const auto& [mk, mv] : v.items()) {
        if (!mv.is_string()) fail("{}: __metadata__ '{}' is not a string", name_, mk);
        metadata_[mk] = mv.get<std::string>();
      }
      continue;
    }
    if (!v.is_object()) fail("{}: tensor '{}' is not an object", name_, key);
    Tensor t;
    t.name = key;
    const auto dt = v.find("dtype"), shape = v.find("shape"), offs = v.find("data_offsets");
    if (dt == v.end() || !dt->is_string()) fail("{}: tensor '{}' has no dtype", name_, key);
    const std::string ds = dt->get<std::string>();
    const auto known = std::find_if(std::begin(kDtypes), std::end(kDtypes), [&](const auto& p) { return p.first == ds; });
    if (known == std::end(kDtypes)) fail("{}: tensor '{}' has dtype '{}', which ridge does not read", name_, key, ds);
    t.dtype = known->second;
    if (shape == v.end() || !shape->is_array() || shape->size() > 8)
      fail("{}: tensor '{}' has no shape (an array of at most 8 dimensions)", name_, key);
    // The element count, overflow-safe: no product may pass the data section's bytes.
    uint64_t elems = 1;
    for (const auto& d : *shape) {
      const int64_t x = count(d, name_, key, "shape");
      t.shape.push_back(x);
      if (x != 0 && elems > data_size / uint64_t(x)) elems = data_size + 1;
      else elems *= uint64_t(x);
    }
    if (offs == v.end() || !offs->is_array() || offs->size() != 2)
      fail("{}: tensor '{}' has no data_offsets [begin, end]", name_, key);
    const int64_t b = count((*offs)[0], name_, key, "data_offsets"), e = count((*offs)[1], name_, key, "data_offsets");
    if (b > e) fail("{}: tensor '{}': data_offsets [{}, {}] run backwards", name_, key, b, e);
    if (uint64_t(e) > data_size)
      fail("{}: tensor '{}': data_offsets end {} is past the data's {} bytes (truncated file?)", name_, key, e, data_size);
    if (elems > data_size || elems * uint64_t(dtype_size(t.dtype)) != uint64_t(e - b))
      fail("{}: tensor '{}': shape {} of {} needs {} bytes, its data_offsets hold {}", name_, key, t.shape_str(), ds,
           elems > data_size ? std::string("more than the file's") : std::to_string(elems * uint64_t(dtype_size(t.dtype))),
           e - b);
    t.data = base + b;
    t.nbytes = uint64_t(e - b);
    tensors_.push_back(std::move(t));
  }
  // The tensors tile the data section: sorted by offset, each starts where the last ended.
  std::vector<const Tensor*> order;
  for (const Tensor& t : tensors_) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const Tensor* a, const Tensor* b) {
    return a->data != b->data ? a->data < b->data : a->nbytes < b->nbytes;
  });
  const uint8_t* at = base;
  for (const Tensor* t : order) {
    if (t->data < at) fail("{}: tensor '{}' overlaps the tensor before it in the file", name_, t->name);
    if (t->data > at) fail("{}: {} bytes before tensor '{}' belong to no tensor", name_, t->data - at, t->name);
    at = t->data + t->nbytes;
  }
  if (at != base + data_size) fail("{}: {} bytes after the last tensor belong to no tensor", name_, base + data_size - at);
  for (size_t i = 0; i < tensors_.size(); ++i) index_[tensors_[i].name] = i;
}

Checkpoint::Checkpoint(const std::string& dir) : dir_(dir) {
  namespace fs = std::filesystem;
  const fs::path d(dir), index = d / "model.safetensors.index.json", single = d / "model.safetensors";
  auto add_file = [&](const std::string& path) -> const File* {
    files_.push_back(File::open(path));
    return files_.back().get();
  };
  if (fs::exists(index)) {
    json j;
    try {
      j = json::parse(read_text_file(index.string()));
    } catch (const json::exception& e) {
      fail("{}: not valid JSON: {}", index.string(), e.what());
    }
    const auto wm = j.find("weight_map");
    if (!j.is_object() || wm == j.end() || !wm->is_object() || wm->empty())
      fail("{}: no weight_map of tensor names to shard files", index.string());
    std::map<std::string, const File*> shards;
    for (const auto& [name, file] : wm->items()) {
      if (!file.is_string()) fail("{}: weight_map['{}'] is not a file name", index.string(), name);
      const std::string fname = file.get<std::string>();
      if (fname.empty() || fname.find('/') != std::string::npos || fname == "..")
        fail("{}: weight_map['{}'] = '{}' is not a file in the directory", index.string(), name, fname);
      auto it = shards.find(fname);
      if (it == shards.end()) it = shards.emplace(fname, add_file((d / fname).string())).first;
      const Tensor* t = it->second->find(name);
      if (!t) fail("{}: weight_map puts '{}' in {}, which has no such tensor", index.string(), name, fname);
      by_name_[name] = {it->second, t};
    }
  } else if (fs::exists(single)) {
    const File* f = add_file(single.string());
    for (const Tensor& t : f->tensors()) by_name_[t.name] = {f, &t};
  } else {
    fail("{}: no model.safetensors or model.safetensors.index.json", dir);
  }
}

const Tensor* Checkpoint::find(std::string_view name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second.second;
}

const Tensor& Checkpoint::require(std::string_view name) const {
  const Tensor* t = find(name);
  if (!t) fail("{}: the checkpoint has no tensor '{}'", dir_, name);
  return *t;
}

std::vector<const Tensor*> Checkpoint::tensors() const {
  std::vector<const Tensor*> v;
  for (const auto& [n, p] : by_name_) v.push_back(p.second);
  return v;
}

void Checkpoint::release(const Tensor& t) const {
  const auto it = by_name_.find(t.name);
  if (it != by_name_.end()) it->second.first->release(t);
}

}  // namespace ridge::safetensors
