#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "core/error.h"
#include "tokenizer/byte_unicode.h"

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

// The length of the character at s[i] by llama.cpp's lenient decoder (lead byte and
// continuation bytes only); 0 where it gives up and substitutes U+FFFD for one byte.
size_t lenient_char_len(std::string_view s, size_t i) {
  const auto b = uint8_t(s[i]);
  const size_t n = b < 0x80            ? 1
                   : (b & 0x40) == 0   ? 0
                   : (b & 0x20) == 0   ? 2
                   : (b & 0x10) == 0   ? 3
                   : (b & 0x08) == 0   ? 4
                                       : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((uint8_t(s[i + k]) & 0xC0) != 0x80) return 0;
  return n;
}

// llama.cpp replaces each byte it cannot decode with U+FFFD before pre-tokenizing; doing
// the same keeps ids identical on malformed input. Returns text itself when it is clean.
std::string_view sanitize_utf8(std::string_view text, std::string& buf) {
  size_t i = 0;
  while (i < text.size()) {
    const size_t n = lenient_char_len(text, i);
    if (n == 0) break;
    i += n;
  }
  if (i == text.size()) return text;
  buf.assign(text, 0, i);
  while (i < text.size()) {
    const size_t n = lenient_char_len(text, i);
    if (n == 0) {
      buf += "\xEF\xBF\xBD";
      ++i;
    } else {
      buf.append(text, i, n);
      i += n;
    }
  }
  return buf;
}

// Token texts llama.cpp (llama-vocab.cpp, v0.4.0 of node-llama-cpp's copy) forces to control:
// its end-of-generation names and its fill-in-the-middle names.
constexpr std::string_view kControlByName[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
    "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
    "[e~[", "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>", "<PRE>",
    "\xE2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>", "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
    "<\xEF\xBD\x9C" "fim\xE2\x96\x81hole\xEF\xBD\x9C>", "<SUF>", "\xE2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>", "<|fim_middle|>",
    "<fim-middle>", "<fim_middle>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>", "<MID>", "\xE2\x96\x81<MID>", "<|code_middle|>",
    "<|middle|>", "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", "<|fim_repo|>", "<|repo_name|>",
    "<fim-repo>", "<REPO>", "<reponame>", "<|file_sep|>",
};

std::vector<std::pair<std::string, std::string>> read_merges(const gguf::File& f) {
  constexpr std::string_view kMerges = "tokenizer.ggml.merges";
  const gguf::Value* v = f.find(kMerges);
  if (!v)
    fail("{}: required metadata '{}' is missing (a tokenizer.ggml.model = 'gpt2' BPE vocabulary needs its merges)",
         f.name(), kMerges);
  if (v->type != gguf::ValueType::ARRAY || v->elem_type != gguf::ValueType::STRING)
    fail("{}: metadata '{}' must be an array of strings", f.name(), kMerges);
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(v->strs.size());
  for (std::string_view m : v->strs) {
    // Split at the first space after the first character, as llama.cpp does: a side may
    // be a lone space only in the first position. No space: an empty, never-matching pair.
    const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string_view::npos;
    if (sp == std::string_view::npos)
      merges.emplace_back();
    else
      merges.emplace_back(std::string(m.substr(0, sp)), std::string(m.substr(sp + 1)));
  }
  return merges;
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const gguf::File& f) {
  auto model = f.get_str("tokenizer.ggml.model");
  if (!model) fail("{}: required metadata 'tokenizer.ggml.model' is missing (the file has no tokenizer)", f.name());
  const std::string general_name(f.get_str("general.name").value_or(""));
  if (*model == "llama") {
    auto tok = from_vocab(Vocab::from_gguf(f));
    tok->apply_strip_rules(general_name, "");
    return tok;
  }
  if (*model != "gpt2")
    fail("{}: tokenizer.ggml.model = '{}' is not supported (only 'llama' SentencePiece and 'gpt2' byte-level BPE "
         "vocabularies)",
         f.name(), *model);

  std::string pre_name = "default";
  if (auto pre = f.get_str("tokenizer.ggml.pre"))
    pre_name = std::string(*pre);
  else
    std::fprintf(stderr,
                 "ridge: warning: %s has no tokenizer.ggml.pre; using the 'default' pre-tokenizer, as llama.cpp "
                 "does (tokenization may differ from the original model's)\n",
                 f.name().c_str());
  GgufPre pre;
  try {
    pre = gguf_pre(pre_name);
  } catch (const Error& e) {
    fail("{}: {}", f.name(), e.what());
  }
  BpeSetup setup;
  setup.merges = read_merges(f);
  setup.pre_regexes = std::move(pre.regexes);
  setup.options.ignore_merges = pre.ignore_merges;
  setup.byte_level = true;
  auto tok = from_bpe(Vocab::from_gguf(f), std::move(setup));
  // Llama 3 style files add BOS unless they say otherwise (llama.cpp's per-pre default).
  if (pre.add_bos && !f.get_bool("tokenizer.ggml.add_bos_token")) {
    if (tok->vocab_.bos() == Vocab::kNone)
      fail("{}: tokenizer.ggml.pre = '{}' adds BOS, but the vocabulary has no BOS token", f.name(), pre_name);
    tok->add_bos_ = true;
  }
  tok->apply_strip_rules(general_name, pre_name);
  return tok;
}

std::unique_ptr<Tokenizer> Tokenizer::from_vocab(Vocab vocab) { return std::make_unique<Tokenizer>(std::move(vocab)); }

std::unique_ptr<Tokenizer> Tokenizer::from_bpe(Vocab vocab, BpeSetup bpe) {
  return std::make_unique<Tokenizer>(std::move(vocab), std::move(bpe));
}

std::unique_ptr<Tokenizer> Tokenizer::from_pipeline(
    Vocab vocab, const std::function<std::unique_ptr<TextEncoder>(const Vocab&)>& make_encoder,
    std::vector<std::string> piece_bytes) {
  RIDGE_CHECK(piece_bytes.size() == size_t(vocab.size()), "from_pipeline: {} piece byte strings for {} tokens",
              piece_bytes.size(), vocab.size());
  auto tok = std::make_unique<Tokenizer>(std::move(vocab));
  tok->encoder_ = make_encoder(tok->vocab_);
  tok->bytes_ = std::move(piece_bytes);
  return tok;
}

Tokenizer::Tokenizer(Vocab vocab) : vocab_(std::move(vocab)), spm_(vocab_) { init_common(); }

Tokenizer::Tokenizer(Vocab vocab, BpeSetup bpe) : vocab_(std::move(vocab)), spm_(vocab_) {
  bpe_ = std::make_unique<BpeModel>(vocab_, bpe.merges, bpe.options);
  pre_ = std::make_unique<PreTokenizer>(bpe.pre_regexes);
  byte_level_ = bpe.byte_level;
  init_common();
}

void Tokenizer::init_common() {
  add_bos_ = vocab_.add_bos();
  add_eos_ = vocab_.add_eos();
  const size_t n = size_t(vocab_.size());
  control_.assign(n, 0);
  for (int32_t id = 0; id < vocab_.size(); ++id) {
    const TokenType t = vocab_.type(id);
    control_[size_t(id)] = t == TokenType::Control || t == TokenType::Unknown;
  }
  // llama.cpp makes the end-of-generation and fill-in-the-middle tokens it finds by name
  // control tokens even when the file calls them normal or user-defined, so they are
  // neither printed nor matched in literal text (Phi-3's "</s>" is user-defined in the file).
  for (int32_t id : {vocab_.eot(), vocab_.eom()})
    if (id != Vocab::kNone) control_[size_t(id)] = 1;
  for (std::string_view name : kControlByName)
    if (const int32_t id = vocab_.find(name); id != Vocab::kNone) control_[size_t(id)] = 1;
  // ...and its gpt-oss workaround: these always print, whatever the file says.
  for (std::string_view name : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"})
    if (const int32_t id = vocab_.find(name); id != Vocab::kNone) control_[size_t(id)] = 0;

  bytes_.assign(n, std::string());
  for (int32_t id = 0; id < vocab_.size(); ++id) {
    std::string& b = bytes_[size_t(id)];
    if (control_[size_t(id)]) continue;  // markup for the model, not text for the user
    switch (vocab_.type(id)) {
      case TokenType::Normal:
        if (!is_bpe())
          b = unescape_spaces(vocab_.text(id));
        else
          b = byte_level_ ? unicode_to_bytes(vocab_.text(id)) : unescape_spaces(vocab_.text(id));
        break;
      case TokenType::UserDefined: b = vocab_.text(id); break;
      case TokenType::Byte: {
        const int v = vocab_.byte_value(id);
        b = v >= 0 ? std::string(1, char(v)) : vocab_.text(id);
        break;
      }
      // Unused and undefined tokens print nothing, as in llama.cpp.
      default: break;
    }
  }

  specials_.clear();
  for (int32_t id = 0; id < vocab_.size(); ++id) {
    const bool user = vocab_.type(id) == TokenType::UserDefined && !control_[size_t(id)];
    if (!user && !control_[size_t(id)]) continue;
    specials_.push_back({vocab_.text(id), id, user});
  }
  // Longest first; equal lengths by id so the order is deterministic.
  std::stable_sort(specials_.begin(), specials_.end(),
                   [](const Special& a, const Special& b) { return a.text.size() > b.text.size(); });
}

void Tokenizer::apply_strip_rules(std::string_view model_name, std::string_view pre) {
  std::string name(model_name);
  for (char& c : name) c = char(std::tolower(uint8_t(c)));
  if (pre == "jina-v2-de" || pre == "jina-v2-es" || pre == "jina-v2-code") {
    for (Special& s : specials_)
      if (s.text == "<mask>") s.lstrip = true;
  } else if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
    // Phi-3's special tokens eat the whitespace after them (HF rstrip=True), except these.
    for (Special& s : specials_)
      s.rstrip = !(s.text == "<unk>" || s.text == "<s>" || s.text == "<|endoftext|>");
  }
}

bool Tokenizer::is_control(int32_t id) const {
  check_id(id);
  return control_[size_t(id)] != 0;
}

void Tokenizer::check_id(int32_t id) const {
  RIDGE_CHECK(vocab_.valid(id), "token id {} is out of range (vocabulary has {} tokens)", id, vocab_.size());
}

void Tokenizer::encode_text(std::string_view text, std::vector<int32_t>& out) const {
  if (!is_bpe()) {
    spm_.encode(text, out);  // adds the space prefix: every fragment starts a "word"
    return;
  }
  std::string clean_buf, word;
  const std::string_view clean = sanitize_utf8(text, clean_buf);
  std::vector<std::string_view> pieces;
  pre_->split(clean, pieces);
  for (std::string_view p : pieces) {
    if (byte_level_) {
      word.clear();
      bytes_to_unicode(p, word);
      bpe_->encode(word, out);
    } else {
      bpe_->encode(p, out);
    }
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 2 + 2);
  if (add_bos && add_bos_) ids.push_back(vocab_.bos());
  if (encoder_) {  // an external pipeline splits out its own added tokens
    encoder_->encode(text, parse_special, ids);
    if (add_bos && add_eos_) ids.push_back(vocab_.eos());
    return ids;
  }

  // Fragments: a text range (id == kNone) or a special token. Each special text, longest
  // first, splits every text fragment where it occurs (llama.cpp's tokenizer_st_partition).
  struct Frag {
    size_t off, len;
    int32_t id;
  };
  std::vector<Frag> frags;
  if (!text.empty()) frags.push_back({0, text.size(), Vocab::kNone});
  std::vector<Frag> next;
  for (const Special& s : specials_) {
    if (!s.always && !parse_special) continue;
    if (text.find(s.text) == std::string_view::npos) continue;  // the common case: absent
    next.clear();
    for (const Frag& f : frags) {
      if (f.id != Vocab::kNone) {
        next.push_back(f);
        continue;
      }
      const std::string_view frag = text.substr(f.off, f.len);
      size_t pos = 0;
      for (size_t m; (m = frag.find(s.text, pos)) != std::string_view::npos;) {
        size_t left_end = m;
        if (s.lstrip)
          while (left_end > pos && std::isspace(uint8_t(frag[left_end - 1]))) --left_end;
        if (left_end > pos) next.push_back({f.off + pos, left_end - pos, Vocab::kNone});
        next.push_back({f.off + m, s.text.size(), s.id});
        pos = m + s.text.size();
        if (s.rstrip)
          while (pos < frag.size() && std::isspace(uint8_t(frag[pos]))) ++pos;
      }
      if (pos < frag.size()) next.push_back({f.off + pos, frag.size() - pos, Vocab::kNone});
    }
    frags.swap(next);
  }

  for (const Frag& f : frags) {
    if (f.id != Vocab::kNone)
      ids.push_back(f.id);
    else
      encode_text(text.substr(f.off, f.len), ids);
  }
  if (add_bos && add_eos_) ids.push_back(vocab_.eos());
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
  bool strip = add_space_prefix();
  for (int32_t id : ids) {
    const std::string& b = piece_bytes(id);
    if (b.empty()) continue;
    // The SentencePiece encoder put one space before the text; the first piece carries it.
    if (strip && b[0] == ' ')
      out.append(b, 1);
    else
      out += b;
    strip = false;
  }
  return out;
}

}  // namespace ridge
