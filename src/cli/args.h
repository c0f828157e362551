// Minimal command-line parsing with errors a user can act on: every flag is declared by
// the command that reads it, values are range-checked, and anything left over (a typo,
// a flag of another command) is an error naming it.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ridge::cli {

class Args {
 public:
  Args(std::vector<std::string> argv) : a_(std::move(argv)), used_(a_.size(), false), origin_(a_.size()) {}

  // Adds an argument that came from elsewhere than the command line (a config file);
  // `origin` names where, for the error about an argument nobody read.
  void append(std::string arg, std::string origin);

  // --name VALUE, --name=VALUE, or -n VALUE for any of the names.
  std::optional<std::string> str(std::initializer_list<std::string_view> names);
  std::string str(std::initializer_list<std::string_view> names, std::string dflt) {
    return str(names).value_or(std::move(dflt));
  }
  // Every value of a repeatable option, in order (--name A --name B), consumed.
  std::vector<std::string> all(std::initializer_list<std::string_view> names);
  bool flag(std::initializer_list<std::string_view> names);
  // Whether any of the names is on the command line (as --name or --name=VALUE), without
  // consuming it.
  bool given(std::initializer_list<std::string_view> names) const;
  int64_t integer(std::initializer_list<std::string_view> names, int64_t dflt, int64_t lo, int64_t hi);
  double number(std::initializer_list<std::string_view> names, double dflt, double lo, double hi);
  // The first argument when it does not start with '-' (a subcommand), consumed.
  std::optional<std::string> subcommand();
  // Arguments not starting with '-' (in order), consumed. Call after the options.
  std::vector<std::string> positional();
  // Throws for anything not consumed.
  void finish() const;

  // Every option read so far, in order: its first long name without the dashes, and its
  // value (none for a flag). What a command that writes its configuration back (ridge
  // tune's --output) reads to carry the options it was given.
  struct Read {
    std::string name, value;
    bool flag = false;
  };
  const std::vector<Read>& reads() const { return reads_; }

 private:
  void record(std::initializer_list<std::string_view> names, std::string value, bool flag);

  std::vector<std::string> a_;
  std::vector<bool> used_;
  std::vector<std::string> origin_;  // "" for the command line
  std::vector<Read> reads_;
};

}  // namespace ridge::cli
