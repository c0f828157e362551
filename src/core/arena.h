// One anonymous, page-aligned allocation for data built at load time (repacked weights):
// transparent huge pages are requested because the GEMM streams it end to end and 4 KiB
// pages would cost a TLB miss every page.
#pragma once
#include <cstddef>
#include <cstdint>

namespace ridge {

class Arena {
 public:
  Arena() = default;
  explicit Arena(size_t bytes);  // throws ridge::Error when the memory is not there
  ~Arena();
  Arena(Arena&& o) noexcept;
  Arena& operator=(Arena&& o) noexcept;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  void lock() const;  // mlock, throws ridge::Error with the reason

 private:
  void reset();
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace ridge
