// The paged KV pool's memory: one anonymous mapping of n_blocks blocks in the layout of
// kernels/kv_view.h, committed lazily as blocks fill. The view is what the kernels
// read; this class only owns the bytes.
#pragma once
#include <cstddef>

#include "kernels/kv_view.h"

namespace ridge {

class KVCache : public KVView {
 public:
  explicit KVCache(const KVLayout& layout);  // throws ridge::Error on an impossible layout
  ~KVCache();
  KVCache(const KVCache&) = delete;
  KVCache& operator=(const KVCache&) = delete;

 private:
  size_t map_len_ = 0;
};

}  // namespace ridge
