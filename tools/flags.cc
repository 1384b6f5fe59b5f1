#include "tools/flags.h"

#include <cstdlib>
#include <iterator>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "common/common.h"

namespace meshpool::tools {

std::string ForCommandLine(absl::string_view message) {
  // Longest first: "NodeOptions.evict = false" before "NodeOptions.evict".
  static constexpr std::pair<absl::string_view, absl::string_view> kFlags[] = {
      {"NodeOptions.capacity_bytes, slab_bytes, bucket_count, pin_sessions "
       "and pins_per_session",
       "--capacity, --slab-size and --index-buckets"},
      {"NodeOptions.evict_low_watermark", "--evict-low"},
      {"NodeOptions.evict_high_watermark", "--evict-high"},
      {"evict_high_watermark", "--evict-high"},
      {"NodeOptions.evict = false", "--no-evict"},
      {"NodeOptions.advertise_host", "--advertise HOST"},
      {"NodeOptions.session_lease", "--session-lease"},
      {"NodeOptions.max_read_lease", "--read-lease"},
      {"NodeOptions.slab_lease", "--slab-lease"},
      {"NodeOptions.slab_bytes", "--slab-size"},
      {"NodeOptions.capacity_bytes", "--capacity"},
      {"ClientOptions.coordinator", "--coordinator"},
      {"the coordinator address", "--coordinator"},
      {"LoadOptions.replace", "--replace"},
      {"RemoveModel", "meshpool weights rm"},
      {"WeightStore::Tensors", "meshpool weights ls --model MODEL"},
  };
  std::vector<std::pair<absl::string_view, absl::string_view>> replacements(
      std::begin(kFlags), std::end(kFlags));
  return absl::StrReplaceAll(message, replacements);
}

Flags::Flags(std::string usage, std::string summary)
    : usage_(std::move(usage)), summary_(std::move(summary)) {}

void Flags::Define(const std::string& name, const std::string& default_value,
                   const std::string& help) {
  defs_[name] = Def{default_value, help, false};
  order_.push_back(name);
}

void Flags::DefineBool(const std::string& name, const std::string& help) {
  defs_[name] = Def{"", help, true};
  order_.push_back(name);
}

void Flags::Alias(const std::string& shorthand, const std::string& name) {
  aliases_[shorthand] = name;
}

absl::Status Flags::Parse(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      help_ = true;
      continue;
    }
    if (arg == "-" || arg.size() < 2 || arg[0] != '-') {
      positional_.push_back(arg);
      continue;
    }
    std::string name = arg.substr(arg[1] == '-' ? 2 : 1);
    std::string value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    if (auto a = aliases_.find(name); a != aliases_.end()) name = a->second;
    auto def = defs_.find(name);
    if (def == defs_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag ", arg, "\n\n", Help()));
    }
    if (def->second.is_bool) {
      values_[name] = has_value ? value : "true";
      continue;
    }
    if (!has_value) {
      if (i + 1 >= argc) {
        return absl::InvalidArgumentError(
            absl::StrCat("flag --", name, " needs a value\n\n", Help()));
      }
      value = argv[++i];
    }
    values_[name] = value;
  }
  return absl::OkStatus();
}

std::string Flags::Help() const {
  std::string out = absl::StrCat("usage: ", usage_, "\n\n", summary_, "\n");
  if (!order_.empty()) absl::StrAppend(&out, "\nflags:\n");
  for (const std::string& name : order_) {
    const Def& d = defs_.at(name);
    std::string left = absl::StrCat("  --", name, d.is_bool ? "" : " VALUE");
    for (const auto& [shorthand, target] : aliases_) {
      if (target == name) absl::StrAppend(&left, ", -", shorthand);
    }
    absl::StrAppend(&out, absl::StrFormat("%-30s %s", left, d.help));
    if (!d.default_value.empty()) {
      absl::StrAppend(&out, " (default ", d.default_value, ")");
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

std::string Flags::Get(const std::string& name) const {
  if (auto v = values_.find(name); v != values_.end()) return v->second;
  if (auto d = defs_.find(name); d != defs_.end()) return d->second.default_value;
  return "";
}

bool Flags::GetBool(const std::string& name) const {
  std::string v = Get(name);
  return v == "true" || v == "1" || v == "yes";
}

absl::StatusOr<uint64_t> Flags::GetSize(const std::string& name) const {
  absl::StatusOr<uint64_t> size = ParseSize(Get(name));
  if (!size.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, ": ", size.status().message()));
  }
  return size;
}

absl::StatusOr<int64_t> Flags::GetInt(const std::string& name) const {
  int64_t v;
  if (!absl::SimpleAtoi(Get(name), &v)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " wants an integer, got '", Get(name), "'"));
  }
  return v;
}

absl::StatusOr<double> Flags::GetDouble(const std::string& name) const {
  double v;
  if (!absl::SimpleAtod(Get(name), &v)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " wants a number, got '", Get(name), "'"));
  }
  return v;
}

absl::StatusOr<absl::Duration> Flags::GetDuration(
    const std::string& name) const {
  absl::Duration d;
  if (!absl::ParseDuration(Get(name), &d) || d < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", name, " wants a duration such as 500ms, 5s or 1m, got '",
        Get(name), "'"));
  }
  return d;
}

absl::StatusOr<std::string> CoordinatorAddress(const Flags& flags) {
  std::string address = flags.Get("coordinator");
  if (address.empty()) {
    const char* env = std::getenv("MESHPOOL_COORDINATOR");
    if (env != nullptr) address = env;
  }
  if (address.empty()) {
    return absl::InvalidArgumentError(
        "no coordinator: pass --coordinator HOST:PORT or set "
        "MESHPOOL_COORDINATOR (`meshpool up` prints it)");
  }
  return address;
}

}  // namespace meshpool::tools
