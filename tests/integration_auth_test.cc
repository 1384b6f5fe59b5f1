// The control plane under TLS, against real `meshpool` processes: a cluster
// started with `meshpool certs init`'s certificates serves clients that
// present one, refuses those without, binds a node's id to its certificate,
// lets only a region's owner or an admin delete it, admits to a node's tcp
// data port (and uc UDP socket) only connections (sessions) that present a
// token its authenticated handshake issued; and servers refuse to listen beyond
// loopback without TLS unless told --insecure.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "auth/auth.h"
#include "gtest/gtest.h"
#include "meshpool/client.h"
#include "meshpool/kv_cache.h"
#include "meshpool/region.h"
#include "meshpool/weights.h"
#include "placement/coordinator_client.h"
#include "proto/proto.h"
#include "rdma/rdma.h"
#include "rdma/tcp.h"
#include "rdma/tcp_wire.h"
#include "rdma/uc.h"
#include "tests/raw_socket.h"
#include "tests/safetensors_writer.h"
#include "tests/shell_util.h"
#include "tools/local_cluster.h"
#include "tools/tls.h"

namespace meshpool {
namespace {

// A fresh directory under the test's temporary directory.
std::string TempDir(absl::string_view tag) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(base != nullptr ? base : "/tmp",
                                 "/meshpool-auth-", tag, "-", ::getpid());
  testing::Shell(absl::StrCat("rm -rf ", dir));
  return dir;
}

// A cluster of two nodes serving TLS with certificates made for it.
class TlsClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    certs_ = TempDir("certs");
    std::vector<tools::CertIdentity> ids = tools::DefaultIdentities(2);
    ids.push_back({auth::Role::kClient, "bob"});
    ids.push_back({auth::Role::kClient, "alice", "team-a"});
    ids.push_back({auth::Role::kClient, "carol", "team-b"});
    absl::Status made = tools::CertsInit(certs_, ids);
    ASSERT_TRUE(made.ok()) << made;
    tools::LocalClusterOptions options;
    options.binary = MESHPOOL_BINARY;
    options.nodes = 2;
    options.capacity_bytes = 32 << 20;
    options.node_args = {"--transport", "tcp", "--no-shm"};
    options.tls_dir = certs_;
    // Only tenant team-a has a quota (TenantsShareNoNames...).
    options.coordinator_args = {"--region-quota", "team-a=1:-"};
    auto cluster = tools::LocalCluster::Start(options);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
  }
  void TearDown() override {
    cluster_.reset();
    testing::Shell(absl::StrCat("rm -rf ", certs_));
  }

  // A client presenting DIR/NAME.pem ("" for none).
  absl::StatusOr<std::unique_ptr<Client>> ConnectAs(absl::string_view name) {
    ClientOptions options;
    options.coordinator = cluster_->coordinator_address();
    options.connect_timeout = absl::Seconds(2);
    if (!name.empty()) {
      auth::TlsConfig tls = auth::TlsConfig::InDir(certs_, name);
      options.tls_ca_file = tls.ca_file;
      options.tls_cert_file = tls.cert_file;
      options.tls_key_file = tls.key_file;
    }
    return Client::Connect(options);
  }

  // The coordinator's stub, presenting DIR/NAME.pem.
  std::unique_ptr<placement::CoordinatorClient> CoordinatorAs(
      absl::string_view name) {
    auto c = placement::CoordinatorClient::Connect(
        cluster_->coordinator_address(), absl::Seconds(3),
        auth::TlsConfig::InDir(certs_, name));
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  // A stub of the node `info`'s gRPC service, presenting DIR/NAME.pem.
  absl::StatusOr<std::shared_ptr<proto::Node::Stub>> NodeStubAs(
      absl::string_view name, const proto::NodeInfo& info) {
    auto security =
        auth::MakeChannelSecurity(auth::TlsConfig::InDir(certs_, name));
    if (!security.ok()) return security.status();
    return std::shared_ptr<proto::Node::Stub>(
        proto::Node::NewStub(security->Dial(info.control_address())));
  }

  // Asks the node at `control` where its pool is, presenting DIR/NAME.pem.
  absl::StatusOr<proto::RemoteRegion> DescribePoolAs(
      absl::string_view name, const proto::NodeInfo& info) {
    auto stub = NodeStubAs(name, info);
    if (!stub.ok()) return stub.status();
    proto::DescribePoolRequest request;
    request.set_incarnation(info.incarnation());
    proto::DescribePoolReply reply;
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(3)));
    absl::Status s =
        FromGrpc((*stub)->DescribePool(&ctx, request, &reply), "DescribePool");
    if (!s.ok()) return s;
    return reply.pool();
  }

  // Reads `length` bytes at pool offset `offset` of the node `info` over
  // its tcp data port, admitted through the node's Handshake call
  // presenting DIR/NAME.pem: what any certificate holder can do once it
  // knows (or guesses) where bytes lie.
  absl::StatusOr<std::string> ReadPoolAs(absl::string_view name,
                                         const proto::NodeInfo& info,
                                         uint64_t offset, uint32_t length) {
    auto pool = DescribePoolAs(name, info);
    if (!pool.ok()) return pool.status();
    absl::StatusOr<std::shared_ptr<proto::Node::Stub>> node_stub =
        NodeStubAs(name, info);
    if (!node_stub.ok()) return node_stub.status();
    rdma::Handshake handshake =
        [stub = *node_stub](
            const std::string& bytes) -> absl::StatusOr<std::string> {
      proto::HandshakeRequest request;
      request.set_transport("tcp");
      request.set_request(bytes);
      proto::HandshakeReply reply;
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(3)));
      absl::Status s =
          FromGrpc(stub->Handshake(&ctx, request, &reply), "Handshake");
      if (!s.ok()) return s;
      return reply.reply();
    };
    auto transport = rdma::CreateTcpTransport();
    if (!transport.ok()) return transport.status();
    auto ep = (*transport)->Connect(info.transport_addresses(0), handshake);
    if (!ep.ok()) return ep.status();
    std::string got(length, '\0');
    rdma::WorkRequest wr;
    wr.opcode = rdma::Opcode::kRead;
    wr.local = got.data();
    wr.length = length;
    wr.remote_addr = pool->addr() + offset;
    wr.rkey = pool->rkey();
    rdma::Completion c;
    absl::Status s =
        rdma::PostAndWait(**ep, {wr}, absl::MakeSpan(&c, 1), absl::Seconds(10));
    if (!s.ok()) return s;
    return got;
  }

  std::string certs_;
  std::unique_ptr<tools::LocalCluster> cluster_;
};

TEST_F(TlsClusterTest, ClientsWithACertificateAreServed) {
  auto client = ConnectAs("client");
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Put("tls-key", "over tls").ok());
  auto got = (*client)->Get("tls-key");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "over tls");
  auto region = CreateRegion(**client, "tls-region", 1 << 20);
  ASSERT_TRUE(region.ok()) << region.status();
}

TEST_F(TlsClusterTest, ClientsWithoutACertificateAreRefused) {
  auto client = ConnectAs("");
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnavailable)
      << client.status();
  // And the cluster keeps serving the others.
  auto good = ConnectAs("client");
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_TRUE((*good)->Put("still", "serving").ok());
}

TEST_F(TlsClusterTest, ADataConnectionWithoutATokenIsRefusedBeforeAnyRequest) {
  auto client = ConnectAs("client");
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Put("guarded", "value").ok());
  // What an outsider who learned a node's address and pool key (here from
  // a certificate holder) would send.
  auto coordinator = CoordinatorAs("client");
  ASSERT_NE(coordinator, nullptr);
  auto map = coordinator->GetClusterMap();
  ASSERT_TRUE(map.ok()) << map.status();
  for (const auto& entry : map->nodes()) {
    const proto::NodeInfo& info = entry.info();
    auto pool = DescribePoolAs("client", info);
    ASSERT_TRUE(pool.ok()) << pool.status();
    const std::string& address = info.transport_addresses(0);
    ASSERT_TRUE(absl::StartsWith(address, "tcp://127.0.0.1:")) << address;
    uint32_t port = 0;
    ASSERT_TRUE(
        absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port));
    for (rdma::Opcode op : {rdma::Opcode::kWrite, rdma::Opcode::kRead}) {
      rdma::internal::RequestHeader h{};
      h.magic = rdma::internal::kRequestMagic;
      h.opcode = static_cast<uint8_t>(op);
      h.rkey = pool->rkey();
      h.length = 4096;
      h.remote_addr = pool->addr();
      std::string frame(reinterpret_cast<const char*>(&h), sizeof(h));
      if (op == rdma::Opcode::kWrite) frame.append(4096, '\0');
      testing::RawSocket raw(static_cast<uint16_t>(port));
      ASSERT_TRUE(raw.connected());
      raw.Send(frame.data(), frame.size());  // may be closed mid-send
      std::string received;
      ASSERT_TRUE(raw.ReadUntilClosed(&received)) << info.node_id();
      EXPECT_TRUE(received.empty()) << info.node_id() << " answered";
    }
  }
  // Certificate holders are served as before, their data intact.
  auto got = (*client)->Get("guarded");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "value");
  auto again = ConnectAs("client");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE((*again)->Put("after", "the outsider").ok());
}

// A tenant's region memory on tcp is out of reach of another tenant's data
// connections, and of callers without a tenant, even when they know its
// pool offsets and hold the pool's key; its own tenant and an admin without
// a tenant read it.
TEST_F(TlsClusterTest, ATenantsRegionMemoryIsOutOfReachOfOtherTenants) {
  auto alice = ConnectAs("alice");
  ASSERT_TRUE(alice.ok()) << alice.status();
  auto region = CreateRegion(**alice, "weights", 1 << 20);
  ASSERT_TRUE(region.ok()) << region.status();
  const std::string secret(1 << 20, 'S');  // every stripe
  ASSERT_TRUE((*region)->Write(0, secret).ok());
  // Where its first stripe lies, as alice's own view of it says.
  auto info = CoordinatorAs("alice")->GetRegion("weights");
  ASSERT_TRUE(info.ok()) << info.status();
  const proto::RegionExtent& extent = info->extents(0);
  auto map = CoordinatorAs("alice")->GetClusterMap();
  ASSERT_TRUE(map.ok()) << map.status();
  const proto::NodeInfo* node = nullptr;
  for (const auto& entry : map->nodes()) {
    if (entry.info().node_id() == extent.node_id()) node = &entry.info();
  }
  ASSERT_NE(node, nullptr);
  const uint64_t at = extent.slab_offsets(0);
  auto own = ReadPoolAs("alice", *node, at, 4096);
  ASSERT_TRUE(own.ok()) << own.status();
  auto admin = ReadPoolAs("admin", *node, at, 4096);
  ASSERT_TRUE(admin.ok()) << admin.status();
  EXPECT_EQ(*own, *admin);
  EXPECT_EQ(*own, std::string(4096, 'S')) << "the stripe holds it";
  for (const char* outsider : {"carol", "bob"}) {
    auto got = ReadPoolAs(outsider, *node, at, 4096);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kPermissionDenied)
        << outsider << ": " << got.status();
  }
  // Nor may they have the node digest it (a guess confirmed is a leak).
  for (const char* caller : {"alice", "carol"}) {
    auto stub = NodeStubAs(caller, *node);
    ASSERT_TRUE(stub.ok()) << stub.status();
    proto::DigestRangesRequest request;
    request.set_incarnation(node->incarnation());
    proto::DigestRange* range = request.add_ranges();
    range->set_offset(at);
    range->set_length(4096);
    proto::DigestRangesReply reply;
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(3)));
    absl::Status s =
        FromGrpc((*stub)->DigestRanges(&ctx, request, &reply), "DigestRanges");
    if (std::string(caller) == "alice") {
      EXPECT_TRUE(s.ok()) << s;
    } else {
      EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
    }
  }
  // The cluster serves everyone on: carol's own region, alice's reads.
  auto carol = ConnectAs("carol");
  ASSERT_TRUE(carol.ok()) << carol.status();
  auto hers = CreateRegion(**carol, "weights", 1 << 20);
  ASSERT_TRUE(hers.ok()) << hers.status();
  ASSERT_TRUE((*hers)->Write(0, std::string(64, 'c')).ok());
  std::string back(4096, '\0');
  ASSERT_TRUE((*region)->Read(0, absl::MakeSpan(back)).ok());
  EXPECT_EQ(back, secret.substr(0, 4096));
}

// The same over uc on UDP: a session whose hello brings no token from the
// node's authenticated handshake is refused, certificate holders are
// served.
TEST_F(TlsClusterTest,
       AUcSessionWithoutATokenIsRefusedCertificateHoldersAreServed) {
  cluster_.reset();
  tools::LocalClusterOptions options;
  options.binary = MESHPOOL_BINARY;
  options.nodes = 1;
  options.capacity_bytes = 32 << 20;
  options.node_args = {"--transport", "uc", "--no-shm"};
  options.tls_dir = certs_;
  auto cluster = tools::LocalCluster::Start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  cluster_ = *std::move(cluster);
  auto client = ConnectAs("client");
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Put("guarded", "value").ok());
  auto coordinator = CoordinatorAs("client");
  ASSERT_NE(coordinator, nullptr);
  auto map = coordinator->GetClusterMap();
  ASSERT_TRUE(map.ok()) << map.status();
  ASSERT_EQ(map->nodes_size(), 1);
  const std::string& address = map->nodes(0).info().transport_addresses(0);
  ASSERT_TRUE(absl::StartsWith(address, "uc://127.0.0.1:")) << address;
  auto outsider = rdma::CreateUcTransport();
  ASSERT_TRUE(outsider.ok()) << outsider.status();
  auto ep = (*outsider)->Connect(address, nullptr);
  ASSERT_FALSE(ep.ok());
  EXPECT_EQ(ep.status().code(), absl::StatusCode::kPermissionDenied)
      << ep.status();
  auto got = (*client)->Get("guarded");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "value");
  auto again = ConnectAs("client");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE((*again)->Put("after", "the outsider").ok());
}

TEST_F(TlsClusterTest, TheMapLeaksNoPoolKeyAndOnlyDataUsersLearnIt) {
  auto coordinator = CoordinatorAs("bob");
  ASSERT_NE(coordinator, nullptr);
  auto map = coordinator->GetClusterMap();
  ASSERT_TRUE(map.ok()) << map.status();
  ASSERT_EQ(map->nodes_size(), 2);
  for (const auto& entry : map->nodes()) {
    const proto::NodeInfo& info = entry.info();
    EXPECT_EQ(info.pool().rkey(), 0u) << info.node_id();
    EXPECT_EQ(info.pool().addr(), 0u) << info.node_id();
    EXPECT_GT(info.pool().length(), 0u) << info.node_id();
    // A client certificate learns them from the node itself...
    auto pool = DescribePoolAs("bob", info);
    ASSERT_TRUE(pool.ok()) << pool.status();
    EXPECT_NE(pool->addr(), 0u);
    EXPECT_EQ(pool->length(), info.pool().length());
    // ...naming the incarnation it found in the map...
    proto::NodeInfo restarted = info;
    restarted.set_incarnation(info.incarnation() + 1);
    EXPECT_EQ(DescribePoolAs("bob", restarted).status().code(),
              absl::StatusCode::kFailedPrecondition);
    // ...and another node's certificate does not (nodes never read pools).
    EXPECT_EQ(DescribePoolAs("node-2", info).status().code(),
              absl::StatusCode::kPermissionDenied);
  }
  // The client reaches its data through what the nodes described.
  auto client = ConnectAs("bob");
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Put("described", "pool").ok());
  auto got = (*client)->Get("described");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "pool");
}

TEST_F(TlsClusterTest, ANodeCannotRegisterUnderAnotherNodesId) {
  auto coordinator = CoordinatorAs("node-2");
  ASSERT_NE(coordinator, nullptr);
  auto map = coordinator->GetClusterMap();
  ASSERT_TRUE(map.ok()) << map.status();
  proto::NodeInfo hijack;
  for (const auto& entry : map->nodes()) {
    if (entry.info().node_id() == "node-1") hijack = entry.info();
  }
  ASSERT_EQ(hijack.node_id(), "node-1");
  hijack.set_incarnation(hijack.incarnation() + 1);
  auto registered = coordinator->RegisterNode(hijack);
  EXPECT_EQ(registered.status().code(), absl::StatusCode::kPermissionDenied)
      << registered.status();
  EXPECT_TRUE(absl::StrContains(registered.status().message(), "node:node-2"))
      << registered.status();
  // Nor may a client register a node at all.
  auto as_client = CoordinatorAs("client");
  ASSERT_NE(as_client, nullptr);
  EXPECT_EQ(as_client->RegisterNode(hijack).status().code(),
            absl::StatusCode::kPermissionDenied);
  // node-1 is still the one alive under its id, and serves.
  map = coordinator->GetClusterMap();
  ASSERT_TRUE(map.ok());
  int alive = 0;
  for (const auto& entry : map->nodes()) {
    alive += entry.state() == proto::NODE_ALIVE;
  }
  EXPECT_EQ(alive, 2);
  auto client = ConnectAs("client");
  ASSERT_TRUE(client.ok()) << client.status();
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE((*client)->Put(absl::StrCat("k", i), "v").ok()) << i;
  }
}

TEST_F(TlsClusterTest, OnlyARegionsOwnerOrAnAdminMayDeleteOrRenameIt) {
  auto owner = ConnectAs("client");
  auto bob = ConnectAs("bob");
  auto admin = ConnectAs("admin");
  ASSERT_TRUE(owner.ok() && bob.ok() && admin.ok());
  ASSERT_TRUE(CreateRegion(**owner, "owned", 1 << 20).ok());
  absl::Status s = DeleteRegion(**bob, "owned");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "client:client")) << s;
  s = RenameRegion(**bob, "owned", "stolen");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  // Bob may not replace it with his own either.
  ASSERT_TRUE(CreateRegion(**bob, "bobs", 1 << 20).ok());
  s = RenameRegion(**bob, "bobs", "owned", /*replace=*/true);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_TRUE(OpenRegion(**bob, "owned").ok()) << "reading stays open to all";
  // Its owner may rename it; an admin may delete it.
  EXPECT_TRUE(RenameRegion(**owner, "owned", "owned2").ok());
  EXPECT_TRUE(DeleteRegion(**admin, "owned2").ok());
  EXPECT_EQ(OpenRegion(**owner, "owned2").status().code(),
            absl::StatusCode::kNotFound);
}

// Tenants: the same name is three regions (two tenants and the callers
// without one), none sees the others', and team-a at its quota of one
// region leaves team-b creating. An admin without a tenant sees them all
// under their stored names and frees team-a's quota.
TEST_F(TlsClusterTest,
       TenantsShareNoNamesAndOneTenantsQuotaLeavesOthersCreating) {
  auto alice = ConnectAs("alice");
  auto carol = ConnectAs("carol");
  auto plain = ConnectAs("client");
  auto admin = ConnectAs("admin");
  ASSERT_TRUE(alice.ok() && carol.ok() && plain.ok() && admin.ok());
  std::vector<std::unique_ptr<Region>> regions;
  for (auto* c : {&*alice, &*carol, &*plain}) {
    auto r = CreateRegion(**c, "model", 1 << 20);
    ASSERT_TRUE(r.ok()) << r.status();
    regions.push_back(*std::move(r));
  }
  for (size_t i = 0; i < regions.size(); ++i) {
    const std::string mark(64, static_cast<char>('a' + i));
    ASSERT_TRUE(regions[i]->Write(0, mark).ok());
  }
  for (size_t i = 0; i < regions.size(); ++i) {
    std::string got(64, '\0');
    ASSERT_TRUE(regions[i]->Read(0, absl::MakeSpan(got)).ok());
    EXPECT_EQ(got, std::string(64, static_cast<char>('a' + i))) << i;
  }

  absl::Status s = CreateRegion(**alice, "second", 1 << 20).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "tenant 'team-a'")) << s;
  EXPECT_TRUE(CreateRegion(**carol, "second", 1 << 20).ok());
  EXPECT_TRUE(CreateRegion(**plain, "second", 1 << 20).ok());

  auto names = [](Client& c) {
    std::vector<std::string> out;
    auto listed = ListRegions(c, "");
    EXPECT_TRUE(listed.ok()) << listed.status();
    if (listed.ok()) {
      for (const RegionDescription& d : *listed) out.push_back(d.name);
    }
    return out;
  };
  EXPECT_EQ(names(**alice), std::vector<std::string>({"model"}));
  EXPECT_EQ(names(**carol), std::vector<std::string>({"model", "second"}));
  EXPECT_EQ(names(**plain), std::vector<std::string>({"model", "second"}));
  EXPECT_EQ(names(**admin),
            std::vector<std::string>({"model", "second", "~team-a/model",
                                      "~team-b/model", "~team-b/second"}));
  // No caller but an admin without a tenant can name another's region.
  EXPECT_EQ(DeleteRegion(**carol, "~team-a/model").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenRegion(**plain, "~team-a/model").status().code(),
            absl::StatusCode::kInvalidArgument);
  // A region stays in its tenant (its memory on the nodes is reserved for
  // that tenant), even when an admin renames it.
  absl::Status moved = RenameRegion(**admin, "~team-a/model", "~team-b/moved");
  EXPECT_EQ(moved.code(), absl::StatusCode::kInvalidArgument) << moved;
  EXPECT_TRUE(absl::StrContains(moved.message(), "stays in its tenant"))
      << moved;
  EXPECT_TRUE(RenameRegion(**admin, "~team-b/second", "~team-b/third").ok());
  ASSERT_TRUE(DeleteRegion(**admin, "~team-a/model").ok());
  EXPECT_EQ(OpenRegion(**alice, "model").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(CreateRegion(**alice, "second", 1 << 20).ok());
  EXPECT_TRUE(OpenRegion(**carol, "model").ok());
  EXPECT_TRUE(OpenRegion(**carol, "third").ok());
}

// Keys are per tenant: one key name holds one value per tenant (and one
// for the clients of no tenant); each reads, finds and deletes only its
// own. The coordinator tells each client its tenant (WhoAmI).
TEST_F(TlsClusterTest, EachTenantKeepsItsOwnValueUnderTheSameKey) {
  auto alice = ConnectAs("alice");
  auto carol = ConnectAs("carol");
  auto bob = ConnectAs("bob");
  auto plain = ConnectAs("client");
  ASSERT_TRUE(alice.ok() && carol.ok() && bob.ok() && plain.ok());
  auto me = CoordinatorAs("alice");
  ASSERT_NE(me, nullptr);
  auto who = me->WhoAmI();
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_EQ(who->role(), "client");
  EXPECT_EQ(who->name(), "alice");
  EXPECT_EQ(who->tenant(), "team-a");

  ASSERT_TRUE((*alice)->Put("same-key", "alice's").ok());
  ASSERT_TRUE((*carol)->Put("same-key", "carol's").ok());
  ASSERT_TRUE((*bob)->Put("same-key", "bob's").ok());
  EXPECT_EQ((*alice)->Get("same-key").value_or("?"), "alice's");
  EXPECT_EQ((*carol)->Get("same-key").value_or("?"), "carol's");
  EXPECT_EQ((*bob)->Get("same-key").value_or("?"), "bob's");
  EXPECT_EQ((*plain)->Get("same-key").value_or("?"), "bob's")
      << "clients of no tenant share one key space";

  ASSERT_TRUE((*alice)->Put("alice-only", "x").ok());
  EXPECT_EQ((*carol)->Get("alice-only").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ((*bob)->Get("alice-only").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ((*carol)->Exists("alice-only").value_or(true), false);
  ASSERT_TRUE((*carol)->Delete("same-key").ok());
  EXPECT_EQ((*carol)->Get("same-key").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ((*alice)->Get("same-key").value_or("?"), "alice's");
  EXPECT_EQ((*bob)->Get("same-key").value_or("?"), "bob's");
}

// Models are regions: two tenants load a model of the same name, and each
// reads back its own tensors (the load's staging region and rename stay
// inside the tenant too).
TEST_F(TlsClusterTest, TenantsLoadModelsOfTheSameNameApart) {
  auto alice = ConnectAs("alice");
  auto carol = ConnectAs("carol");
  ASSERT_TRUE(alice.ok() && carol.ok());
  client_internal::SafetensorsTensor t;
  t.name = "w";
  t.dtype = client_internal::DType::kU8;
  t.shape = {100000};
  for (auto [client, seed] : {std::pair{&*alice, 1}, std::pair{&*carol, 2}}) {
    const std::string path =
        absl::StrCat(certs_, "/model-", seed, ".safetensors");
    auto written = testing::WriteSafetensorsFile(path, {t}, seed);
    ASSERT_TRUE(written.ok()) << written.status();
    auto loaded = LoadSafetensors(**client, "llama", {path});
    ASSERT_TRUE(loaded.ok()) << loaded.status();
  }
  for (auto [client, seed] : {std::pair{&*alice, 1}, std::pair{&*carol, 2}}) {
    auto store = WeightStore::Open(**client, "llama");
    ASSERT_TRUE(store.ok()) << store.status();
    std::string got(100000, '\0');
    auto n = (*store)->ReadTensor("w", absl::MakeSpan(got));
    ASSERT_TRUE(n.ok()) << n.status();
    EXPECT_TRUE(got == testing::TensorBytes(seed, "w", 0, 100000)) << seed;
    auto models = ListModels(**client);
    ASSERT_TRUE(models.ok()) << models.status();
    ASSERT_EQ(models->size(), 1u);
    EXPECT_EQ((*models)[0].name, "llama");
  }
}

// --tenant-sessions 1 --tenant-slabs 1: a second client of team-a finds
// no session (its pins fail ResourceExhausted naming the tenant) and no
// slab to write into, while team-b pins and writes on.
TEST_F(TlsClusterTest, ATenantAtItsCapsLeavesSessionsAndSlabsToOthers) {
  cluster_.reset();
  tools::LocalClusterOptions options;
  options.binary = MESHPOOL_BINARY;
  options.nodes = 1;
  options.capacity_bytes = 32 << 20;
  options.node_args = {
      "--transport",    "tcp", "--no-shm", "--tenant-sessions", "1",
      "--tenant-slabs", "1"};
  options.tls_dir = certs_;
  auto cluster = tools::LocalCluster::Start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  cluster_ = *std::move(cluster);
  auto alice1 = ConnectAs("alice");
  auto alice2 = ConnectAs("alice");
  auto carol = ConnectAs("carol");
  ASSERT_TRUE(alice1.ok() && alice2.ok() && carol.ok());
  ASSERT_TRUE((*alice1)->Put("k", "v").ok());
  const absl::string_view keys[] = {"k"};
  std::vector<absl::Status> pinned = Pin(**alice1, keys, absl::Seconds(30));
  ASSERT_TRUE(pinned[0].ok()) << pinned[0];
  pinned = Pin(**alice2, keys, absl::Seconds(30));
  EXPECT_EQ(pinned[0].code(), absl::StatusCode::kResourceExhausted)
      << pinned[0];
  EXPECT_TRUE(absl::StrContains(pinned[0].message(), "'team-a' hold 1"))
      << pinned[0];
  // carol's "k" is her own key (keys are per tenant).
  ASSERT_TRUE((*carol)->Put("k", "carol's").ok());
  pinned = Pin(**carol, keys, absl::Seconds(30));
  EXPECT_TRUE(pinned[0].ok()) << pinned[0];
  auto got = (*alice2)->Get("k");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "v");
  // alice1 leases team-a's one slab (for its slab lease, 10 s).
  absl::Status put = (*alice2)->Put("k2", "v2");
  EXPECT_EQ(put.code(), absl::StatusCode::kResourceExhausted) << put;
  EXPECT_TRUE(absl::StrContains(put.message(), "'team-a' lease 1")) << put;
  EXPECT_TRUE((*carol)->Put("k3", "v3").ok());
  EXPECT_TRUE((*alice1)->Put("k4", "v4").ok()) << "into its own lease";
}

TEST(ProtectedModeTest, ServersRefuseNonLoopbackAddressesWithoutTls) {
  testing::ShellResult coordinator = testing::Shell(
      absl::StrCat(MESHPOOL_BINARY, " coordinator --listen 0.0.0.0:0"));
  EXPECT_NE(coordinator.exit_code, 0) << coordinator.output;
  EXPECT_TRUE(absl::StrContains(coordinator.output, "--tls-dir"))
      << coordinator.output;
  EXPECT_TRUE(absl::StrContains(coordinator.output, "--insecure"))
      << coordinator.output;
  testing::ShellResult node = testing::Shell(absl::StrCat(
      MESHPOOL_BINARY,
      " node --coordinator 127.0.0.1:1 --capacity 8MiB --listen 0.0.0.0:0"));
  EXPECT_NE(node.exit_code, 0) << node.output;
  EXPECT_TRUE(absl::StrContains(node.output, "--tls-dir")) << node.output;
  // --insecure says it knowingly: the coordinator then serves (and stops
  // when told to).
  testing::ShellResult insecure = testing::Shell(
      absl::StrCat("timeout -s INT 2 ", MESHPOOL_BINARY,
                   " coordinator --insecure --listen 0.0.0.0:0"));
  EXPECT_TRUE(absl::StrContains(insecure.output, "listening on"))
      << insecure.output;
}

TEST(CertsTest, InitRefusesADirectoryThatHoldsACaAndAddIssuesMore) {
  const std::string dir = TempDir("init");
  ASSERT_TRUE(tools::CertsInit(dir, tools::DefaultIdentities(1)).ok());
  struct stat st;
  ASSERT_EQ(::stat((dir + "/ca.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "the CA key is private";
  ASSERT_EQ(::stat((dir + "/node-1.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(tools::CertsInit(dir, tools::DefaultIdentities(1)).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(tools::CertsAdd(dir, {auth::Role::kNode, "node-7"}).ok());
  EXPECT_EQ(tools::CertsAdd(dir, {auth::Role::kNode, "node-7"}).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(tools::CertsAdd(dir, {auth::Role::kNode, "../x"}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tools::CertsAdd(dir + "/none", {auth::Role::kNode, "n"}).code(),
            absl::StatusCode::kNotFound);
  testing::ShellResult subject = testing::Shell(
      absl::StrCat("openssl x509 -noout -subject -in ", dir, "/node-7.pem"));
  EXPECT_TRUE(absl::StrContains(subject.output, "node:node-7"))
      << subject.output;
  // Tenants: only on clients and admins, and only valid names.
  EXPECT_EQ(tools::CertsAdd(dir, {auth::Role::kNode, "n9", "team-a"}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tools::CertsAdd(dir, {auth::Role::kClient, "x", "a b"}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      tools::CertsAdd(dir, {auth::Role::kClient, "alice", "team-a"}).ok());
  subject = testing::Shell(
      absl::StrCat("openssl x509 -noout -subject -in ", dir, "/alice.pem"));
  EXPECT_TRUE(absl::StrContains(subject.output, "client:alice@team-a"))
      << subject.output;
  testing::Shell(absl::StrCat("rm -rf ", dir));
}

// `certs init --tenant` would have made no tenant certificate: it says to
// use `certs add`, and makes nothing.
TEST(CertsTest, InitWithATenantSaysToUseAddAndMakesNothing) {
  const std::string dir = TempDir("init-tenant");
  testing::ShellResult init = testing::Shell(absl::StrCat(
      MESHPOOL_BINARY, " certs init ", dir, " --tenant team-a 2>&1"));
  EXPECT_NE(init.exit_code, 0) << init.output;
  EXPECT_TRUE(absl::StrContains(init.output, "certs add")) << init.output;
  struct stat st;
  EXPECT_NE(::stat((dir + "/ca.pem").c_str(), &st), 0) << "made a CA";
  testing::Shell(absl::StrCat("rm -rf ", dir));
}

}  // namespace
}  // namespace meshpool
