// meshpool/coordinator: MapFeed, the maps and deltas the coordinator streams
// to its watchers (WatchClusterMap, WatchClusterMapUpdates), built once per
// epoch and shared by every watcher, however many there are.
//
// Without it each watcher took its own snapshot of the map and diffed it
// against the one it held: O(nodes) per watcher per change, O(nodes^2) per
// change when every node watches. With it, a change costs one snapshot and
// one diff per distinct epoch that watchers hold (usually one: they were all
// sent the previous epoch), and each watcher then only writes a shared
// message.
//
// Thread-safe: one mutex serialises publication, so watchers that wake for
// the same epoch wait for the first one's snapshot instead of taking their
// own.
#ifndef MESHPOOL_COORDINATOR_MAP_FEED_H_
#define MESHPOOL_COORDINATOR_MAP_FEED_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/meshpool.pb.h"

namespace meshpool::coordinator {

// How many published maps the feed keeps to cut deltas from: a watcher that
// holds an older epoch than all of them is sent the whole map.
inline constexpr size_t kMapFeedHistory = 16;
static_assert(kMapFeedHistory >= 2, "a delta needs the map before the newest");

// One message for a watcher, and the map it brings the watcher to (what it
// holds next). Both are shared with every other watcher sent the same:
// never modify them.
struct MapFeedUpdate {
  std::shared_ptr<const proto::ClusterMap> map;
  std::shared_ptr<const proto::ClusterMapUpdate> update;
};

class MapFeed {
 public:
  // `snapshot` returns a copy of the current map (Membership::Map); it is
  // called with the feed's mutex held and must not call back into the feed.
  explicit MapFeed(std::function<absl::StatusOr<proto::ClusterMap>()> snapshot);

  MapFeed(const MapFeed&) = delete;
  MapFeed& operator=(const MapFeed&) = delete;

  // The newest published map, at `epoch` or newer: `epoch` is the caller's
  // view of the current epoch (Membership::AwaitEpochAbove), and a snapshot
  // is taken only when no map that new has been published yet. Errors are
  // the snapshot's (Unavailable when the state cannot be read).
  absl::StatusOr<std::shared_ptr<const proto::ClusterMap>> Latest(
      uint64_t epoch);

  // The one message that takes a watcher holding `held` (a map this feed
  // returned before; null: none, as at a stream's start) to Latest(epoch):
  // a delta (placement::DiffMaps) when `held` is one of the last
  // kMapFeedHistory published maps and the delta is the smaller message,
  // the whole map otherwise. Errors as Latest.
  absl::StatusOr<MapFeedUpdate> UpdateFrom(
      const std::shared_ptr<const proto::ClusterMap>& held, uint64_t epoch);

  // How many snapshots the feed has taken (for tests and benchmarks).
  uint64_t snapshots() const;

 private:
  struct Published {
    std::shared_ptr<const proto::ClusterMap> map;
    // Built on first demand: the whole map as an update, and the update
    // from each earlier published map (by its epoch) a watcher held.
    std::shared_ptr<const proto::ClusterMapUpdate> whole;
    absl::flat_hash_map<uint64_t,
                        std::shared_ptr<const proto::ClusterMapUpdate>>
        from;
  };

  absl::StatusOr<Published*> LatestLocked(uint64_t epoch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::shared_ptr<const proto::ClusterMapUpdate> WholeLocked(Published& p)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const Published* FindLocked(uint64_t epoch) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::function<absl::StatusOr<proto::ClusterMap>()> snapshot_;
  mutable absl::Mutex mu_;
  // Oldest first, at most kMapFeedHistory, epochs increasing.
  std::deque<Published> published_ ABSL_GUARDED_BY(mu_);
  uint64_t snapshots_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace meshpool::coordinator

#endif  // MESHPOOL_COORDINATOR_MAP_FEED_H_
