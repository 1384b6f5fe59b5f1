// tests/: memory nodes for the coordinator's region table without a
// network — a RegionNodes that keeps free slabs and allocations per node,
// with switches to make a node silent, refuse allocations or stall them.
// Thread-safe.
#ifndef MESHPOOL_TESTS_FAKE_REGION_NODES_H_
#define MESHPOOL_TESTS_FAKE_REGION_NODES_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/region_table.h"
#include "proto/meshpool.pb.h"

namespace meshpool::testing {

inline constexpr uint64_t kMiB = uint64_t{1} << 20;
inline constexpr uint64_t kSlab = 4 * kMiB;

// Memory nodes in a map: free slabs per node, the regions each holds, and
// switches to make a node silent, refuse allocations or stall them.
class FakeNodes final : public coordinator::RegionNodes {
 public:
  struct Node {
    uint64_t slab_bytes = kSlab;
    uint64_t free_slabs = 16;
    bool silent = false;                // GetStats (and all else) Unavailable
    absl::Status allocate_error;        // returned by Allocate when set
    std::map<uint64_t, uint64_t> held;  // region id -> slabs
    uint64_t next_offset = 1 << 20;
  };

  void Add(const std::string& id, uint64_t free_slabs,
           uint64_t slab_bytes = kSlab) {
    absl::MutexLock lock(&mu_);
    nodes_[id].free_slabs = free_slabs;
    nodes_[id].slab_bytes = slab_bytes;
  }
  template <typename F>
  void With(const std::string& id, F change) {
    absl::MutexLock lock(&mu_);
    change(nodes_[id]);
  }
  uint64_t Held(const std::string& id) {
    absl::MutexLock lock(&mu_);
    uint64_t slabs = 0;
    for (const auto& [region, n] : nodes_[id].held) slabs += n;
    return slabs;
  }
  std::vector<uint64_t> HeldIds(const std::string& id) {
    absl::MutexLock lock(&mu_);
    std::vector<uint64_t> ids;
    for (const auto& [region, n] : nodes_[id].held) ids.push_back(region);
    return ids;
  }
  int frees() {
    absl::MutexLock lock(&mu_);
    return frees_;
  }
  // The next Allocate call waits for Release(); later ones do not.
  void Stall() {
    absl::MutexLock lock(&mu_);
    stall_next_ = true;
    stalled_ = true;
  }
  void AwaitStalledCall() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&waiting_));
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    stalled_ = false;
  }

  absl::StatusOr<proto::NodeStats> GetStats(
      const proto::NodeInfo& info) override {
    absl::MutexLock lock(&mu_);
    Node& node = nodes_[info.node_id()];
    if (node.silent) return absl::UnavailableError("silent");
    proto::NodeStats stats;
    stats.set_slabs_free(node.free_slabs);
    return stats;
  }

  absl::StatusOr<proto::AllocateRegionReply> Allocate(
      const proto::NodeInfo& info,
      const proto::AllocateRegionRequest& request) override {
    absl::MutexLock lock(&mu_);
    if (stall_next_) {
      stall_next_ = false;
      waiting_ = true;
      mu_.Await(absl::Condition(
          +[](bool* stalled) { return !*stalled; }, &stalled_));
      waiting_ = false;
    }
    Node& node = nodes_[info.node_id()];
    if (node.silent) return absl::UnavailableError("silent");
    if (!node.allocate_error.ok()) return node.allocate_error;
    if (node.held.count(request.region_id()) > 0) {
      return absl::FailedPreconditionError("allocated twice");
    }
    const uint64_t per_slab = node.slab_bytes / request.stripe_bytes();
    const uint64_t slabs = (request.stripes() + per_slab - 1) / per_slab;
    if (slabs > node.free_slabs) return absl::ResourceExhaustedError("full");
    node.free_slabs -= slabs;
    node.held[request.region_id()] = slabs;
    proto::AllocateRegionReply reply;
    reply.set_slab_bytes(node.slab_bytes);
    for (uint64_t i = 0; i < slabs; ++i) {
      reply.add_slab_offsets(node.next_offset);
      node.next_offset += node.slab_bytes;
    }
    return reply;
  }

  absl::Status Free(const proto::NodeInfo& info,
                    const proto::FreeRegionRequest& request) override {
    absl::MutexLock lock(&mu_);
    ++frees_;
    Node& node = nodes_[info.node_id()];
    if (node.silent) return absl::UnavailableError("silent");
    auto it = node.held.find(request.region_id());
    if (it != node.held.end()) {
      node.free_slabs += it->second;
      node.held.erase(it);
    }
    return absl::OkStatus();
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, Node> nodes_ ABSL_GUARDED_BY(mu_);
  int frees_ ABSL_GUARDED_BY(mu_) = 0;
  bool stall_next_ ABSL_GUARDED_BY(mu_) = false;
  bool stalled_ ABSL_GUARDED_BY(mu_) = false;
  bool waiting_ ABSL_GUARDED_BY(mu_) = false;
};

inline proto::NodeEntry Entry(const std::string& id,
                              uint64_t slab_bytes = kSlab,
                              proto::NodeState state = proto::NODE_ALIVE) {
  proto::NodeEntry entry;
  entry.set_state(state);
  entry.mutable_info()->set_node_id(id);
  entry.mutable_info()->set_incarnation(42);
  entry.mutable_info()->set_control_address("127.0.0.1:1");
  entry.mutable_info()->mutable_layout()->set_slab_bytes(slab_bytes);
  return entry;
}

}  // namespace meshpool::testing

#endif  // MESHPOOL_TESTS_FAKE_REGION_NODES_H_
