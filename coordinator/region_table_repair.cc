// RegionTable: region health and the hooks the repairer uses
// (coordinator/region_table.h, coordinator/region_repair.h).
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/common.h"
#include "coordinator/region_table.h"
#include "placement/region_layout.h"

namespace meshpool::coordinator {

proto::RegionHealth HealthOf(const proto::RegionInfo& info,
                             const proto::ClusterMap& map) {
  proto::RegionHealth health;
  absl::StatusOr<placement::RegionLayout> layout =
      placement::RegionLayout::Create(info);
  if (!layout.ok()) return health;  // REGION_HEALTH_UNKNOWN
  std::vector<bool> live(info.extents_size(), false);
  for (int e = 0; e < info.extents_size(); ++e) {
    const proto::RegionExtent& extent = info.extents(e);
    for (const proto::NodeEntry& entry : map.nodes()) {
      if (entry.info().node_id() == extent.node_id()) {
        live[e] = entry.state() == proto::NODE_ALIVE &&
                  entry.info().incarnation() == extent.incarnation();
        break;
      }
    }
  }
  for (uint64_t s = 0; s < layout->stripes(); ++s) {
    uint32_t copies = 0;
    for (uint32_t r = 0; r < layout->replicas(); ++r)
      copies += live[layout->Copy(s, r).extent];
    if (copies == 0) {
      health.set_stripes_lost(health.stripes_lost() + 1);
    } else if (copies < layout->replicas()) {
      health.set_stripes_degraded(health.stripes_degraded() + 1);
    }
  }
  health.set_state(health.stripes_lost() > 0       ? proto::REGION_LOST
                   : health.stripes_degraded() > 0 ? proto::REGION_DEGRADED
                                                   : proto::REGION_HEALTHY);
  return health;
}

void RegionTable::FillHealth(proto::RegionInfo& info,
                             const proto::ClusterMap& map) const {
  proto::RegionHealth health = HealthOf(info, map);
  {
    absl::MutexLock lock(&status_mu_);
    auto it = repair_status_.find(info.region_id());
    if (it != repair_status_.end()) {
      health.set_repair_bytes_total(it->second.repair_bytes_total());
      health.set_repair_bytes_done(it->second.repair_bytes_done());
      health.set_repair_error(it->second.repair_error());
    }
  }
  *info.mutable_health() = std::move(health);
}

void RegionTable::SetRepairStatus(uint64_t region_id,
                                  std::optional<proto::RegionHealth> status) {
  absl::MutexLock lock(&status_mu_);
  if (status.has_value()) {
    repair_status_[region_id] = *std::move(status);
  } else {
    repair_status_.erase(region_id);
  }
}

absl::StatusOr<uint64_t> RegionTable::ReserveAllocationId() {
  absl::MutexLock lock(&mu_);
  MESHPOOL_ASSIGN_OR_RETURN(const uint64_t id, state_->NextRegionId());
  repairing_.insert(id);
  return id;
}

void RegionTable::ReleaseAllocationId(uint64_t id) {
  absl::MutexLock lock(&mu_);
  repairing_.erase(id);
}

absl::Status RegionTable::CommitRepair(const proto::RegionInfo& before,
                                       const proto::RegionInfo& repaired) {
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<proto::RegionInfo> now = state_->FindRegion(before.name());
    if (!now.ok() && !absl::IsNotFound(now.status())) return now.status();
    if (!now.ok() || now->region_id() != before.region_id() ||
        now->layout_version() != before.layout_version()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "region '", before.name(), "' (id ", before.region_id(),
          ") was deleted, renamed or repaired while its repair copied; the "
          "repair's copies are dropped"));
    }
    MESHPOOL_RETURN_IF_ERROR(state_->PutRegion(repaired));
  }
  // Clients holding the region refetch its layout when the map changes.
  return state_->BumpEpoch().status();
}

}  // namespace meshpool::coordinator
