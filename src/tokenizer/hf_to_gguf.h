// A Hugging Face tokenizer.json (and tokenizer_config.json) as llama.cpp's converter
// writes it into a GGUF: tokenizer.ggml.model "gpt2" (byte-level BPE), the tokens with
// their types (added special tokens are control tokens, other added ones user-defined,
// rows of the embedding past the tokenizer "[PADn]", unused), the merges, the
// pre-tokenizer's llama.cpp name, the special ids, add_bos/add_eos and the chat template.
// The pre-tokenizer is recognized by its split patterns (llama.cpp recognizes it by the
// ids of a test text); one ridge does not know is an error, as is a SentencePiece-style
// (byte_fallback) model: `-m DIR` reads those tokenizer.json files directly instead.
#pragma once
#include <cstdint>
#include <string>

#include "gguf/gguf_writer.h"

namespace ridge {

// n_vocab: the embedding's rows, at least the tokenizer's ids.
void hf_tokenizer_to_gguf(const std::string& tokenizer_json, const std::string& tokenizer_config_json, int64_t n_vocab,
                          gguf::Writer& w);

}  // namespace ridge
