// libFuzzer target for the safetensors reader (gguf/safetensors.h: the header length,
// the JSON header, dtypes, shapes and offsets). Bad input must end in a ridge::Error;
// anything else (another exception, a crash, UB, a leak, a huge allocation) is a finding.
// A header that parses is walked: every tensor's bytes are read, so an offset the checks
// let through past the buffer shows as an ASan report.
//
//   scripts/fuzz.sh   (builds and runs it after the GGUF target, over tests/fuzz/corpus_safetensors)
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "gguf/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto f = ridge::safetensors::File::parse(data, size, "fuzz.safetensors");
    uint64_t sum = 0;
    for (const auto& t : f->tensors()) {
      for (uint64_t i = 0; i < t.nbytes; ++i) sum += t.data[i];
      (void)t.n_elements();
      (void)t.shape_str();
      (void)f->find(t.name);
    }
    for (const auto& [k, v] : f->metadata()) sum += k.size() + v.size();
    volatile uint64_t sink = sum;
    (void)sink;
  } catch (const ridge::Error&) {
  }
  return 0;
}
