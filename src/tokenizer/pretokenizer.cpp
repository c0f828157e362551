#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cstdint>

#include "core/error.h"

namespace ridge {

namespace {

// Unicode White_Space (PropList.txt), the set llama.cpp, Rust's regex and Python call \s.
constexpr std::string_view kWhiteSpace =
    R"(\x{09}-\x{0D}\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

// \s -> [White_Space], \S -> [^White_Space]; inside a class \s -> the ranges themselves.
// Escapes are consumed in pairs so "\\s" (a backslash, then 's') is left alone.
std::string rewrite_space_classes(const std::string& p) {
  std::string r;
  r.reserve(p.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char n = p[++i];
      if (n == 's' && in_class) {
        r += kWhiteSpace;
      } else if (n == 's' || (n == 'S' && !in_class)) {
        r += n == 's' ? "[" : "[^";
        r += kWhiteSpace;
        r += ']';
      } else {
        r += c;
        r += n;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      r += c;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < p.size() && p[i + 1] == '^') r += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') r += p[++i];
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {  // [:alpha:]
      const size_t end = p.find(":]", i + 2);
      if (end != std::string::npos) {
        r.append(p, i, end + 2 - i);
        i = end + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    r += c;
  }
  return r;
}

struct CodeDeleter {
  void operator()(pcre2_code* c) const { pcre2_code_free(c); }
};
struct MatchDataDeleter {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};

// The byte length of the character at text[i] (1 for a stray byte), to step past an empty match.
size_t char_len(std::string_view text, size_t i) {
  size_t n = 1;
  while (i + n < text.size() && (uint8_t(text[i + n]) & 0xC0) == 0x80) ++n;
  return n;
}

}  // namespace

RegexSplitter::RegexSplitter(const std::string& pcre2_pattern) : pattern_(pcre2_pattern) {
  const std::string rewritten = rewrite_space_classes(pcre2_pattern);
  int err = 0;
  PCRE2_SIZE err_off = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_DOLLAR_ENDONLY, &err, &err_off, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    fail("pre-tokenizer regex '{}' does not compile: {} (at offset {} of '{}')", pcre2_pattern,
         reinterpret_cast<const char*>(msg), size_t(err_off), rewritten);
  }
  code_.reset(code, CodeDeleter{});
  // JIT is an optimization only: without it (no JIT support on this CPU) matching still works.
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
}

void RegexSplitter::matches(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  if (text.empty()) return;  // our patterns cannot match usefully in nothing; skip the setup
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> md(pcre2_match_data_create_from_pattern(code_.get(), nullptr));
  if (!md) throw std::bad_alloc();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  uint32_t opts = 0;
  while (start <= text.size()) {
    const int rc = pcre2_match(code_.get(), subject, text.size(), start, opts, md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) {
      if (opts == 0 || start >= text.size()) break;
      // No non-empty match where the empty one was: step one character and search again.
      start += char_len(text, start);
      opts = 0;
      continue;
    }
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      fail("pre-tokenizer regex '{}' failed on a {}-byte text: {}", pattern_, text.size(),
           reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const size_t b = ov[0], e = ov[1];
    out.emplace_back(b, e);
    start = e;
    // After an empty match, first look for a non-empty one at the same place (Perl's rule).
    opts = b == e ? PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED : 0;
    if (b == e && e >= text.size()) break;
  }
}

void RegexSplitter::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  std::vector<std::pair<size_t, size_t>> m;
  matches(text, m);
  size_t prev = 0;
  for (auto [b, e] : m) {
    if (b == e) continue;
    if (b > prev) pieces.push_back(text.substr(prev, b - prev));
    pieces.push_back(text.substr(b, e - b));
    prev = e;
  }
  if (prev < text.size()) pieces.push_back(text.substr(prev));
}

PreTokenizer::PreTokenizer(const std::vector<std::string>& patterns) {
  splitters_.reserve(patterns.size());
  for (const auto& p : patterns) splitters_.emplace_back(p);
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  if (text.empty()) return;
  std::vector<std::string_view> cur{text}, next;
  for (const auto& s : splitters_) {
    next.clear();
    for (auto piece : cur) s.split(piece, next);
    cur.swap(next);
  }
  pieces.insert(pieces.end(), cur.begin(), cur.end());
}

namespace {

// GPT-2's own pattern (also the word-level step of several others).
constexpr const char* kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
// Llama 3's, with (?i:...) spelled out as llama.cpp does (identical under PCRE2).
constexpr const char* kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kTekken =
    R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kGpt4o =
    R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// CJK runs for the DeepSeek tokenizers. llama.cpp runs patterns without \p{..} through
// std::wregex on text whose non-ASCII whitespace was replaced by U+000B, so a whitespace
// character inside a literal range (U+0800-U+4E00 holds U+1680, U+2000.., U+3000) never
// matches there; the (?!\s) guard gives PCRE2 the same behaviour.
constexpr const char* kCjkRun = R"((?:(?!\s)[\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}])+)";

bool in(std::string_view v, std::initializer_list<std::string_view> names) {
  for (auto n : names)
    if (v == n) return true;
  return false;
}

}  // namespace

GgufPre gguf_pre(std::string_view pre) {
  GgufPre g;
  if (pre == "default") {
    g.regexes = {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"};
  } else if (in(pre, {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral"})) {
    g.regexes = {kLlama3};
    g.ignore_merges = true;
    g.add_bos = true;
  } else if (in(pre, {"dbrx", "smaug-bpe"})) {
    g.regexes = {kLlama3};
  } else if (pre == "deepseek-llm") {
    g.regexes = {
        "[\r\n]",
        R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)",
        // llama.cpp's last range is U+3000-U+3002; U+3000 is whitespace (see kCjkRun), so it
        // only ever matches U+3001-U+3002 there.
        R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3001}-\x{3002}]+)",
        R"(\s+$)",
        kCjkRun,
        R"(\p{N}+)",
    };
  } else if (pre == "deepseek-coder") {
    g.regexes = {"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kCjkRun, R"(\p{N})"};
  } else if (pre == "deepseek-v3") {
    g.regexes = {
        R"(\p{N}{1,3})",
        R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)",
        R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
    };
  } else if (pre == "falcon") {
    g.regexes = {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"};
  } else if (in(pre, {"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"})) {
    g.regexes = {R"(\p{N})", kGpt2};
  } else if (in(pre, {"gpt2", "gpt-2", "gpt-neox", "mpt", "olmo", "phi-2", "jina-es", "jina-de", "jais", "exaone4",
                      "trillion", "granite-docling", "jina-v2-es", "jina-v2-de", "roberta-bpe"})) {
    // "gpt-neox" is not a value llama.cpp writes (its NeoX-family files say "mpt" or
    // "olmo", or nothing); accepted as the same GPT-2 pattern those use.
    g.regexes = {kGpt2};
  } else if (in(pre, {"qwen2", "deepseek-r1-qwen", "stablelm2", "hunyuan"})) {
    g.regexes = {kQwen2};
  } else if (in(pre, {"poro-chat", "bloom", "gpt3-finnish"})) {
    g.regexes = {R"( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{964}\x{6D4}\x{60C})]+)"};
  } else if (pre == "viking") {
    g.regexes = {R"( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{964}\x{6D4}\x{60C})]+)", R"(\p{N})"};
  } else if (pre == "tekken") {
    g.regexes = {kTekken};
    g.ignore_merges = true;
    g.add_bos = true;
  } else if (in(pre, {"gpt-4o", "llama4"})) {
    g.regexes = {kGpt4o};
  } else {
    fail("tokenizer.ggml.pre = '{}' is not a pre-tokenizer ridge knows (known: default, gpt-2, llama-bpe, qwen2, "
         "deepseek-llm, deepseek-coder, deepseek-v3, falcon, starcoder, refact, mpt, olmo, gpt-neox, tekken, gpt-4o, "
         "...)",
         pre);
  }
  return g;
}

std::vector<std::string> gguf_pre_regexes(std::string_view pre) { return gguf_pre(pre).regexes; }

}  // namespace ridge
