#include "common/common.h"

#include <cerrno>
#include <cmath>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace meshpool {

absl::Status ErrnoToStatus(int err, absl::string_view what) {
  std::string msg = absl::StrCat(what, ": ", std::strerror(err));
  switch (err) {
    case EAGAIN:
    case ECONNREFUSED:
    case ECONNRESET:
    case ECONNABORTED:
    case EPIPE:
    case ETIMEDOUT:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case ENOTCONN:
    case EINTR:
      return absl::UnavailableError(msg);
    case ENOMEM:
    case ENOSPC:
    case EMFILE:
    case ENFILE:
      return absl::ResourceExhaustedError(msg);
    case EINVAL:
      return absl::InvalidArgumentError(msg);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(msg);
    case ENOENT:
      return absl::NotFoundError(msg);
    case EADDRINUSE:
      return absl::AlreadyExistsError(msg);
    default:
      return absl::InternalError(msg);
  }
}

absl::StatusOr<uint64_t> ParseSize(absl::string_view text) {
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid size '", text,
        "': use a number with an optional unit, e.g. 4096, 64KiB, 512MiB, "
        "8GiB, 1TiB"));
  };
  std::string s = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  size_t pos = 0;
  while (pos < s.size() && (absl::ascii_isdigit(s[pos]) || s[pos] == '.')) ++pos;
  if (pos == 0) return bad();
  double number = 0;
  if (!absl::SimpleAtod(s.substr(0, pos), &number) || number < 0) return bad();
  std::string unit = s.substr(pos);
  uint64_t mult = 0;
  if (unit.empty() || unit == "b") mult = 1;
  else if (unit == "k" || unit == "kb" || unit == "kib") mult = 1ull << 10;
  else if (unit == "m" || unit == "mb" || unit == "mib") mult = 1ull << 20;
  else if (unit == "g" || unit == "gb" || unit == "gib") mult = 1ull << 30;
  else if (unit == "t" || unit == "tb" || unit == "tib") mult = 1ull << 40;
  else return bad();
  double bytes = number * static_cast<double>(mult);
  if (bytes > 9.0e18 || bytes != std::floor(bytes)) return bad();
  return static_cast<uint64_t>(bytes);
}

std::string FormatSize(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  if (u == 0) return absl::StrCat(bytes, "B");
  std::string out = absl::StrFormat("%.2f", v);
  while (out.back() == '0') out.pop_back();
  if (out.back() == '.') out.pop_back();
  return absl::StrCat(out, kUnits[u]);
}

bool IsIpv4HostPort(absl::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos || colon == 0 ||
      colon + 1 == address.size()) {
    return false;
  }
  int dots = 0;
  for (char c : address.substr(0, colon)) {
    if (c == '.') {
      ++dots;
    } else if (c < '0' || c > '9') {
      return false;
    }
  }
  for (char c : address.substr(colon + 1)) {
    if (c < '0' || c > '9') return false;
  }
  return dots == 3;
}

}  // namespace meshpool
