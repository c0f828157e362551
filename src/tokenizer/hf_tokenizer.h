// Hugging Face tokenizers: tokenizer.json (+ tokenizer_config.json) -> a ridge Tokenizer
// whose encode produces the ids the Rust `tokenizers` library does for the same text.
//
// Supported, as the Llama 3, Qwen 2.5/3, Mistral, Gemma 3 and DeepSeek-V3 files use them:
//   model          BPE (vocab; merges as "a b" or ["a", "b"]; ignore_merges, byte_fallback,
//                  unk_token, fuse_unk)
//   added_tokens   special or not; lstrip, rstrip, normalized
//   normalizer     NFC, NFD, NFKC, NFKD, Lowercase, Strip, Replace (String or Regex),
//                  Prepend, Sequence
//   pre_tokenizer  Split (Regex or String; Removed, Isolated, MergedWithPrevious,
//                  MergedWithNext, Contiguous; invert), ByteLevel, Metaspace, Digits,
//                  Punctuation, WhitespaceSplit, Sequence
//   post_processor TemplateProcessing (at most one special token before and one after $A),
//                  ByteLevel, Sequence of those
//   decoder        ByteLevel, Metaspace, Replace (String), ByteFallback, Fuse, Strip, Sequence
// Anything else (another model or component type, an unknown option value, truncation,
// single_word added tokens) is a ridge::Error naming it: never silently different ids.
//
// Semantics chosen where the libraries leave a choice:
// - Tokenizer::encode(text, add_bos, parse_special): parse_special=false is the Rust
//   library's encode_special_tokens mode (special added tokens in the text stay text;
//   non-special added tokens are still split out).
// - BOS/EOS: tokenizer_config.json's add_bos_token / add_eos_token, when present, decide (as
//   transformers' fast tokenizers rebuild their post-processor from them); otherwise the
//   post_processor's template does.
// - decode() skips special tokens and does not apply transformers'
//   clean_up_tokenization_spaces (exposed in HfTokenizerConfig for whoever wants it).
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "tokenizer/tokenizer.h"

namespace ridge {

// tokenizer_config.json, the parts ridge uses.
struct HfTokenizerConfig {
  std::optional<std::string> bos_token, eos_token, pad_token, unk_token;  // content strings
  std::optional<bool> add_bos_token, add_eos_token;
  std::string chat_template;                           // the default one ("" when absent)
  std::map<std::string, std::string> chat_templates;   // named ones, when given as a list
  bool clean_up_tokenization_spaces = false;
};

// text: the file's contents; "" gives the defaults. Throws ridge::Error on malformed JSON.
HfTokenizerConfig parse_hf_tokenizer_config(const std::string& text);

// tokenizer_json / tokenizer_config_json: the files' contents (the config may be "").
// Throws ridge::Error naming the unsupported or malformed component.
std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& tokenizer_json,
                                             const std::string& tokenizer_config_json);

// Reads the files; config_path "" or a missing config file means no config.
std::unique_ptr<Tokenizer> load_hf_tokenizer_files(const std::string& json_path, const std::string& config_path);

}  // namespace ridge
