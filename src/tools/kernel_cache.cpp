#include "tools/kernel_cache.h"

#include <cpuid.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/text_file.h"
#include "kernels/cpu/attention.h"
#include "perf/peaks.h"

namespace ridge {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

json entry_json(const TunedEntry& e) {
  json types = json::object();
  for (size_t i = 0; i < kernels::kTunedTypes.size(); ++i) {
    json t = json::object();
    for (const auto& p : kernels::tunable_params()) t[std::string(p.name)] = e.tuning.types[i].*p.field;
    types[std::string(dtype_name(kernels::kTunedTypes[i]))] = t;
  }
  json j = {{"tuner", e.tuner}, {"threads", e.threads}, {"measured_at", e.measured_at}, {"seconds", e.seconds},
            {"types", types}};
  if (e.fp8_path) j["fp8_path"] = fp8_path_name(*e.fp8_path);
  if (e.attn_tile_keys) j["attn_tile_keys"] = *e.attn_tile_keys;
  return j;
}

TunedEntry entry_from_json(const json& j, const std::string& where) {
  auto fail_at = [&](const std::string& key, const std::string& why) {
    throw Error(fmt::format("{}: {}: {}", where, key, why));
  };
  if (!j.is_object()) fail_at("entry", "not an object");
  TunedEntry e;
  e.tuner = 1;  // entries before the field
  if (j.contains("tuner")) {
    if (!j["tuner"].is_number_integer() || j["tuner"].get<int64_t>() < 1) fail_at("tuner", "not a generation (1, 2, ...)");
    e.tuner = int(std::min<int64_t>(j["tuner"].get<int64_t>(), 1 << 20));
  }
  if (j.contains("threads") && j["threads"].is_number_integer()) e.threads = j["threads"].get<int>();
  if (j.contains("measured_at") && j["measured_at"].is_number_integer()) e.measured_at = j["measured_at"].get<int64_t>();
  if (j.contains("seconds") && j["seconds"].is_number()) e.seconds = j["seconds"].get<double>();
  if (j.contains("fp8_path")) {
    const json& f = j["fp8_path"];
    if (f == "bf16") e.fp8_path = Fp8Path::Bf16;
    else if (f == "f16c") e.fp8_path = Fp8Path::F16c;
    else fail_at("fp8_path", "not one of bf16, f16c");
  }
  // A later tuner's entry (a newer ridge sharing the cache) may hold candidates this
  // ridge does not have: such a value keeps this ridge's default, where from this
  // generation or an earlier one it is an error (a damaged file). Either way a value that
  // is not an integer is one.
  const bool newer = e.tuner > kTunerGeneration;
  // Whether v is to be applied: one of this ridge's candidates (known); else an error
  // naming key, unless a later tuner's integer.
  auto accept = [&](const json& v, bool known, const std::string& key, const std::string& candidates) {
    if (!known && !(newer && v.is_number_integer())) fail_at(key, fmt::format("{} is not one of {}", v.dump(), candidates));
    return known;
  };
  if (j.contains("attn_tile_keys")) {
    const json& k = j["attn_tile_keys"];
    const bool known = k.is_number_integer() && std::find(std::begin(kernels::kAttnTileKeys), std::end(kernels::kAttnTileKeys),
                                                          k.get<int64_t>()) != std::end(kernels::kAttnTileKeys);
    if (accept(k, known, "attn_tile_keys", "64, 128")) e.attn_tile_keys = int32_t(k.get<int64_t>());
  }
  if (!j.contains("types") || !j["types"].is_object()) fail_at("types", "missing or not an object");
  for (const auto& [name, params] : j["types"].items()) {
    const auto t = dtype_from_name(name);
    bool tuned = false;
    for (DType k : kernels::kTunedTypes) tuned |= t && *t == k;
    if (!tuned) fail_at("types." + name, "no packed kernels for this type");
    if (!params.is_object()) fail_at("types." + name, "not an object");
    for (const auto& [pname, v] : params.items()) {
      const auto* p = kernels::find_tunable(pname);
      if (!p) continue;  // a parameter of another ridge version: its default stays
      const bool known = v.is_number_integer() && kernels::valid_value(*p, v.get<int32_t>());
      if (accept(v, known, "types." + name + "." + pname, "its candidates")) e.tuning.of(*t).*p->field = v.get<int32_t>();
    }
  }
  return e;
}

json read_file_json(const std::string& file) {
  const std::string text = read_text_file(file);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number like 1e999
    throw Error(fmt::format("{}: not JSON ({})", file, e.what()));
  }
}

}  // namespace

std::string kernel_cpu_id() {
  unsigned a = 0, b, c, d;
  __get_cpuid(1, &a, &b, &c, &d);
  const unsigned family = ((a >> 8) & 0xF) + (((a >> 8) & 0xF) == 0xF ? (a >> 20) & 0xFF : 0);
  const unsigned model = ((a >> 4) & 0xF) | (((a >> 8) & 0xF) >= 6 ? ((a >> 16) & 0xF) << 4 : 0);
  const auto& f = cpu_features();
  // The path the kernels run on (RIDGE_ISA may force a lower one): its tuned values are its own.
  std::string feats = std::string(isa_name(active_isa()));
  if (f.avx512vnni) feats += " vnni";
  if (f.avx512bf16) feats += " bf16";
  if (f.avx512fp16) feats += " fp16";
  if (f.avx512vbmi) feats += " vbmi";
  if (amx_active()) feats += " amx";  // the 32-block formats' prefill on tiles (kernels/cpu/gemm.h)
  Peaks caches;
  read_cache_sizes(caches);
  return fmt::format("{} | family {} model {} stepping {} | {} | L2 {} KiB", cpu_model_name(), family, model, a & 0xF,
                     feats, caches.l2 >> 10);
}

std::string kernel_cache_dir(const std::string& flag) {
  std::string d = flag;
  if (d.empty())
    if (const char* e = std::getenv("RIDGE_KERNEL_CACHE"); e && *e) d = e;
  if (d == "off") return "";
  if (!d.empty()) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/ridge";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/ridge";
  return "";
}

std::string kernel_cache_file(const std::string& dir) { return dir + "/kernels.json"; }

std::optional<TunedEntry> load_tuned(const std::string& file, const std::string& cpu) {
  std::error_code ec;
  if (!fs::exists(file, ec)) return std::nullopt;
  const json j = read_file_json(file);
  if (!j.is_object() || !j.contains("cpus") || !j["cpus"].is_object())
    throw Error(fmt::format("{}: no \"cpus\" object", file));
  if (j.contains("version") && j["version"] != 1) throw Error(fmt::format("{}: version {} (this ridge writes 1)", file, j["version"].dump()));
  if (!j["cpus"].contains(cpu)) return std::nullopt;
  return entry_from_json(j["cpus"][cpu], file);
}

void save_tuned(const std::string& file, const std::string& cpu, const TunedEntry& e) {
  json j;
  try {
    j = read_file_json(file);
  } catch (const Error&) {
    j = json::object();  // absent or corrupt: replaced
  }
  if (!j.is_object() || !j.contains("cpus") || !j["cpus"].is_object()) j = json::object({{"cpus", json::object()}});
  j["version"] = 1;
  j["cpus"][cpu] = entry_json(e);
  const fs::path path(file);
  std::error_code ec;
  if (path.has_parent_path()) fs::create_directories(path.parent_path(), ec);
  if (ec) throw Error(fmt::format("{}: cannot create the directory: {}", path.parent_path().string(), ec.message()));
  const std::string tmp = fmt::format("{}.tmp.{}", file, ::getpid());
  {
    std::ofstream o(tmp);
    o << j.dump(1) << "\n";
    o.flush();
    if (!o) {
      fs::remove(tmp, ec);
      throw Error(fmt::format("{}: cannot write (disk full or read-only?)", tmp));
    }
  }
  fs::rename(tmp, file, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw Error(fmt::format("{}: cannot replace: {}", file, ec.message()));
  }
}

void check_cache_dir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error(fmt::format("kernel cache {}: cannot create the directory: {}", dir, ec.message()));
  const std::string probe = fmt::format("{}/.probe.{}", dir, ::getpid());
  {
    std::ofstream o(probe);
    o << "ok\n";
    if (!o.flush()) throw Error(fmt::format("kernel cache {}: cannot write there", dir));
  }
  fs::remove(probe, ec);
}

KernelCacheUse apply_kernel_cache(const std::string& dir) {
  if (dir.empty()) return {KernelCacheUse::Off, "kernels: default parameters (kernel cache off)"};
  const std::string file = kernel_cache_file(dir);
  std::optional<TunedEntry> e;
  try {
    e = load_tuned(file, kernel_cpu_id());
  } catch (const Error& err) {
    return {KernelCacheUse::Unusable,
            fmt::format("kernels: default parameters (kernel cache unusable: {}; `ridge tune-kernels` rewrites it)", err.what())};
  }
  if (!e)
    return {KernelCacheUse::NoEntry,
            fmt::format("kernels: default parameters (no entry for this CPU in {}; `ridge tune-kernels` makes one)", file)};
  kernels::set_kernel_tuning(e->tuning);
  const char* forced = std::getenv("RIDGE_FP8_PATH");
  if (e->fp8_path && !(forced && *forced) && (*e->fp8_path == Fp8Path::F16c || fp8_bf16_available()))
    set_fp8_path(*e->fp8_path);
  if (e->attn_tile_keys) kernels::set_attention_tile_keys(*e->attn_tile_keys);
  if (e->tuner < kTunerGeneration)
    return {KernelCacheUse::Stale, fmt::format("kernels: tuned for this CPU by an older ridge's tuner ({})", file)};
  return {KernelCacheUse::Applied, fmt::format("kernels: tuned for this CPU ({})", file)};
}

}  // namespace ridge
