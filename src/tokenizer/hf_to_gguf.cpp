#include "tokenizer/hf_to_gguf.h"

#include <nlohmann/json.hpp>
#include <algorithm>
#include <cctype>
#include <optional>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/vocab.h"

namespace ridge {
namespace {

using nlohmann::json;

// llama.cpp's name for a byte-level BPE pre-tokenizer: its Split patterns, in order,
// before a ByteLevel that splits no more (or a lone ByteLevel with GPT-2's pattern).
std::optional<std::string> pre_name(const json& pre) {
  auto plain_byte_level = [](const json& b) { return !b.value("add_prefix_space", false); };
  if (pre.is_object() && pre.value("type", "") == "ByteLevel" && pre.value("use_regex", true) && plain_byte_level(pre))
    return "gpt-2";
  if (!pre.is_object() || pre.value("type", "") != "Sequence") return std::nullopt;
  const auto& seq = pre.at("pretokenizers");
  if (!seq.is_array() || seq.empty()) return std::nullopt;
  const json& last = seq.back();
  if (last.value("type", "") != "ByteLevel" || last.value("use_regex", true) || !plain_byte_level(last)) return std::nullopt;
  std::vector<std::string> pats;
  for (size_t i = 0; i + 1 < seq.size(); ++i) {
    const json& s = seq[i];
    if (s.value("type", "") != "Split" || s.value("behavior", "") != "Isolated" || s.value("invert", false) ||
        !s.contains("pattern") || !s["pattern"].contains("Regex"))
      return std::nullopt;
    pats.push_back(s["pattern"]["Regex"].get<std::string>());
  }
  const std::string contractions = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|";
  const std::string tail = "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  if (pats == std::vector<std::string>{contractions + "\\p{N}{1,3}" + tail}) return "llama-bpe";
  if (pats == std::vector<std::string>{contractions + "\\p{N}" + tail}) return "qwen2";
  if (pats == std::vector<std::string>{"\\p{N}{1,3}", "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
                                      "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"})
    return "deepseek-v3";
  return std::nullopt;
}

constexpr const char* kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// A SentencePiece-style BPE (byte_fallback: Llama 2, Mistral) whose text is prepared as
// llama.cpp's "llama" tokenizer prepares it: a normalizer that prepends U+2581 to every
// segment and turns spaces into it, no pre-tokenizer. (A Metaspace pre-tokenizer is not:
// it prepends only where the text does not start with U+2581 already, and with
// prepend_scheme "first" only at the start, which llama.cpp has no setting for.)
bool spm_style(const json& j) {
  const json norm = j.value("normalizer", json()), pre = j.value("pre_tokenizer", json());
  if (!norm.is_object() || !pre.is_null()) return false;
  if (norm.value("type", "") != "Sequence" || !norm.contains("normalizers") || norm["normalizers"].size() != 2) return false;
  const json& p = norm["normalizers"][0];
  const json& r = norm["normalizers"][1];
  return p.value("type", "") == "Prepend" && p.value("prepend", "") == kSpace && r.value("type", "") == "Replace" &&
         r.contains("pattern") && r["pattern"].value("String", "") == " " && r.value("content", "") == kSpace;
}

// Bytes of the UTF-8 character starting at s[i] (1 for a stray continuation byte).
size_t utf8_len(const std::string& s, size_t i) {
  const uint8_t b = uint8_t(s[i]);
  const size_t n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 1;
  return i + n <= s.size() ? n : 1;
}

// llama.cpp's SentencePiece tokenizer merges any adjacent pair whose concatenation is a
// token, the highest-scoring token first; Hugging Face's BPE merges only the listed pairs,
// lowest rank first. They agree when the merges are SentencePiece's: every split of a
// token into two tokens is a merge, a token's merges have consecutive ranks, and every
// longer token is made by some merge. Then a token scoring minus the rank of its first
// merge orders them as the ranks do. Fails naming the first token that breaks this.
std::vector<float> spm_scores(const json& vocab, const std::vector<std::pair<std::string, std::string>>& merges,
                              const std::vector<int32_t>& types, int64_t n_vocab) {
  std::unordered_map<std::string, int64_t> id_of;
  for (const auto& [text, id] : vocab.items()) id_of.emplace(text, id.get<int64_t>());
  std::unordered_map<std::string, int64_t> rank;  // "a\0b" -> rank; the last of duplicates, as Hugging Face
  for (size_t r = 0; r < merges.size(); ++r) {
    if (!id_of.count(merges[r].first + merges[r].second))
      fail("tokenizer.json: merge {} makes '{}', which is not in the vocabulary", r, merges[r].first + merges[r].second);
    rank[merges[r].first + '\0' + merges[r].second] = int64_t(r);
  }
  std::vector<float> scores(static_cast<size_t>(n_vocab), 0.0f);
  auto refuse = [](const std::string& t, const std::string& why) {
    fail("tokenizer.json: token '{}' {}: these merges are not SentencePiece's, and llama.cpp's tokenizer would not "
         "reproduce them (-m DIR reads it)", t, why);
  };
  for (const auto& [text, idv] : vocab.items()) {
    const int64_t id = idv.get<int64_t>();
    if (types[size_t(id)] != int32_t(TokenType::Normal) || utf8_len(text, 0) == text.size()) continue;
    std::vector<int64_t> ranks;
    for (size_t k = utf8_len(text, 0); k < text.size(); k += utf8_len(text, k)) {
      const std::string a = text.substr(0, k), b = text.substr(k);
      if (!id_of.count(a) || !id_of.count(b)) continue;
      const auto it = rank.find(a + '\0' + b);
      if (it == rank.end()) refuse(text, "splits into tokens '" + a + "' + '" + b + "' that no merge joins");
      ranks.push_back(it->second);
    }
    if (ranks.empty()) refuse(text, "is made by no merge");
    std::sort(ranks.begin(), ranks.end());
    if (ranks.back() - ranks.front() + 1 != int64_t(ranks.size())) refuse(text, "has merges of non-consecutive ranks");
    scores[size_t(id)] = -float(ranks.front() + 1);
  }
  return scores;
}

void convert(const std::string& tokenizer_json, const std::string& tokenizer_config_json, int64_t n_vocab,
             gguf::Writer& w);

}  // namespace

void hf_tokenizer_to_gguf(const std::string& tokenizer_json, const std::string& tokenizer_config_json, int64_t n_vocab,
                          gguf::Writer& w) {
  try {
    convert(tokenizer_json, tokenizer_config_json, n_vocab, w);
  } catch (const json::exception& e) {  // a field of the wrong type or missing
    fail("tokenizer.json: {}", e.what());
  }
}

namespace {

void convert(const std::string& tokenizer_json, const std::string& tokenizer_config_json, int64_t n_vocab,
             gguf::Writer& w) {
  json j;
  try {
    j = json::parse(tokenizer_json);
  } catch (const json::exception& e) {
    fail("tokenizer.json is not valid JSON: {}", e.what());
  }
  // What the byte-level pipeline ridge writes does not do: refuse rather than differ.
  for (const char* key : {"truncation", "padding"})
    if (j.contains(key) && !j[key].is_null()) fail("tokenizer.json: {} is set; convert does not write it", key);
  for (const char* key : {"dropout", "continuing_subword_prefix", "end_of_word_suffix"})
    if (j.at("model").contains(key) && !j["model"][key].is_null() && j["model"][key] != "")
      fail("tokenizer.json: model.{} is set; convert does not write it", key);
  const json& model = j.at("model");
  if (model.value("type", "") != "BPE") fail("tokenizer.json: a {} model; convert writes BPE only", model.value("type", "?"));
  const bool spm = model.value("byte_fallback", false);
  if (spm && !spm_style(j))
    fail("tokenizer.json: a byte_fallback BPE whose normalizer {} and pre-tokenizer {} are not SentencePiece's (a "
         "prepended and replaced U+2581); -m DIR reads it",
         j.value("normalizer", json()).dump().substr(0, 120), j.value("pre_tokenizer", json()).dump().substr(0, 120));
  const auto pre = spm ? std::optional<std::string>("default") : pre_name(j.value("pre_tokenizer", json()));
  if (!pre)
    fail("tokenizer.json: pre-tokenizer {} is not one convert knows (llama-bpe, qwen2, deepseek-v3, gpt-2); -m DIR reads it",
         j.value("pre_tokenizer", json()).dump().substr(0, 200));
  const HfTokenizerConfig cfg = parse_hf_tokenizer_config(tokenizer_config_json);

  std::vector<std::string> tokens(static_cast<size_t>(n_vocab));
  std::vector<int32_t> types(static_cast<size_t>(n_vocab), static_cast<int32_t>(TokenType::Unused));
  std::vector<bool> seen(size_t(n_vocab), false);
  auto put = [&](int64_t id, const std::string& text, TokenType t) {
    if (id < 0 || id >= n_vocab) fail("tokenizer.json: token id {} ('{}') is past the embedding's {} rows", id, text, n_vocab);
    tokens[size_t(id)] = text;
    types[size_t(id)] = int32_t(t);
    seen[size_t(id)] = true;
  };
  // SentencePiece's byte tokens are <0xXX>; its unknown token is its own type.
  // The unknown token: the model's, as the tokenizer.json route (and Hugging Face) use it.
  const std::string unk = model.contains("unk_token") && model["unk_token"].is_string() ? model["unk_token"].get<std::string>()
                                                                                       : cfg.unk_token.value_or("");
  if (spm && model.value("ignore_merges", false))
    fail("tokenizer.json: ignore_merges on a byte_fallback BPE: llama.cpp's tokenizer has no such step; -m DIR reads it");
  auto base_type = [&](const std::string& text) {
    if (!spm) return TokenType::Normal;
    if (text.size() == 6 && text.starts_with("<0x") && text.back() == '>' && std::isxdigit(uint8_t(text[3])) &&
        std::isxdigit(uint8_t(text[4])))
      return TokenType::Byte;
    return text == unk ? TokenType::Unknown : TokenType::Normal;
  };
  for (const auto& [text, id] : model.at("vocab").items()) put(id.get<int64_t>(), text, base_type(text));
  for (const auto& a : j.value("added_tokens", json::array())) {
    const std::string text = a.at("content").get<std::string>();
    put(a.at("id").get<int64_t>(), text,
        spm && text == unk ? TokenType::Unknown : a.value("special", false) ? TokenType::Control : TokenType::UserDefined);
  }
  for (int64_t i = 0; i < n_vocab; ++i)
    if (!seen[size_t(i)]) tokens[size_t(i)] = "[PAD" + std::to_string(i) + "]";
  std::vector<std::pair<std::string, std::string>> merges;
  for (const auto& m : model.at("merges")) {
    if (m.is_string()) {
      const std::string t = m.get<std::string>();
      const size_t sp = t.find(' ');
      if (sp == std::string::npos || t.find(' ', sp + 1) != std::string::npos)
        fail("tokenizer.json: merge '{}' is not two tokens and a space", t);
      merges.emplace_back(t.substr(0, sp), t.substr(sp + 1));
    } else if (m.is_array() && m.size() == 2) {
      merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      fail("tokenizer.json: a merge that is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }
  w.set_str("tokenizer.ggml.model", spm ? "llama" : "gpt2");
  w.set_str("tokenizer.ggml.pre", *pre);
  w.set_str_array("tokenizer.ggml.tokens", tokens);
  w.set_i32_array("tokenizer.ggml.token_type", types);
  if (spm) {
    // Characters, bytes and specials are never a merge's result and score 0, as in
    // SentencePiece's own files.
    w.set_f32_array("tokenizer.ggml.scores", spm_scores(model.at("vocab"), merges, types, n_vocab));
    w.set_bool("tokenizer.ggml.add_space_prefix", true);
  } else {
    std::vector<std::string> joined;
    for (const auto& [a, b] : merges) joined.push_back(a + " " + b);
    w.set_str_array("tokenizer.ggml.merges", joined);
  }
  auto id_of = [&](const std::optional<std::string>& s) -> std::optional<uint32_t> {
    if (!s) return std::nullopt;
    for (int64_t i = 0; i < n_vocab; ++i)
      if (seen[size_t(i)] && tokens[size_t(i)] == *s) return uint32_t(i);
    return std::nullopt;
  };
  if (auto id = id_of(cfg.bos_token)) w.set_u32("tokenizer.ggml.bos_token_id", *id);
  if (auto id = id_of(cfg.eos_token)) w.set_u32("tokenizer.ggml.eos_token_id", *id);
  if (auto id = id_of(spm && !unk.empty() ? std::optional<std::string>(unk) : cfg.unk_token))
    w.set_u32("tokenizer.ggml.unknown_token_id", *id);
  if (auto id = id_of(cfg.pad_token)) w.set_u32("tokenizer.ggml.padding_token_id", *id);
  // What the fast tokenizer does: the config's flags when present, else its post-processor
  // (a BOS in its single-sequence template).
  bool add_bos = false;
  if (cfg.add_bos_token) {
    add_bos = *cfg.add_bos_token;
  } else if (const json& pp = j.value("post_processor", json()); pp.is_object()) {
    const std::string d = pp.dump();
    add_bos = cfg.bos_token && d.find("\"TemplateProcessing\"") != std::string::npos &&
              d.find("\"" + *cfg.bos_token + "\"") != std::string::npos;
  }
  w.set_bool("tokenizer.ggml.add_bos_token", add_bos);
  w.set_bool("tokenizer.ggml.add_eos_token", cfg.add_eos_token.value_or(false));
  if (!cfg.chat_template.empty()) w.set_str("tokenizer.chat_template", cfg.chat_template);
}

}  // namespace
}  // namespace ridge
