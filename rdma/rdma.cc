#include "rdma/rdma.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/common.h"

namespace meshpool::rdma {

absl::string_view OpcodeName(Opcode op) {
  switch (op) {
    case Opcode::kRead:
      return "READ";
    case Opcode::kWrite:
      return "WRITE";
    case Opcode::kCompareSwap:
      return "CAS";
    case Opcode::kFetchAdd:
      return "FAA";
  }
  return "UNKNOWN";
}

absl::string_view TransportKindName(TransportKind kind) {
  switch (kind) {
    case TransportKind::kTcp:
      return "tcp";
    case TransportKind::kVerbs:
      return "verbs";
    case TransportKind::kShm:
      return "shm";
    case TransportKind::kSim:
      return "sim";
    case TransportKind::kUc:
      return "uc";
  }
  return "unknown";
}

absl::Status PostAndWait(Endpoint& endpoint,
                         absl::Span<const WorkRequest> batch,
                         absl::Span<Completion> out, absl::Duration timeout) {
  if (out.size() < batch.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PostAndWait needs room for ", batch.size(), " completions, got ",
        out.size()));
  }
  const absl::Time deadline = absl::Now() + timeout;
  MESHPOOL_RETURN_IF_ERROR(endpoint.Post(batch));
  size_t done = 0;
  // The first Poll gets the whole timeout (one clock read fewer per post).
  bool first = true;
  while (done < batch.size()) {
    const absl::Duration left = first ? timeout : deadline - absl::Now();
    first = false;
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat(
          done, " of ", batch.size(), " requests completed within ",
          absl::FormatDuration(timeout),
          "; discard this endpoint and connect again"));
    }
    MESHPOOL_ASSIGN_OR_RETURN(
        size_t got, endpoint.Poll(out.subspan(done, batch.size() - done), left));
    done += got;
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!out[i].status.ok()) return out[i].status;
  }
  return absl::OkStatus();
}

}  // namespace meshpool::rdma
