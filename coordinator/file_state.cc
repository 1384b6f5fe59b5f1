// FileCoordinatorState: the in-memory state, with every change appended to
// a StateLog before it is applied (so memory only ever holds acknowledged
// changes, and reads stay correct even after a write failed).
#include "coordinator/file_state.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/common.h"
#include "coordinator/state_log.h"
#include "proto/state.pb.h"

namespace meshpool::coordinator {
namespace {

proto::NodeEntry* FindEntry(proto::ClusterMap& map, absl::string_view id) {
  for (proto::NodeEntry& e : *map.mutable_nodes()) {
    if (e.info().node_id() == id) return &e;
  }
  return nullptr;
}

// Replays one record onto `state`. DataLoss when it names a node the state
// does not have (a log that does not continue this snapshot).
absl::Status Apply(const proto::StateRecord& r, proto::StateSnapshot& state) {
  proto::ClusterMap& map = *state.mutable_map();
  if (r.restart_history()) {
    RestartMapHistory(map, r.epoch());
  } else if (r.epoch() != 0) {
    map.set_epoch(r.epoch());
  }
  if (r.has_upsert_node()) {
    proto::NodeEntry* e = FindEntry(map, r.upsert_node().info().node_id());
    if (e != nullptr) NoteNodeChange(map, *e, &r.upsert_node(), map.epoch());
    *(e != nullptr ? e : map.add_nodes()) = r.upsert_node();
  }
  if (!r.mark_dead().empty()) {
    proto::NodeEntry* e = FindEntry(map, r.mark_dead());
    if (e == nullptr) {
      return absl::DataLossError(
          absl::StrCat("a record marks unknown node ", r.mark_dead(), " dead"));
    }
    NoteNodeChange(map, *e, nullptr, map.epoch());
    e->set_state(proto::NODE_DEAD);
  }
  if (!r.remove_node().empty()) {
    auto* nodes = map.mutable_nodes();
    int at = 0;
    while (at < nodes->size() &&
           nodes->Get(at).info().node_id() != r.remove_node()) {
      ++at;
    }
    if (at == nodes->size()) {
      return absl::DataLossError(
          absl::StrCat("a record forgets unknown node ", r.remove_node()));
    }
    nodes->DeleteSubrange(at, 1);
  }
  if (r.next_region_id() != 0) state.set_next_region_id(r.next_region_id());
  auto* regions = state.mutable_regions();
  for (const std::string& name : r.remove_regions()) {
    for (int i = 0; i < regions->size(); ++i) {
      if (regions->Get(i).name() == name) {
        regions->DeleteSubrange(i, 1);
        break;
      }
    }
  }
  for (const proto::RegionInfo& info : r.put_regions()) {
    bool replaced = false;
    for (proto::RegionInfo& existing : *regions) {
      if (existing.name() == info.name()) {
        existing = info;
        replaced = true;
        break;
      }
    }
    if (!replaced) *regions->Add() = info;
  }
  return absl::OkStatus();
}

class FileCoordinatorState final : public CoordinatorState {
 public:
  FileCoordinatorState(std::unique_ptr<CoordinatorState> mem, StateLog log,
                       uint64_t epoch, uint64_t next_region_id,
                       size_t compact_after)
      : mem_(std::move(mem)),
        log_(std::move(log)),
        epoch_(epoch),
        next_region_id_(next_region_id),
        compact_after_(compact_after) {}

  absl::StatusOr<proto::ClusterMap> Snapshot() const override {
    return mem_->Snapshot();
  }
  absl::StatusOr<proto::NodeEntry> FindNode(
      absl::string_view node_id) const override {
    return mem_->FindNode(node_id);
  }
  absl::Status RecordHeartbeat(absl::string_view node_id, int64_t unix_ms,
                               const proto::NodeStats& stats) override {
    return mem_->RecordHeartbeat(node_id, unix_ms, stats);  // not durable
  }
  absl::StatusOr<proto::RegionInfo> FindRegion(
      absl::string_view name) const override {
    return mem_->FindRegion(name);
  }
  absl::StatusOr<std::vector<proto::RegionInfo>> ListRegions(
      absl::string_view prefix) const override {
    return mem_->ListRegions(prefix);
  }

  absl::StatusOr<uint64_t> UpsertNode(const proto::NodeEntry& entry) override {
    if (entry.info().node_id().empty()) {
      return mem_->UpsertNode(entry);  // InvalidArgument, nothing logged
    }
    absl::MutexLock lock(&mu_);
    proto::StateRecord r;
    r.set_epoch(epoch_ + 1);
    *r.mutable_upsert_node() = DurableEntry(entry);
    MESHPOOL_RETURN_IF_ERROR(Log(r));
    MESHPOOL_ASSIGN_OR_RETURN(epoch_, mem_->UpsertNode(entry));
    return epoch_;
  }

  absl::StatusOr<uint64_t> MarkDead(absl::string_view node_id) override {
    absl::MutexLock lock(&mu_);
    MESHPOOL_RETURN_IF_ERROR(mem_->FindNode(node_id).status());
    proto::StateRecord r;
    r.set_epoch(epoch_ + 1);
    r.set_mark_dead(std::string(node_id));
    MESHPOOL_RETURN_IF_ERROR(Log(r));
    MESHPOOL_ASSIGN_OR_RETURN(epoch_, mem_->MarkDead(node_id));
    return epoch_;
  }

  absl::StatusOr<uint64_t> RemoveNode(absl::string_view node_id) override {
    absl::MutexLock lock(&mu_);
    MESHPOOL_RETURN_IF_ERROR(mem_->FindNode(node_id).status());
    proto::StateRecord r;
    r.set_epoch(epoch_ + 1);
    r.set_remove_node(std::string(node_id));
    MESHPOOL_RETURN_IF_ERROR(Log(r));
    MESHPOOL_ASSIGN_OR_RETURN(epoch_, mem_->RemoveNode(node_id));
    return epoch_;
  }

  absl::StatusOr<uint64_t> BumpEpoch() override {
    absl::MutexLock lock(&mu_);
    proto::StateRecord r;
    r.set_epoch(epoch_ + 1);
    MESHPOOL_RETURN_IF_ERROR(Log(r));
    MESHPOOL_ASSIGN_OR_RETURN(epoch_, mem_->BumpEpoch());
    return epoch_;
  }

  absl::StatusOr<uint64_t> RestartHistory(uint64_t at_least) override {
    absl::MutexLock lock(&mu_);
    proto::StateRecord r;
    r.set_epoch(std::max(at_least, epoch_ + 1));
    r.set_restart_history(true);
    MESHPOOL_RETURN_IF_ERROR(Log(r));
    MESHPOOL_ASSIGN_OR_RETURN(epoch_, mem_->RestartHistory(r.epoch()));
    return epoch_;
  }

  absl::StatusOr<uint64_t> NextRegionId() override {
    absl::MutexLock lock(&mu_);
    proto::StateRecord r;
    r.set_next_region_id(next_region_id_ + 1);
    MESHPOOL_RETURN_IF_ERROR(Log(r));
    return next_region_id_++;
  }

  absl::Status PutRegion(const proto::RegionInfo& info) override {
    if (info.name().empty()) return mem_->PutRegion(info);  // InvalidArgument
    absl::MutexLock lock(&mu_);
    proto::StateRecord r;
    *r.add_put_regions() = info;
    MESHPOOL_RETURN_IF_ERROR(Log(r));
    return mem_->PutRegion(info);
  }

  absl::StatusOr<proto::RegionInfo> RemoveRegion(
      absl::string_view name) override {
    absl::MutexLock lock(&mu_);
    MESHPOOL_RETURN_IF_ERROR(mem_->FindRegion(name).status());
    proto::StateRecord r;
    r.add_remove_regions(std::string(name));
    MESHPOOL_RETURN_IF_ERROR(Log(r));
    return mem_->RemoveRegion(name);
  }

  absl::StatusOr<std::optional<proto::RegionInfo>> RenameRegion(
      absl::string_view from, absl::string_view to, bool replace) override {
    absl::MutexLock lock(&mu_);
    // The checks first (the in-memory state's own rules): nothing is logged
    // for a rename that fails or changes nothing.
    absl::StatusOr<proto::RegionInfo> source = mem_->FindRegion(from);
    if (to.empty() || !source.ok() || from == to ||
        (!replace && mem_->FindRegion(to).ok())) {
      return mem_->RenameRegion(from, to, replace);
    }
    proto::StateRecord r;
    r.add_remove_regions(std::string(from));
    proto::RegionInfo* renamed = r.add_put_regions();
    *renamed = *source;
    renamed->set_name(std::string(to));
    MESHPOOL_RETURN_IF_ERROR(Log(r));
    return mem_->RenameRegion(from, to, replace);
  }

 private:
  // Appends `r` durably; compacts when the log has grown.
  absl::Status Log(const proto::StateRecord& r)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    MESHPOOL_RETURN_IF_ERROR(log_.Append(r.SerializeAsString()));
    if (log_.log_records() >= compact_after_) {
      // The record is durable in the log already; a failed compaction
      // leaves the old log in charge (or, past its commit point, makes
      // later changes fail).
      std::optional<proto::StateSnapshot> snapshot = CurrentSnapshot(r);
      if (snapshot.has_value()) {
        log_.Compact(snapshot->SerializeAsString()).IgnoreError();
      }
    }
    return absl::OkStatus();
  }

  // The durable state including `pending` (logged, not yet applied).
  std::optional<proto::StateSnapshot> CurrentSnapshot(
      const proto::StateRecord& pending) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    absl::StatusOr<proto::ClusterMap> map = mem_->Snapshot();
    absl::StatusOr<std::vector<proto::RegionInfo>> regions =
        mem_->ListRegions("");
    if (!map.ok() || !regions.ok()) return std::nullopt;
    proto::StateSnapshot s;
    s.set_generation(log_.generation() + 1);
    *s.mutable_map() = DurableMap(*map);
    for (proto::RegionInfo& r : *regions) *s.add_regions() = std::move(r);
    s.set_next_region_id(next_region_id_);
    if (!Apply(pending, s).ok()) return std::nullopt;
    return s;
  }

  const std::unique_ptr<CoordinatorState> mem_;
  absl::Mutex mu_;  // serialises changes: log, then memory
  StateLog log_ ABSL_GUARDED_BY(mu_);
  uint64_t epoch_ ABSL_GUARDED_BY(mu_);
  uint64_t next_region_id_ ABSL_GUARDED_BY(mu_);
  const size_t compact_after_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<CoordinatorState>> OpenFileCoordinatorState(
    const FileStateOptions& options, FileStateLoad* load) {
  if (options.dir.empty()) {
    return absl::InvalidArgumentError(
        "FileStateOptions.dir is empty: name the state directory");
  }
  MESHPOOL_ASSIGN_OR_RETURN(std::string snapshot_bytes,
                            StateLog::ReadSnapshot(options.dir));
  proto::StateSnapshot state;
  const bool fresh_snapshot = snapshot_bytes.empty();
  if (fresh_snapshot) {
    state.set_next_region_id(std::max<uint64_t>(options.first_region_id, 1));
  } else if (!state.ParseFromString(snapshot_bytes)) {
    return absl::DataLossError(
        absl::StrCat(options.dir,
                     "/state.snapshot passes its checksum but does not "
                     "parse: written by another version? restore a backup"));
  }
  StateLog::Contents contents;
  MESHPOOL_ASSIGN_OR_RETURN(
      StateLog log, StateLog::Open(options.dir, state.generation(), &contents));
  for (size_t i = 0; i < contents.records.size(); ++i) {
    proto::StateRecord r;
    absl::Status applied = r.ParseFromString(contents.records[i])
                               ? Apply(r, state)
                               : absl::DataLossError(
                                     "a record passes its checksum but does "
                                     "not parse");
    if (!applied.ok()) {
      return absl::DataLossError(
          absl::StrCat(options.dir, "/state.log.", state.generation(),
                       ": record ", i, ": ", applied.message(),
                       "; restore the state directory from a "
                       "backup"));
    }
  }
  // Nodes marked alive get a full dead_after from now to heartbeat again.
  const int64_t now_ms = absl::ToUnixMillis(EnvOrDefault(options.env)->Now());
  for (proto::NodeEntry& e : *state.mutable_map()->mutable_nodes()) {
    if (e.state() == proto::NODE_ALIVE) e.set_last_heartbeat_unix_ms(now_ms);
  }
  std::unique_ptr<CoordinatorState> mem =
      NewInMemoryCoordinatorState(state.map(), state.next_region_id());
  for (const proto::RegionInfo& r : state.regions()) {
    MESHPOOL_RETURN_IF_ERROR(mem->PutRegion(r));
  }
  if (load != nullptr) {
    load->generation = state.generation();
    load->records_replayed = contents.records.size();
    load->dropped_tail_bytes = contents.dropped_tail_bytes;
    load->fresh = fresh_snapshot && contents.records.empty();
  }
  return std::unique_ptr<CoordinatorState>(new FileCoordinatorState(
      std::move(mem), std::move(log), state.map().epoch(),
      state.next_region_id(),
      std::max<size_t>(options.compact_after_records, 1)));
}

}  // namespace meshpool::coordinator
