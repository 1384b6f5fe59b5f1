// MapFeed: publication and the per-epoch caches.
//
// A map is published when a caller asks for an epoch newer than the newest
// published one; the snapshot may be newer still (a change landed in
// between), and is published under its own epoch. The updates cut from it
// are cached in its entry, keyed by the epoch they start from, so the
// second and later watchers of the same change only take a reference.
#include "coordinator/map_feed.h"

#include <optional>
#include <utility>

#include "common/common.h"
#include "placement/map_delta.h"

namespace meshpool::coordinator {

MapFeed::MapFeed(std::function<absl::StatusOr<proto::ClusterMap>()> snapshot)
    : snapshot_(std::move(snapshot)) {}

absl::StatusOr<MapFeed::Published*> MapFeed::LatestLocked(uint64_t epoch) {
  if (!published_.empty() && published_.back().map->epoch() >= epoch) {
    return &published_.back();
  }
  MESHPOOL_ASSIGN_OR_RETURN(proto::ClusterMap map, snapshot_());
  ++snapshots_;
  if (!published_.empty()) {
    const uint64_t newest = published_.back().map->epoch();
    if (map.epoch() == newest) return &published_.back();
    // An older epoch than one already published: the history restarted
    // under this feed. Deltas from before it would not apply; start over.
    if (map.epoch() < newest) published_.clear();
  }
  Published p;
  p.map = std::make_shared<const proto::ClusterMap>(std::move(map));
  published_.push_back(std::move(p));
  if (published_.size() > kMapFeedHistory) published_.pop_front();
  return &published_.back();
}

std::shared_ptr<const proto::ClusterMapUpdate> MapFeed::WholeLocked(
    Published& p) {
  if (p.whole == nullptr) {
    auto update = std::make_shared<proto::ClusterMapUpdate>();
    *update->mutable_map() = *p.map;
    p.whole = std::move(update);
  }
  return p.whole;
}

const MapFeed::Published* MapFeed::FindLocked(uint64_t epoch) const {
  for (const Published& p : published_) {
    if (p.map->epoch() == epoch) return &p;
  }
  return nullptr;
}

absl::StatusOr<std::shared_ptr<const proto::ClusterMap>> MapFeed::Latest(
    uint64_t epoch) {
  absl::MutexLock lock(&mu_);
  MESHPOOL_ASSIGN_OR_RETURN(Published * latest, LatestLocked(epoch));
  return latest->map;
}

absl::StatusOr<MapFeedUpdate> MapFeed::UpdateFrom(
    const std::shared_ptr<const proto::ClusterMap>& held, uint64_t epoch) {
  absl::MutexLock lock(&mu_);
  MESHPOOL_ASSIGN_OR_RETURN(Published * latest, LatestLocked(epoch));
  MapFeedUpdate result;
  result.map = latest->map;
  // A delta only from the very map the watcher holds, still in the history:
  // an epoch alone could name another map if the history restarted.
  const Published* base = held == nullptr ? nullptr : FindLocked(held->epoch());
  if (base == nullptr || base->map != held || base == latest) {
    // Not cached, so the cache holds at most one entry per published map.
    result.update = WholeLocked(*latest);
    return result;
  }
  auto cached = latest->from.find(held->epoch());
  if (cached != latest->from.end()) {
    result.update = cached->second;
    return result;
  }
  std::shared_ptr<const proto::ClusterMapUpdate> update;
  std::optional<proto::ClusterMapDelta> delta =
      placement::DiffMaps(*held, *latest->map);
  if (delta.has_value() &&
      delta->ByteSizeLong() < latest->map->ByteSizeLong()) {
    auto message = std::make_shared<proto::ClusterMapUpdate>();
    *message->mutable_delta() = *std::move(delta);
    update = std::move(message);
  } else {
    update = WholeLocked(*latest);
  }
  latest->from.emplace(held->epoch(), update);
  result.update = std::move(update);
  return result;
}

uint64_t MapFeed::snapshots() const {
  absl::MutexLock lock(&mu_);
  return snapshots_;
}

}  // namespace meshpool::coordinator
