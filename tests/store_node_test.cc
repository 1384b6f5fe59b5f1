// store/: a Node end to end, with an in-process coordinator and the TCP
// transport on 127.0.0.1.
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/common.h"
#include "coordinator/coordinator.h"
#include "format/layout.h"
#include "gtest/gtest.h"
#include "placement/coordinator_client.h"
#include "placement/region_layout.h"
#include "proto/proto.h"
#include "rdma/rdma.h"
#include "rdma/shm.h"
#include "rdma/sim.h"
#include "rdma/tcp.h"
#include "rdma/tcp_wire.h"
#include "store/slab_manager.h"
#include "store/store.h"
#include "tests/fake_env.h"

namespace meshpool::store {
namespace {

constexpr uint64_t kCapacity = 64ull << 20;
// Bounds every wait on a background thread's progress; only a failure waits
// this long.
constexpr absl::Duration kPatience = absl::Seconds(20);

// Polls `done` until it holds or kPatience passes.
template <typename F>
bool Eventually(F done) {
  absl::Time deadline = absl::Now() + kPatience;
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

std::unique_ptr<coordinator::Coordinator> StartCoordinator(
    std::string listen = "127.0.0.1:0") {
  coordinator::CoordinatorOptions options;
  options.listen = std::move(listen);
  options.heartbeat_interval = absl::Milliseconds(20);
  options.dead_after = absl::Seconds(30);  // no node dies in these tests
  absl::StatusOr<std::unique_ptr<coordinator::Coordinator>> c =
      coordinator::Coordinator::Start(std::move(options));
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

NodeOptions BaseOptions(const std::string& coordinator) {
  NodeOptions o;
  o.coordinator = coordinator;
  o.capacity_bytes = kCapacity;
  o.slab_bytes = 4 << 20;
  o.huge_pages = false;
  o.coordinator_timeout = absl::Seconds(1);
  return o;
}

absl::StatusOr<std::unique_ptr<Node>> StartNode(NodeOptions options) {
  MESHPOOL_ASSIGN_OR_RETURN(std::unique_ptr<rdma::Transport> t,
                            rdma::CreateTcpTransport());
  return Node::Start(std::move(options), std::move(t));
}

std::unique_ptr<proto::Node::Stub> NodeStub(const Node& node) {
  return proto::Node::NewStub(grpc::CreateChannel(
      node.info().control_address(), grpc::InsecureChannelCredentials()));
}

absl::StatusOr<proto::GrantSlabReply> Grant(proto::Node::Stub& stub,
                                            uint64_t incarnation) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + kPatience));
  proto::GrantSlabRequest request;
  request.set_client_id("test-client");
  request.set_incarnation(incarnation);
  proto::GrantSlabReply reply;
  MESHPOOL_RETURN_IF_ERROR(
      FromGrpc(stub.GrantSlab(&ctx, request, &reply), "GrantSlab"));
  return reply;
}

// A copy of the entry for `id`, if the map has one.
std::optional<proto::NodeEntry> FindEntry(const proto::ClusterMap& map,
                                          const std::string& id) {
  for (const proto::NodeEntry& e : map.nodes()) {
    if (e.info().node_id() == id) return e;
  }
  return std::nullopt;
}

class NodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    coordinator_ = StartCoordinator();
    ASSERT_NE(coordinator_, nullptr);
  }
  std::unique_ptr<coordinator::Coordinator> coordinator_;
};

TEST_F(NodeTest, RegistersAliveWithLayoutAndRegion) {
  absl::StatusOr<std::unique_ptr<Node>> node =
      StartNode(BaseOptions(coordinator_->address()));
  ASSERT_TRUE(node.ok()) << node.status();
  const proto::NodeInfo& info = (*node)->info();
  EXPECT_FALSE(info.node_id().empty());
  EXPECT_NE(info.incarnation(), 0u);
  proto::ClusterMap map = coordinator_->Map();
  std::optional<proto::NodeEntry> entry = FindEntry(map, info.node_id());
  ASSERT_TRUE(entry.has_value());
  EXPECT_EQ(entry->state(), proto::NODE_ALIVE);
  EXPECT_EQ(entry->info().incarnation(), info.incarnation());
  EXPECT_EQ(entry->info().capacity_bytes(), kCapacity);
  EXPECT_EQ(entry->info().layout().pool_bytes(), kCapacity);
  EXPECT_EQ(entry->info().layout().slab_bytes(), 4u << 20);
  EXPECT_EQ(entry->info().layout().index_offset(), format::kSuperblockBytes);
  EXPECT_GT(entry->info().layout().slab_count(), 0u);
  EXPECT_EQ(entry->info().pool().length(), kCapacity);
  // The pool's address and key stay with the node (DescribePool).
  EXPECT_EQ(entry->info().pool().addr(), 0u);
  EXPECT_EQ(entry->info().pool().rkey(), 0u);
  EXPECT_NE(info.pool().addr(), 0u);
  // The network address first; then same-host clients' shared memory.
  ASSERT_EQ(entry->info().transport_addresses_size(), 2);
  EXPECT_EQ(entry->info().transport_addresses(0).rfind("tcp://127.0.0.1:", 0),
            0u);
  EXPECT_TRUE(rdma::IsLocalShmAddress(entry->info().transport_addresses(1)))
      << entry->info().transport_addresses(1);
  EXPECT_EQ(entry->info().max_read_lease_ms(), 500u);
  EXPECT_FALSE(entry->info().hostname().empty());
}

TEST_F(NodeTest, ClientReadsSuperblockOneSidedly) {
  absl::StatusOr<std::unique_ptr<Node>> node =
      StartNode(BaseOptions(coordinator_->address()));
  ASSERT_TRUE(node.ok()) << node.status();
  const proto::NodeInfo& info = (*node)->info();
  auto client = rdma::CreateTcpTransport();
  ASSERT_TRUE(client.ok()) << client.status();
  auto endpoint = (*client)->Connect(info.transport_addresses(0), nullptr);
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  // Superblock and the first index bucket in one READ.
  std::vector<char> buf(format::kSuperblockBytes + format::kBucketBytes, 1);
  rdma::WorkRequest read;
  read.opcode = rdma::Opcode::kRead;
  read.local = buf.data();
  read.length = buf.size();
  read.remote_addr = info.pool().addr();
  read.rkey = info.pool().rkey();
  rdma::Completion done;
  ASSERT_TRUE(
      rdma::PostAndWait(**endpoint, {&read, 1}, {&done, 1}, kPatience).ok());
  format::Superblock sb;
  std::memcpy(&sb, buf.data(), sizeof(sb));
  EXPECT_EQ(sb.magic, format::kSuperblockMagic);
  EXPECT_EQ(sb.version, format::kFormatVersion);
  EXPECT_EQ(sb.incarnation, info.incarnation());
  EXPECT_EQ(sb.pool_bytes, kCapacity);
  EXPECT_EQ(sb.slab_count, info.layout().slab_count());
  for (size_t i = format::kSuperblockBytes; i < buf.size(); ++i) {
    ASSERT_EQ(buf[i], 0) << "index byte " << i - format::kSuperblockBytes;
  }
}

TEST_F(NodeTest, GrantSlabOverGrpcAndStatsCountIt) {
  absl::StatusOr<std::unique_ptr<Node>> node =
      StartNode(BaseOptions(coordinator_->address()));
  ASSERT_TRUE(node.ok()) << node.status();
  const proto::NodeInfo& info = (*node)->info();
  auto stub = NodeStub(**node);
  absl::StatusOr<proto::GrantSlabReply> a = Grant(*stub, info.incarnation());
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<proto::GrantSlabReply> b = Grant(*stub, info.incarnation());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NE(a->slab(), b->slab());
  EXPECT_EQ(a->length(), 4u << 20);
  EXPECT_EQ(a->offset(), info.layout().slab_area_offset() +
                             a->slab() * info.layout().slab_bytes());
  EXPECT_EQ(a->lease_ms(), 10000u);
  proto::NodeStats stats = (*node)->Stats();
  EXPECT_EQ(stats.slabs_granted(), 2u);
  EXPECT_EQ(stats.used_bytes(), 2 * (4u << 20));
  EXPECT_EQ(stats.slabs_free(), stats.slabs_total() - 2);
  EXPECT_EQ(stats.capacity_bytes(), kCapacity);

  grpc::ClientContext ctx;
  proto::NodeStats remote;
  ASSERT_TRUE(stub->GetStats(&ctx, proto::GetStatsRequest(), &remote).ok());
  EXPECT_EQ(remote.slabs_granted(), 2u);
}

TEST_F(NodeTest, GrantSlabNamingAnotherIncarnationIsFailedPrecondition) {
  absl::StatusOr<std::unique_ptr<Node>> node =
      StartNode(BaseOptions(coordinator_->address()));
  ASSERT_TRUE(node.ok()) << node.status();
  auto stub = NodeStub(**node);
  absl::StatusOr<proto::GrantSlabReply> r =
      Grant(*stub, (*node)->info().incarnation() + 1);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("refresh the cluster map"),
            std::string::npos);
  EXPECT_EQ((*node)->Stats().slabs_granted(), 0u);
}

TEST_F(NodeTest, ReleasedSlabIsReclaimedInTheBackgroundAfterGrace) {
  testing::FakeEnv env;
  NodeOptions options = BaseOptions(coordinator_->address());
  options.env = &env;
  options.reclaim_interval = absl::Milliseconds(5);
  absl::StatusOr<std::unique_ptr<Node>> node = StartNode(options);
  ASSERT_TRUE(node.ok()) << node.status();
  auto stub = NodeStub(**node);
  absl::StatusOr<proto::GrantSlabReply> g =
      Grant(*stub, (*node)->info().incarnation());
  ASSERT_TRUE(g.ok()) << g.status();
  grpc::ClientContext ctx;
  proto::ReleaseSlabRequest release;
  release.set_client_id("test-client");
  release.set_slab(g->slab());
  release.set_token(g->token());
  proto::ReleaseSlabReply released;
  ASSERT_TRUE(stub->ReleaseSlab(&ctx, release, &released).ok());
  EXPECT_EQ((*node)->Stats().slabs_sealed(), 1u);
  // Time stands still: however many passes run, the slab stays sealed until
  // the clock moves past the grace. Move it in steps until a pass frees it.
  const absl::Duration grace = options.max_read_lease + format::kReclaimMargin;
  ASSERT_TRUE(Eventually([&] {
    if ((*node)->Stats().slabs_reclaimed() == 1) return true;
    env.Advance(grace / 4);
    return false;
  }));
  proto::NodeStats stats = (*node)->Stats();
  EXPECT_EQ(stats.slabs_sealed(), 0u);
  EXPECT_EQ(stats.slabs_free(), stats.slabs_total());
}

// One CAS on the node's pool through `transport`; returns the old word.
absl::StatusOr<uint64_t> CompareSwap(rdma::Transport& transport,
                                     const proto::NodeInfo& info,
                                     uint64_t offset, uint64_t expected,
                                     uint64_t desired) {
  MESHPOOL_ASSIGN_OR_RETURN(
      std::unique_ptr<rdma::Endpoint> endpoint,
      transport.Connect(info.transport_addresses(0), nullptr));
  uint64_t old = 0;
  rdma::WorkRequest cas;
  cas.opcode = rdma::Opcode::kCompareSwap;
  cas.local = &old;
  cas.length = rdma::kAtomicBytes;
  cas.remote_addr = info.pool().addr() + offset;
  cas.rkey = info.pool().rkey();
  cas.compare_add = expected;
  cas.swap = desired;
  rdma::Completion done;
  MESHPOOL_RETURN_IF_ERROR(
      rdma::PostAndWait(*endpoint, {&cas, 1}, {&done, 1}, kPatience));
  return old;
}

TEST_F(NodeTest, SlabStaysSealedWhileASlotPointsIntoItAndIsFreedAfterDelete) {
  testing::FakeEnv env;
  NodeOptions options = BaseOptions(coordinator_->address());
  options.env = &env;
  options.reclaim_interval = absl::Milliseconds(5);
  absl::StatusOr<std::unique_ptr<Node>> node = StartNode(options);
  ASSERT_TRUE(node.ok()) << node.status();
  const proto::NodeInfo& info = (*node)->info();
  auto stub = NodeStub(**node);
  absl::StatusOr<proto::GrantSlabReply> g = Grant(*stub, info.incarnation());
  ASSERT_TRUE(g.ok()) << g.status();
  // Publish an object in the slab (its bytes do not matter to the node).
  auto client = rdma::CreateTcpTransport();
  ASSERT_TRUE(client.ok()) << client.status();
  const uint64_t slot_offset =
      info.layout().index_offset() + 3 * format::kSlotBytes;
  const uint64_t word = format::EncodeSlot(0xab, 256, g->offset() + 64);
  absl::StatusOr<uint64_t> old =
      CompareSwap(**client, info, slot_offset, 0, word);
  ASSERT_TRUE(old.ok()) << old.status();
  ASSERT_EQ(*old, 0u);
  // The lease runs out (node side: lease + margin) and a pass sees the slot.
  env.Advance(options.slab_lease + format::kLeaseMargin);
  ASSERT_TRUE(Eventually([&] {
    proto::NodeStats s = (*node)->Stats();
    return s.objects() == 1 && s.slabs_sealed() == 1;
  }));
  EXPECT_EQ((*node)->Stats().slabs_reclaimed(), 0u);
  // Delete the key: the slab is freed once a grace has passed.
  old = CompareSwap(**client, info, slot_offset, word, 0);
  ASSERT_TRUE(old.ok()) << old.status();
  ASSERT_EQ(*old, word);
  const absl::Duration grace = options.max_read_lease + format::kReclaimMargin;
  ASSERT_TRUE(Eventually([&] {
    if ((*node)->Stats().slabs_reclaimed() == 1) return true;
    env.Advance(grace / 4);
    return false;
  }));
  EXPECT_EQ((*node)->Stats().objects(), 0u);
}

TEST_F(NodeTest, HeartbeatCarriesStatsToTheCoordinator) {
  absl::StatusOr<std::unique_ptr<Node>> node =
      StartNode(BaseOptions(coordinator_->address()));
  ASSERT_TRUE(node.ok()) << node.status();
  auto stub = NodeStub(**node);
  ASSERT_TRUE(Grant(*stub, (*node)->info().incarnation()).ok());
  const std::string id = (*node)->info().node_id();
  ASSERT_TRUE(Eventually([&] {
    std::optional<proto::NodeEntry> e = FindEntry(coordinator_->Map(), id);
    return e.has_value() && e->stats().slabs_granted() == 1;
  })) << "no heartbeat brought the grant to the coordinator";
  std::optional<proto::NodeEntry> e = FindEntry(coordinator_->Map(), id);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->stats().capacity_bytes(), kCapacity);
  EXPECT_EQ(e->stats().slabs_total(), (*node)->info().layout().slab_count());
}

TEST_F(NodeTest, ServesOverTheSimulatedFabric) {
  const uint64_t seed = std::random_device{}();
  std::cout << "seed=" << seed << std::endl;
  std::shared_ptr<rdma::SimFabric> fabric = rdma::SimFabric::Create(seed);
  absl::StatusOr<std::unique_ptr<Node>> node = Node::Start(
      BaseOptions(coordinator_->address()), fabric->CreateTransport("node"));
  ASSERT_TRUE(node.ok()) << node.status();
  const proto::NodeInfo& info = (*node)->info();
  EXPECT_EQ(info.transport_addresses(0), "sim://node");
  std::unique_ptr<rdma::Transport> client = fabric->CreateTransport("client");
  auto endpoint = client->Connect(info.transport_addresses(0), nullptr);
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  format::Superblock sb{};
  rdma::WorkRequest read;
  read.opcode = rdma::Opcode::kRead;
  read.local = &sb;
  read.length = sizeof(sb);
  read.remote_addr = info.pool().addr();
  read.rkey = info.pool().rkey();
  rdma::Completion done;
  ASSERT_TRUE(
      rdma::PostAndWait(**endpoint, {&read, 1}, {&done, 1}, kPatience).ok());
  EXPECT_EQ(sb.magic, format::kSuperblockMagic);
  EXPECT_EQ(sb.incarnation, info.incarnation());
}

TEST_F(NodeTest, HandshakeOverTcpSaysWhetherATokenIsNeeded) {
  absl::StatusOr<std::unique_ptr<Node>> node =
      StartNode(BaseOptions(coordinator_->address()));
  ASSERT_TRUE(node.ok()) << node.status();
  auto stub = NodeStub(**node);
  proto::HandshakeRequest request;
  request.set_transport("tcp");
  request.set_request(rdma::internal::kTcpTokenRequest);
  proto::HandshakeReply reply;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(
        FromGrpc(stub->Handshake(&ctx, request, &reply), "Handshake").ok());
  }
  EXPECT_TRUE(reply.reply().empty()) << "this node's tcp takes no token";
  request.set_request("something else");
  grpc::ClientContext ctx;
  EXPECT_EQ(
      FromGrpc(stub->Handshake(&ctx, request, &reply), "Handshake").code(),
      absl::StatusCode::kInvalidArgument);
}

TEST_F(NodeTest, NamedShmUsersGetAReachableSocketAndOthersARefusal) {
  // The default: the socket file is this user's alone.
  absl::StatusOr<std::unique_ptr<Node>> plain =
      StartNode(BaseOptions(coordinator_->address()));
  ASSERT_TRUE(plain.ok()) << plain.status();
  auto mode_of = [](const Node& node) -> uint32_t {
    auto a = rdma::ParseShmAddress(node.info().transport_addresses(1));
    EXPECT_TRUE(a.ok()) << a.status();
    struct stat st {};
    EXPECT_EQ(::stat(a->path.c_str(), &st), 0) << a->path;
    return st.st_mode & 0777;
  };
  EXPECT_EQ(mode_of(**plain), 0600u);
  // Named users: everyone reaches the file, the peer check decides.
  NodeOptions options = BaseOptions(coordinator_->address());
  options.shm_allowed_uids = {static_cast<uint32_t>(::geteuid()) + 4242};
  absl::StatusOr<std::unique_ptr<Node>> node = StartNode(options);
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ(mode_of(**node), 0666u);
  auto client = rdma::CreateShmTransport({});
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_EQ((*client)
                ->Connect((*node)->info().transport_addresses(1), nullptr)
                .status()
                .code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE((*client)
                  ->Connect((*plain)->info().transport_addresses(1), nullptr)
                  .ok());
}

TEST_F(NodeTest, RegistersAgainWhenCoordinatorForgetsIt) {
  absl::StatusOr<std::unique_ptr<Node>> node =
      StartNode(BaseOptions(coordinator_->address()));
  ASSERT_TRUE(node.ok()) << node.status();
  const std::string address = coordinator_->address();
  const std::string id = (*node)->info().node_id();
  coordinator_.reset();  // its in-memory state is gone
  coordinator_ = StartCoordinator(address);
  ASSERT_NE(coordinator_, nullptr) << "could not rebind " << address;
  ASSERT_TRUE(Eventually([&] {
    std::optional<proto::NodeEntry> e = FindEntry(coordinator_->Map(), id);
    return e.has_value() && e->state() == proto::NODE_ALIVE;
  })) << "the node never registered again";
}

TEST_F(NodeTest, ShutdownIsIdempotentAndEndsWait) {
  absl::StatusOr<std::unique_ptr<Node>> node =
      StartNode(BaseOptions(coordinator_->address()));
  ASSERT_TRUE(node.ok()) << node.status();
  (*node)->Shutdown();
  (*node)->Shutdown();
  (*node)->Wait();
  EXPECT_EQ((*node)->Stats().slabs_total(),
            (*node)->info().layout().slab_count());
}

TEST_F(NodeTest, CapacityTooSmallIsInvalidArgument) {
  NodeOptions options = BaseOptions(coordinator_->address());
  options.capacity_bytes = 64 << 10;
  absl::StatusOr<std::unique_ptr<Node>> node = StartNode(options);
  EXPECT_EQ(node.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(node.status().message().find("capacity"), std::string::npos)
      << node.status();
}

TEST_F(NodeTest, AdvertisedHostReplacesTheBoundHostInPublishedAddresses) {
  NodeOptions options = BaseOptions(coordinator_->address());
  options.advertise_host = "localhost";
  absl::StatusOr<std::unique_ptr<Node>> node = StartNode(options);
  ASSERT_TRUE(node.ok()) << node.status();
  const proto::NodeInfo& info = (*node)->info();
  EXPECT_EQ(info.control_address().rfind("localhost:", 0), 0u)
      << info.control_address();
  EXPECT_EQ(info.transport_addresses(0).rfind("tcp://localhost:", 0), 0u)
      << info.transport_addresses(0);
}

TEST_F(NodeTest, WildcardBindWithoutAdvertiseIsInvalidArgument) {
  // Binds all interfaces only for the instant before Start refuses; no
  // traffic is sent.
  NodeOptions options = BaseOptions(coordinator_->address());
  options.control_listen = "0.0.0.0:0";
  options.insecure = true;  // past protected mode (auth_test covers it)
  absl::StatusOr<std::unique_ptr<Node>> node = StartNode(options);
  EXPECT_EQ(node.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(node.status().message().find("NodeOptions.advertise_host"),
            std::string::npos)
      << node.status();
}

TEST_F(NodeTest, ZeroSlabLeaseIsInvalidArgument) {
  NodeOptions options = BaseOptions(coordinator_->address());
  options.slab_lease = absl::ZeroDuration();
  EXPECT_EQ(StartNode(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// ---- Regions ----

absl::StatusOr<proto::AllocateRegionReply> AllocateRegion(
    proto::Node::Stub& stub, uint64_t incarnation, uint64_t region_id,
    uint64_t stripe_bytes, uint64_t stripes) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + kPatience));
  proto::AllocateRegionRequest request;
  request.set_region_id(region_id);
  request.set_incarnation(incarnation);
  request.set_stripe_bytes(stripe_bytes);
  request.set_stripes(stripes);
  proto::AllocateRegionReply reply;
  MESHPOOL_RETURN_IF_ERROR(
      FromGrpc(stub.AllocateRegion(&ctx, request, &reply), "AllocateRegion"));
  return reply;
}

absl::Status FreeRegion(proto::Node::Stub& stub, uint64_t incarnation,
                        uint64_t region_id) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + kPatience));
  proto::FreeRegionRequest request;
  request.set_region_id(region_id);
  request.set_incarnation(incarnation);
  proto::FreeRegionReply reply;
  return FromGrpc(stub.FreeRegion(&ctx, request, &reply), "FreeRegion");
}

TEST_F(NodeTest, AllocateRegionChecksTheRequest) {
  absl::StatusOr<std::unique_ptr<Node>> node =
      StartNode(BaseOptions(coordinator_->address()));
  ASSERT_TRUE(node.ok()) << node.status();
  const uint64_t inc = (*node)->info().incarnation();
  auto stub = NodeStub(**node);
  absl::StatusOr<proto::AllocateRegionReply> r =
      AllocateRegion(*stub, inc + 1, 1, 1 << 20, 4);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("node restarted"), std::string::npos);
  for (uint64_t stripe : {uint64_t{0}, uint64_t{1000}, uint64_t{8} << 20}) {
    r = AllocateRegion(*stub, inc, 1, stripe, 4);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << stripe;
  }
  r = AllocateRegion(*stub, inc, 1, 1 << 20, 0);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  r = AllocateRegion(*stub, inc, 1, 1 << 20, 1000);  // 250 slabs
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ((*node)->Stats().slabs_region(), 0u);
  EXPECT_EQ(FreeRegion(*stub, inc + 1, 1).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(NodeTest, AllocateRegionTakesWholeSlabsAndFreeRegionSealsThem) {
  absl::StatusOr<std::unique_ptr<Node>> node =
      StartNode(BaseOptions(coordinator_->address()));
  ASSERT_TRUE(node.ok()) << node.status();
  const proto::NodeInfo& info = (*node)->info();
  auto stub = NodeStub(**node);
  // 6 stripes of 1 MiB, 4 per 4 MiB slab: 2 slabs.
  absl::StatusOr<proto::AllocateRegionReply> r =
      AllocateRegion(*stub, info.incarnation(), 5, 1 << 20, 6);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->slab_bytes(), 4u << 20);
  ASSERT_EQ(r->slab_offsets_size(), 2);
  for (uint64_t offset : r->slab_offsets()) {
    EXPECT_GE(offset, info.layout().slab_area_offset());
    EXPECT_EQ((offset - info.layout().slab_area_offset()) %
                  info.layout().slab_bytes(),
              0u);
  }
  proto::NodeStats stats = (*node)->Stats();
  EXPECT_EQ(stats.slabs_region(), 2u);
  EXPECT_EQ(stats.used_bytes(), 2 * (4u << 20));
  EXPECT_EQ(stats.slabs_free(), stats.slabs_total() - 2);
  r = AllocateRegion(*stub, info.incarnation(), 5, 1 << 20, 1);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(FreeRegion(*stub, info.incarnation(), 5).ok());
  stats = (*node)->Stats();
  EXPECT_EQ(stats.slabs_region(), 0u);
  EXPECT_EQ(stats.slabs_sealed(), 2u);  // freed after the grace
  EXPECT_TRUE(FreeRegion(*stub, info.incarnation(), 5).ok());   // again
  EXPECT_TRUE(FreeRegion(*stub, info.incarnation(), 77).ok());  // unknown
}

// Reads `length` bytes at pool `offset` of `info`'s node, one-sidedly.
absl::StatusOr<std::string> ReadPool(rdma::Transport& transport,
                                     const proto::NodeInfo& info,
                                     uint64_t offset, size_t length) {
  MESHPOOL_ASSIGN_OR_RETURN(
      std::unique_ptr<rdma::Endpoint> endpoint,
      transport.Connect(info.transport_addresses(0), nullptr));
  std::string bytes(length, 'x');
  rdma::WorkRequest read;
  read.opcode = rdma::Opcode::kRead;
  read.local = bytes.data();
  read.length = length;
  read.remote_addr = info.pool().addr() + offset;
  read.rkey = info.pool().rkey();
  rdma::Completion done;
  MESHPOOL_RETURN_IF_ERROR(
      rdma::PostAndWait(*endpoint, {&read, 1}, {&done, 1}, kPatience));
  return bytes;
}

// A freed region's slabs still hold its tenant's bytes; a KV lease opens a
// slab to every data user, so the node zeroes a former region slab before
// it answers the lease.
TEST_F(NodeTest, AFreedRegionsSlabIsZeroedBeforeAKvLeaseOpensIt) {
  NodeOptions options = BaseOptions(coordinator_->address());
  options.reclaim_interval = absl::Milliseconds(5);
  absl::StatusOr<std::unique_ptr<Node>> node = StartNode(options);
  ASSERT_TRUE(node.ok()) << node.status();
  const proto::NodeInfo& info = (*node)->info();
  auto stub = NodeStub(**node);
  const uint64_t slabs = (*node)->Stats().slabs_total();
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + kPatience));
  proto::AllocateRegionRequest request;
  request.set_region_id(9);
  request.set_incarnation(info.incarnation());
  request.set_stripe_bytes(4 << 20);
  request.set_stripes(slabs);  // every slab
  request.set_tenant("team-a");
  proto::AllocateRegionReply reply;
  ASSERT_TRUE(
      FromGrpc(stub->AllocateRegion(&ctx, request, &reply), "AllocateRegion")
          .ok());
  ASSERT_EQ(static_cast<uint64_t>(reply.slab_offsets_size()), slabs);
  auto transport = rdma::CreateTcpTransport();
  ASSERT_TRUE(transport.ok());
  auto endpoint = (*transport)->Connect(info.transport_addresses(0), nullptr);
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  std::string secret(4096, 'R');
  for (uint64_t offset : reply.slab_offsets()) {
    rdma::WorkRequest write;
    write.opcode = rdma::Opcode::kWrite;
    write.local = secret.data();
    write.length = secret.size();
    write.remote_addr = info.pool().addr() + offset;
    write.rkey = info.pool().rkey();
    rdma::Completion done;
    ASSERT_TRUE(
        rdma::PostAndWait(**endpoint, {&write, 1}, {&done, 1}, kPatience).ok());
  }
  ASSERT_TRUE(FreeRegion(*stub, info.incarnation(), 9).ok());
  ASSERT_TRUE(
      Eventually([&] { return (*node)->Stats().slabs_free() == slabs; }));
  absl::StatusOr<proto::GrantSlabReply> g = Grant(*stub, info.incarnation());
  ASSERT_TRUE(g.ok()) << g.status();
  auto bytes = ReadPool(**transport, info, g->offset(), 4096);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, std::string(4096, '\0'))
      << "team-a's bytes in a slab leased for KV";
}

TEST_F(NodeTest, CoordinatorCreatesRegionOnNodesAndDeleteReturnsTheSlabs) {
  testing::FakeEnv env;
  NodeOptions options = BaseOptions(coordinator_->address());
  options.env = &env;
  options.reclaim_interval = absl::Milliseconds(5);
  std::vector<std::unique_ptr<Node>> nodes;
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<std::unique_ptr<Node>> node = StartNode(options);
    ASSERT_TRUE(node.ok()) << node.status();
    nodes.push_back(*std::move(node));
  }
  auto client = placement::CoordinatorClient::Connect(coordinator_->address());
  ASSERT_TRUE(client.ok()) << client.status();
  proto::CreateRegionRequest request;
  request.set_name("weights/a");
  request.set_size((20 << 20) + 123);  // 21 stripes of 1 MiB, each twice
  request.set_stripe_bytes(1 << 20);
  request.set_replicas(2);
  absl::StatusOr<proto::RegionInfo> info = (*client)->CreateRegion(request);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ((*client)->CreateRegion(request).status().code(),
            absl::StatusCode::kAlreadyExists);
  absl::StatusOr<placement::RegionLayout> layout =
      placement::RegionLayout::Create(*info);
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_EQ(info->extents_size(), 2);  // two nodes, each a copy per stripe
  uint64_t region_slabs = 0;
  for (const proto::RegionExtent& extent : info->extents()) {
    const Node* holder = nullptr;
    for (const auto& n : nodes) {
      if (n->info().node_id() == extent.node_id()) holder = n.get();
    }
    ASSERT_NE(holder, nullptr) << extent.node_id();
    EXPECT_EQ(extent.incarnation(), holder->info().incarnation());
    EXPECT_EQ(extent.slab_offsets_size(), 6);  // ceil(21 / 4)
    EXPECT_EQ(holder->Stats().slabs_region(), 6u);
    region_slabs += extent.slab_offsets_size();
  }
  // The first stripe's copy is zero-filled memory in the node's pool.
  auto transport = rdma::CreateTcpTransport();
  ASSERT_TRUE(transport.ok());
  const placement::StripeCopy copy = layout->Copy(0, 0);
  const std::string& holder_id = info->extents(copy.extent).node_id();
  const proto::NodeInfo& holder = nodes[0]->info().node_id() == holder_id
                                      ? nodes[0]->info()
                                      : nodes[1]->info();
  absl::StatusOr<std::string> bytes =
      ReadPool(**transport, holder, copy.pool_offset, 4096);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, std::string(4096, '\0'));

  absl::StatusOr<proto::RegionInfo> got = (*client)->GetRegion("weights/a");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->health().state(), proto::REGION_HEALTHY);
  got->clear_health();  // GetRegion adds it; the create's reply has none
  EXPECT_EQ(got->SerializeAsString(), info->SerializeAsString());
  ASSERT_TRUE((*client)->RenameRegion("weights/a", "weights/b", false).ok());
  absl::StatusOr<std::vector<proto::RegionInfo>> listed =
      (*client)->ListRegions("weights/");
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].name(), "weights/b");
  EXPECT_EQ((*client)->GetRegion("weights/a").status().code(),
            absl::StatusCode::kNotFound);

  ASSERT_TRUE((*client)->DeleteRegion("weights/b").ok());
  EXPECT_EQ((*client)->DeleteRegion("weights/b").code(),
            absl::StatusCode::kNotFound);
  for (const auto& n : nodes) EXPECT_EQ(n->Stats().slabs_region(), 0u);
  // The slabs come back once the grace has passed.
  const absl::Duration grace = options.max_read_lease + format::kReclaimMargin;
  ASSERT_TRUE(Eventually([&] {
    uint64_t reclaimed = 0;
    for (const auto& n : nodes) reclaimed += n->Stats().slabs_reclaimed();
    if (reclaimed == region_slabs) return true;
    env.Advance(grace / 4);
    return false;
  }));
  for (const auto& n : nodes) {
    proto::NodeStats stats = n->Stats();
    EXPECT_EQ(stats.slabs_free(), stats.slabs_total());
  }
}

// A bound TCP port nobody listens on: connecting to it is refused.
class ClosedPort {
 public:
  ClosedPort() : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fd_ >= 0 && ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) == 0 &&
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port_ = ntohs(addr.sin_port);
    }
  }
  ~ClosedPort() {
    if (fd_ >= 0) ::close(fd_);
  }
  ClosedPort(const ClosedPort&) = delete;
  ClosedPort& operator=(const ClosedPort&) = delete;
  int port() const { return port_; }

 private:
  int fd_;
  int port_ = 0;
};

TEST(NodeFencing, NodeDeclaredDeadStopsServingItsMemory) {
  // The coordinator runs on a clock the test moves: jumping it past
  // dead_after makes the reaper declare the node dead, unless a heartbeat
  // lands first; so the test keeps jumping until the node learns it was
  // declared dead (the 30 s bound is a failure bound, not a sync point).
  testing::FakeEnv coordinator_env(absl::Now());
  coordinator::CoordinatorOptions coptions;
  coptions.heartbeat_interval = absl::Milliseconds(20);
  coptions.dead_after = absl::Seconds(1);
  coptions.env = &coordinator_env;
  auto coordinator = coordinator::Coordinator::Start(std::move(coptions));
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  absl::Notification fenced;
  NodeOptions options = BaseOptions((*coordinator)->address());
  options.on_declared_dead = [&fenced] { fenced.Notify(); };
  absl::StatusOr<std::unique_ptr<Node>> node = StartNode(options);
  ASSERT_TRUE(node.ok()) << node.status();
  const proto::NodeInfo& info = (*node)->info();
  auto client = rdma::CreateTcpTransport();
  ASSERT_TRUE(client.ok());
  uint64_t word = 0;
  rdma::WorkRequest read;
  read.opcode = rdma::Opcode::kRead;
  read.local = &word;
  read.length = 8;
  read.remote_addr = info.pool().addr();
  read.rkey = info.pool().rkey();
  rdma::Completion done;
  {
    auto endpoint = (*client)->Connect(info.transport_addresses(0), nullptr);
    ASSERT_TRUE(endpoint.ok());
    ASSERT_TRUE(
        rdma::PostAndWait(**endpoint, {&read, 1}, {&done, 1}, kPatience).ok());
    EXPECT_EQ(word, format::kSuperblockMagic);
  }
  absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (!fenced.WaitForNotificationWithTimeout(absl::Milliseconds(50)) &&
         absl::Now() < give_up) {
    coordinator_env.Advance(absl::Seconds(2));
  }
  ASSERT_TRUE(fenced.HasBeenNotified())
      << "the node never learned it was declared dead";
  auto endpoint = (*client)->Connect(info.transport_addresses(0), nullptr);
  ASSERT_TRUE(endpoint.ok());
  absl::Status refused =
      rdma::PostAndWait(**endpoint, {&read, 1}, {&done, 1}, kPatience);
  EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied) << refused;
  // And the coordinator keeps it dead: it did not sneak back in.
  const proto::ClusterMap map = (*coordinator)->Map();
  ASSERT_EQ(map.nodes_size(), 1);
  EXPECT_EQ(map.nodes(0).state(), proto::NODE_DEAD);
}

// A node the coordinator may have declared dead and forgotten (silent for
// dead_after + forget_dead_after) finds itself unknown to a coordinator that
// restarted since (and so no longer remembers forgetting it): it fences its
// memory, as if told it was declared dead, rather than register again with
// bytes that may be stale. (RegistersAgainWhenCoordinatorForgetsIt: after a
// short silence it registers again.)
TEST(NodeFencing, ANodeSilentLongEnoughToBeForgottenStopsServing) {
  coordinator::CoordinatorOptions coptions;
  coptions.heartbeat_interval = absl::Milliseconds(20);
  coptions.dead_after = absl::Milliseconds(500);
  coptions.registration.forget_dead_after = absl::Milliseconds(500);
  auto coordinator = coordinator::Coordinator::Start(std::move(coptions));
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  const std::string address = (*coordinator)->address();
  absl::Notification fenced;
  NodeOptions options = BaseOptions(address);
  options.on_declared_dead = [&fenced] { fenced.Notify(); };
  absl::StatusOr<std::unique_ptr<Node>> node = StartNode(options);
  ASSERT_TRUE(node.ok()) << node.status();
  const std::string id = (*node)->info().node_id();
  coordinator->reset();  // the node's heartbeats fail from here
  absl::SleepFor(absl::Milliseconds(1500));  // > 500 + 500 ms
  std::unique_ptr<coordinator::Coordinator> restarted =
      StartCoordinator(address);
  ASSERT_NE(restarted, nullptr) << "could not rebind " << address;
  ASSERT_TRUE(fenced.WaitForNotificationWithTimeout(kPatience))
      << "the node never fenced itself";
  EXPECT_FALSE(FindEntry(restarted->Map(), id).has_value())
      << "it registered again with its old memory";
}

TEST(NodeStart, UnreachableCoordinatorIsUnavailable) {
  ClosedPort closed;
  ASSERT_NE(closed.port(), 0);
  NodeOptions options = BaseOptions(absl::StrCat("127.0.0.1:", closed.port()));
  options.coordinator_timeout = absl::Milliseconds(300);
  absl::StatusOr<std::unique_ptr<Node>> node = StartNode(options);
  EXPECT_EQ(node.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(node.status().message().find("coordinator"), std::string::npos)
      << node.status();
}

}  // namespace
}  // namespace meshpool::store
