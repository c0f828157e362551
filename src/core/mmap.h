// Read-only memory map of a whole file (RAII). Model weights are used in place.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace ridge {

class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);  // throws ridge::Error naming the path
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // Pins the pages in RAM (mlock): weights must never be paged out under a KV pool that
  // fills the rest of memory. Throws ridge::Error with the reason.
  void lock() const;
  // Pins only the pages touching [p, p + n) (a part of the mapping); the rest may stay
  // released. A no-op outside the mapping.
  void lock_range(const void* p, size_t n) const;
  // Gives the pages wholly inside [p, p + n) back (MADV_DONTNEED): the process no longer
  // holds them, and a later read faults them in again from the file, unchanged (the map
  // is private and read-only, so no page ever differs from the file). Pages shared with
  // bytes outside the range stay. A no-op outside the mapping.
  void release(const void* p, size_t n) const;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void reset();
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace ridge
