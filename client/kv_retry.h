// The client's internal "do it again" outcomes of the KV protocol.
//
// A one-sided reader races writers, the evictor and node restarts; many of
// its steps end in "what I saw is no longer true: start this step over".
// Those outcomes travel through the same absl::Status plumbing as real errors
// (a step may also fail Unavailable, NotFound, OutOfRange...), but they are a
// type of their own: a Status made by Retry() carries a payload naming the
// RetryReason, and only RetryReasonOf() reads it. A plain Aborted from
// anywhere else is never taken for one.
//
// They stay inside the client: every loop that asks for one either repeats
// its step or, when its attempts run out, returns a public status with its
// own message (Unavailable, or NotFound when a key never verified). Should
// one escape regardless, it still reads correctly to a caller: Aborted means
// "retry the higher-level operation".
//
// Thread-safe: free functions over values.

#ifndef MESHPOOL_CLIENT_KV_RETRY_H_
#define MESHPOOL_CLIENT_KV_RETRY_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/string_view.h"

namespace meshpool::client_internal {

enum class RetryReason : char {
  // What was read is torn, reused or from another incarnation: read the
  // key's buckets (the index) again.
  kRereadIndex = 'i',
  // The read outlived the node's read lease: the slab it read may have been
  // reclaimed and reused, so what it fetched could be stale even if it
  // verified. Read again (a slow network, not corruption).
  kReadLeasePassed = 'l',
  // The slab lease ended before the object was published: allocate and
  // write the object again.
  kAllocateAgain = 'a',
};

inline constexpr absl::string_view kRetryPayloadUrl =
    "meshpool.internal/kv-retry";

// An outcome that asks the caller's loop to repeat a step for `reason`;
// `what` says what was seen (for the rare message that escapes).
inline absl::Status Retry(RetryReason reason, absl::string_view what) {
  absl::Status s = absl::AbortedError(what);
  s.SetPayload(
      kRetryPayloadUrl,
      absl::Cord(absl::string_view(reinterpret_cast<const char*>(&reason), 1)));
  return s;
}

// Why `s` asks for a retry; nullopt when it is a result (OK or an error).
inline std::optional<RetryReason> RetryReasonOf(const absl::Status& s) {
  if (s.code() != absl::StatusCode::kAborted) return std::nullopt;
  auto payload = s.GetPayload(kRetryPayloadUrl);  // absl::optional<Cord>
  if (!payload.has_value() || payload->size() != 1) return std::nullopt;
  return static_cast<RetryReason>(static_cast<std::string>(*payload)[0]);
}

inline bool IsRetry(const absl::Status& s, RetryReason reason) {
  return RetryReasonOf(s) == reason;
}

// What a read step returns when its verdict is "stale" or its lease passed.
inline absl::Status StaleRead() {
  return Retry(RetryReason::kRereadIndex, "object torn or reused meanwhile");
}
inline absl::Status ReadLeaseExpired() {
  return Retry(RetryReason::kReadLeasePassed, "read lease passed");
}

// Whether a read step's status means "read the index again".
inline bool IsRetryableRead(const absl::Status& s) {
  std::optional<RetryReason> r = RetryReasonOf(s);
  return r == RetryReason::kRereadIndex || r == RetryReason::kReadLeasePassed;
}

}  // namespace meshpool::client_internal

#endif  // MESHPOOL_CLIENT_KV_RETRY_H_
