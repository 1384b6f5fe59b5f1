// meshpool/common: the few helpers every layer shares.
//
//  * Status propagation macros (abseil 20220623 ships none).
//  * ErrnoToStatus: the one place an errno becomes an absl::Status.
//  * ParseSize / FormatSize: human sizes such as "64KiB" and "8GiB".
//
// Everything here is stateless and thread-safe.
#ifndef MESHPOOL_COMMON_COMMON_H_
#define MESHPOOL_COMMON_COMMON_H_

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define MESHPOOL_CONCAT_INNER_(a, b) a##b
#define MESHPOOL_CONCAT_(a, b) MESHPOOL_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define MESHPOOL_RETURN_IF_ERROR(expr)                   \
  do {                                                   \
    ::absl::Status meshpool_status_ = (expr);            \
    if (!meshpool_status_.ok()) return meshpool_status_; \
  } while (0)

// `lhs = value of expr` where expr is an absl::StatusOr<T>; returns the
// status from the enclosing function when it is not OK.
#define MESHPOOL_ASSIGN_OR_RETURN(lhs, expr) \
  MESHPOOL_ASSIGN_OR_RETURN_IMPL_(MESHPOOL_CONCAT_(meshpool_or_, __LINE__), lhs, expr)
#define MESHPOOL_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                    \
  if (!tmp.ok()) return std::move(tmp).status();        \
  lhs = std::move(tmp).value()

namespace meshpool {

// Converts an errno value from a failed call named `what` into a Status whose
// code carries meaning: EAGAIN/ECONNREFUSED/ECONNRESET/EPIPE/ETIMEDOUT/...
// -> Unavailable (retry), ENOMEM/ENOSPC -> ResourceExhausted, EINVAL ->
// InvalidArgument, EACCES/EPERM -> PermissionDenied, ENOENT -> NotFound,
// anything else -> Internal.
absl::Status ErrnoToStatus(int err, absl::string_view what);

// Parses "4096", "64KiB", "64KB", "8GiB", "1.5MiB", "2m" (binary units, case
// insensitive). Returns InvalidArgument naming the accepted forms otherwise.
absl::StatusOr<uint64_t> ParseSize(absl::string_view text);

// Formats bytes with a binary unit: 1536 -> "1.5KiB", 8<<30 -> "8GiB".
std::string FormatSize(uint64_t bytes);

// True for "a.b.c.d:port" with a numeric IPv4 host (what gRPC's "ipv4:"
// target takes in a list of several addresses).
bool IsIpv4HostPort(absl::string_view address);

}  // namespace meshpool

#endif  // MESHPOOL_COMMON_COMMON_H_
