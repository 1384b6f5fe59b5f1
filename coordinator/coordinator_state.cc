#include "coordinator/coordinator_state.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "placement/placement.h"

namespace meshpool::coordinator {
namespace {

// The map behind one mutex. Lookups are linear: a cluster has tens to
// hundreds of nodes, and every mutation copies or scans the map anyway.
class InMemoryCoordinatorState final : public CoordinatorState {
 public:
  InMemoryCoordinatorState(proto::ClusterMap initial, uint64_t first_region_id)
      : map_(std::move(initial)), next_region_id_(std::max<uint64_t>(first_region_id, 1)) {}

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
      NoteNodeChange(map_, *existing, &entry, map_.epoch() + 1);
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
    NoteNodeChange(map_, *entry, nullptr, map_.epoch() + 1);
    entry->set_state(proto::NODE_DEAD);
    map_.set_epoch(map_.epoch() + 1);
    return map_.epoch();
  }

  absl::StatusOr<uint64_t> RemoveNode(absl::string_view node_id) override {
    absl::MutexLock lock(&mu_);
    auto* nodes = map_.mutable_nodes();
    for (int i = 0; i < nodes->size(); ++i) {
      if (nodes->Get(i).info().node_id() != node_id) continue;
      nodes->DeleteSubrange(i, 1);
      map_.set_epoch(map_.epoch() + 1);
      return map_.epoch();
    }
    return UnknownNode(node_id);
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

  absl::StatusOr<uint64_t> RestartHistory(uint64_t at_least) override {
    absl::MutexLock lock(&mu_);
    return RestartMapHistory(map_, at_least);
  }

  absl::StatusOr<uint64_t> NextRegionId() override {
    absl::MutexLock lock(&mu_);
    return next_region_id_++;
  }

  absl::StatusOr<proto::RegionInfo> FindRegion(absl::string_view name) const override {
    absl::MutexLock lock(&mu_);
    auto it = regions_.find(name);
    if (it == regions_.end()) return UnknownRegion(name);
    return it->second;
  }

  absl::Status PutRegion(const proto::RegionInfo& info) override {
    if (info.name().empty()) {
      return absl::InvalidArgumentError("PutRegion: the region has no name; name it first");
    }
    absl::MutexLock lock(&mu_);
    regions_[info.name()] = info;
    return absl::OkStatus();
  }

  absl::StatusOr<proto::RegionInfo> RemoveRegion(absl::string_view name) override {
    absl::MutexLock lock(&mu_);
    auto it = regions_.find(name);
    if (it == regions_.end()) return UnknownRegion(name);
    proto::RegionInfo removed = std::move(it->second);
    regions_.erase(it);
    return removed;
  }

  absl::StatusOr<std::optional<proto::RegionInfo>> RenameRegion(absl::string_view from,
                                                                absl::string_view to,
                                                                bool replace) override {
    if (to.empty()) {
      return absl::InvalidArgumentError("RenameRegion: the new name is empty; give one");
    }
    absl::MutexLock lock(&mu_);
    auto source = regions_.find(from);
    if (source == regions_.end()) return UnknownRegion(from);
    if (from == to) return std::nullopt;
    std::optional<proto::RegionInfo> replaced;
    auto target = regions_.find(to);
    if (target != regions_.end()) {
      if (!replace) {
        return absl::AlreadyExistsError(absl::StrCat(
            "a region named '", to, "' exists; pick another name, delete it first, or "
            "rename with replace"));
      }
      replaced = std::move(target->second);
      regions_.erase(target);
    }
    proto::RegionInfo moved = std::move(source->second);
    regions_.erase(source);
    moved.set_name(std::string(to));
    regions_.emplace(std::string(to), std::move(moved));
    return replaced;
  }

  absl::StatusOr<std::vector<proto::RegionInfo>> ListRegions(
      absl::string_view prefix) const override {
    absl::MutexLock lock(&mu_);
    std::vector<proto::RegionInfo> found;
    for (auto it = regions_.lower_bound(prefix);
         it != regions_.end() && absl::StartsWith(it->first, prefix); ++it) {
      found.push_back(it->second);
    }
    return found;
  }

 private:
  static absl::Status UnknownRegion(absl::string_view name) {
    return absl::NotFoundError(
        absl::StrCat("no region named '", name, "'; ListRegions shows the existing ones"));
  }

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
  // By name; std::less<> so string_view lookups need no copy.
  std::map<std::string, proto::RegionInfo, std::less<>> regions_ ABSL_GUARDED_BY(mu_);
  uint64_t next_region_id_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<CoordinatorState> NewInMemoryCoordinatorState(proto::ClusterMap initial,
                                                              uint64_t first_region_id) {
  return std::make_unique<InMemoryCoordinatorState>(std::move(initial), first_region_id);
}

uint64_t FirstRegionIdAt(absl::Time now) {
  return static_cast<uint64_t>(std::max<int64_t>(absl::ToUnixMillis(now), 1)) << 20;
}

void NoteNodeChange(proto::ClusterMap& map, const proto::NodeEntry& before,
                    const proto::NodeEntry* after, uint64_t epoch) {
  const uint64_t capacity = before.info().capacity_bytes();
  if (before.state() != proto::NODE_ALIVE || capacity == 0) return;
  // The same weight, alive: every key stays where it was.
  if (after != nullptr && after->state() == proto::NODE_ALIVE &&
      after->info().capacity_bytes() == capacity) {
    return;
  }
  proto::Departure* departure = map.add_departures();
  departure->set_node_id(before.info().node_id());
  departure->set_capacity_bytes(capacity);
  departure->set_epoch(epoch);
  const int excess =
      map.departures_size() - static_cast<int>(placement::kMaxDepartures);
  if (excess <= 0) return;
  map.set_history_epoch(
      std::max(map.history_epoch(), map.departures(excess - 1).epoch()));
  map.mutable_departures()->DeleteSubrange(0, excess);
}

uint64_t RestartMapHistory(proto::ClusterMap& map, uint64_t at_least) {
  const uint64_t epoch = std::max(at_least, map.epoch() + 1);
  map.set_epoch(epoch);
  map.set_history_epoch(epoch);
  map.clear_departures();
  return epoch;
}

proto::NodeEntry DurableEntry(const proto::NodeEntry& entry) {
  proto::NodeEntry out;
  *out.mutable_info() = entry.info();
  out.set_state(entry.state());
  return out;
}

proto::ClusterMap DurableMap(const proto::ClusterMap& map) {
  proto::ClusterMap out = map;
  for (proto::NodeEntry& entry : *out.mutable_nodes()) {
    entry.clear_last_heartbeat_unix_ms();
    entry.clear_stats();
  }
  return out;
}

}  // namespace meshpool::coordinator
