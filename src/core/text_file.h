// A whole small file (JSON, a prompt, a template) as a string.
#pragma once
#include <string>

namespace ridge {

// Throws ridge::Error naming the path and the reason when it cannot be read.
std::string read_text_file(const std::string& path);

}  // namespace ridge
