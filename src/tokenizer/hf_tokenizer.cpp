#include "tokenizer/hf_tokenizer.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "tokenizer/hf_pipeline.h"

namespace ridge {

namespace {

using json = nlohmann::json;
using hf::DecoderStep;
using hf::Normalizer;
using hf::PreTokenizerStep;

// Ids beyond this are a broken file, not a vocabulary (the largest real ones are ~300K).
constexpr int64_t kMaxId = 1 << 24;

json parse(const std::string& text, const char* file) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", file, e.what());
  }
}

// A member that is absent or null -> nullptr.
const json* member(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

bool get_bool(const json& j, const char* key, bool dflt, const std::string& where) {
  const json* v = member(j, key);
  if (!v) return dflt;
  if (!v->is_boolean()) fail("tokenizer.json: {}.{} is not a boolean", where, key);
  return v->get<bool>();
}

std::string get_str(const json& j, const char* key, const std::string& dflt, const std::string& where) {
  const json* v = member(j, key);
  if (!v) return dflt;
  if (!v->is_string()) fail("tokenizer.json: {}.{} is not a string", where, key);
  return v->get<std::string>();
}

size_t get_size(const json& j, const char* key, const std::string& where) {
  const json* v = member(j, key);
  if (!v) return 0;
  if (!v->is_number_unsigned()) fail("tokenizer.json: {}.{} is not a non-negative integer", where, key);
  return v->get<size_t>();
}

std::string type_of(const json& j, const std::string& where) {
  const json* t = member(j, "type");
  if (!t || !t->is_string()) fail("tokenizer.json: {} has no \"type\"", where);
  return t->get<std::string>();
}

const json& array_of(const json& j, const char* key, const std::string& where) {
  const json* v = member(j, key);
  if (!v || !v->is_array()) fail("tokenizer.json: {}.{} is not an array", where, key);
  return *v;
}

// {"String": "..."} or {"Regex": "..."}: a literal, or a regex (Oniguruma syntax, which
// PCRE2 reads the same for the patterns tokenizers ship).
void parse_pattern(const json& j, const std::string& where, std::string& literal,
                   std::shared_ptr<RegexSplitter>& regex) {
  const json* p = member(j, "pattern");
  if (const json* s = p ? member(*p, "String") : nullptr; s && s->is_string()) {
    literal = s->get<std::string>();
    if (literal.empty()) fail("tokenizer.json: {}.pattern is an empty string", where);
    return;
  }
  if (const json* r = p ? member(*p, "Regex") : nullptr; r && r->is_string()) {
    try {
      regex = std::make_shared<RegexSplitter>(r->get<std::string>());
    } catch (const Error& e) {
      fail("tokenizer.json: {}.pattern: {}", where, e.what());
    }
    return;
  }
  fail("tokenizer.json: {}.pattern is neither {{\"String\": ...}} nor {{\"Regex\": ...}}", where);
}

void add_normalizer(const json& j, const std::string& where, std::vector<Normalizer>& out) {
  const std::string type = type_of(j, where);
  Normalizer n;
  if (type == "Sequence") {
    const json& list = array_of(j, "normalizers", where);
    for (size_t i = 0; i < list.size(); ++i) add_normalizer(list[i], fmt::format("{}.normalizers[{}]", where, i), out);
    return;
  } else if (type == "NFC") {
    n.kind = Normalizer::Kind::NFC;
  } else if (type == "NFD") {
    n.kind = Normalizer::Kind::NFD;
  } else if (type == "NFKC") {
    n.kind = Normalizer::Kind::NFKC;
  } else if (type == "NFKD") {
    n.kind = Normalizer::Kind::NFKD;
  } else if (type == "Lowercase") {
    n.kind = Normalizer::Kind::Lowercase;
  } else if (type == "Strip") {
    n.kind = Normalizer::Kind::Strip;
    n.strip_left = get_bool(j, "strip_left", true, where);
    n.strip_right = get_bool(j, "strip_right", true, where);
  } else if (type == "Replace") {
    n.kind = Normalizer::Kind::Replace;
    parse_pattern(j, where, n.pattern, n.regex);
    n.content = get_str(j, "content", "", where);
  } else if (type == "Prepend") {
    n.kind = Normalizer::Kind::Prepend;
    n.content = get_str(j, "prepend", "", where);
  } else {
    fail("tokenizer.json: {}: normalizer type '{}' is not supported", where, type);
  }
  out.push_back(std::move(n));
}

hf::SplitBehavior parse_behavior(const json& j, const std::string& where, hf::SplitBehavior dflt) {
  const json* b = member(j, "behavior");
  if (!b) return dflt;
  const std::string s = b->is_string() ? b->get<std::string>() : std::string("?");
  if (s == "Removed") return hf::SplitBehavior::Removed;
  if (s == "Isolated") return hf::SplitBehavior::Isolated;
  if (s == "MergedWithPrevious") return hf::SplitBehavior::MergedWithPrevious;
  if (s == "MergedWithNext") return hf::SplitBehavior::MergedWithNext;
  if (s == "Contiguous") return hf::SplitBehavior::Contiguous;
  fail("tokenizer.json: {}: split behavior '{}' is not supported", where, s);
}

// Metaspace's prepend_scheme, or the older boolean add_prefix_space.
PreTokenizerStep::Prepend parse_prepend(const json& j, const std::string& where) {
  if (const json* p = member(j, "prepend_scheme")) {
    const std::string s = p->is_string() ? p->get<std::string>() : std::string("?");
    if (s == "always") return PreTokenizerStep::Prepend::Always;
    if (s == "first") return PreTokenizerStep::Prepend::First;
    if (s == "never") return PreTokenizerStep::Prepend::Never;
    fail("tokenizer.json: {}: prepend_scheme '{}' is not supported", where, s);
  }
  return get_bool(j, "add_prefix_space", true, where) ? PreTokenizerStep::Prepend::Always
                                                      : PreTokenizerStep::Prepend::Never;
}

void add_pre_tokenizer(const json& j, const std::string& where, std::vector<PreTokenizerStep>& out) {
  const std::string type = type_of(j, where);
  PreTokenizerStep s;
  if (type == "Sequence") {
    const json& list = array_of(j, "pretokenizers", where);
    for (size_t i = 0; i < list.size(); ++i)
      add_pre_tokenizer(list[i], fmt::format("{}.pretokenizers[{}]", where, i), out);
    return;
  } else if (type == "Split") {
    s.kind = PreTokenizerStep::Kind::Split;
    parse_pattern(j, where, s.literal, s.regex);
    s.behavior = parse_behavior(j, where, hf::SplitBehavior::Isolated);
    s.invert = get_bool(j, "invert", false, where);
  } else if (type == "ByteLevel") {
    s.kind = PreTokenizerStep::Kind::ByteLevel;
    s.add_prefix_space = get_bool(j, "add_prefix_space", true, where);
    if (get_bool(j, "use_regex", true, where)) s.regex = std::make_shared<RegexSplitter>(hf::kByteLevelRegex);
  } else if (type == "Metaspace") {
    s.kind = PreTokenizerStep::Kind::Metaspace;
    s.replacement = get_str(j, "replacement", "\xE2\x96\x81", where);
    if (s.replacement.empty()) fail("tokenizer.json: {}.replacement is empty", where);
    s.prepend = parse_prepend(j, where);
    s.split = get_bool(j, "split", true, where);
  } else if (type == "Digits") {
    s.kind = PreTokenizerStep::Kind::Digits;
    s.individual_digits = get_bool(j, "individual_digits", false, where);
  } else if (type == "Punctuation") {
    s.kind = PreTokenizerStep::Kind::Punctuation;
    s.behavior = parse_behavior(j, where, hf::SplitBehavior::Isolated);
  } else if (type == "WhitespaceSplit") {
    s.kind = PreTokenizerStep::Kind::WhitespaceSplit;
  } else {
    fail("tokenizer.json: {}: pre_tokenizer type '{}' is not supported", where, type);
  }
  out.push_back(std::move(s));
}

void add_decoder(const json& j, const std::string& where, std::vector<DecoderStep>& out) {
  const std::string type = type_of(j, where);
  DecoderStep d;
  if (type == "Sequence") {
    const json& list = array_of(j, "decoders", where);
    for (size_t i = 0; i < list.size(); ++i) add_decoder(list[i], fmt::format("{}.decoders[{}]", where, i), out);
    return;
  } else if (type == "ByteLevel") {
    d.kind = DecoderStep::Kind::ByteLevel;
  } else if (type == "ByteFallback") {
    d.kind = DecoderStep::Kind::ByteFallback;
  } else if (type == "Fuse") {
    d.kind = DecoderStep::Kind::Fuse;
  } else if (type == "Replace") {
    d.kind = DecoderStep::Kind::Replace;
    std::shared_ptr<RegexSplitter> regex;
    parse_pattern(j, where, d.pattern, regex);
    if (regex) fail("tokenizer.json: {}: decoder Replace with a Regex pattern is not supported", where);
    d.content = get_str(j, "content", "", where);
  } else if (type == "Strip") {
    d.kind = DecoderStep::Kind::Strip;
    d.content = get_str(j, "content", " ", where);
    d.start = get_size(j, "start", where);
    d.stop = get_size(j, "stop", where);
  } else if (type == "Metaspace") {
    d.kind = DecoderStep::Kind::Metaspace;
    d.pattern = get_str(j, "replacement", "\xE2\x96\x81", where);
    if (d.pattern.empty()) fail("tokenizer.json: {}.replacement is empty", where);
    d.strip_first = parse_prepend(j, where) != PreTokenizerStep::Prepend::Never;
  } else {
    fail("tokenizer.json: {}: decoder type '{}' is not supported", where, type);
  }
  out.push_back(std::move(d));
}

// The special tokens a post-processor puts around the text: at most one id before $A and
// one after (what the facade's BOS/EOS can express). nullopt = adds nothing.
struct Template {
  int32_t before = Vocab::kNone, after = Vocab::kNone;
};

void parse_post_processor(const json& j, const std::string& where, Template& t, bool& seen_template) {
  const std::string type = type_of(j, where);
  if (type == "ByteLevel") return;  // offsets only; no tokens
  if (type == "Sequence") {
    const json& list = array_of(j, "processors", where);
    for (size_t i = 0; i < list.size(); ++i)
      parse_post_processor(list[i], fmt::format("{}.processors[{}]", where, i), t, seen_template);
    return;
  }
  if (type != "TemplateProcessing") fail("tokenizer.json: {}: post_processor type '{}' is not supported", where, type);
  if (seen_template) fail("tokenizer.json: {}: more than one TemplateProcessing is not supported", where);
  seen_template = true;
  const json& single = array_of(j, "single", where);
  const json* specials = member(j, "special_tokens");
  std::vector<int32_t> before, after;
  bool seen_a = false;
  for (const json& item : single) {
    if (const json* seq = member(item, "Sequence")) {
      if (get_str(*seq, "id", "", where + ".single") != "A" || seen_a)
        fail("tokenizer.json: {}.single: only one sequence $A is supported", where);
      seen_a = true;
    } else if (const json* sp = member(item, "SpecialToken")) {
      const std::string name = get_str(*sp, "id", "", where + ".single");
      const json* tok = specials ? member(*specials, name.c_str()) : nullptr;
      const json* ids = tok ? member(*tok, "ids") : nullptr;
      if (!ids || !ids->is_array()) fail("tokenizer.json: {}: special token '{}' has no ids", where, name);
      for (const json& id : *ids) {
        if (!id.is_number_integer()) fail("tokenizer.json: {}: special token '{}' has a bad id", where, name);
        (seen_a ? after : before).push_back(id.get<int32_t>());
      }
    } else {
      fail("tokenizer.json: {}.single has an item that is neither Sequence nor SpecialToken", where);
    }
  }
  if (!seen_a) fail("tokenizer.json: {}.single has no sequence $A", where);
  if (before.size() > 1 || after.size() > 1)
    fail("tokenizer.json: {}: a template with {} tokens before and {} after $A is not supported (at most one each)",
         where, before.size(), after.size());
  if (!before.empty()) t.before = before[0];
  if (!after.empty()) t.after = after[0];
}

// bos_token etc.: a string, or an AddedToken object {"content": ...}.
std::optional<std::string> token_name(const json& cfg, const char* key) {
  const json* v = member(cfg, key);
  if (!v) return std::nullopt;
  if (v->is_string()) return v->get<std::string>();
  if (const json* c = member(*v, "content"); c && c->is_string()) return c->get<std::string>();
  fail("tokenizer_config.json: {} is neither a string nor an object with \"content\"", key);
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot open", path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

HfTokenizerConfig parse_hf_tokenizer_config(const std::string& text) {
  HfTokenizerConfig c;
  if (text.empty()) return c;
  const json j = parse(text, "tokenizer_config.json");
  if (!j.is_object()) fail("tokenizer_config.json: not a JSON object");
  c.bos_token = token_name(j, "bos_token");
  c.eos_token = token_name(j, "eos_token");
  c.pad_token = token_name(j, "pad_token");
  c.unk_token = token_name(j, "unk_token");
  for (auto [key, dst] : {std::pair{"add_bos_token", &c.add_bos_token}, std::pair{"add_eos_token", &c.add_eos_token}})
    if (const json* v = member(j, key)) {
      if (!v->is_boolean()) fail("tokenizer_config.json: {} is not a boolean", key);
      *dst = v->get<bool>();
    }
  if (const json* v = member(j, "clean_up_tokenization_spaces"); v && v->is_boolean())
    c.clean_up_tokenization_spaces = v->get<bool>();
  if (const json* t = member(j, "chat_template")) {
    if (t->is_string()) {
      c.chat_template = t->get<std::string>();
    } else if (t->is_array()) {  // [{"name": "default", "template": "..."}, {"name": "tool_use", ...}]
      for (const json& e : *t) {
        const json* n = member(e, "name");
        const json* s = member(e, "template");
        if (!n || !s || !n->is_string() || !s->is_string())
          fail("tokenizer_config.json: chat_template list entries need \"name\" and \"template\" strings");
        c.chat_templates[n->get<std::string>()] = s->get<std::string>();
      }
      if (auto it = c.chat_templates.find("default"); it != c.chat_templates.end()) c.chat_template = it->second;
    } else {
      fail("tokenizer_config.json: chat_template is neither a string nor a list");
    }
  }
  return c;
}

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& tokenizer_json,
                                             const std::string& tokenizer_config_json) {
  const HfTokenizerConfig cfg = parse_hf_tokenizer_config(tokenizer_config_json);
  const json j = parse(tokenizer_json, "tokenizer.json");
  if (!j.is_object()) fail("tokenizer.json: not a JSON object");
  // Both change the ids of a single text (cut it, pad it): refuse rather than ignore.
  if (member(j, "truncation")) fail("tokenizer.json: truncation is set, which is not supported");
  if (member(j, "padding")) fail("tokenizer.json: padding is set, which is not supported");

  // ---- model
  const json* model = member(j, "model");
  if (!model) fail("tokenizer.json: no model");
  const std::string mtype = member(*model, "type") ? type_of(*model, "model") : "BPE";
  if (mtype != "BPE") fail("tokenizer.json: model type '{}' is not supported (only BPE)", mtype);
  if (const json* d = member(*model, "dropout"); d && !(d->is_number() && d->get<double>() == 0.0))
    fail("tokenizer.json: model.dropout is set, which is not supported (encoding would be random)");
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (!get_str(*model, k, "", "model").empty()) fail("tokenizer.json: model.{} is not supported", k);
  hf::ModelOptions opt;
  opt.ignore_merges = get_bool(*model, "ignore_merges", false, "model");
  opt.byte_fallback = get_bool(*model, "byte_fallback", false, "model");
  opt.fuse_unk = get_bool(*model, "fuse_unk", false, "model");
  const std::string unk = get_str(*model, "unk_token", "", "model");

  const json* vocab_j = member(*model, "vocab");
  if (!vocab_j || !vocab_j->is_object()) fail("tokenizer.json: model.vocab is not an object");
  std::vector<std::string> texts;
  std::vector<int32_t> types;
  auto put = [&](int64_t id, const std::string& text, TokenType type, const char* what) {
    if (id < 0 || id >= kMaxId) fail("tokenizer.json: {} '{}' has id {}, out of range", what, text, id);
    if (size_t(id) >= texts.size()) {
      texts.resize(size_t(id) + 1);
      types.resize(size_t(id) + 1, int32_t(TokenType::Unused));  // ids nothing claims
    }
    std::string& slot = texts[size_t(id)];
    if (types[size_t(id)] != int32_t(TokenType::Unused) && slot != text)
      fail("tokenizer.json: {} '{}' has id {}, which is already '{}'", what, text, id, slot);
    slot = text;
    types[size_t(id)] = int32_t(type);
  };
  for (auto it = vocab_j->begin(); it != vocab_j->end(); ++it) {
    if (!it.value().is_number_integer()) fail("tokenizer.json: model.vocab['{}'] is not an integer", it.key());
    const bool byte = opt.byte_fallback && it.key().size() == 6 && it.key().compare(0, 3, "<0x") == 0;
    put(it.value().get<int64_t>(), it.key(), byte ? TokenType::Byte : TokenType::Normal, "model.vocab token");
  }

  std::vector<std::pair<std::string, std::string>> merges;
  if (const json* m = member(*model, "merges")) {
    if (!m->is_array()) fail("tokenizer.json: model.merges is not an array");
    merges.reserve(m->size());
    for (size_t i = 0; i < m->size(); ++i) {
      const json& e = (*m)[i];
      if (e.is_string()) {  // "a b": exactly one space, as the Rust library requires
        const std::string& s = e.get_ref<const std::string&>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
          fail("tokenizer.json: model.merges[{}] = '{}' is not two tokens separated by one space", i, s);
        merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
      } else {
        fail("tokenizer.json: model.merges[{}] is neither \"a b\" nor [\"a\", \"b\"]", i);
      }
    }
  }

  // ---- added tokens
  std::vector<hf::AddedToken> added;
  if (const json* a = member(j, "added_tokens")) {
    if (!a->is_array()) fail("tokenizer.json: added_tokens is not an array");
    for (size_t i = 0; i < a->size(); ++i) {
      const json& e = (*a)[i];
      const std::string where = fmt::format("added_tokens[{}]", i);
      hf::AddedToken t;
      const json* id = member(e, "id");
      if (!id || !id->is_number_integer()) fail("tokenizer.json: {}.id is not an integer", where);
      t.content = get_str(e, "content", "", where);
      t.special = get_bool(e, "special", false, where);
      t.lstrip = get_bool(e, "lstrip", false, where);
      t.rstrip = get_bool(e, "rstrip", false, where);
      t.normalized = get_bool(e, "normalized", !t.special, where);
      if (get_bool(e, "single_word", false, where))
        fail("tokenizer.json: {} ('{}'): single_word added tokens are not supported", where, t.content);
      put(id->get<int64_t>(), t.content, t.special ? TokenType::Control : TokenType::UserDefined, "added token");
      t.id = id->get<int32_t>();
      added.push_back(std::move(t));
    }
  }
  if (texts.empty()) fail("tokenizer.json: the vocabulary is empty");

  // ---- pipeline
  std::vector<Normalizer> norms;
  if (const json* n = member(j, "normalizer")) add_normalizer(*n, "normalizer", norms);
  std::vector<PreTokenizerStep> pre;
  if (const json* p = member(j, "pre_tokenizer")) add_pre_tokenizer(*p, "pre_tokenizer", pre);
  for (const PreTokenizerStep& s : pre) opt.byte_level |= s.kind == PreTokenizerStep::Kind::ByteLevel;
  std::vector<DecoderStep> decoders;
  if (const json* d = member(j, "decoder")) add_decoder(*d, "decoder", decoders);
  const bool strip_first = hf::check_decoders(decoders);
  Template tmpl;
  bool seen_template = false;
  if (const json* p = member(j, "post_processor")) parse_post_processor(*p, "post_processor", tmpl, seen_template);

  // ---- special ids and BOS/EOS
  auto id_of = [&](const std::optional<std::string>& name, const char* key) -> int32_t {
    if (!name) return Vocab::kNone;
    for (const hf::AddedToken& t : added)
      if (t.content == *name) return t.id;
    for (size_t i = 0; i < texts.size(); ++i)
      if (texts[i] == *name && types[i] != int32_t(TokenType::Unused)) return int32_t(i);
    fail("tokenizer_config.json: {} '{}' is not a token of tokenizer.json", key, *name);
  };
  Vocab::Spec spec;
  spec.model = "hf";
  spec.unk = unk.empty() ? Vocab::kNone : id_of(unk, "model.unk_token");
  spec.pad = id_of(cfg.pad_token, "pad_token");
  const int32_t cfg_bos = id_of(cfg.bos_token, "bos_token"), cfg_eos = id_of(cfg.eos_token, "eos_token");
  spec.add_bos = cfg.add_bos_token.value_or(tmpl.before != Vocab::kNone);
  spec.bos = cfg.add_bos_token ? cfg_bos : tmpl.before != Vocab::kNone ? tmpl.before : cfg_bos;
  if (spec.add_bos && spec.bos == Vocab::kNone) fail("tokenizer_config.json: add_bos_token is true but bos_token is not set");
  spec.add_eos = cfg.add_eos_token.value_or(tmpl.after != Vocab::kNone);
  if (spec.add_eos && !cfg.add_eos_token && cfg_eos != Vocab::kNone && cfg_eos != tmpl.after)
    fail("tokenizer.json: the post_processor appends token {} but eos_token is {}: not supported", tmpl.after, cfg_eos);
  spec.eos = cfg.add_eos_token ? cfg_eos : tmpl.after != Vocab::kNone ? tmpl.after : cfg_eos;
  if (spec.add_eos && spec.eos == Vocab::kNone) fail("tokenizer_config.json: add_eos_token is true but eos_token is not set");
  spec.add_space_prefix = strip_first;  // for this vocabulary: decode drops the first piece's space
  spec.tokens = std::move(texts);
  spec.types = std::move(types);
  Vocab vocab = Vocab::from_spec(std::move(spec));

  std::vector<std::string> bytes = hf::decode_table(vocab, decoders);
  return Tokenizer::from_pipeline(
      std::move(vocab),
      [&](const Vocab& v) {
        return std::make_unique<hf::HfEncoder>(v, merges, opt, std::move(added), std::move(norms), std::move(pre));
      },
      std::move(bytes));
}

std::unique_ptr<Tokenizer> load_hf_tokenizer_files(const std::string& json_path, const std::string& config_path) {
  std::string cfg;
  if (!config_path.empty() && std::ifstream(config_path).good()) cfg = read_file(config_path);
  try {
    return load_hf_tokenizer(read_file(json_path), cfg);
  } catch (const Error& e) {
    fail("{}: {}", json_path, e.what());
  }
}

}  // namespace ridge
