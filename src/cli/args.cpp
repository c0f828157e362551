#include "cli/args.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "core/error.h"

namespace ridge::cli {

void Args::append(std::string arg, std::string origin) {
  a_.push_back(std::move(arg));
  used_.push_back(false);
  origin_.push_back(std::move(origin));
}

void Args::record(std::initializer_list<std::string_view> names, std::string value, bool flag) {
  std::string_view name = *names.begin();
  for (auto n : names)
    if (n.starts_with("--")) {
      name = n;
      break;
    }
  while (name.starts_with('-')) name.remove_prefix(1);
  reads_.push_back({std::string(name), std::move(value), flag});
}

bool Args::given(std::initializer_list<std::string_view> names) const {
  for (const std::string& s : a_)
    for (auto n : names)
      if (s == n || (s.size() > n.size() && s.compare(0, n.size(), n) == 0 && s[n.size()] == '=')) return true;
  return false;
}

std::optional<std::string> Args::str(std::initializer_list<std::string_view> names) {
  // The last occurrence wins, as in most tools; one on the command line wins over any
  // from a config file, whichever alias each used.
  std::optional<std::string> out;
  bool out_from_cmdline = false;
  auto take = [&](size_t i, std::string v) {
    const bool cmdline = origin_[i].empty();
    if (cmdline || !out_from_cmdline) out = std::move(v), out_from_cmdline = cmdline;
  };
  for (size_t i = 0; i < a_.size(); ++i) {
    if (used_[i]) continue;
    for (auto n : names) {
      const std::string& s = a_[i];
      if (s == n) {
        // A value from elsewhere than the option (the next config entry, or the config
        // after the command line) is not its value.
        if (!origin_[i].empty()) fail("{}: {} needs a value", origin_[i], n);
        if (i + 1 >= a_.size() || origin_[i + 1] != origin_[i]) fail("option {} needs a value", n);
        used_[i] = used_[i + 1] = true;
        take(i, a_[i + 1]);
        ++i;
        break;
      }
      if (s.size() > n.size() + 1 && s.compare(0, n.size(), n) == 0 && s[n.size()] == '=') {
        used_[i] = true;
        take(i, s.substr(n.size() + 1));
        break;
      }
    }
  }
  if (out) record(names, *out, false);
  return out;
}

std::vector<std::string> Args::all(std::initializer_list<std::string_view> names) {
  std::vector<std::string> out;
  for (size_t i = 0; i < a_.size(); ++i) {
    if (used_[i]) continue;
    for (auto n : names) {
      const std::string& s = a_[i];
      if (s == n) {
        if (i + 1 >= a_.size() || origin_[i + 1] != origin_[i]) fail("option {} needs a value", n);
        used_[i] = used_[i + 1] = true;
        out.push_back(a_[i + 1]);
        record(names, a_[i + 1], false);
        ++i;
        break;
      }
      if (s.size() > n.size() + 1 && s.compare(0, n.size(), n) == 0 && s[n.size()] == '=') {
        used_[i] = true;
        out.push_back(s.substr(n.size() + 1));
        record(names, out.back(), false);
        break;
      }
    }
  }
  return out;
}

bool Args::flag(std::initializer_list<std::string_view> names) {
  bool found = false;
  for (size_t i = 0; i < a_.size(); ++i)
    for (auto n : names)
      if (!used_[i] && a_[i] == n) used_[i] = found = true;
  if (found) record(names, "", true);
  return found;
}

int64_t Args::integer(std::initializer_list<std::string_view> names, int64_t dflt, int64_t lo, int64_t hi) {
  auto s = str(names);
  if (!s) return dflt;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s->c_str(), &end, 10);
  if (s->empty() || *end || errno) fail("option {} expects an integer, got '{}'", *names.begin(), *s);
  if (v < lo || v > hi) fail("option {} = {} is out of range [{}, {}]", *names.begin(), v, lo, hi);
  return v;
}

double Args::number(std::initializer_list<std::string_view> names, double dflt, double lo, double hi) {
  auto s = str(names);
  if (!s) return dflt;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(s->c_str(), &end);
  if (s->empty() || *end || errno || !std::isfinite(v)) fail("option {} expects a number, got '{}'", *names.begin(), *s);
  if (v < lo || v > hi) fail("option {} = {} is out of range [{}, {}]", *names.begin(), v, lo, hi);
  return v;
}

std::optional<std::string> Args::subcommand() {
  if (a_.empty() || used_[0] || a_[0].empty() || a_[0][0] == '-') return std::nullopt;
  used_[0] = true;
  return a_[0];
}

std::vector<std::string> Args::positional() {
  std::vector<std::string> out;
  for (size_t i = 0; i < a_.size(); ++i)
    if (!used_[i] && (a_[i].empty() || a_[i][0] != '-')) {
      used_[i] = true;
      out.push_back(a_[i]);
    }
  return out;
}

void Args::finish() const {
  for (size_t i = 0; i < a_.size(); ++i) {
    if (used_[i]) continue;
    if (!origin_[i].empty()) fail("{}: '{}' is not an option of this command (see ridge --help)", origin_[i], a_[i]);
    fail("unknown or misplaced argument '{}' (see ridge --help)", a_[i]);
  }
}

}  // namespace ridge::cli
