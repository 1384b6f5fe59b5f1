// The coordinator over real gRPC on 127.0.0.1: membership, failure
// detection, watch streams, client errors. Time is a fake clock; deaths are
// driven by advancing it and calling the reaper through the test peer.
#include "coordinator/coordinator.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/membership.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "placement/coordinator_client.h"
#include "placement/map_delta.h"
#include "placement/placement.h"
#include "proto/proto.h"
#include "tests/fake_env.h"
#include "tests/node_info.h"

namespace meshpool::coordinator {

class CoordinatorTestPeer {
 public:
  static absl::StatusOr<int> Reap(Coordinator& coordinator) { return coordinator.Reap(); }
};

namespace {

using ::testing::HasSubstr;

// Generous bound for events that arrive in milliseconds; only a broken
// coordinator ever waits this long.
constexpr absl::Duration kEventTimeout = absl::Seconds(20);
constexpr absl::Duration kDeadAfter = absl::Seconds(3);
// So long that the background reaper never runs during a test: tests reap
// through the peer instead.
constexpr absl::Duration kQuietHeartbeat = absl::Hours(1);

proto::NodeInfo ValidNode(const std::string& id = "", uint64_t incarnation = 1) {
  proto::NodeInfo info;
  info.set_node_id(id);
  info.set_incarnation(incarnation);
  info.set_control_address("127.0.0.1:7000");
  info.add_transport_addresses("tcp://127.0.0.1:7001");
  info.mutable_pool()->set_addr(0x10000);
  info.mutable_pool()->set_rkey(7);
  testing::SetPool(&info, uint64_t{1} << 30);
  info.set_hostname("test");
  return info;
}

const proto::NodeEntry* FindEntry(const proto::ClusterMap& map, const std::string& id) {
  for (const proto::NodeEntry& entry : map.nodes()) {
    if (entry.info().node_id() == id) return &entry;
  }
  return nullptr;
}

// Collects the maps a watch delivers.
class MapCollector {
 public:
  std::function<void(const proto::ClusterMap&)> Callback() {
    return [this](const proto::ClusterMap& map) {
      absl::MutexLock lock(&mu_);
      maps_.push_back(map);
    };
  }
  // The first delivered map satisfying `wanted`; fails the test on timeout.
  proto::ClusterMap AwaitMap(const std::function<bool(const proto::ClusterMap&)>& wanted,
                             absl::string_view what) {
    absl::MutexLock lock(&mu_);
    auto arrived = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return !maps_.empty() && wanted(maps_.back());
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&arrived), kEventTimeout)) {
      ADD_FAILURE() << "no map with " << what << " within " << kEventTimeout;
      return proto::ClusterMap();
    }
    for (const proto::ClusterMap& map : maps_) {
      if (wanted(map)) return map;
    }
    return maps_.back();
  }
  proto::ClusterMap AwaitEpoch(uint64_t epoch) {
    return AwaitMap([epoch](const proto::ClusterMap& map) { return map.epoch() >= epoch; },
                    absl::StrCat("epoch >= ", epoch));
  }
  std::vector<uint64_t> Epochs() {
    absl::MutexLock lock(&mu_);
    std::vector<uint64_t> epochs;
    for (const proto::ClusterMap& map : maps_) epochs.push_back(map.epoch());
    return epochs;
  }

 private:
  absl::Mutex mu_;
  std::vector<proto::ClusterMap> maps_ ABSL_GUARDED_BY(mu_);
};

class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(kQuietHeartbeat, absl::Hours(3) + kDeadAfter); }

  void Start(absl::Duration heartbeat, absl::Duration dead_after,
             std::string listen = "127.0.0.1:0",
             RegistrationLimits registration = {}) {
    client_.reset();
    coordinator_.reset();
    dead_after_ = dead_after;
    CoordinatorOptions options;
    options.listen = std::move(listen);
    options.heartbeat_interval = heartbeat;
    options.dead_after = dead_after;
    options.env = &env_;
    options.registration = registration;
    absl::StatusOr<std::unique_ptr<Coordinator>> coordinator =
        Coordinator::Start(std::move(options));
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    coordinator_ = *std::move(coordinator);
    absl::StatusOr<std::unique_ptr<placement::CoordinatorClient>> client =
        placement::CoordinatorClient::Connect(coordinator_->address());
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  proto::RegisterNodeReply Register(const proto::NodeInfo& info) {
    absl::StatusOr<proto::RegisterNodeReply> reply = client_->RegisterNode(info);
    EXPECT_TRUE(reply.ok()) << reply.status();
    return reply.ok() ? *reply : proto::RegisterNodeReply();
  }

  proto::HeartbeatReply Beat(const std::string& id, uint64_t incarnation,
                             uint64_t used_bytes = 0) {
    proto::HeartbeatRequest request;
    request.set_node_id(id);
    request.set_incarnation(incarnation);
    request.mutable_stats()->set_used_bytes(used_bytes);
    absl::StatusOr<proto::HeartbeatReply> reply = client_->Heartbeat(request);
    EXPECT_TRUE(reply.ok()) << reply.status();
    return reply.ok() ? *reply : proto::HeartbeatReply();
  }

  proto::ClusterMap RemoteMap() {
    absl::StatusOr<proto::ClusterMap> map = client_->GetClusterMap();
    EXPECT_TRUE(map.ok()) << map.status();
    return map.ok() ? *map : proto::ClusterMap();
  }

  testing::FakeEnv env_;
  absl::Duration dead_after_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<placement::CoordinatorClient> client_;
};

TEST_F(CoordinatorTest, RegisterAssignsIdsAndBumpsEpoch) {
  EXPECT_EQ(RemoteMap().epoch(), 0u);
  const proto::RegisterNodeReply first = Register(ValidNode());
  EXPECT_EQ(first.node_id(), "node-1");
  EXPECT_EQ(first.epoch(), 1u);
  EXPECT_EQ(first.heartbeat_interval_ms(), absl::ToInt64Milliseconds(kQuietHeartbeat));
  const proto::RegisterNodeReply second = Register(ValidNode());
  EXPECT_EQ(second.node_id(), "node-2");
  EXPECT_EQ(second.epoch(), 2u);
  EXPECT_EQ(Register(ValidNode("edge-a")).node_id(), "edge-a");
  EXPECT_EQ(Register(ValidNode()).node_id(), "node-3");

  const proto::ClusterMap map = RemoteMap();
  EXPECT_EQ(map.epoch(), 4u);
  ASSERT_EQ(map.nodes_size(), 4);
  for (const proto::NodeEntry& entry : map.nodes()) {
    EXPECT_EQ(entry.state(), proto::NODE_ALIVE) << entry.info().node_id();
    EXPECT_EQ(entry.info().transport_addresses(0), "tcp://127.0.0.1:7001");
    EXPECT_EQ(entry.last_heartbeat_unix_ms(), absl::ToUnixMillis(env_.Now()));
  }
  EXPECT_EQ(coordinator_->Map().SerializeAsString(), map.SerializeAsString());
}

TEST_F(CoordinatorTest, TheMapCarriesNoPoolAddressOrKey) {
  // A node that sends them anyway (ValidNode does) is stored without them:
  // with them, any peer reaching its data port could read the whole pool.
  const proto::NodeInfo sent = ValidNode("leaky");
  ASSERT_NE(sent.pool().rkey(), 0u);
  Register(sent);
  const proto::ClusterMap map = RemoteMap();
  const proto::NodeEntry* entry = FindEntry(map, "leaky");
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(entry->info().pool().addr(), 0u);
  EXPECT_EQ(entry->info().pool().rkey(), 0u);
  EXPECT_EQ(entry->info().pool().length(), sent.pool().length());
  EXPECT_EQ(entry->info().layout().SerializeAsString(),
            sent.layout().SerializeAsString());
}

TEST_F(CoordinatorTest, ConcurrentRegistrationsGetDistinctIds) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 10;
  absl::Mutex mu;
  std::vector<std::string> ids;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kPerThread; ++i) {
        absl::StatusOr<proto::RegisterNodeReply> reply = client_->RegisterNode(ValidNode());
        ASSERT_TRUE(reply.ok()) << reply.status();
        absl::MutexLock lock(&mu);
        ids.push_back(reply->node_id());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(std::set<std::string>(ids.begin(), ids.end()).size(), kThreads * kPerThread);
  EXPECT_EQ(RemoteMap().epoch(), static_cast<uint64_t>(kThreads * kPerThread));
}

TEST_F(CoordinatorTest, HeartbeatFromUnknownOrStaleNodeIsNotKnown) {
  const std::string id = Register(ValidNode("", /*incarnation=*/5)).node_id();
  EXPECT_FALSE(Beat("ghost", 5).known());
  EXPECT_FALSE(Beat(id, 4).known());  // stale incarnation
  EXPECT_TRUE(Beat(id, 4).declared_dead()) << "another incarnation holds the id";

  const proto::HeartbeatReply reply = Beat(id, 5, /*used_bytes=*/12345);
  EXPECT_TRUE(reply.known());
  EXPECT_EQ(reply.epoch(), 1u);
  const proto::ClusterMap map = RemoteMap();
  EXPECT_EQ(map.epoch(), 1u) << "a heartbeat must not bump the epoch";
  ASSERT_NE(FindEntry(map, id), nullptr);
  EXPECT_EQ(FindEntry(map, id)->stats().used_bytes(), 12345u);
}

TEST_F(CoordinatorTest, SilentNodeIsDeclaredDead) {
  const std::string silent = Register(ValidNode()).node_id();
  const std::string chatty = Register(ValidNode()).node_id();
  env_.Advance(dead_after_ / 2);
  ASSERT_TRUE(Beat(chatty, 1).known());
  env_.Advance(dead_after_ / 2 - absl::Milliseconds(1));
  absl::StatusOr<int> reaped = CoordinatorTestPeer::Reap(*coordinator_);
  ASSERT_TRUE(reaped.ok()) << reaped.status();
  EXPECT_EQ(*reaped, 0) << "one millisecond early";
  EXPECT_EQ(RemoteMap().epoch(), 2u);

  env_.Advance(absl::Milliseconds(1));
  reaped = CoordinatorTestPeer::Reap(*coordinator_);
  ASSERT_TRUE(reaped.ok()) << reaped.status();
  EXPECT_EQ(*reaped, 1);
  const proto::ClusterMap map = RemoteMap();
  EXPECT_EQ(map.epoch(), 3u);
  ASSERT_EQ(map.nodes_size(), 2) << "dead nodes stay in the map";
  EXPECT_EQ(FindEntry(map, silent)->state(), proto::NODE_DEAD);
  EXPECT_EQ(FindEntry(map, chatty)->state(), proto::NODE_ALIVE);
  // The dead node must register again; placement skips it.
  EXPECT_FALSE(Beat(silent, 1).known());
  for (uint64_t key = 0; key < 100; ++key) {
    const int home = placement::HomeNode(map, key, ~key);
    ASSERT_GE(home, 0);
    EXPECT_EQ(map.nodes(home).info().node_id(), chatty);
  }
  // Reaping again changes nothing.
  reaped = CoordinatorTestPeer::Reap(*coordinator_);
  ASSERT_TRUE(reaped.ok());
  EXPECT_EQ(*reaped, 0);
  EXPECT_EQ(RemoteMap().epoch(), 3u);
}

TEST_F(CoordinatorTest, RestartedNodeReplacesItsEntry) {
  const std::string id = Register(ValidNode("", 1)).node_id();
  env_.Advance(dead_after_);
  ASSERT_TRUE(CoordinatorTestPeer::Reap(*coordinator_).ok());
  ASSERT_EQ(FindEntry(RemoteMap(), id)->state(), proto::NODE_DEAD);

  proto::NodeInfo restarted = ValidNode(id, 2);
  restarted.set_control_address("127.0.0.1:7100");
  const proto::RegisterNodeReply reply = Register(restarted);
  EXPECT_EQ(reply.node_id(), id);
  EXPECT_EQ(reply.epoch(), 3u);
  const proto::ClusterMap map = RemoteMap();
  ASSERT_EQ(map.nodes_size(), 1);
  EXPECT_EQ(map.nodes(0).info().incarnation(), 2u);
  EXPECT_EQ(map.nodes(0).info().control_address(), "127.0.0.1:7100");
  EXPECT_EQ(map.nodes(0).state(), proto::NODE_ALIVE);
  EXPECT_FALSE(Beat(id, 1).known()) << "the old incarnation is gone";
  EXPECT_TRUE(Beat(id, 2).known());
}

TEST_F(CoordinatorTest, ANodeThatSawNewerEpochsRestartsTheMapsHistoryPastThem) {
  // A node of a coordinator that lost its state registers, having seen
  // epoch 1000: the map starts past every epoch anyone saw then.
  const std::string a = Register(ValidNode("", 1)).node_id();
  absl::StatusOr<proto::RegisterNodeReply> old_node =
      client_->RegisterNode(ValidNode("old-node", 7), /*last_epoch=*/1000);
  ASSERT_TRUE(old_node.ok()) << old_node.status();
  EXPECT_EQ(old_node->epoch(), 1000 + kLostHistoryEpochGap + 1);
  proto::ClusterMap map = RemoteMap();
  EXPECT_EQ(map.history_epoch(), 1000 + kLostHistoryEpochGap);
  ASSERT_NE(FindEntry(map, a), nullptr) << "the nodes stay";

  // A node that saw no newer epoch than the coordinator's changes nothing;
  // a death after the restart is a departure again.
  absl::StatusOr<proto::RegisterNodeReply> b =
      client_->RegisterNode(ValidNode("b", 1), map.epoch());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->epoch(), map.epoch() + 1);
  env_.Advance(dead_after_);
  ASSERT_TRUE(CoordinatorTestPeer::Reap(*coordinator_).ok());
  map = RemoteMap();
  EXPECT_EQ(map.history_epoch(), 1000 + kLostHistoryEpochGap);
  EXPECT_EQ(map.departures_size(), 3) << "a, old-node and b died";
}

TEST_F(CoordinatorTest, DeadIncarnationIsToldSoAndCannotRejoin) {
  const std::string id = Register(ValidNode("", 1)).node_id();
  EXPECT_FALSE(Beat(id, 1).declared_dead());
  env_.Advance(dead_after_);
  ASSERT_TRUE(CoordinatorTestPeer::Reap(*coordinator_).ok());
  const proto::HeartbeatReply reply = Beat(id, 1);
  EXPECT_FALSE(reply.known());
  EXPECT_TRUE(reply.declared_dead())
      << "a node paused past dead_after must learn its memory is stale";
  // Its keys may have been rewritten elsewhere: the same incarnation may
  // not come back; a restarted process (new incarnation) may.
  absl::StatusOr<proto::RegisterNodeReply> again =
      client_->RegisterNode(ValidNode(id, 1));
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(again.status().message().find("restart"), std::string::npos)
      << again.status();
  EXPECT_EQ(FindEntry(RemoteMap(), id)->state(), proto::NODE_DEAD);
  EXPECT_EQ(Register(ValidNode(id, 2)).node_id(), id);
  EXPECT_TRUE(Beat(id, 1).declared_dead())
      << "superseded: registering again would take the id back";
  EXPECT_TRUE(Beat(id, 2).known());
}

// A dead node's entry leaves the map forget_dead_after after its death
// (its id may then be handed out again), and its process, should it come
// back, is still told it was declared dead and cannot register again.
TEST_F(CoordinatorTest, DeadEntriesAreForgottenAndTheirProcessesStayOut) {
  RegistrationLimits limits;
  limits.forget_dead_after = absl::Minutes(1);
  Start(kQuietHeartbeat, absl::Hours(3) + kDeadAfter, "127.0.0.1:0", limits);
  const std::string alive = Register(ValidNode("", 1)).node_id();
  const std::string gone = Register(ValidNode("", 1)).node_id();
  ASSERT_EQ(gone, "node-2");
  env_.Advance(dead_after_);
  ASSERT_TRUE(Beat(alive, 1).known());
  ASSERT_TRUE(CoordinatorTestPeer::Reap(*coordinator_).ok());
  ASSERT_EQ(FindEntry(RemoteMap(), gone)->state(), proto::NODE_DEAD);
  env_.Advance(absl::Minutes(1) - absl::Milliseconds(1));
  ASSERT_TRUE(Beat(alive, 1).known());
  ASSERT_TRUE(CoordinatorTestPeer::Reap(*coordinator_).ok());
  ASSERT_NE(FindEntry(RemoteMap(), gone), nullptr) << "one millisecond early";
  const uint64_t epoch = RemoteMap().epoch();

  env_.Advance(absl::Milliseconds(1));
  ASSERT_TRUE(Beat(alive, 1).known());
  ASSERT_TRUE(CoordinatorTestPeer::Reap(*coordinator_).ok());
  const proto::ClusterMap map = RemoteMap();
  EXPECT_EQ(map.epoch(), epoch + 1);
  ASSERT_EQ(map.nodes_size(), 1);
  EXPECT_EQ(map.nodes(0).info().node_id(), alive);

  const proto::HeartbeatReply back = Beat(gone, 1);
  EXPECT_FALSE(back.known());
  EXPECT_TRUE(back.declared_dead()) << "forgotten, not forgiven";
  EXPECT_EQ(client_->RegisterNode(ValidNode(gone, 1)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // A new process may take the id, given or handed out again.
  EXPECT_EQ(Register(ValidNode("", 2)).node_id(), gone);
  EXPECT_TRUE(Beat(gone, 2).known());
  EXPECT_TRUE(Beat(gone, 1).declared_dead());
}

TEST(MembershipTest, AFullMapRefusesNewIdsUntilDeadEntriesAreForgotten) {
  testing::FakeEnv env;
  proto::ClusterMap initial;
  for (size_t i = 0; i < kMaxMapNodes; ++i) {
    proto::NodeEntry* e = initial.add_nodes();
    *e->mutable_info() = ValidNode(absl::StrCat("n", i), 1);
    e->set_state(proto::NODE_DEAD);
  }
  RegistrationLimits limits;
  limits.registrations_per_minute = 0;
  limits.forget_dead_after = absl::Minutes(1);
  auto membership = Membership::Create(NewInMemoryCoordinatorState(initial),
                                       absl::Seconds(10), limits, &env);
  ASSERT_TRUE(membership.ok()) << membership.status();
  absl::Status s = (*membership)->Register(ValidNode("new", 1), "t").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "--forget-dead-after")) << s;
  EXPECT_EQ((*membership)->Register(ValidNode("", 1), "t").status().code(),
            absl::StatusCode::kResourceExhausted);
  // A known id (a restart) still registers.
  EXPECT_TRUE((*membership)->Register(ValidNode("n5", 2), "t").ok());
  env.Advance(absl::Seconds(10) + absl::Minutes(1));
  ASSERT_TRUE((*membership)->Reap().ok());
  absl::StatusOr<proto::ClusterMap> map = (*membership)->Map();
  ASSERT_TRUE(map.ok());
  ASSERT_EQ(map->nodes_size(), 1) << "every entry dead that long is gone";
  EXPECT_EQ(map->nodes(0).info().node_id(), "n5");
  EXPECT_TRUE((*membership)->Register(ValidNode("new", 1), "t").ok());
}

TEST_F(CoordinatorTest, InvalidRegistrationsAreRejected) {
  struct Case {
    std::string what;
    proto::NodeInfo info;
  };
  std::vector<Case> cases;
  cases.push_back({"transport address", ValidNode()});
  cases.back().info.clear_transport_addresses();
  cases.push_back({"transport address is empty", ValidNode()});
  cases.back().info.set_transport_addresses(0, "");
  cases.push_back({"control address", ValidNode()});
  cases.back().info.clear_control_address();
  cases.push_back({"pool region", ValidNode()});
  cases.back().info.clear_pool();
  cases.push_back({"capacity", ValidNode()});
  cases.back().info.set_capacity_bytes(0);
  cases.push_back({"layout", ValidNode()});
  cases.back().info.clear_layout();
  cases.push_back({"node_id", ValidNode(std::string(placement::kMaxNodeIdBytes + 1, 'n'))});
  for (const Case& c : cases) {
    absl::StatusOr<proto::RegisterNodeReply> reply = client_->RegisterNode(c.info);
    ASSERT_FALSE(reply.ok()) << c.what;
    EXPECT_EQ(reply.status().code(), absl::StatusCode::kInvalidArgument) << reply.status();
    EXPECT_THAT(std::string(reply.status().message()), HasSubstr(c.what));
  }
  EXPECT_EQ(RemoteMap().epoch(), 0u);
  EXPECT_EQ(RemoteMap().nodes_size(), 0);
}

// A node claiming more memory than its pool, or than the coordinator
// allows a node, would draw most keys to itself (placement weighs nodes by
// capacity): refused, and the map stays as it was.
TEST_F(CoordinatorTest, OversizedCapacityOrUnfitLayoutIsRefused) {
  struct Case {
    std::string what;
    proto::NodeInfo info;
  };
  std::vector<Case> cases;
  cases.push_back({"exceeds the pool layout's pool_bytes", ValidNode()});
  cases.back().info.set_capacity_bytes(uint64_t{1} << 44);
  cases.push_back({"slab table", ValidNode()});
  cases.back().info.mutable_layout()->set_slab_count(uint64_t{1} << 40);
  cases.push_back({"pool_bytes", ValidNode()});
  cases.back().info.mutable_pool()->set_length(uint64_t{1} << 20);
  cases.push_back({"transport addresses", ValidNode()});
  for (int i = 0; i < kMaxTransportAddresses; ++i) {
    cases.back().info.add_transport_addresses("tcp://127.0.0.1:1");
  }
  cases.push_back({"control address is", ValidNode()});
  cases.back().info.set_control_address(
      std::string(kMaxNodeAddressBytes + 1, 'a'));
  for (const Case& c : cases) {
    absl::StatusOr<proto::RegisterNodeReply> reply =
        client_->RegisterNode(c.info);
    ASSERT_FALSE(reply.ok()) << c.what;
    EXPECT_EQ(reply.status().code(), absl::StatusCode::kInvalidArgument)
        << reply.status();
    EXPECT_THAT(std::string(reply.status().message()), HasSubstr(c.what));
  }
  EXPECT_EQ(RemoteMap().nodes_size(), 0);

  // A cap of 512 MiB per node: the 1 GiB node is refused, naming the flag.
  RegistrationLimits capped;
  capped.max_node_bytes = uint64_t{512} << 20;
  Start(kQuietHeartbeat, absl::Hours(3) + kDeadAfter, "127.0.0.1:0", capped);
  absl::StatusOr<proto::RegisterNodeReply> big =
      client_->RegisterNode(ValidNode());
  EXPECT_EQ(big.status().code(), absl::StatusCode::kInvalidArgument)
      << big.status();
  EXPECT_THAT(std::string(big.status().message()),
              HasSubstr("--max-node-bytes"));
  proto::NodeInfo small = ValidNode();
  testing::SetPool(&small, uint64_t{512} << 20);
  EXPECT_TRUE(client_->RegisterNode(small).ok());
}

// One caller registering in a loop would rewrite the map and send it to
// every watcher each time: past its budget it is refused ResourceExhausted
// until its bucket refills (by the coordinator's clock), and nothing it
// sent reaches the map.
TEST_F(CoordinatorTest,
       RegistrationsBeyondTheRateAreRefusedUntilTheBucketRefills) {
  constexpr int kPerMinute = 6;
  RegistrationLimits limits;
  limits.registrations_per_minute = kPerMinute;
  Start(kQuietHeartbeat, absl::Hours(3) + kDeadAfter, "127.0.0.1:0", limits);
  placement::CoordinatorClient* client = client_.get();
  for (int i = 0; i < kPerMinute; ++i) {
    ASSERT_TRUE(client->RegisterNode(ValidNode()).ok()) << i;
  }
  absl::StatusOr<proto::RegisterNodeReply> refused =
      client->RegisterNode(ValidNode());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted)
      << refused.status();
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("--registrations-per-minute"));
  EXPECT_EQ(RemoteMap().nodes_size(), kPerMinute);
  env_.Advance(absl::Seconds(60) / kPerMinute);  // one token back
  EXPECT_TRUE(client->RegisterNode(ValidNode()).ok());
  EXPECT_EQ(client->RegisterNode(ValidNode()).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(RateLimiterTest, OneCallersBurstLeavesOthersTheirOwn) {
  testing::FakeEnv env;
  RateLimiter limiter(3, "calls", "--limit", &env);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(limiter.Admit("a").ok());
  EXPECT_EQ(limiter.Admit("a").code(), absl::StatusCode::kResourceExhausted);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(limiter.Admit("b").ok()) << i;
  env.Advance(absl::Seconds(20));
  EXPECT_TRUE(limiter.Admit("a").ok());
  EXPECT_EQ(limiter.Admit("a").code(), absl::StatusCode::kResourceExhausted);
  RateLimiter unlimited(0, "calls", "--limit", &env);
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(unlimited.Admit("a").ok());
}

// Callers beyond kMaxRateLimitedCallers: those whose bucket refilled are
// forgotten to make room; while all are throttled, a newcomer is refused.
TEST(RateLimiterTest, TrackedCallersStayBounded) {
  testing::FakeEnv env;
  RateLimiter limiter(1, "calls", "--limit", &env);
  for (size_t i = 0; i < kMaxRateLimitedCallers; ++i) {
    ASSERT_TRUE(limiter.Admit(absl::StrCat("caller-", i)).ok());
  }
  EXPECT_EQ(limiter.Admit("newcomer").code(),
            absl::StatusCode::kResourceExhausted);
  env.Advance(absl::Minutes(1));
  EXPECT_TRUE(limiter.Admit("newcomer").ok());
  EXPECT_TRUE(limiter.Admit("caller-0").ok()) << "forgotten, so as if new";
}

TEST_F(CoordinatorTest, WatchSeesInitialMapJoinAndDeath) {
  const std::string first = Register(ValidNode()).node_id();
  MapCollector maps;
  absl::StatusOr<std::unique_ptr<placement::CoordinatorClient::Watch>> watch =
      client_->WatchClusterMap(0, maps.Callback());
  ASSERT_TRUE(watch.ok()) << watch.status();
  EXPECT_EQ(maps.AwaitEpoch(1).nodes_size(), 1);

  const std::string second = Register(ValidNode()).node_id();
  const proto::ClusterMap joined = maps.AwaitEpoch(2);
  EXPECT_EQ(joined.epoch(), 2u);
  ASSERT_NE(FindEntry(joined, second), nullptr);

  env_.Advance(dead_after_ / 2);
  ASSERT_TRUE(Beat(second, 1).known());
  env_.Advance(dead_after_ / 2);
  ASSERT_TRUE(CoordinatorTestPeer::Reap(*coordinator_).ok());
  const proto::ClusterMap died = maps.AwaitEpoch(3);
  EXPECT_EQ(died.epoch(), 3u);
  EXPECT_EQ(FindEntry(died, first)->state(), proto::NODE_DEAD);
  EXPECT_EQ(FindEntry(died, second)->state(), proto::NODE_ALIVE);
  EXPECT_EQ(maps.Epochs(), (std::vector<uint64_t>{1, 2, 3}));
}

TEST_F(CoordinatorTest, WatchFromCurrentEpochGetsOnlyNewerMaps) {
  Register(ValidNode());
  Register(ValidNode());
  MapCollector maps;
  auto watch = client_->WatchClusterMap(2, maps.Callback());
  ASSERT_TRUE(watch.ok()) << watch.status();
  Register(ValidNode());
  EXPECT_EQ(maps.AwaitEpoch(3).epoch(), 3u);
  EXPECT_EQ(maps.Epochs(), (std::vector<uint64_t>{3}));
}

TEST_F(CoordinatorTest, BackgroundReaperDeclaresSilentNodeDead) {
  Start(absl::Milliseconds(10), kDeadAfter);
  const std::string id = Register(ValidNode()).node_id();
  MapCollector maps;
  auto watch = client_->WatchClusterMap(1, maps.Callback());
  ASSERT_TRUE(watch.ok()) << watch.status();
  env_.Advance(kDeadAfter);  // the reaper thread notices on its own
  const proto::ClusterMap died = maps.AwaitEpoch(2);
  ASSERT_NE(FindEntry(died, id), nullptr);
  EXPECT_EQ(FindEntry(died, id)->state(), proto::NODE_DEAD);
}

TEST_F(CoordinatorTest, WatchResumesAfterCoordinatorRestartsWithoutState) {
  Register(ValidNode());
  Register(ValidNode());
  MapCollector maps;
  auto watch = client_->WatchClusterMap(0, maps.Callback());
  ASSERT_TRUE(watch.ok()) << watch.status();
  ASSERT_EQ(maps.AwaitEpoch(2).epoch(), 2u);

  // Same port, fresh in-memory state: epoch 0 < the 2 the watch knows.
  // Start() also destroys the client: the watch outlives it.
  const std::string address = coordinator_->address();
  Start(kQuietHeartbeat, absl::Hours(3), address);
  Register(ValidNode("after-restart"));
  const proto::ClusterMap map = maps.AwaitMap(
      [](const proto::ClusterMap& m) { return FindEntry(m, "after-restart") != nullptr; },
      "the node registered after the restart");
  EXPECT_EQ(map.epoch(), 1u);
  const std::vector<uint64_t> epochs = maps.Epochs();
  // The watch starts at the current map (epoch 2), then takes the restarted
  // coordinator's lower epoch (0 or 1, depending on when it reconnected).
  ASSERT_GE(epochs.size(), 2u);
  EXPECT_EQ(epochs[0], 2u);
  EXPECT_LT(epochs[1], 2u);
}

TEST_F(CoordinatorTest, UpdatesStreamTheWholeMapFirstThenSmallerDeltas) {
  for (int i = 0; i < 8; ++i) Register(ValidNode());
  auto channel = grpc::CreateChannel(coordinator_->address(),
                                     grpc::InsecureChannelCredentials());
  auto stub = proto::Coordinator::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kEventTimeout));
  proto::WatchClusterMapRequest request;
  auto reader = stub->WatchClusterMapUpdates(&context, request);
  proto::ClusterMapUpdate update;
  ASSERT_TRUE(reader->Read(&update));
  ASSERT_TRUE(update.has_map()) << "the first message is the whole map";
  proto::ClusterMap held = update.map();
  EXPECT_EQ(held.epoch(), 8u);

  const std::string joined = Register(ValidNode()).node_id();
  ASSERT_TRUE(reader->Read(&update));
  ASSERT_TRUE(update.has_delta()) << update.ShortDebugString();
  ASSERT_EQ(update.delta().changed_size(), 1);
  EXPECT_EQ(update.delta().changed(0).info().node_id(), joined);
  ASSERT_TRUE(placement::ApplyMapDelta(update.delta(), held).ok());
  absl::StatusOr<proto::ClusterMap> current = client_->GetClusterMap();
  ASSERT_TRUE(current.ok()) << current.status();
  EXPECT_LT(update.delta().ByteSizeLong() * 4, current->ByteSizeLong())
      << "one node's delta against nine nodes' map";
  ASSERT_EQ(held.epoch(), current->epoch());
  ASSERT_EQ(held.nodes_size(), current->nodes_size());
  for (int i = 0; i < held.nodes_size(); ++i) {
    EXPECT_TRUE(placement::SameEntry(held.nodes(i), current->nodes(i))) << i;
  }
  context.TryCancel();
}

TEST_F(CoordinatorTest, ShutdownEndsWatchStreamsWithUnavailable) {
  Register(ValidNode());
  auto channel = grpc::CreateChannel(coordinator_->address(), grpc::InsecureChannelCredentials());
  auto stub = proto::Coordinator::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kEventTimeout));
  proto::WatchClusterMapRequest request;
  auto reader = stub->WatchClusterMap(&context, request);
  proto::ClusterMap map;
  ASSERT_TRUE(reader->Read(&map));
  EXPECT_EQ(map.epoch(), 1u);

  coordinator_->Shutdown();
  coordinator_->Shutdown();  // idempotent
  coordinator_->Wait();      // returns: Shutdown is done
  EXPECT_FALSE(reader->Read(&map));
  const grpc::Status status = reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();

  absl::StatusOr<proto::ClusterMap> after = client_->GetClusterMap();
  ASSERT_FALSE(after.ok());
  EXPECT_EQ(after.status().code(), absl::StatusCode::kUnavailable) << after.status();
}

TEST(CoordinatorClientTest, ConnectWhereNothingListensIsUnavailable) {
  // A bound but not listening socket: connections to its port are refused,
  // and no other process can take the port while we hold it.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t length = sizeof(addr);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length), 0);
  const std::string address = absl::StrCat("127.0.0.1:", ntohs(addr.sin_port));

  absl::StatusOr<std::unique_ptr<placement::CoordinatorClient>> client =
      placement::CoordinatorClient::Connect(address, absl::Milliseconds(300));
  close(fd);
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnavailable);
  const std::string message(client.status().message());
  EXPECT_THAT(message, HasSubstr(address));
  EXPECT_THAT(message, HasSubstr("meshpool coordinator"));
  EXPECT_THAT(message, HasSubstr("coordinator address"));
  EXPECT_THAT(message, HasSubstr("MESHPOOL_COORDINATOR"));
}

TEST(CoordinatorClientTest, ConnectWithoutAddressIsInvalidArgument) {
  absl::StatusOr<std::unique_ptr<placement::CoordinatorClient>> client = placement::CoordinatorClient::Connect("");
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CoordinatorStartTest, BadOptionsAreInvalidArgument) {
  CoordinatorOptions options;
  options.heartbeat_interval = absl::Seconds(5);
  options.dead_after = absl::Seconds(3);
  absl::StatusOr<std::unique_ptr<Coordinator>> coordinator =
      Coordinator::Start(std::move(options));
  ASSERT_FALSE(coordinator.ok());
  EXPECT_EQ(coordinator.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CoordinatorStartTest, PortInUseIsFailedPrecondition) {
  absl::StatusOr<std::unique_ptr<Coordinator>> first = Coordinator::Start(CoordinatorOptions());
  ASSERT_TRUE(first.ok()) << first.status();
  CoordinatorOptions options;
  options.listen = (*first)->address();
  absl::StatusOr<std::unique_ptr<Coordinator>> second = Coordinator::Start(std::move(options));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition) << second.status();
}

}  // namespace
}  // namespace meshpool::coordinator
