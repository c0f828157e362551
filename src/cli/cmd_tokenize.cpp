// ridge tokenize: what ids a model's tokenizer gives a text. Loads only the tokenizer, so
// a vocabulary-only GGUF (no tensors) works. --jsonl batches many texts in one process
// (the llama.cpp comparison in tests/oracle feeds thousands of strings through it).
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace ridge::cli {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open '{}'", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A piece for a terminal: printable UTF-8 as is; control bytes and bytes that are not part
// of a valid character as C escapes, so a piece holding half a character stays visible.
std::string escape(std::string_view s) {
  std::string r;
  for (size_t i = 0; i < s.size();) {
    const auto b = uint8_t(s[i]);
    size_t n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (n > 1 && i + n <= s.size()) {
      for (size_t k = 1; k < n; ++k)
        if ((uint8_t(s[i + k]) & 0xC0) != 0x80) n = 0;
    } else if (n > 1) {
      n = 0;
    }
    if (n == 1 && b >= 0x20 && b != 0x7F && b != '\\') {
      r += char(b);
    } else if (n > 1) {
      r.append(s, i, n);
      i += n;
      continue;
    } else if (b == '\n') {
      r += "\\n";
    } else if (b == '\t') {
      r += "\\t";
    } else if (b == '\r') {
      r += "\\r";
    } else if (b == '\\') {
      r += "\\\\";
    } else {
      r += fmt::format("\\x{:02x}", b);
    }
    ++i;
  }
  return r;
}

void append_ids(std::string& out, const std::vector<int32_t>& ids) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ' ';
    out += std::to_string(ids[i]);
  }
  out += '\n';
}

}  // namespace

int cmd_tokenize(Args& a) {
  // --tokenizer-json: an HF tokenizer.json (+ tokenizer_config.json) instead of a model.
  const auto hf_json = a.str({"--tokenizer-json"});
  const auto hf_config = a.str({"--tokenizer-config"});
  if (hf_config && !hf_json) fail("--tokenizer-config goes with --tokenizer-json");
  const std::string path = hf_json ? std::string() : resolve_model(a);
  // --decode (with --jsonl): lines are JSON arrays of ids, printed back as JSON strings.
  const bool decode = a.flag({"--decode"});
  // --timing: the encode (or decode) time alone, without loading, on stderr, for benches.
  const bool timing = a.flag({"--timing"});
  const bool ids_only = a.flag({"--ids"});
  const bool pieces = a.flag({"--pieces"});
  const bool no_bos = a.flag({"--no-bos"});
  const bool parse_special = a.flag({"--parse-special"});
  const bool jsonl = a.flag({"--jsonl"});
  const auto file = a.str({"-f", "--file"});
  const auto prompt = a.str({"-p", "--prompt"});
  const auto rest = a.positional();
  a.finish();
  if (ids_only && pieces) fail("--ids and --pieces are exclusive");
  if (jsonl && !file) fail("--jsonl reads its texts from -f FILE (one JSON string per line)");
  if (decode && !jsonl) fail("--decode needs --jsonl -f FILE (one JSON array of ids per line)");
  if (int(bool(file)) + int(bool(prompt)) + int(!rest.empty()) != 1)
    fail("give the text exactly one way: as an argument, with -p TEXT, or with -f FILE");

  std::unique_ptr<gguf::File> f;
  std::unique_ptr<Tokenizer> tok;
  if (hf_json) {
    tok = load_hf_tokenizer_files(*hf_json, hf_config.value_or(""));
  } else {
    f = gguf::File::open(path);
    tok = Tokenizer::from_gguf(*f);
  }
  double busy_s = 0;
  size_t busy_bytes = 0;
  auto timed = [&](auto&& fn, size_t bytes) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    busy_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    busy_bytes += bytes;
  };
  auto report = [&] {
    if (timing)
      std::fprintf(stderr, "timing: %zu bytes in %.6f s (%.2f MB/s)\n", busy_bytes, busy_s,
                   busy_s > 0 ? double(busy_bytes) / busy_s / 1e6 : 0.0);
  };

  if (jsonl) {
    // One JSON string per input line -> one line of space-separated ids per input.
    std::ifstream in(*file, std::ios::binary);
    if (!in) fail("cannot open '{}'", *file);
    std::string out, line;
    size_t lineno = 0;
    while (std::getline(in, line)) {
      ++lineno;
      if (line.empty()) continue;
      std::string text;
      std::vector<int32_t> ids;
      try {
        if (decode)
          ids = nlohmann::json::parse(line).get<std::vector<int32_t>>();
        else
          text = nlohmann::json::parse(line).get<std::string>();
      } catch (const nlohmann::json::exception& e) {
        fail("{}:{}: not a JSON {}: {}", *file, lineno, decode ? "array of ids" : "string", e.what());
      }
      if (decode) {
        timed([&] { text = tok->decode(ids); }, 0);
        busy_bytes += text.size();
        out += nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        out += '\n';
      } else {
        timed([&] { ids = tok->encode(text, !no_bos, parse_special); }, text.size());
        append_ids(out, ids);
      }
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    report();
    return 0;
  }

  std::string text;
  if (file)
    text = read_file(*file);
  else if (prompt)
    text = *prompt;
  else
    for (size_t i = 0; i < rest.size(); ++i) text += (i ? " " : "") + rest[i];

  std::vector<int32_t> ids;
  timed([&] { ids = tok->encode(text, !no_bos, parse_special); }, text.size());
  report();
  std::string out;
  if (ids_only) {
    append_ids(out, ids);
  } else {
    for (int32_t id : ids) {
      // Default: the text the token stands for; --pieces: its spelling in the vocabulary.
      // Control tokens print as nothing when decoded, so they show their name instead.
      const std::string& shown = pieces || tok->piece_bytes(id).empty() ? tok->piece(id) : tok->piece_bytes(id);
      out += fmt::format("{}\t{}\n", id, escape(shown));
    }
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace ridge::cli
