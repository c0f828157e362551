#include "core/text_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace ridge {

std::string read_text_file(const std::string& path) {
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read {}: {}", path, errno ? std::strerror(errno) : "cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail("cannot read {}: read error", path);
  return ss.str();
}

}  // namespace ridge
