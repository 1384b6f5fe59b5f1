// TextBuilder: the Prometheus text exposition format, version 0.0.4.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "metrics/metrics.h"

namespace meshpool::metrics {
namespace {

std::string EscapeLabel(absl::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string EscapeHelp(absl::string_view help) {
  std::string out;
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  // Integers (most of what we count) print exactly, up to 2^53.
  if (value == std::floor(value) && std::fabs(value) < 9007199254740992.0) {
    return absl::StrCat(static_cast<int64_t>(value));
  }
  return absl::StrCat(value);
}

}  // namespace

void TextBuilder::Add(absl::string_view name, Type type, absl::string_view help,
                      double value, Labels labels) {
  if (families_.find(name) == families_.end()) {
    families_.insert(std::string(name));
    absl::StrAppend(&text_, "# HELP ", name, " ", EscapeHelp(help), "\n# TYPE ",
                    name, type == Type::kCounter ? " counter\n" : " gauge\n");
  }
  absl::StrAppend(&text_, name);
  if (labels.size() > 0) {
    text_ += '{';
    bool first = true;
    for (const auto& [key, val] : labels) {
      absl::StrAppend(&text_, first ? "" : ",", key, "=\"", EscapeLabel(val),
                      "\"");
      first = false;
    }
    text_ += '}';
  }
  absl::StrAppend(&text_, " ", FormatValue(value), "\n");
}

}  // namespace meshpool::metrics
