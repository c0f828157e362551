// Readers for llama.cpp's tokenizer test vectors in ../shared/vocab (the layout of its
// tests/test-tokenizer-0): every input in NAME.gguf.inp is followed by
// "\n__ggml_vocab_test__\n", so the file ends with a separator; NAME.gguf.out has one line
// of space-separated ids per input (an empty line for the empty input).
#pragma once
#include <fmt/format.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace ridge::test {

inline std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::vector<std::string> read_inputs(const std::string& path) {
  const std::string text = read_all(path);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  size_t pos = 0;
  for (size_t next; (next = text.find(sep, pos)) != std::string::npos; pos = next + sep.size())
    inputs.push_back(text.substr(pos, next - pos));
  return inputs;
}

inline std::vector<std::vector<int32_t>> read_outputs(const std::string& path) {
  std::istringstream in(read_all(path));
  std::vector<std::vector<int32_t>> outs;
  for (std::string line; std::getline(in, line);) {
    std::istringstream ls(line);
    std::vector<int32_t> ids;
    for (int32_t id; ls >> id;) ids.push_back(id);
    outs.push_back(std::move(ids));
  }
  return outs;
}

inline std::string show(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += fmt::format(" {}", id);
  return s;
}

}  // namespace ridge::test
