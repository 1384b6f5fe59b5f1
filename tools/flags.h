// A small command-line parser for the meshpool subcommands:
// `--name value`, `--name=value`, boolean `--name`, and positional args.
// Each subcommand declares its flags with help text, so `--help` and errors
// for unknown flags come for free. Not thread-safe (used from main only).
#ifndef MESHPOOL_TOOLS_FLAGS_H_
#define MESHPOOL_TOOLS_FLAGS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace meshpool::tools {

class Flags {
 public:
  // `usage` is the one-line synopsis, e.g. "meshpool get KEY [-o FILE]".
  Flags(std::string usage, std::string summary);

  // Declares a flag taking a value, with its default ("" = none).
  void Define(const std::string& name, const std::string& default_value,
              const std::string& help);
  // Declares a boolean flag (no value).
  void DefineBool(const std::string& name, const std::string& help);
  // Short alias, e.g. Alias("o", "output").
  void Alias(const std::string& shorthand, const std::string& name);

  // Parses argv after the subcommand. InvalidArgument for an unknown flag or
  // a missing value. Sets help_requested() for -h/--help.
  absl::Status Parse(int argc, char** argv);

  bool help_requested() const { return help_; }
  std::string Help() const;

  std::string Get(const std::string& name) const;
  bool GetBool(const std::string& name) const;
  absl::StatusOr<uint64_t> GetSize(const std::string& name) const;
  absl::StatusOr<int64_t> GetInt(const std::string& name) const;
  absl::StatusOr<double> GetDouble(const std::string& name) const;
  absl::StatusOr<absl::Duration> GetDuration(const std::string& name) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  struct Def {
    std::string default_value;
    std::string help;
    bool is_bool = false;
  };
  std::string usage_;
  std::string summary_;
  std::map<std::string, Def> defs_;
  std::vector<std::string> order_;
  std::map<std::string, std::string> aliases_;
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
  bool help_ = false;
};

// A library message as the command line should say it: the libraries name
// their own options ("NodeOptions.slab_bytes", "LoadOptions.replace", "the
// coordinator address"); this names the flag that sets each instead
// ("--slab-size", "--replace", "--coordinator"). Other text is unchanged.
std::string ForCommandLine(absl::string_view message);

// The coordinator a client command talks to: --coordinator, else
// $MESHPOOL_COORDINATOR, else InvalidArgument saying how to set it.
absl::StatusOr<std::string> CoordinatorAddress(const Flags& flags);

}  // namespace meshpool::tools

#endif  // MESHPOOL_TOOLS_FLAGS_H_
