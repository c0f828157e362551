// What the kernel says of the machine's memory and disks (Linux /proc and statvfs).
#pragma once
#include <cstdint>
#include <string>

namespace ridge {

// /proc/meminfo's MemAvailable: what can be allocated without swapping (0 when unknown).
int64_t mem_available_bytes();
// Bytes an unprivileged process may still write on the file system holding `dir` (0
// when unknown).
int64_t disk_available_bytes(const std::string& dir);
// Whether `dir` is on a tmpfs, whose "disk" is the same memory the process uses.
bool on_tmpfs(const std::string& dir);

}  // namespace ridge
