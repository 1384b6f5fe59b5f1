// A client checks the layout of every node in the map before anything is
// sized or addressed by it. The coordinator refuses such registrations too
// (coordinator_test); this is the client's own line, for a map from an
// older or a compromised coordinator.
#include <cstdint>
#include <memory>

#include "absl/strings/match.h"
#include "client/node_connection.h"
#include "gtest/gtest.h"
#include "rdma/tcp.h"
#include "tests/node_info.h"

namespace meshpool {
namespace {

proto::NodeInfo NodeWithPool(uint64_t pool_bytes) {
  proto::NodeInfo info;
  info.set_node_id("n1");
  info.set_incarnation(1);
  info.set_control_address("127.0.0.1:1");
  info.add_transport_addresses("tcp://127.0.0.1:1");
  info.mutable_pool()->set_addr(0x10000);
  info.mutable_pool()->set_rkey(7);
  testing::SetPool(&info, pool_bytes);
  return info;
}

absl::Status Connect(const proto::NodeInfo& info) {
  absl::StatusOr<std::unique_ptr<rdma::Transport>> transport =
      rdma::CreateTcpTransport();
  if (!transport.ok()) return transport.status();
  return client_internal::NodeConnection::Create(
             info, **transport, info.transport_addresses(0), {})
      .status();
}

TEST(NodeLayoutTest, AHostileLayoutIsRefusedBeforeAnythingIsSizedByIt) {
  proto::NodeInfo slabs = NodeWithPool(32 << 20);
  slabs.mutable_layout()->set_slab_count(uint64_t{1}
                                         << 40);  // a table of 16 TiB
  proto::NodeInfo outside = NodeWithPool(32 << 20);
  outside.mutable_pool()->set_length(1 << 20);  // the layout outruns the region
  proto::NodeInfo greedy = NodeWithPool(32 << 20);
  greedy.set_capacity_bytes(uint64_t{1} << 44);  // draws every key to it
  for (const proto::NodeInfo* info : {&slabs, &outside, &greedy}) {
    const absl::Status s = Connect(*info);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "bad pool layout")) << s;
  }
}

TEST(NodeLayoutTest, ARealLayoutPassesTheCheck) {
  // Lanes and the gRPC channel connect on first use, so nothing needs to
  // listen at the node's addresses for this.
  const absl::Status s = Connect(NodeWithPool(32 << 20));
  EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace meshpool
