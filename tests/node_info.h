// tests/: the memory a fake node registers, laid out as a real node of that
// size would lay it out (the coordinator and clients check layouts), and
// bare map entries for placement tests.
#ifndef MESHPOOL_TESTS_NODE_INFO_H_
#define MESHPOOL_TESTS_NODE_INFO_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "format/layout.h"
#include "gtest/gtest.h"
#include "proto/meshpool.pb.h"

namespace meshpool::testing {

// Gives `info` a pool of `pool_bytes` (its capacity, its region's length)
// with format::ComputeLayout's layout for it (slab_bytes 0: the default).
inline void SetPool(proto::NodeInfo* info, uint64_t pool_bytes,
                    uint64_t slab_bytes = 0) {
  absl::StatusOr<format::PoolLayout> computed =
      format::ComputeLayout(pool_bytes, slab_bytes);
  ASSERT_TRUE(computed.ok()) << computed.status();
  info->set_capacity_bytes(pool_bytes);
  info->mutable_pool()->set_length(pool_bytes);
  proto::PoolLayout* l = info->mutable_layout();
  l->set_pool_bytes(computed->pool_bytes);
  l->set_index_offset(computed->index_offset);
  l->set_bucket_count(computed->bucket_count);
  l->set_slab_area_offset(computed->slab_area_offset);
  l->set_slab_bytes(computed->slab_bytes);
  l->set_slab_count(computed->slab_count);
  l->set_slab_meta_offset(computed->slab_meta_offset);
  l->set_pin_area_offset(computed->pin_area_offset);
  l->set_pin_sessions(computed->pin_sessions);
  l->set_pins_per_session(computed->pins_per_session);
}

// Appends a node entry with just an id, a capacity and a state (what
// placement weighs) to `map`.
inline void AddNode(proto::ClusterMap& map, const std::string& id,
                    uint64_t capacity,
                    proto::NodeState state = proto::NODE_ALIVE) {
  proto::NodeEntry* entry = map.add_nodes();
  entry->mutable_info()->set_node_id(id);
  entry->mutable_info()->set_capacity_bytes(capacity);
  entry->set_state(state);
}

}  // namespace meshpool::testing

#endif  // MESHPOOL_TESTS_NODE_INFO_H_
