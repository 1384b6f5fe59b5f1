// store/: a Node's KV-cache side end to end: client sessions over gRPC,
// pins written one-sidedly, eviction on a full pool clearing index slots
// through the node's own transport (TCP on 127.0.0.1, and the simulated
// fabric), and the stats that report it.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/common.h"
#include "coordinator/coordinator.h"
#include "format/layout.h"
#include "gtest/gtest.h"
#include "proto/proto.h"
#include "rdma/rdma.h"
#include "rdma/sim.h"
#include "rdma/tcp.h"
#include "store/slab_manager.h"
#include "store/store.h"
#include "tests/fake_env.h"

namespace meshpool::store {
namespace {

constexpr absl::Duration kPatience = absl::Seconds(20);
constexpr uint64_t kSlabBytes = 64 << 10;
constexpr uint64_t kValueBytes = 1000;

template <typename F>
bool Eventually(F done) {
  absl::Time deadline = absl::Now() + kPatience;
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

// One-sided access to a node's pool, as a client has it.
class Remote {
 public:
  static absl::StatusOr<Remote> Connect(rdma::Transport& transport,
                                        const proto::NodeInfo& info) {
    MESHPOOL_ASSIGN_OR_RETURN(
        std::unique_ptr<rdma::Endpoint> endpoint,
        transport.Connect(info.transport_addresses(0), nullptr));
    return Remote(std::move(endpoint), info);
  }
  absl::StatusOr<std::string> Read(uint64_t offset, size_t length) {
    std::string bytes(length, '\0');
    MESHPOOL_RETURN_IF_ERROR(
        Do(rdma::Opcode::kRead, bytes.data(), length, offset));
    return bytes;
  }
  absl::StatusOr<uint64_t> ReadWord(uint64_t offset) {
    uint64_t word = 0;
    MESHPOOL_RETURN_IF_ERROR(Do(rdma::Opcode::kRead, &word, 8, offset));
    return word;
  }
  absl::Status Write(uint64_t offset, std::string bytes) {
    return Do(rdma::Opcode::kWrite, bytes.data(), bytes.size(), offset);
  }
  absl::StatusOr<uint64_t> Cas(uint64_t offset, uint64_t expected,
                               uint64_t desired) {
    uint64_t old = 0;
    MESHPOOL_RETURN_IF_ERROR(
        Do(rdma::Opcode::kCompareSwap, &old, 8, offset, expected, desired));
    return old;
  }

 private:
  Remote(std::unique_ptr<rdma::Endpoint> endpoint, const proto::NodeInfo& info)
      : endpoint_(std::move(endpoint)),
        addr_(info.pool().addr()),
        rkey_(info.pool().rkey()) {}
  absl::Status Do(rdma::Opcode op, void* local, size_t length, uint64_t offset,
                  uint64_t compare = 0, uint64_t swap = 0) {
    rdma::WorkRequest wr;
    wr.opcode = op;
    wr.local = local;
    wr.length = static_cast<uint32_t>(length);
    wr.remote_addr = addr_ + offset;
    wr.rkey = rkey_;
    wr.compare_add = compare;
    wr.swap = swap;
    rdma::Completion done;
    return rdma::PostAndWait(*endpoint_, {&wr, 1}, {&done, 1}, kPatience);
  }
  std::unique_ptr<rdma::Endpoint> endpoint_;
  uint64_t addr_;
  uint32_t rkey_;
};

// Which transport the node and the test's client use.
enum class Fabric { kTcp, kSim };

class NodeKvTest : public ::testing::TestWithParam<Fabric> {
 protected:
  void SetUp() override {
    coordinator::CoordinatorOptions c;
    c.listen = "127.0.0.1:0";
    c.heartbeat_interval = absl::Milliseconds(20);
    c.dead_after = absl::Seconds(30);
    auto coordinator = coordinator::Coordinator::Start(std::move(c));
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    coordinator_ = *std::move(coordinator);
    const uint64_t seed = std::random_device{}();
    std::cout << "seed=" << seed << std::endl;
    fabric_ = rdma::SimFabric::Create(seed);
  }

  NodeOptions Options() {
    NodeOptions o;
    o.coordinator = coordinator_->address();
    o.capacity_bytes = 1 << 20;  // 14 slabs of 64 KiB
    o.slab_bytes = kSlabBytes;
    o.bucket_count = 1024;
    o.pin_sessions = 4;
    o.pins_per_session = 64;
    o.huge_pages = false;
    o.coordinator_timeout = absl::Seconds(1);
    o.env = &env_;
    o.reclaim_interval = absl::Milliseconds(5);
    return o;
  }

  void Start(NodeOptions options) {
    std::unique_ptr<rdma::Transport> node_transport;
    if (GetParam() == Fabric::kTcp) {
      auto tcp = rdma::CreateTcpTransport();
      ASSERT_TRUE(tcp.ok()) << tcp.status();
      node_transport = *std::move(tcp);
      auto client = rdma::CreateTcpTransport();
      ASSERT_TRUE(client.ok()) << client.status();
      client_transport_ = *std::move(client);
    } else {
      node_transport = fabric_->CreateTransport("node");
      client_transport_ = fabric_->CreateTransport("client");
    }
    auto node = Node::Start(std::move(options), std::move(node_transport));
    ASSERT_TRUE(node.ok()) << node.status();
    node_ = *std::move(node);
    stub_ = proto::Node::NewStub(grpc::CreateChannel(
        node_->info().control_address(), grpc::InsecureChannelCredentials()));
    auto remote = Remote::Connect(*client_transport_, node_->info());
    ASSERT_TRUE(remote.ok()) << remote.status();
    remote_ = std::make_unique<Remote>(*std::move(remote));
  }

  const proto::PoolLayout& layout() const { return node_->info().layout(); }
  uint64_t incarnation() const { return node_->info().incarnation(); }
  uint64_t SlotOffset(uint64_t slot) const {
    return layout().index_offset() + slot * format::kSlotBytes;
  }
  uint64_t SlabOffset(uint64_t slab) const {
    return layout().slab_area_offset() + slab * layout().slab_bytes();
  }
  uint64_t EvictingOffset(uint64_t slab) const {
    return layout().slab_meta_offset() + slab * format::kSlabMetaBytes;
  }

  template <typename Request, typename Reply, typename Call>
  absl::StatusOr<Reply> Rpc(Call call, const Request& request,
                            absl::string_view what) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + kPatience));
    Reply reply;
    MESHPOOL_RETURN_IF_ERROR(
        FromGrpc((stub_.get()->*call)(&ctx, request, &reply), what));
    return reply;
  }
  absl::StatusOr<proto::GrantSlabReply> Grant() {
    proto::GrantSlabRequest r;
    r.set_client_id("writer");
    r.set_incarnation(incarnation());
    return Rpc<proto::GrantSlabRequest, proto::GrantSlabReply>(
        &proto::Node::Stub::GrantSlab, r, "GrantSlab");
  }
  absl::Status Release(const proto::GrantSlabReply& grant) {
    proto::ReleaseSlabRequest r;
    r.set_client_id("writer");
    r.set_slab(grant.slab());
    r.set_token(grant.token());
    return Rpc<proto::ReleaseSlabRequest, proto::ReleaseSlabReply>(
               &proto::Node::Stub::ReleaseSlab, r, "ReleaseSlab")
        .status();
  }
  absl::StatusOr<proto::OpenSessionReply> OpenSession(uint64_t incarnation,
                                                      uint32_t pins = 0) {
    proto::OpenSessionRequest r;
    r.set_client_id("reader");
    r.set_incarnation(incarnation);
    r.set_pin_entries(pins);
    return Rpc<proto::OpenSessionRequest, proto::OpenSessionReply>(
        &proto::Node::Stub::OpenSession, r, "OpenSession");
  }
  absl::Status Renew(const proto::OpenSessionReply& s, uint64_t hits) {
    proto::RenewSessionRequest r;
    r.set_session(s.session());
    r.set_token(s.token());
    r.mutable_stats()->set_hits(hits);
    return Rpc<proto::RenewSessionRequest, proto::RenewSessionReply>(
               &proto::Node::Stub::RenewSession, r, "RenewSession")
        .status();
  }
  absl::Status Close(const proto::OpenSessionReply& s) {
    proto::CloseSessionRequest r;
    r.set_session(s.session());
    r.set_token(s.token());
    return Rpc<proto::CloseSessionRequest, proto::CloseSessionReply>(
               &proto::Node::Stub::CloseSession, r, "CloseSession")
        .status();
  }

  // Grants a slab, PUTs one object into it (WRITE, then CAS into `slot`)
  // and releases it. Returns the slab and the object's offset.
  void PutIntoNewSlab(uint64_t slot, uint64_t* slab, uint64_t* offset) {
    absl::StatusOr<proto::GrantSlabReply> g = Grant();
    ASSERT_TRUE(g.ok()) << g.status();
    const std::string key = absl::StrCat("key-", slot);
    std::string object(format::ObjectBytes(key.size(), kValueBytes), '\0');
    format::EncodeObject(absl::MakeSpan(object), key, format::HashKey(key),
                         std::string(kValueBytes, 'v'), incarnation(), slot);
    ASSERT_TRUE(remote_->Write(g->offset(), object).ok());
    const uint64_t word = format::EncodeSlot(
        format::Fingerprint(format::HashKey(key)), object.size(), g->offset());
    absl::StatusOr<uint64_t> old = remote_->Cas(SlotOffset(slot), 0, word);
    ASSERT_TRUE(old.ok()) << old.status();
    ASSERT_EQ(*old, 0u);
    ASSERT_TRUE(Release(*g).ok());
    words_.push_back(word);
    *slab = g->slab();
    *offset = g->offset();
  }

  testing::FakeEnv env_;
  std::unique_ptr<coordinator::Coordinator> coordinator_;
  std::shared_ptr<rdma::SimFabric> fabric_;
  std::unique_ptr<rdma::Transport> client_transport_;
  std::unique_ptr<Node> node_;
  std::unique_ptr<proto::Node::Stub> stub_;
  std::unique_ptr<Remote> remote_;
  std::vector<uint64_t> words_;  // published slot words, by slot
};

TEST_P(NodeKvTest, FullPoolEvictsUnpinnedSlabsThroughItsOwnTransport) {
  NodeOptions options = Options();
  options.evict_high_watermark = 1.0;  // only a writer finding no slab evicts
  options.evict_low_watermark = 0.8;   // 14 -> 11: three slabs
  ASSERT_NO_FATAL_FAILURE(Start(options));
  const uint64_t slabs = layout().slab_count();
  ASSERT_EQ(slabs, 14u);
  absl::StatusOr<proto::OpenSessionReply> session = OpenSession(incarnation());
  ASSERT_TRUE(session.ok()) << session.status();
  std::vector<uint64_t> slab_of_slot(slabs), object_of_slot(slabs);
  for (uint64_t slot = 0; slot < slabs; ++slot) {
    ASSERT_NO_FATAL_FAILURE(
        PutIntoNewSlab(slot, &slab_of_slot[slot], &object_of_slot[slot]));
  }
  // Hard-pin the oldest slab's object, as a client does: WRITE the entry.
  format::PinEntry pin{object_of_slot[0], format::kPinForever};
  ASSERT_TRUE(
      remote_
          ->Write(session->pin_table_offset(),
                  std::string(reinterpret_cast<char*>(&pin), sizeof(pin)))
          .ok());
  absl::StatusOr<proto::GrantSlabReply> full = Grant();
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_GT(full->retry_after_ms(), 0u) << "no slab is free: retry later";
  EXPECT_EQ(full->length(), 0u);
  // The clock stands still, so nothing is freed; eviction needs no time.
  ASSERT_TRUE(Eventually([&] { return node_->Stats().slabs_evicted() == 3; }))
      << "evicted " << node_->Stats().slabs_evicted();
  // Slots of slabs 2..4 in seal order are cleared (the pinned oldest slab
  // and everything younger are intact), and their evicting words set.
  for (uint64_t slot = 0; slot < slabs; ++slot) {
    absl::StatusOr<uint64_t> word = remote_->ReadWord(SlotOffset(slot));
    ASSERT_TRUE(word.ok()) << word.status();
    absl::StatusOr<uint64_t> evicting =
        remote_->ReadWord(EvictingOffset(slab_of_slot[slot]));
    ASSERT_TRUE(evicting.ok()) << evicting.status();
    const bool evicted = slot >= 1 && slot <= 3;
    EXPECT_EQ(*word, evicted ? 0 : words_[slot]) << "slot " << slot;
    EXPECT_EQ(*evicting != 0, evicted) << "slot " << slot;
  }
  proto::NodeStats stats = node_->Stats();
  EXPECT_EQ(stats.objects_evicted(), 3u);
  EXPECT_EQ(stats.pinned_objects(), 1u);
  EXPECT_EQ(stats.pinned_bytes(), format::ObjectBytes(5, kValueBytes));
  ASSERT_EQ(stats.sessions_size(), 1);
  EXPECT_EQ(stats.sessions(0).pinned_objects(), 1u);
  // A grace later the evicted slabs are free and granted again, with their
  // evicting words cleared first.
  const absl::Duration grace = options.max_read_lease + format::kReclaimMargin;
  absl::StatusOr<proto::GrantSlabReply> again;
  ASSERT_TRUE(Eventually([&] {
    again = Grant();
    EXPECT_TRUE(again.ok()) << again.status();
    if (!again.ok() || again->retry_after_ms() == 0) return true;
    env_.Advance(grace / 8);
    return false;
  }));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->length(), kSlabBytes);
  EXPECT_TRUE(again->slab() == slab_of_slot[1] ||
              again->slab() == slab_of_slot[2] ||
              again->slab() == slab_of_slot[3])
      << again->slab();
  absl::StatusOr<uint64_t> evicting =
      remote_->ReadWord(EvictingOffset(again->slab()));
  ASSERT_TRUE(evicting.ok());
  EXPECT_EQ(*evicting, 0u);
  // Those three came free. The watermarks fall with the grant rate the
  // clock shows (this test's burst of 15 grants in no time), so the evictor
  // goes on to evict more unpinned slabs once the clock moves (7 in all
  // here), and the longer the loop above runs (a busy machine) the more of
  // those are reclaimed too. What holds: at least the first three came
  // free, only evicted slabs did (every other object is live), and the
  // pinned oldest slab survived every round.
  const proto::NodeStats after = node_->Stats();
  EXPECT_GE(after.slabs_reclaimed(), 3u);
  EXPECT_LE(after.slabs_reclaimed(), after.slabs_evicted());
  absl::StatusOr<uint64_t> pinned_word = remote_->ReadWord(SlotOffset(0));
  ASSERT_TRUE(pinned_word.ok()) << pinned_word.status();
  EXPECT_EQ(*pinned_word, words_[0]);
}

// The node's 4 x 64 pin entries go to whoever asks, as much as each asks
// while they last.
TEST_P(NodeKvTest, OpenSessionGrantsThePinsAskedForWhileTheAreaLasts) {
  ASSERT_NO_FATAL_FAILURE(Start(Options()));
  absl::StatusOr<proto::OpenSessionReply> wide =
      OpenSession(incarnation(), 128);
  ASSERT_TRUE(wide.ok()) << wide.status();
  EXPECT_EQ(wide->pin_entries(), 128u);
  absl::StatusOr<proto::OpenSessionReply> plain = OpenSession(incarnation());
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->pin_entries(), 64u);
  absl::StatusOr<proto::OpenSessionReply> short_of =
      OpenSession(incarnation(), 1000);
  ASSERT_TRUE(short_of.ok()) << short_of.status();
  EXPECT_EQ(short_of->pin_entries(), 64u);
  absl::Status none = OpenSession(incarnation()).status();
  EXPECT_EQ(none.code(), absl::StatusCode::kResourceExhausted) << none;
  EXPECT_TRUE(absl::StrContains(none.message(), "no free pin table")) << none;
  // The node serves on: the sessions it holds renew.
  EXPECT_TRUE(Renew(*wide, 1).ok());
}

TEST_P(NodeKvTest, SessionsOpenRenewCloseAndExpireInTheBackground) {
  ASSERT_NO_FATAL_FAILURE(Start(Options()));
  EXPECT_EQ(OpenSession(incarnation() + 1).status().code(),
            absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<proto::OpenSessionReply> a = OpenSession(incarnation());
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<proto::OpenSessionReply> b = OpenSession(incarnation());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_GE(a->pin_table_offset(), layout().pin_area_offset());
  EXPECT_NE(a->pin_table_offset(), b->pin_table_offset());
  EXPECT_EQ(a->pin_entries(), 64u);
  EXPECT_EQ(a->lease_ms(), 10000u);
  EXPECT_EQ(a->node_clock_ms(), uint64_t(absl::ToUnixMillis(env_.Now())));
  ASSERT_TRUE(Renew(*a, 40).ok());
  ASSERT_TRUE(Close(*b).ok());
  EXPECT_EQ(Close(*b).code(), absl::StatusCode::kNotFound);
  proto::OpenSessionReply wrong = *a;
  wrong.set_token(a->token() + 1);
  EXPECT_EQ(Renew(wrong, 0).code(), absl::StatusCode::kNotFound);
  format::PinEntry pin{SlabOffset(0), format::kPinForever};
  ASSERT_TRUE(
      remote_
          ->Write(a->pin_table_offset() + 3 * format::kPinEntryBytes,
                  std::string(reinterpret_cast<char*>(&pin), sizeof(pin)))
          .ok());
  EXPECT_EQ(node_->Stats().sessions_size(), 1);
  // The client dies: no more renewals. One lease later the node has ended
  // the session on its own and zeroed its table.
  env_.Advance(absl::Seconds(10));
  ASSERT_TRUE(Eventually([&] { return node_->Stats().sessions_size() == 0; }));
  absl::StatusOr<std::string> table =
      remote_->Read(a->pin_table_offset(), 64 * format::kPinEntryBytes);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(*table, std::string(64 * format::kPinEntryBytes, '\0'));
  EXPECT_EQ(Renew(*a, 41).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(node_->Stats().clients_total().hits(), 40u);
}

TEST_P(NodeKvTest, ReleaseSlabWithAnotherGrantsTokenIsRefusedAndSealsNothing) {
  // Client ids are public (GetStats lists them): anyone could name the
  // writer's id, but only the writer was told its grant's token.
  ASSERT_NO_FATAL_FAILURE(Start(Options()));
  absl::StatusOr<proto::GrantSlabReply> g = Grant();
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_NE(g->token(), 0u);
  proto::GrantSlabReply forged = *g;
  forged.set_token(g->token() ^ 1);
  EXPECT_EQ(Release(forged).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(node_->Stats().slabs_sealed(), 0u);
  EXPECT_EQ(node_->Stats().slabs_granted(), 1u);
  EXPECT_TRUE(Release(*g).ok());
  EXPECT_EQ(node_->Stats().slabs_sealed(), 1u);
}

TEST_P(NodeKvTest, WithoutEvictionAFullPoolIsResourceExhausted) {
  NodeOptions options = Options();
  options.evict = false;
  ASSERT_NO_FATAL_FAILURE(Start(options));
  for (uint64_t slot = 0; slot < layout().slab_count(); ++slot) {
    uint64_t slab, offset;
    ASSERT_NO_FATAL_FAILURE(PutIntoNewSlab(slot, &slab, &offset));
  }
  EXPECT_EQ(Grant().status().code(), absl::StatusCode::kResourceExhausted);
  absl::SleepFor(absl::Milliseconds(50));  // loop passes: still nothing
  EXPECT_EQ(node_->Stats().slabs_evicted(), 0u);
  for (uint64_t slot = 0; slot < layout().slab_count(); ++slot) {
    absl::StatusOr<uint64_t> word = remote_->ReadWord(SlotOffset(slot));
    ASSERT_TRUE(word.ok());
    EXPECT_EQ(*word, words_[slot]);
  }
}

TEST_P(NodeKvTest, PublishesTheCurrentLayoutInNodeInfoAndTheSuperblock) {
  ASSERT_NO_FATAL_FAILURE(Start(Options()));
  absl::StatusOr<std::string> bytes =
      remote_->Read(0, sizeof(format::Superblock));
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  format::Superblock sb;
  std::memcpy(&sb, bytes->data(), sizeof(sb));
  EXPECT_EQ(sb.version, 4u);  // 4: objects record their map epoch
  EXPECT_EQ(sb.slab_meta_offset, layout().slab_meta_offset());
  EXPECT_EQ(sb.pin_area_offset, layout().pin_area_offset());
  EXPECT_EQ(sb.pin_sessions, 4u);
  EXPECT_EQ(sb.pins_per_session, 64u);
  EXPECT_EQ(layout().pin_sessions(), 4u);
  EXPECT_EQ(layout().pins_per_session(), 64u);
  EXPECT_GT(layout().slab_meta_offset(), layout().index_offset());
  EXPECT_GT(layout().pin_area_offset(), layout().slab_meta_offset());
  EXPECT_GE(layout().slab_area_offset(),
            layout().pin_area_offset() + 4 * 64 * format::kPinEntryBytes);
}

INSTANTIATE_TEST_SUITE_P(Transports, NodeKvTest,
                         ::testing::Values(Fabric::kTcp, Fabric::kSim),
                         [](const auto& info) {
                           return info.param == Fabric::kTcp ? "Tcp" : "Sim";
                         });

TEST(NodeKvOptions, BadWatermarksAndSessionLeaseAreInvalidArgument) {
  NodeOptions o;
  o.coordinator = "127.0.0.1:1";  // never reached: options are checked first
  o.capacity_bytes = 1 << 20;
  o.evict_high_watermark = 0.7;
  o.evict_low_watermark = 0.8;
  auto t = rdma::CreateTcpTransport();
  ASSERT_TRUE(t.ok());
  absl::StatusOr<std::unique_ptr<Node>> node = Node::Start(o, *std::move(t));
  EXPECT_EQ(node.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(node.status().message().find("evict_low_watermark"),
            std::string::npos)
      << node.status();
  o.evict_high_watermark = 0.9;
  o.session_lease = absl::ZeroDuration();
  t = rdma::CreateTcpTransport();
  ASSERT_TRUE(t.ok());
  node = Node::Start(o, *std::move(t));
  EXPECT_EQ(node.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(node.status().message().find("session_lease"), std::string::npos)
      << node.status();
}

}  // namespace
}  // namespace meshpool::store
