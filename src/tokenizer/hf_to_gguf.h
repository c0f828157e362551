// A Hugging Face tokenizer.json (and tokenizer_config.json) as llama.cpp's converter
// writes it into a GGUF: the tokens with their types (added special tokens are control
// tokens, other added ones user-defined, rows of the embedding past the tokenizer
// "[PADn]", unused), the special ids, add_bos/add_eos and the chat template; then
//  - byte-level BPE: tokenizer.ggml.model "gpt2", the merges and the pre-tokenizer's
//    llama.cpp name, recognized by its split patterns (llama.cpp recognizes it by the ids
//    of a test text); one ridge does not know is an error;
//  - SentencePiece-style BPE (byte_fallback, a normalizer that prepends U+2581 and turns
//    spaces into it: Llama 2, Mistral): tokenizer.ggml.model "llama", <0xXX> byte tokens
//    and the unknown token typed as SentencePiece types them, and scores that make
//    llama.cpp's highest-score-first merging follow the merges' order (llama.cpp's own
//    converter gives every token -1000 without tokenizer.model, which merges left to
//    right); merges that are not SentencePiece's (spm_scores in the .cpp) are an error.
// `-m DIR` reads any tokenizer.json directly instead.
#pragma once
#include <cstdint>
#include <string>

#include "gguf/gguf_writer.h"

namespace ridge {

// n_vocab: the embedding's rows, at least the tokenizer's ids.
void hf_tokenizer_to_gguf(const std::string& tokenizer_json, const std::string& tokenizer_config_json, int64_t n_vocab,
                          gguf::Writer& w);

}  // namespace ridge
