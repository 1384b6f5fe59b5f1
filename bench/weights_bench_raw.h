// For bench/weights_bench: the raw one-sided bandwidth of a cluster, the
// ceiling region reads and writes are measured against. It drives the
// memory holding one region's stripes with the rdma transport directly: no
// Region, no client library data path. Per node it opens as many endpoints
// as a region transfer uses at most (kMaxRegionLanesPerNode), one thread
// each, and keeps `depth` requests of `request_bytes` in flight on each,
// moving one local buffer (the region's size, registered once) to or from
// the region's stripes.
//
// Not thread-safe: one Run at a time.
#ifndef MESHPOOL_BENCH_WEIGHTS_BENCH_RAW_H_
#define MESHPOOL_BENCH_WEIGHTS_BENCH_RAW_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/node_connection.h"
#include "proto/meshpool.pb.h"
#include "rdma/rdma.h"
#include "rdma/verbs.h"

namespace meshpool::bench {

struct RawOptions {
  size_t lanes_per_node = 4;
  uint64_t request_bytes = uint64_t{4} << 20;
  size_t depth = 16;  // requests in flight per endpoint
  // How the client reaches verbs nodes (unused for tcp).
  rdma::VerbsOptions verbs;
  absl::Duration op_timeout = absl::Seconds(10);
};

class RawBench {
 public:
  // Connects to the nodes holding `region` (copy 0 of every stripe), as the
  // cluster map shows them. InvalidArgument for bad options; FailedPrecondition
  // when a node holding a stripe is not alive in the map or uses a transport
  // other than tcp or verbs; Unavailable when a node cannot be reached.
  static absl::StatusOr<std::unique_ptr<RawBench>> Create(
      const proto::RegionInfo& region, const proto::ClusterMap& map,
      const RawOptions& options);
  ~RawBench();
  RawBench(const RawBench&) = delete;
  RawBench& operator=(const RawBench&) = delete;

  // "tcp" or "verbs".
  const std::string& transport() const { return transport_name_; }
  size_t endpoints() const { return lanes_.size(); }
  uint64_t bytes() const { return bytes_; }
  // The local buffer (region-sized): WRITEs send it, READs fill it.
  char* buffer() { return buffer_.get(); }

  // Moves the whole region `passes` times with `op` (kRead or kWrite) and
  // returns the wall time. Unavailable / PermissionDenied / DeadlineExceeded
  // from a failed request (the bench is then unusable).
  absl::StatusOr<absl::Duration> Run(rdma::Opcode op, int passes);

 private:
  struct Lane {
    std::unique_ptr<rdma::Endpoint> endpoint;
    std::vector<rdma::WorkRequest> requests;  // one pass, opcode set per Run
  };
  RawBench() = default;
  absl::Status RunLane(Lane& lane, rdma::Opcode op, int passes) const;

  // Teardown in reverse: endpoints, registration, buffer, connections,
  // transport.
  RawOptions options_;
  std::string transport_name_;
  std::unique_ptr<rdma::Transport> transport_;
  std::vector<std::shared_ptr<client_internal::NodeConnection>> nodes_;
  uint64_t bytes_ = 0;
  std::unique_ptr<char[]> buffer_;
  std::unique_ptr<rdma::MemoryRegion> registration_;
  std::vector<Lane> lanes_;
};

}  // namespace meshpool::bench

#endif  // MESHPOOL_BENCH_WEIGHTS_BENCH_RAW_H_
