// The shm backend's address format and host identity (rdma.h).
#include <sys/un.h>
#include <unistd.h>

#include <cctype>
#include <climits>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "rdma/rdma.h"
#include "rdma/shm.h"

namespace meshpool::rdma {
namespace {

constexpr absl::string_view kScheme = "shm://";
constexpr absl::string_view kHostKey = "host";
constexpr absl::string_view kAtomicsKey = "atomics";
// The longest socket path: sun_path less its terminating NUL.
constexpr size_t kMaxSocketPath = sizeof(sockaddr_un::sun_path) - 1;

bool NeedsEscape(unsigned char c) {
  return c <= ' ' || c >= 0x7f || c == '%' || c == '?' || c == '&' ||
         c == '=' || c == '#';
}

void AppendEscaped(absl::string_view text, std::string* out) {
  constexpr char kHex[] = "0123456789ABCDEF";
  for (unsigned char c : text) {
    if (NeedsEscape(c)) {
      out->push_back('%');
      out->push_back(kHex[c >> 4]);
      out->push_back(kHex[c & 15]);
    } else {
      out->push_back(static_cast<char>(c));
    }
  }
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  c = static_cast<char>(absl::ascii_tolower(static_cast<unsigned char>(c)));
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// Undoes AppendEscaped; false on a malformed escape.
bool Unescape(absl::string_view text, std::string* out) {
  out->clear();
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out->push_back(text[i]);
      continue;
    }
    if (i + 2 >= text.size()) return false;
    const int hi = HexValue(text[i + 1]);
    const int lo = HexValue(text[i + 2]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return true;
}

}  // namespace

absl::StatusOr<ShmAddress> ParseShmAddress(absl::string_view address) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "malformed shm address '", address, "' (", why,
        "); use shm:///absolute/socket/path[?host=ID][&atomics=ADDRESS]"));
  };
  absl::string_view rest = address;
  if (!absl::ConsumePrefix(&rest, kScheme)) return bad("wrong scheme");
  absl::string_view query;
  if (const size_t q = rest.find('?'); q != absl::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  ShmAddress out;
  if (!Unescape(rest, &out.path)) return bad("bad %-escape in the path");
  if (out.path.empty() || out.path[0] != '/') {
    return bad("the socket path must be absolute");
  }
  if (out.path.size() > kMaxSocketPath) {
    return bad(
        absl::StrCat("socket paths hold at most ", kMaxSocketPath, " bytes"));
  }
  if (out.path.find('\0') != std::string::npos) return bad("NUL in the path");
  bool have_host = false;
  bool have_atomics = false;
  if (address.find('?') != absl::string_view::npos) {
    for (absl::string_view pair : absl::StrSplit(query, '&')) {
      const size_t eq = pair.find('=');
      if (eq == absl::string_view::npos || eq == 0 || eq + 1 == pair.size()) {
        return bad(absl::StrCat("'", pair, "' is not key=value"));
      }
      const absl::string_view key = pair.substr(0, eq);
      std::string value;
      if (!Unescape(pair.substr(eq + 1), &value)) {
        return bad(absl::StrCat("bad %-escape in ", key));
      }
      bool* seen = key == kHostKey      ? &have_host
                   : key == kAtomicsKey ? &have_atomics
                                        : nullptr;
      if (seen == nullptr) return bad(absl::StrCat("unknown key '", key, "'"));
      if (*seen) return bad(absl::StrCat("'", key, "' given twice"));
      *seen = true;
      (key == kHostKey ? out.host : out.atomics) = std::move(value);
    }
  }
  return out;
}

std::string FormatShmAddress(const ShmAddress& address) {
  std::string out(kScheme);
  AppendEscaped(address.path, &out);
  char separator = '?';
  for (const auto& [key, value] : {std::pair{kHostKey, &address.host},
                                   std::pair{kAtomicsKey, &address.atomics}}) {
    if (value->empty()) continue;
    out.push_back(separator);
    separator = '&';
    absl::StrAppend(&out, key, "=");
    AppendEscaped(*value, &out);
  }
  return out;
}

bool IsLocalShmAddress(absl::string_view address) {
  absl::StatusOr<ShmAddress> parsed = ParseShmAddress(address);
  return parsed.ok() && !parsed->host.empty() && parsed->host == HostIdentity();
}

}  // namespace meshpool::rdma
