#include "core/mmap.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace ridge {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open {}: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    fail("cannot stat {}: {}", path, std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("{} is not a regular file", path);
  }
  size_ = size_t(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      fail("cannot mmap {}: {}", path, std::strerror(e));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() { reset(); }

void MappedFile::lock() const {
  if (!data_) return;
  if (::mlock(data_, size_) != 0)
    fail("cannot lock {} MiB of {} in RAM: {} (raise the limit with `ulimit -l`, or run as root)", size_ >> 20, path_,
         std::strerror(errno));
}

namespace {
uintptr_t page_size() {
  static const uintptr_t n = uintptr_t(::sysconf(_SC_PAGESIZE));
  return n;
}
}  // namespace

void MappedFile::lock_range(const void* p, size_t n) const {
  const auto b = reinterpret_cast<uintptr_t>(p), lo = reinterpret_cast<uintptr_t>(data_);
  if (!data_ || n == 0 || b < lo || b + n > lo + size_) return;
  const uintptr_t ps = page_size(), from = b / ps * ps, to = (b + n + ps - 1) / ps * ps;
  if (::mlock(reinterpret_cast<void*>(from), to - from) != 0)
    fail("cannot lock {} MiB of {} in RAM: {} (raise the limit with `ulimit -l`, or run as root)", (to - from) >> 20,
         path_, std::strerror(errno));
}

void MappedFile::release(const void* p, size_t n) const {
  const auto b = reinterpret_cast<uintptr_t>(p), lo = reinterpret_cast<uintptr_t>(data_);
  if (!data_ || n == 0 || b < lo || b + n > lo + size_) return;
  const uintptr_t ps = page_size(), from = (b + ps - 1) / ps * ps, to = (b + n) / ps * ps;
  // Advisory: where the kernel refuses, the pages merely stay resident.
  if (to > from) ::madvise(reinterpret_cast<void*>(from), to - from, MADV_DONTNEED);
}

void MappedFile::reset() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)), path_(std::move(o.path_)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    path_ = std::move(o.path_);
  }
  return *this;
}

}  // namespace ridge
