#include "core/meminfo.h"

#include <sys/statfs.h>
#include <sys/statvfs.h>

#include <fstream>

namespace ridge {

int64_t mem_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  int64_t kb = 0;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

int64_t disk_available_bytes(const std::string& dir) {
  struct statvfs s {};
  if (statvfs(dir.c_str(), &s) != 0) return 0;
  return int64_t(s.f_bavail) * int64_t(s.f_frsize);
}

bool on_tmpfs(const std::string& dir) {
  struct statfs s {};
  constexpr decltype(s.f_type) kTmpfsMagic = 0x01021994;  // linux/magic.h TMPFS_MAGIC
  return statfs(dir.c_str(), &s) == 0 && s.f_type == kTmpfsMagic;
}

}  // namespace ridge
