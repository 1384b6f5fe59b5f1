// meshpool/rdma/device_matrix.h: which local RDMA device reaches which peer
// host, for hosts with several devices (a Thunderbolt full mesh has one per
// cable): one row of an N x N matrix (VerbsOptions.peer_devices). Pure and
// thread-safe.
#ifndef MESHPOOL_RDMA_DEVICE_MATRIX_H_
#define MESHPOOL_RDMA_DEVICE_MATRIX_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace meshpool::rdma {

// Parses a device matrix: the first non-comment line names the hosts, then
// one line per host: its name and, per column, the device that reaches that
// host ("-" on the diagonal or where no link exists). '#' starts a comment.
// Returns `self`'s row as peer -> device. InvalidArgument (with the line)
// when malformed; NotFound when `self` has no row.
//     hosts    mac1      mac2      mac3
//     mac1     -         rdma_en2  rdma_en3
//     mac2     rdma_en2  -         rdma_en4
absl::StatusOr<std::map<std::string, std::string>> ParseDeviceMatrix(
    absl::string_view text, absl::string_view self);

}  // namespace meshpool::rdma

#endif  // MESHPOOL_RDMA_DEVICE_MATRIX_H_
