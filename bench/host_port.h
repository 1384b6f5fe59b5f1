// For bench/kv_compare's clients: "host:port" split for the client
// libraries' connect calls, which take the two apart.
#ifndef MESHPOOL_BENCH_HOST_PORT_H_
#define MESHPOOL_BENCH_HOST_PORT_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace meshpool::bench {

// "host:port" -> `host`, `port` (1..65535; the host may itself hold colons,
// the port follows the last). InvalidArgument otherwise, showing `example`.
inline absl::Status SplitHostPort(absl::string_view address,
                                  absl::string_view example, std::string& host,
                                  int& port) {
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port <= 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "address '", address, "' is not HOST:PORT (e.g. ", example, ")"));
  }
  host = std::string(address.substr(0, colon));
  return absl::OkStatus();
}

}  // namespace meshpool::bench

#endif  // MESHPOOL_BENCH_HOST_PORT_H_
