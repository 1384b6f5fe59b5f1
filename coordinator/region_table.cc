// RegionTable: validation, placement, allocation on the nodes, and the
// table's read-decide-write sequences (coordinator/region_table.h).
#include "coordinator/region_table.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/common.h"
#include "coordinator/tenants.h"

namespace meshpool::coordinator {

namespace {

// Runs fn(0) .. fn(n - 1) on up to kMaxParallelNodeCalls threads (this one
// included) and returns when all are done.
void ParallelFor(size_t n, const std::function<void(size_t)>& fn) {
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < n; i = next++) fn(i);
  };
  std::vector<std::thread> helpers;
  for (size_t t = 1; t < std::min(n, kMaxParallelNodeCalls); ++t) helpers.emplace_back(work);
  work();
  for (std::thread& t : helpers) t.join();
}

uint64_t CeilDiv(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

uint64_t SaturatingMul(uint64_t a, uint64_t b) {
  const unsigned __int128 p = static_cast<unsigned __int128>(a) * b;
  return p > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(p);
}

std::string EncodeExtents(const std::vector<uint16_t>& per_stripe,
                          const std::vector<uint16_t>& extent_of) {
  std::string bytes(2 * per_stripe.size(), '\0');
  for (size_t s = 0; s < per_stripe.size(); ++s) {
    const uint16_t e = extent_of[per_stripe[s]];
    bytes[2 * s] = static_cast<char>(e & 0xff);
    bytes[2 * s + 1] = static_cast<char>(e >> 8);
  }
  return bytes;
}

}  // namespace

RegionTable::RegionTable(CoordinatorState* state, RegionNodes* nodes, Env* env,
                         RegionQuotas quotas)
    : state_(state),
      nodes_(nodes),
      env_(EnvOrDefault(env)),
      quotas_(std::move(quotas)) {}

void RegionTable::Log(absl::string_view message) const {
  env_->Log("coordinator", message);
}

absl::StatusOr<proto::RegionInfo> RegionTable::Create(
    const proto::CreateRegionRequest& request, absl::string_view owner) {
  const std::string& name = request.name();
  MESHPOOL_RETURN_IF_ERROR(ValidateStoredRegionName(name));
  if (request.size() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("region '", name, "' has size 0; give it at least one byte"));
  }
  const uint32_t replicas = request.replicas() == 0 ? 1 : request.replicas();
  if (replicas > placement::kMaxReplicas) {
    return absl::InvalidArgumentError(absl::StrCat("region '", name, "' asks for ", replicas,
                                                   " replicas; use 1 to ", placement::kMaxReplicas));
  }
  if (request.stripe_bytes() % placement::kStripeAlign != 0) {
    return absl::InvalidArgumentError(absl::StrCat("stripe_bytes ", request.stripe_bytes(),
                                                   " is not a multiple of ", placement::kStripeAlign,
                                                   "; round it, or pass 0 for the default"));
  }
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<proto::RegionInfo> existing = state_->FindRegion(name);
    if (existing.ok() || creating_.count(name) > 0) {
      return absl::AlreadyExistsError(absl::StrCat("a region named '", name, "' exists",
                                                   existing.ok() ? "" : " (being created)",
                                                   "; pick another name or delete it first"));
    }
    if (!absl::IsNotFound(existing.status())) return existing.status();
    const uint64_t bytes = SaturatingMul(request.size(), replicas);
    MESHPOOL_RETURN_IF_ERROR(CheckQuotaLocked(name, bytes));
    creating_.emplace(name, Creating{0, bytes});
  }
  size_t live = 0;
  absl::StatusOr<proto::RegionInfo> info;
  absl::StatusOr<std::vector<LiveNode>> candidates = FreshLiveNodes(live);
  if (!candidates.ok()) {
    info = candidates.status();
  } else if (live == 0) {
    info = absl::FailedPreconditionError(
        absl::StrCat("cannot create region '", name,
                     "': the cluster has no live memory node; start nodes "
                     "with `meshpool node` and retry"));
  } else if (candidates->empty()) {
    info = absl::UnavailableError(
        absl::StrCat("cannot create region '", name, "': none of the ", live,
                     " live memory node(s) answered a stats request; retry, or check the nodes"));
  } else {
    info = Place(request, request.stripe_bytes(), replicas,
                 *std::move(candidates), owner);
  }
  absl::Status recorded = info.status();
  {
    absl::MutexLock lock(&mu_);
    creating_.erase(name);
    if (recorded.ok()) recorded = state_->PutRegion(*info);
  }
  if (info.ok() && !recorded.ok()) FreeMemory(*info);
  if (!recorded.ok()) return recorded;
  return info;
}

absl::StatusOr<std::vector<RegionTable::LiveNode>> RegionTable::FreshLiveNodes(
    size_t& live) {
  MESHPOOL_ASSIGN_OR_RETURN(proto::ClusterMap map, state_->Snapshot());
  std::vector<const proto::NodeInfo*> alive;
  for (const proto::NodeEntry& entry : map.nodes()) {
    if (entry.state() == proto::NODE_ALIVE) alive.push_back(&entry.info());
  }
  live = alive.size();
  std::vector<absl::StatusOr<proto::NodeStats>> stats(alive.size());
  ParallelFor(alive.size(), [&](size_t i) { stats[i] = nodes_->GetStats(*alive[i]); });
  std::vector<LiveNode> candidates;
  for (size_t i = 0; i < alive.size(); ++i) {
    if (!stats[i].ok() || alive[i]->layout().slab_bytes() == 0) continue;
    candidates.push_back(LiveNode{*alive[i], *std::move(stats[i])});
  }
  return candidates;
}

absl::StatusOr<proto::RegionInfo> RegionTable::Place(
    const proto::CreateRegionRequest& request, uint64_t stripe_bytes,
    uint32_t replicas, std::vector<LiveNode> candidates,
    absl::string_view owner) {
  const std::string& name = request.name();
  const LiveNode* smallest = &candidates[0];
  for (const LiveNode& c : candidates) {
    if (c.info.layout().slab_bytes() < smallest->info.layout().slab_bytes()) smallest = &c;
  }
  const uint64_t min_slab = smallest->info.layout().slab_bytes();
  const uint64_t max_stripe = min_slab / placement::kStripeAlign * placement::kStripeAlign;
  if (max_stripe == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "node ", smallest->info.node_id(), " has slabs of ", min_slab,
        " bytes, below the smallest stripe (", placement::kStripeAlign, "); restart it with larger slabs"));
  }
  if (stripe_bytes == 0) {
    stripe_bytes = std::min(placement::kDefaultStripeBytes, max_stripe);
  } else if (stripe_bytes > min_slab) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stripe_bytes ", stripe_bytes, " exceeds the slab size of node ", smallest->info.node_id(),
        "; use at most ", max_stripe, " (", FormatSize(max_stripe), "), or 0 for the default"));
  }
  const uint64_t stripes = CeilDiv(request.size(), stripe_bytes);
  if (stripes > placement::kMaxRegionStripes) {
    const uint64_t needed =
        CeilDiv(CeilDiv(request.size(), placement::kMaxRegionStripes), placement::kStripeAlign) * placement::kStripeAlign;
    return absl::InvalidArgumentError(
        absl::StrCat("region '", name, "' of ", FormatSize(request.size()), " would have ", stripes,
                     " stripes of ", FormatSize(stripe_bytes), ", more than ", placement::kMaxRegionStripes,
                     needed <= max_stripe ? absl::StrCat("; use stripe_bytes of at least ", needed)
                                          : std::string("; split it into several regions")));
  }
  std::vector<placement::PlacementCandidate> placement_candidates;
  uint64_t free_bytes = 0;
  for (const LiveNode& c : candidates) {
    const uint64_t slab_bytes = c.info.layout().slab_bytes();
    placement_candidates.push_back(placement::PlacementCandidate{
        c.info.node_id(), SaturatingMul(c.stats.slabs_free(), slab_bytes / stripe_bytes)});
    free_bytes += SaturatingMul(c.stats.slabs_free(), slab_bytes);
  }
  absl::StatusOr<std::vector<std::vector<uint16_t>>> placed =
      placement::PlaceStripes(placement_candidates, stripes, replicas);
  if (!placed.ok()) {
    return absl::Status(
        placed.status().code(),
        absl::StrCat("cannot create region '", name, "' (", FormatSize(request.size()), ", ",
                     replicas, " replica(s), stripes of ", FormatSize(stripe_bytes), ") on ",
                     candidates.size(), " live node(s) with ", FormatSize(free_bytes),
                     " free in whole slabs: ", placed.status().message()));
  }
  // Extents: the candidates that got copies, in candidate order.
  std::vector<uint64_t> copies_of(candidates.size(), 0);
  for (const std::vector<uint16_t>& replica : *placed) {
    for (uint16_t c : replica) ++copies_of[c];
  }
  proto::RegionInfo info;
  info.set_name(name);
  info.set_owner(std::string(owner));
  info.set_size(request.size());
  info.set_stripe_bytes(stripe_bytes);
  info.set_replicas(replicas);
  std::vector<uint16_t> extent_of(candidates.size(), 0);
  std::vector<proto::NodeInfo> nodes;
  std::vector<uint64_t> copies;
  for (size_t c = 0; c < candidates.size(); ++c) {
    if (copies_of[c] == 0) continue;
    extent_of[c] = static_cast<uint16_t>(nodes.size());
    proto::RegionExtent* extent = info.add_extents();
    extent->set_node_id(candidates[c].info.node_id());
    extent->set_incarnation(candidates[c].info.incarnation());
    extent->set_slab_bytes(candidates[c].info.layout().slab_bytes());
    nodes.push_back(candidates[c].info);
    copies.push_back(copies_of[c]);
  }
  for (const std::vector<uint16_t>& replica : *placed) {
    info.add_stripe_extents(EncodeExtents(replica, extent_of));
  }
  MESHPOOL_ASSIGN_OR_RETURN(const uint64_t region_id, state_->NextRegionId());
  info.set_region_id(region_id);
  {
    absl::MutexLock lock(&mu_);
    creating_[name].region_id = region_id;  // Reconcile leaves it alone
  }
  std::vector<int> all(nodes.size());
  for (size_t e = 0; e < all.size(); ++e) all[e] = static_cast<int>(e);
  MESHPOOL_RETURN_IF_ERROR(Allocate(info, all, nodes, copies));
  // The client decodes it the same way; a region it could not decode must
  // never be recorded.
  absl::StatusOr<placement::RegionLayout> layout = placement::RegionLayout::Create(info);
  if (!layout.ok()) {
    FreeMemory(info);
    return absl::InternalError(absl::StrCat("region '", name, "' came out inconsistent (",
                                            layout.status().message(),
                                            "); this is a bug, please report it"));
  }
  info.set_created_unix_ms(absl::ToUnixMillis(env_->Now()));
  return info;
}

absl::Status RegionTable::Allocate(proto::RegionInfo& info,
                                   const std::vector<int>& extents,
                                   const std::vector<proto::NodeInfo>& nodes,
                                   const std::vector<uint64_t>& copies) {
  std::vector<absl::StatusOr<proto::AllocateRegionReply>> replies(nodes.size());
  ParallelFor(nodes.size(), [&](size_t i) {
    proto::AllocateRegionRequest request;
    request.set_region_id(AllocationId(info, info.extents(extents[i])));
    request.set_incarnation(nodes[i].incarnation());
    request.set_stripe_bytes(info.stripe_bytes());
    request.set_stripes(copies[i]);
    request.set_tenant(std::string(TenantOfRegion(info.name())));
    replies[i] = nodes_->Allocate(nodes[i], request);
  });
  absl::Status first;
  for (size_t i = 0; i < nodes.size() && first.ok(); ++i) {
    const std::string where =
        absl::StrCat("allocating region '", info.name(), "' on node ",
                     nodes[i].node_id(), " failed");
    if (!replies[i].ok()) {
      const absl::Status& s = replies[i].status();
      // FailedPrecondition from a node: it restarted since the map was read.
      const absl::StatusCode code =
          absl::IsFailedPrecondition(s) ? absl::StatusCode::kUnavailable : s.code();
      first = absl::Status(code, absl::StrCat(where, " (", s.message(),
                                              "); nothing was left allocated: free memory or "
                                              "add nodes if it is full, then retry"));
      continue;
    }
    proto::RegionExtent* extent = info.mutable_extents(extents[i]);
    const uint64_t per_slab = extent->slab_bytes() / info.stripe_bytes();
    if (replies[i]->slab_bytes() != extent->slab_bytes() ||
        static_cast<uint64_t>(replies[i]->slab_offsets_size()) !=
            CeilDiv(copies[i], per_slab)) {
      first = absl::InternalError(absl::StrCat(
          where, ": it answered ", replies[i]->slab_offsets_size(),
          " slabs of ", replies[i]->slab_bytes(), " bytes for ", copies[i],
          " stripes of ", info.stripe_bytes(), " with ", extent->slab_bytes(),
          "-byte slabs; nothing was left allocated"));
      continue;
    }
    *extent->mutable_slab_offsets() = replies[i]->slab_offsets();
  }
  if (first.ok()) return absl::OkStatus();
  // Free on every node asked, not only those that answered: a reply lost to
  // a deadline may have allocated all the same. Freeing is idempotent.
  // Except where the node refused with FailedPrecondition: it allocated
  // nothing for this call (another incarnation, or it already holds slabs
  // under this id — e.g. a region of a coordinator that restarted without
  // state and counts ids from 1 again); freeing would free that region.
  ParallelFor(nodes.size(), [&](size_t i) {
    if (!replies[i].ok() && absl::IsFailedPrecondition(replies[i].status()))
      return;
    proto::FreeRegionRequest request;
    request.set_region_id(AllocationId(info, info.extents(extents[i])));
    request.set_incarnation(nodes[i].incarnation());
    absl::Status freed = nodes_->Free(nodes[i], request);
    if (!freed.ok()) {
      Log(absl::StrCat("region '", info.name(), "' (id ", info.region_id(),
                       "): freeing a failed allocation's memory on node ",
                       nodes[i].node_id(), " failed: ", freed.ToString()));
    }
  });
  return first;
}

void RegionTable::FreeMemory(const proto::RegionInfo& info,
                             const std::vector<int>& extents) {
  absl::StatusOr<proto::ClusterMap> map = state_->Snapshot();
  if (!map.ok()) {
    Log(absl::StrCat(
        "region '", info.name(), "' (id ", info.region_id(),
        "): cannot read the cluster map to free its memory: ", map.status().ToString()));
    return;
  }
  std::vector<int> chosen = extents;
  if (chosen.empty()) {
    for (int e = 0; e < info.extents_size(); ++e) chosen.push_back(e);
  }
  // (node, allocation id) of each chosen extent whose process is alive.
  std::vector<std::pair<const proto::NodeInfo*, uint64_t>> holders;
  for (int e : chosen) {
    const proto::RegionExtent& extent = info.extents(e);
    for (const proto::NodeEntry& entry : map->nodes()) {
      if (entry.info().node_id() == extent.node_id() && entry.state() == proto::NODE_ALIVE &&
          entry.info().incarnation() == extent.incarnation()) {
        holders.emplace_back(&entry.info(), AllocationId(info, extent));
      }
    }
  }
  ParallelFor(holders.size(), [&](size_t i) {
    const proto::NodeInfo& node = *holders[i].first;
    proto::FreeRegionRequest request;
    request.set_region_id(holders[i].second);
    request.set_incarnation(node.incarnation());
    absl::Status freed = nodes_->Free(node, request);
    if (freed.ok()) {
      absl::MutexLock lock(&mu_);
      freed_[holders[i].second] = env_->Now();
    } else {
      Log(absl::StrCat("region '", info.name(), "' (id ", info.region_id(),
                       ", allocation ", holders[i].second,
                       "): freeing its memory on node ", node.node_id(),
                       " failed, so it stays pinned until that node restarts: ",
                       freed.ToString()));
    }
  });
}

absl::StatusOr<proto::RegionInfo> RegionTable::Get(absl::string_view name) const {
  MESHPOOL_ASSIGN_OR_RETURN(proto::RegionInfo info, state_->FindRegion(name));
  MESHPOOL_ASSIGN_OR_RETURN(proto::ClusterMap map, state_->Snapshot());
  FillHealth(info, map);
  return info;
}

absl::Status RegionTable::CheckOwnerLocked(absl::string_view name,
                                           absl::string_view only_owner) const {
  if (only_owner.empty()) return absl::OkStatus();
  absl::StatusOr<proto::RegionInfo> info = state_->FindRegion(name);
  if (!info.ok())
    return absl::IsNotFound(info.status()) ? absl::OkStatus() : info.status();
  if (info->owner() == only_owner) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      only_owner, " may not change region '", name, "': it belongs to ",
      info->owner().empty() ? "no one (created without TLS)" : info->owner(),
      "; only its owner or an admin certificate may delete or rename it"));
}

absl::Status RegionTable::CheckQuotaLocked(absl::string_view name,
                                           uint64_t bytes) const {
  const absl::string_view tenant = TenantOfRegion(name);
  const RegionQuota& quota = quotas_.For(tenant);
  if (quota.regions == kUnlimited && quota.bytes == kUnlimited) {
    return absl::OkStatus();
  }
  uint64_t regions = 0;
  uint64_t used = 0;
  auto charge = [&](absl::string_view region, uint64_t region_bytes) {
    if (TenantOfRegion(region) != tenant) return;
    ++regions;
    used = region_bytes > kUnlimited - used ? kUnlimited : used + region_bytes;
  };
  MESHPOOL_ASSIGN_OR_RETURN(
      std::vector<proto::RegionInfo> recorded,
      state_->ListRegions(tenant.empty() ? "" : ScopedRegionName(tenant, "")));
  for (const proto::RegionInfo& r : recorded) {
    charge(r.name(), SaturatingMul(r.size(), std::max(r.replicas(), 1u)));
  }
  for (const auto& [creating, c] : creating_) charge(creating, c.bytes);
  const std::string who = tenant.empty()
                              ? std::string("callers without a tenant hold")
                              : absl::StrCat("tenant '", tenant, "' holds");
  if (quota.regions != kUnlimited && regions + 1 > quota.regions) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot create region '", UnscopedRegionName(name), "': ", who, " ",
        regions, " region(s), the quota's limit of ", quota.regions,
        "; delete one, or have the operator raise --region-quota"));
  }
  if (quota.bytes != kUnlimited &&
      (bytes > quota.bytes - std::min(used, quota.bytes))) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot create region '", UnscopedRegionName(name), "' (",
        FormatSize(bytes), " with its replicas): ", who, " ", FormatSize(used),
        " of the quota's ", FormatSize(quota.bytes),
        "; delete regions, or have the operator raise --region-quota"));
  }
  return absl::OkStatus();
}

absl::Status RegionTable::Delete(absl::string_view name,
                                 absl::string_view only_owner) {
  absl::StatusOr<proto::RegionInfo> removed;
  {
    absl::MutexLock lock(&mu_);
    MESHPOOL_RETURN_IF_ERROR(CheckOwnerLocked(name, only_owner));
    removed = state_->RemoveRegion(name);
  }
  if (!removed.ok()) return removed.status();
  FreeMemory(*removed);
  return absl::OkStatus();
}

absl::Status RegionTable::Rename(absl::string_view from, absl::string_view to,
                                 bool replace, absl::string_view only_owner) {
  MESHPOOL_RETURN_IF_ERROR(ValidateStoredRegionName(to));
  absl::StatusOr<std::optional<proto::RegionInfo>> replaced;
  {
    absl::MutexLock lock(&mu_);
    if (creating_.count(to) > 0) {
      return absl::AlreadyExistsError(absl::StrCat(
          "a region named '", to, "' is being created; retry the rename once it exists"));
    }
    MESHPOOL_RETURN_IF_ERROR(CheckOwnerLocked(from, only_owner));
    if (replace) MESHPOOL_RETURN_IF_ERROR(CheckOwnerLocked(to, only_owner));
    replaced = state_->RenameRegion(from, to, replace);
  }
  if (!replaced.ok()) return replaced.status();
  if (replaced->has_value()) FreeMemory(**replaced);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<proto::RegionInfo>> RegionTable::List(absl::string_view prefix) const {
  MESHPOOL_ASSIGN_OR_RETURN(std::vector<proto::RegionInfo> regions, state_->ListRegions(prefix));
  MESHPOOL_ASSIGN_OR_RETURN(proto::ClusterMap map, state_->Snapshot());
  for (proto::RegionInfo& info : regions) {
    FillHealth(info, map);
    info.clear_stripe_extents();
    for (proto::RegionExtent& extent : *info.mutable_extents()) extent.clear_slab_offsets();
  }
  return regions;
}

size_t RegionTable::Reconcile() {
  absl::StatusOr<proto::ClusterMap> map = state_->Snapshot();
  if (!map.ok()) return 0;
  std::set<uint64_t> keep;
  {
    // The table and the creates in progress at one instant: a region
    // recorded later was in `creating_` now, so it is kept either way.
    absl::MutexLock lock(&mu_);
    absl::StatusOr<std::vector<proto::RegionInfo>> regions = state_->ListRegions("");
    if (!regions.ok()) return 0;
    for (const proto::RegionInfo& r : *regions) {
      for (const proto::RegionExtent& extent : r.extents())
        keep.insert(AllocationId(r, extent));
    }
    for (const auto& [name, creating] : creating_)
      keep.insert(creating.region_id);
    keep.insert(repairing_.begin(), repairing_.end());
    const absl::Time now = env_->Now();
    for (auto it = freed_.begin(); it != freed_.end();) {
      if (now - it->second > kFreedReportGrace) {
        it = freed_.erase(it);
      } else {
        keep.insert(it->first);  // freed already; the report is stale
        ++it;
      }
    }
  }
  std::vector<std::pair<const proto::NodeInfo*, uint64_t>> leaked;
  for (const proto::NodeEntry& entry : map->nodes()) {
    if (entry.state() != proto::NODE_ALIVE) continue;
    for (uint64_t id : entry.stats().region_ids()) {
      if (keep.count(id) == 0) leaked.emplace_back(&entry.info(), id);
    }
  }
  ParallelFor(leaked.size(), [&](size_t i) {
    const proto::NodeInfo& node = *leaked[i].first;
    proto::FreeRegionRequest request;
    request.set_region_id(leaked[i].second);
    request.set_incarnation(node.incarnation());
    absl::Status freed = nodes_->Free(node, request);
    Log(absl::StrCat("region id ", leaked[i].second, " on node ", node.node_id(),
                     " is in no region of the table (left by a create the coordinator "
                     "did not finish): ",
                     freed.ok() ? "freed" : absl::StrCat("freeing failed: ", freed.ToString())));
  });
  return leaked.size();
}

}  // namespace meshpool::coordinator
