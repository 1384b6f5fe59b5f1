#include "placement/coordinator_state.h"

#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace meshpool::placement {
namespace {

// The map behind one mutex. Lookups are linear: a cluster has tens to
// hundreds of nodes, and every mutation copies or scans the map anyway.
class InMemoryCoordinatorState final : public CoordinatorState {
 public:
  explicit InMemoryCoordinatorState(proto::ClusterMap initial) : map_(std::move(initial)) {}

  absl::StatusOr<proto::ClusterMap> Snapshot() const override {
    absl::MutexLock lock(&mu_);
    return map_;
  }

  absl::StatusOr<proto::NodeEntry> FindNode(absl::string_view node_id) const override {
    absl::MutexLock lock(&mu_);
    const proto::NodeEntry* entry = Find(node_id);
    if (entry == nullptr) return UnknownNode(node_id);
    return *entry;
  }

  absl::StatusOr<uint64_t> UpsertNode(const proto::NodeEntry& entry) override {
    if (entry.info().node_id().empty()) {
      return absl::InvalidArgumentError("UpsertNode: the entry has no node_id; assign one first");
    }
    absl::MutexLock lock(&mu_);
    proto::NodeEntry* existing = Find(entry.info().node_id());
    if (existing != nullptr) {
      *existing = entry;
    } else {
      *map_.add_nodes() = entry;
    }
    map_.set_epoch(map_.epoch() + 1);
    return map_.epoch();
  }

  absl::StatusOr<uint64_t> MarkDead(absl::string_view node_id) override {
    absl::MutexLock lock(&mu_);
    proto::NodeEntry* entry = Find(node_id);
    if (entry == nullptr) return UnknownNode(node_id);
    entry->set_state(proto::NODE_DEAD);
    map_.set_epoch(map_.epoch() + 1);
    return map_.epoch();
  }

  absl::Status RecordHeartbeat(absl::string_view node_id, int64_t unix_ms,
                               const proto::NodeStats& stats) override {
    absl::MutexLock lock(&mu_);
    proto::NodeEntry* entry = Find(node_id);
    if (entry == nullptr) return UnknownNode(node_id);
    entry->set_last_heartbeat_unix_ms(unix_ms);
    *entry->mutable_stats() = stats;
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> BumpEpoch() override {
    absl::MutexLock lock(&mu_);
    map_.set_epoch(map_.epoch() + 1);
    return map_.epoch();
  }

 private:
  static absl::Status UnknownNode(absl::string_view node_id) {
    return absl::NotFoundError(
        absl::StrCat("node '", node_id, "' is not in the cluster map; register it first"));
  }

  proto::NodeEntry* Find(absl::string_view node_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (proto::NodeEntry& entry : *map_.mutable_nodes()) {
      if (entry.info().node_id() == node_id) return &entry;
    }
    return nullptr;
  }
  const proto::NodeEntry* Find(absl::string_view node_id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const proto::NodeEntry& entry : map_.nodes()) {
      if (entry.info().node_id() == node_id) return &entry;
    }
    return nullptr;
  }

  mutable absl::Mutex mu_;
  proto::ClusterMap map_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<CoordinatorState> NewInMemoryCoordinatorState(proto::ClusterMap initial) {
  return std::make_unique<InMemoryCoordinatorState>(std::move(initial));
}

}  // namespace meshpool::placement
