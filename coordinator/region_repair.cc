// Re-replication (coordinator/region_repair.h): planning new homes for
// lost stripe copies, and the repair of one region from allocation to
// record.
#include "coordinator/region_repair.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/common.h"
#include "placement/region_layout.h"

namespace meshpool::coordinator {
namespace {

uint16_t EntryAt(const std::string& entries, uint64_t stripe) {
  return static_cast<uint16_t>(static_cast<uint8_t>(entries[2 * stripe]) |
                               static_cast<uint8_t>(entries[2 * stripe + 1])
                                   << 8);
}

void SetEntry(std::string& entries, uint64_t stripe, uint16_t extent) {
  entries[2 * stripe] = static_cast<char>(extent & 0xff);
  entries[2 * stripe + 1] = static_cast<char>(extent >> 8);
}

// Per extent of `info`: is its node process alive in `map`?
std::vector<bool> LiveExtents(const proto::RegionInfo& info,
                              const proto::ClusterMap& map) {
  std::vector<bool> live(info.extents_size(), false);
  for (int e = 0; e < info.extents_size(); ++e) {
    for (const proto::NodeEntry& entry : map.nodes()) {
      if (entry.info().node_id() == info.extents(e).node_id()) {
        live[e] = entry.state() == proto::NODE_ALIVE &&
                  entry.info().incarnation() == info.extents(e).incarnation();
        break;
      }
    }
  }
  return live;
}

// Drops the extents no stripe copy names, renumbering the rest (and
// `new_extents`, which all name copies).
void DropUnusedExtents(proto::RegionInfo& info, std::vector<int>& new_extents) {
  const uint64_t stripes =
      info.stripe_extents_size() == 0 ? 0 : info.stripe_extents(0).size() / 2;
  std::vector<bool> used(info.extents_size(), false);
  for (const std::string& entries : info.stripe_extents()) {
    for (uint64_t s = 0; s < stripes; ++s) used[EntryAt(entries, s)] = true;
  }
  std::vector<uint16_t> renumbered(info.extents_size(), 0);
  google::protobuf::RepeatedPtrField<proto::RegionExtent> kept;
  for (int e = 0; e < info.extents_size(); ++e) {
    if (!used[e]) continue;
    renumbered[e] = static_cast<uint16_t>(kept.size());
    *kept.Add() = info.extents(e);
  }
  *info.mutable_extents() = std::move(kept);
  for (std::string& entries : *info.mutable_stripe_extents()) {
    for (uint64_t s = 0; s < stripes; ++s)
      SetEntry(entries, s, renumbered[EntryAt(entries, s)]);
  }
  for (int& e : new_extents) e = renumbered[e];
}

}  // namespace

absl::StatusOr<RepairPlan> PlanRepair(
    const proto::RegionInfo& info, const proto::ClusterMap& map,
    absl::Span<const RegionTable::LiveNode> nodes) {
  absl::StatusOr<placement::RegionLayout> layout =
      placement::RegionLayout::Create(info);
  if (!layout.ok()) return layout.status();
  RepairPlan plan;
  plan.repaired = info;
  const std::vector<bool> live = LiveExtents(info, map);
  // Free stripe copies each node can still take, and its new extent (-1:
  // none yet).
  std::vector<uint64_t> free(nodes.size(), 0);
  std::vector<int> extent_of(nodes.size(), -1);
  for (size_t n = 0; n < nodes.size(); ++n) {
    const uint64_t slab_bytes = nodes[n].info.layout().slab_bytes();
    if (slab_bytes >= info.stripe_bytes()) {
      free[n] =
          nodes[n].stats.slabs_free() * (slab_bytes / info.stripe_bytes());
    }
  }
  for (uint64_t s = 0; s < layout->stripes(); ++s) {
    std::set<std::string> holders;  // nodes holding a live or new copy of s
    bool any_live = false;
    for (uint32_t r = 0; r < layout->replicas(); ++r) {
      const int e = layout->Copy(s, r).extent;
      if (live[e]) {
        holders.insert(info.extents(e).node_id());
        any_live = true;
      }
    }
    for (uint32_t r = 0; r < layout->replicas(); ++r) {
      if (live[layout->Copy(s, r).extent]) continue;
      if (!any_live) {
        ++plan.copies_unplaced;  // no source: the stripe is lost
        continue;
      }
      size_t best = nodes.size();
      for (size_t n = 0; n < nodes.size(); ++n) {
        if (free[n] == 0 || holders.count(nodes[n].info.node_id()) > 0)
          continue;
        if (best == nodes.size() || free[n] > free[best]) best = n;
      }
      if (best == nodes.size()) {
        ++plan.copies_unplaced;
        continue;
      }
      if (extent_of[best] < 0) {
        extent_of[best] = plan.repaired.extents_size();
        proto::RegionExtent* extent = plan.repaired.add_extents();
        extent->set_node_id(nodes[best].info.node_id());
        extent->set_incarnation(nodes[best].info.incarnation());
        extent->set_slab_bytes(nodes[best].info.layout().slab_bytes());
        plan.new_extents.push_back(extent_of[best]);
        plan.nodes.push_back(nodes[best].info);
        plan.copies.push_back(0);
      }
      if (extent_of[best] > static_cast<int>(placement::kMaxRegionExtents)) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "region '", info.name(), "' would have more than ",
            placement::kMaxRegionExtents, " extents; delete and recreate it"));
      }
      SetEntry(*plan.repaired.mutable_stripe_extents(static_cast<int>(r)), s,
               static_cast<uint16_t>(extent_of[best]));
      for (size_t i = 0; i < plan.new_extents.size(); ++i) {
        if (plan.new_extents[i] == extent_of[best]) ++plan.copies[i];
      }
      --free[best];
      holders.insert(nodes[best].info.node_id());
      ++plan.copies_placed;
      plan.bytes += layout->StripeLength(s);
    }
  }
  if (plan.copies_placed > 0) {
    DropUnusedExtents(plan.repaired, plan.new_extents);
    plan.repaired.set_layout_version(info.layout_version() + 1);
  }
  return plan;
}

RegionRepairer::RegionRepairer(CoordinatorState* state, RegionTable* table,
                               StripeCopierFactory factory,
                               std::string coordinator_address, Env* env)
    : state_(state),
      table_(table),
      factory_(std::move(factory)),
      coordinator_address_(std::move(coordinator_address)),
      env_(EnvOrDefault(env)) {}

RegionRepairer::Counters RegionRepairer::counters() const {
  absl::MutexLock lock(&counters_mu_);
  return counters_;
}

absl::StatusOr<StripeCopier> RegionRepairer::Copier() {
  if (copier_) return copier_;
  absl::StatusOr<StripeCopier> made = factory_(coordinator_address_);
  if (!made.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "the repairer could not reach the data plane (",
        made.status().message(), "); it tries again on its next pass"));
  }
  copier_ = *std::move(made);
  return copier_;
}

void RegionRepairer::Recheck() {
  const absl::Time now = env_->Now();
  std::vector<PendingRecheck> later;
  for (PendingRecheck& r : rechecks_) {
    if (r.due > now) {
      later.push_back(std::move(r));
      continue;
    }
    absl::StatusOr<proto::RegionInfo> current =
        state_->FindRegion(r.repaired.name());
    if (!current.ok() || current->region_id() != r.repaired.region_id() ||
        current->layout_version() != r.repaired.layout_version()) {
      continue;  // deleted, renamed or repaired again since
    }
    absl::Status s = copier_(r.before, r.repaired, CopyPass::kRecheck,
                             [](uint64_t) { return true; });
    if (!s.ok()) {
      env_->Log("coordinator",
                absl::StrCat("region '", r.repaired.name(),
                             "': re-checking its repaired copies failed: ",
                             s.ToString()));
    }
  }
  rechecks_ = std::move(later);
}

size_t RegionRepairer::RepairOnce(const std::function<bool()>& stop) {
  Recheck();
  absl::StatusOr<proto::ClusterMap> map = state_->Snapshot();
  if (!map.ok()) return 0;
  absl::StatusOr<std::vector<proto::RegionInfo>> regions =
      state_->ListRegions("");
  if (!regions.ok()) return 0;
  size_t repaired = 0;
  for (const proto::RegionInfo& info : *regions) {
    if (stop && stop()) break;
    if (HealthOf(info, *map).state() != proto::REGION_DEGRADED) continue;
    absl::Status s = Repair(info, *map, stop);
    if (s.ok()) {
      ++repaired;
      last_error_.erase(info.region_id());
      continue;
    }
    {
      absl::MutexLock lock(&counters_mu_);
      ++counters_.failed;
    }
    // Each pass retries; the log says so once per distinct error.
    std::string& last = last_error_[info.region_id()];
    if (last != s.ToString()) {
      last = s.ToString();
      env_->Log("coordinator",
                absl::StrCat("repairing region '", info.name(),
                             "' failed: ", last, "; each pass tries again"));
    }
    proto::RegionHealth failed;
    failed.set_repair_error(std::string(s.message()));
    table_->SetRepairStatus(info.region_id(), std::move(failed));
  }
  return repaired;
}

absl::Status RegionRepairer::Repair(const proto::RegionInfo& info,
                                    const proto::ClusterMap& map,
                                    const std::function<bool()>& stop) {
  size_t live = 0;
  MESHPOOL_ASSIGN_OR_RETURN(std::vector<RegionTable::LiveNode> nodes,
                            table_->FreshLiveNodes(live));
  MESHPOOL_ASSIGN_OR_RETURN(RepairPlan plan, PlanRepair(info, map, nodes));
  if (plan.copies_placed == 0) {
    return absl::ResourceExhaustedError(absl::StrCat(
        plan.copies_unplaced,
        " lost stripe copies have no live node to go to (every live node "
        "holds another copy of their stripe, or is full); add a node or free "
        "memory"));
  }
  MESHPOOL_ASSIGN_OR_RETURN(StripeCopier copier, Copier());
  // Fresh allocation ids, which Reconcile leaves alone until recorded.
  std::vector<uint64_t> ids;
  auto release = [&] {
    for (uint64_t id : ids) table_->ReleaseAllocationId(id);
  };
  for (int e : plan.new_extents) {
    absl::StatusOr<uint64_t> id = table_->ReserveAllocationId();
    if (!id.ok()) {
      release();
      return id.status();
    }
    ids.push_back(*id);
    plan.repaired.mutable_extents(e)->set_allocation_id(*id);
  }
  absl::Status s = table_->Allocate(plan.repaired, plan.new_extents, plan.nodes,
                                    plan.copies);
  if (!s.ok()) {
    release();
    return s;
  }
  env_->Log(
      "coordinator",
      absl::StrCat(
          "region '", info.name(), "': copying ", plan.copies_placed,
          " lost stripe copies (", FormatSize(plan.bytes), ") to ",
          plan.nodes.size(), " node(s)",
          plan.copies_unplaced > 0
              ? absl::StrCat("; ", plan.copies_unplaced, " have nowhere to go")
              : std::string()));
  const absl::Time start = env_->Now();
  proto::RegionHealth progress;
  progress.set_repair_bytes_total(plan.bytes);
  table_->SetRepairStatus(info.region_id(), progress);
  auto on_progress = [&](uint64_t bytes) {
    progress.set_repair_bytes_done(
        std::min(plan.bytes, progress.repair_bytes_done() + bytes));
    table_->SetRepairStatus(info.region_id(), progress);
    return !(stop && stop());
  };
  s = copier(info, plan.repaired, CopyPass::kFill, on_progress);
  if (s.ok()) s = table_->CommitRepair(info, plan.repaired);
  release();
  if (!s.ok()) {
    table_->FreeMemory(plan.repaired, plan.new_extents);
    if (absl::IsCancelled(s))
      table_->SetRepairStatus(info.region_id(), std::nullopt);
    return s;
  }
  table_->SetRepairStatus(info.region_id(), std::nullopt);
  {
    absl::MutexLock lock(&counters_mu_);
    ++counters_.repaired;
    counters_.bytes_copied += plan.bytes;
  }
  env_->Log(
      "coordinator",
      absl::StrCat("region '", info.name(), "': repaired (layout version ",
                   plan.repaired.layout_version(), ") in ",
                   absl::FormatDuration(env_->Now() - start)));
  // Writes that reached only the old copies while this copied: a later
  // pass checks the new copies once more, once clients have the layout.
  rechecks_.push_back({info, plan.repaired, env_->Now() + kRepairSettle});
  return absl::OkStatus();
}

}  // namespace meshpool::coordinator
