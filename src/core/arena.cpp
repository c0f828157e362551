#include "core/arena.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace ridge {

Arena::Arena(size_t bytes) : size_(bytes) {
  if (bytes == 0) return;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) fail("cannot allocate {} MiB: {}", bytes >> 20, std::strerror(errno));
  ::madvise(p, bytes, MADV_HUGEPAGE);  // advisory: no error if THP is off
  data_ = static_cast<uint8_t*>(p);
}

Arena::~Arena() { reset(); }

Arena::Arena(Arena&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

Arena& Arena::operator=(Arena&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

void Arena::reset() {
  if (data_) ::munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

void Arena::lock() const {
  if (data_ && ::mlock(data_, size_) != 0)
    fail("cannot lock {} MiB of repacked weights in RAM: {} (raise `ulimit -l` or drop --mlock)", size_ >> 20,
         std::strerror(errno));
}

}  // namespace ridge
