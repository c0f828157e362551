#include "tokenizer/tokenizer.h"

#include "core/error.h"

namespace ridge {

namespace {

std::string unescape_spaces(std::string_view s) {
  static constexpr std::string_view kSpace = "\xE2\x96\x81";
  std::string r;
  r.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, kSpace.size(), kSpace) == 0) {
      r += ' ';
      i += kSpace.size();
    } else {
      r += s[i++];
    }
  }
  return r;
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const gguf::File& f) {
  auto model = f.get_str("tokenizer.ggml.model");
  if (!model) fail("{}: required metadata 'tokenizer.ggml.model' is missing (the file has no tokenizer)", f.name());
  if (*model != "llama")
    fail("{}: tokenizer.ggml.model = '{}' is not supported yet (only 'llama' SentencePiece vocabularies; gpt2 "
         "byte-level BPE arrives with the tokenizer issue)",
         f.name(), *model);
  return from_vocab(Vocab::from_gguf(f));
}

std::unique_ptr<Tokenizer> Tokenizer::from_vocab(Vocab vocab) { return std::make_unique<Tokenizer>(std::move(vocab)); }

Tokenizer::Tokenizer(Vocab vocab) : vocab_(std::move(vocab)), spm_(vocab_) {
  bytes_.resize(size_t(vocab_.size()));
  for (int32_t id = 0; id < vocab_.size(); ++id) {
    std::string& b = bytes_[size_t(id)];
    switch (vocab_.type(id)) {
      case TokenType::Normal: b = unescape_spaces(vocab_.text(id)); break;
      case TokenType::UserDefined: b = vocab_.text(id); break;
      case TokenType::Byte: {
        const int v = vocab_.byte_value(id);
        b = v >= 0 ? std::string(1, char(v)) : vocab_.text(id);
        break;
      }
      // Control, unknown, unused and undefined tokens print nothing, as in llama.cpp
      // without `special`: they are markup for the model, not text for the user.
      default: break;
    }
  }
}

void Tokenizer::check_id(int32_t id) const {
  RIDGE_CHECK(vocab_.valid(id), "token id {} is out of range (vocabulary has {} tokens)", id, vocab_.size());
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 2 + 2);
  if (add_bos && vocab_.add_bos()) ids.push_back(vocab_.bos());
  spm_.encode(text, ids);
  if (add_bos && vocab_.add_eos()) ids.push_back(vocab_.eos());
  return ids;
}

const std::string& Tokenizer::piece_bytes(int32_t id) const {
  check_id(id);
  return bytes_[size_t(id)];
}

const std::string& Tokenizer::piece(int32_t id) const {
  check_id(id);
  return vocab_.text(id);
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  bool strip = vocab_.add_space_prefix();
  for (int32_t id : ids) {
    const std::string& b = piece_bytes(id);
    if (b.empty()) continue;
    // The encoder put one space before the text; the first piece carries it.
    if (strip && b[0] == ' ')
      out.append(b, 1);
    else
      out += b;
    strip = false;
  }
  return out;
}

}  // namespace ridge
