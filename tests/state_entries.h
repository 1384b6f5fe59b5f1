// tests/: small map entries and regions for the CoordinatorState tests
// (file, etcd): what each stores and reloads.
#ifndef MESHPOOL_TESTS_STATE_ENTRIES_H_
#define MESHPOOL_TESTS_STATE_ENTRIES_H_

#include <cstdint>
#include <string>

#include "proto/meshpool.pb.h"

namespace meshpool::testing {

// An alive node `id` of `incarnation`, with a heartbeat time (which the
// durable states do not keep).
inline proto::NodeEntry StateNode(const std::string& id, uint64_t incarnation) {
  proto::NodeEntry e;
  e.mutable_info()->set_node_id(id);
  e.mutable_info()->set_incarnation(incarnation);
  e.set_state(proto::NODE_ALIVE);
  e.set_last_heartbeat_unix_ms(123);
  return e;
}

// A region `name` of id `id`, id * 4096 bytes.
inline proto::RegionInfo StateRegion(const std::string& name, uint64_t id) {
  proto::RegionInfo r;
  r.set_name(name);
  r.set_region_id(id);
  r.set_size(id * 4096);
  return r;
}

}  // namespace meshpool::testing

#endif  // MESHPOOL_TESTS_STATE_ENTRIES_H_
