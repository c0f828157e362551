#include "tokenizer/vocab.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace ridge {

namespace {

constexpr std::string_view kModel = "tokenizer.ggml.model";
constexpr std::string_view kTokens = "tokenizer.ggml.tokens";
constexpr std::string_view kScores = "tokenizer.ggml.scores";
constexpr std::string_view kTypes = "tokenizer.ggml.token_type";

// A numeric array of exactly n elements, or nullptr when the key is absent.
const gguf::Value* numeric_array(const gguf::File& f, std::string_view key, uint64_t n, bool allow_float) {
  const gguf::Value* v = f.find(key);
  if (!v) return nullptr;
  const bool ok_elem = v->type == gguf::ValueType::ARRAY && v->raw != nullptr &&
                       (v->elem_type == gguf::ValueType::I32 || v->elem_type == gguf::ValueType::U32 ||
                        (allow_float && v->elem_type == gguf::ValueType::F32));
  if (!ok_elem)
    fail("{}: metadata '{}' is {}, expected an array of {}", f.name(), key,
         v->type == gguf::ValueType::ARRAY ? fmt::format("an array of {}", gguf::value_type_name(v->elem_type))
                                           : std::string(gguf::value_type_name(v->type)),
         allow_float ? "F32" : "I32");
  if (v->count != n)
    fail("{}: metadata '{}' has {} elements but '{}' has {} tokens", f.name(), key, v->count, kTokens, n);
  return v;
}

// A special-token id: absent keeps the default; -1 (also written as u32 0xFFFFFFFF, as
// converters do for "none", e.g. stories260K's padding id) unsets it; else it must be valid.
void read_id(const gguf::File& f, std::string_view key, int32_t n_vocab, int32_t& id) {
  auto v = f.get_int(key);  // throws naming the key when not an integer
  if (!v) return;
  if (*v == -1 || *v == int64_t(UINT32_MAX)) {
    id = Vocab::kNone;
    return;
  }
  if (*v < 0 || *v >= int64_t(n_vocab))
    fail("{}: metadata '{}' = {} is out of range (vocabulary has {} tokens)", f.name(), key, *v, n_vocab);
  id = static_cast<int32_t>(*v);
}

}  // namespace

int32_t Vocab::find(std::string_view text) const {
  auto it = index_.find(text);
  return it == index_.end() ? kNone : it->second;
}

int Vocab::byte_value(int32_t id) const {
  const std::string& t = text(id);
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

void Vocab::build_index() {
  index_.clear();
  index_.reserve(text_.size());
  for (size_t i = 0; i < text_.size(); ++i) {
    // llama.cpp renames empty tokens so they can never match text; keep the same ids.
    if (text_[i].empty()) text_[i] = fmt::format("[EMPTY_{}]", i);
    auto [it, fresh] = index_.emplace(text_[i], static_cast<int32_t>(i));
    if (!fresh) fail("'{}': duplicate token '{}' at ids {} and {}", kTokens, text_[i], it->second, i);
  }
  static const char* hex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    const char name[6] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
    int32_t id = find(std::string_view(name, 6));
    if (id == kNone) id = find(std::string_view(std::string(1, char(b))));  // llama.cpp's second choice
    byte_token_[size_t(b)] = id;
  }
}

bool Vocab::is_eog(int32_t id) const {
  return id != kNone && std::find(eog_.begin(), eog_.end(), id) != eog_.end();
}

void Vocab::build_eog() {
  eog_.clear();
  for (int32_t id : {eos_, eot_, eom_})
    if (id != kNone) eog_.push_back(id);
  // Files converted before eot_token_id existed mark end-of-turn only by the token's
  // text; llama.cpp stops on these names too, so chat models (Phi-3's <|end|>) stop.
  for (std::string_view name : {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                                "<|end_of_text|>", "<|eom_id|>", "<EOT>", "_<EOT>", "<end_of_utterance>"}) {
    const int32_t id = find(name);
    if (id == kNone || is_eog(id)) continue;
    eog_.push_back(id);
    if (eot_ == kNone && name != "<|eom_id|>") eot_ = id;
    if (eom_ == kNone && name == "<|eom_id|>") eom_ = id;
  }
}

Vocab Vocab::from_spec(Spec s) {
  const size_t n = s.tokens.size();
  RIDGE_CHECK(n > 0, "'{}': the vocabulary is empty", kTokens);
  RIDGE_CHECK(s.scores.empty() || s.scores.size() == n, "'{}' has {} elements but '{}' has {} tokens", kScores,
              s.scores.size(), kTokens, n);
  RIDGE_CHECK(s.types.empty() || s.types.size() == n, "'{}' has {} elements but '{}' has {} tokens", kTypes,
              s.types.size(), kTokens, n);
  Vocab v;
  v.model_ = std::move(s.model);
  v.text_ = std::move(s.tokens);
  v.score_ = s.scores.empty() ? std::vector<float>(n, 0.0f) : std::move(s.scores);
  v.type_.resize(n, TokenType::Normal);
  for (size_t i = 0; i < s.types.size(); ++i) {
    // Unknown type numbers behave like llama.cpp's "undefined": decoded to nothing.
    const int32_t t = s.types[i];
    v.type_[i] = t >= 0 && t <= 6 ? static_cast<TokenType>(t) : TokenType::Undefined;
  }
  auto check = [&](int32_t id, const char* what) {
    RIDGE_CHECK(id == kNone || (id >= 0 && size_t(id) < n), "{} id {} is out of range (vocabulary has {} tokens)",
                what, id, n);
    return id;
  };
  v.bos_ = check(s.bos, "bos");
  v.eos_ = check(s.eos, "eos");
  v.unk_ = check(s.unk, "unk");
  v.pad_ = check(s.pad, "pad");
  v.eot_ = check(s.eot, "eot");
  v.eom_ = check(s.eom, "eom");
  v.add_bos_ = s.add_bos;
  v.add_eos_ = s.add_eos;
  v.add_space_prefix_ = s.add_space_prefix;
  v.build_index();
  v.build_eog();
  return v;
}

Vocab Vocab::from_gguf(const gguf::File& f) {
  Vocab v;
  auto model = f.get_str(kModel);
  if (!model) fail("{}: required metadata '{}' is missing (the file has no tokenizer)", f.name(), kModel);
  v.model_ = std::string(*model);

  // Defaults by model family, as llama.cpp sets them before reading the overrides.
  if (v.model_ == "llama") {
    v.bos_ = 1, v.eos_ = 2, v.unk_ = 0;
    v.add_bos_ = true, v.add_eos_ = false, v.add_space_prefix_ = true;
  } else if (v.model_ == "gpt2") {
    v.bos_ = 11, v.eos_ = 11;
  }

  const gguf::Value* toks = f.get_array(kTokens, gguf::ValueType::STRING);
  if (!toks) fail("{}: required metadata '{}' is missing", f.name(), kTokens);
  const uint64_t n = toks->count;
  if (n == 0) fail("{}: metadata '{}' is empty", f.name(), kTokens);
  if (n > uint64_t(INT32_MAX)) fail("{}: metadata '{}' has {} tokens, too many", f.name(), kTokens, n);
  const int32_t n_vocab = static_cast<int32_t>(n);

  v.text_.reserve(n);
  for (auto s : toks->strs) v.text_.emplace_back(s);

  v.score_.assign(n, 0.0f);
  if (const gguf::Value* sc = numeric_array(f, kScores, n, /*allow_float=*/true))
    for (uint64_t i = 0; i < n; ++i) v.score_[i] = static_cast<float>(sc->num_at(i));

  v.type_.assign(n, TokenType::Normal);
  if (const gguf::Value* ty = numeric_array(f, kTypes, n, /*allow_float=*/false))
    for (uint64_t i = 0; i < n; ++i) {
      const int64_t t = ty->int_at(i);
      v.type_[i] = t >= 0 && t <= 6 ? static_cast<TokenType>(t) : TokenType::Undefined;
    }

  // Defaults that fall outside a small vocabulary are dropped, as llama.cpp does;
  // explicit ids out of range are an error.
  for (int32_t* id : {&v.bos_, &v.eos_, &v.unk_})
    if (*id >= n_vocab) *id = kNone;
  read_id(f, "tokenizer.ggml.bos_token_id", n_vocab, v.bos_);
  read_id(f, "tokenizer.ggml.eos_token_id", n_vocab, v.eos_);
  read_id(f, "tokenizer.ggml.unknown_token_id", n_vocab, v.unk_);
  read_id(f, "tokenizer.ggml.padding_token_id", n_vocab, v.pad_);
  read_id(f, "tokenizer.ggml.eot_token_id", n_vocab, v.eot_);
  read_id(f, "tokenizer.ggml.eom_token_id", n_vocab, v.eom_);

  if (auto b = f.get_bool("tokenizer.ggml.add_bos_token")) v.add_bos_ = *b;
  if (auto b = f.get_bool("tokenizer.ggml.add_eos_token")) v.add_eos_ = *b;
  if (auto b = f.get_bool("tokenizer.ggml.add_space_prefix")) v.add_space_prefix_ = *b;
  if (v.add_bos_ && v.bos_ == kNone)
    fail("{}: tokenizer.ggml.add_bos_token is true, but tokenizer.ggml.bos_token_id is not set", f.name());
  if (v.add_eos_ && v.eos_ == kNone)
    fail("{}: tokenizer.ggml.add_eos_token is true, but tokenizer.ggml.eos_token_id is not set", f.name());

  try {
    v.build_index();
  } catch (const Error& e) {
    fail("{}: {}", f.name(), e.what());
  }

  v.build_eog();
  return v;
}

}  // namespace ridge
