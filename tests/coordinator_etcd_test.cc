// coordinator/etcd_*: the coordinator's state and its election in a real
// etcd on loopback (tests/etcd_process.h): durable fields survive a new
// process, a write fenced by a lost lead changes nothing, a standby takes
// over when the leader gives up or dies, a standby sends clients to the
// leader and stops when told, and a coordinator started again on the same
// etcd finds its nodes and regions.
#include <atomic>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/coordinator.h"
#include "coordinator/coordinator_state.h"
#include "coordinator/etcd_client.h"
#include "coordinator/etcd_leader.h"
#include "coordinator/etcd_state.h"
#include "gtest/gtest.h"
#include "placement/coordinator_client.h"
#include "tests/etcd_process.h"
#include "tests/fake_env.h"
#include "tests/fake_region_nodes.h"
#include "tests/node_info.h"
#include "tests/state_entries.h"
#include "tests/temp_dir.h"

namespace meshpool::coordinator {
namespace {

using testing::ScopedTempDir;

class EtcdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto etcd = testing::EtcdProcess::Start(dir_.path());
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = *std::move(etcd);
  }
  std::shared_ptr<EtcdClient> Client() {
    auto c = EtcdClient::Create(etcd_->endpoint());
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::shared_ptr<EtcdClient>(*std::move(c)) : nullptr;
  }
  std::unique_ptr<CoordinatorState> Open(EtcdStateOptions options = {},
                                         Env* env = nullptr) {
    options.first_region_id = 1000;
    options.env = env;
    auto state = OpenEtcdCoordinatorState(Client(), options);
    EXPECT_TRUE(state.ok()) << state.status();
    return state.ok() ? *std::move(state) : nullptr;
  }

  ScopedTempDir dir_;
  std::unique_ptr<testing::EtcdProcess> etcd_;
};

proto::NodeEntry Node(const std::string& id, uint64_t incarnation) {
  return testing::StateNode(id, incarnation);
}

proto::RegionInfo RegionNamed(const std::string& name, uint64_t id) {
  return testing::StateRegion(name, id);
}

// The node testing::FakeNodes::Add("n1", 16) stands for: 64 MiB in slabs
// of 4 MiB.
proto::NodeInfo NodeN1() {
  proto::NodeInfo info = testing::Entry("n1").info();
  info.add_transport_addresses("tcp://127.0.0.1:1");
  testing::SetPool(&info, 64 << 20, testing::kSlab);
  return info;
}

TEST_F(EtcdTest, EveryDurableFieldSurvivesANewProcess) {
  testing::FakeEnv env;
  {
    auto s = Open();
    ASSERT_NE(s, nullptr);
    ASSERT_EQ(*s->UpsertNode(Node("a", 11)), 1u);
    ASSERT_EQ(*s->UpsertNode(Node("b", 22)), 2u);
    ASSERT_EQ(*s->MarkDead("a"), 3u);
    ASSERT_EQ(*s->BumpEpoch(), 4u);
    ASSERT_TRUE(s->RecordHeartbeat("b", 999, proto::NodeStats()).ok());
    EXPECT_EQ(*s->NextRegionId(), 1000u);
    EXPECT_EQ(*s->NextRegionId(), 1001u);
    ASSERT_TRUE(s->PutRegion(RegionNamed("x", 1000)).ok());
    ASSERT_TRUE(s->PutRegion(RegionNamed("w/y", 1001)).ok());
    ASSERT_TRUE(s->PutRegion(RegionNamed("q", 7)).ok());
    ASSERT_TRUE(s->RenameRegion("x", "z", false).ok());
    EXPECT_EQ(s->RenameRegion("q", "z", false).status().code(),
              absl::StatusCode::kAlreadyExists);
    ASSERT_TRUE(s->RemoveRegion("q").ok());
    EXPECT_EQ(s->RemoveRegion("q").status().code(),
              absl::StatusCode::kNotFound);
    EXPECT_EQ(s->MarkDead("nobody").status().code(),
              absl::StatusCode::kNotFound);
  }
  auto s = Open({}, &env);  // a new client, as a new coordinator process
  ASSERT_NE(s, nullptr);
  auto map = s->Snapshot();
  ASSERT_TRUE(map.ok());
  EXPECT_EQ(map->epoch(), 4u);
  ASSERT_EQ(map->nodes_size(), 2);
  EXPECT_EQ(map->nodes(0).info().incarnation(), 11u);
  EXPECT_EQ(map->nodes(0).state(), proto::NODE_DEAD)
      << "a fenced node stays fenced";
  EXPECT_EQ(map->nodes(1).state(), proto::NODE_ALIVE);
  EXPECT_EQ(map->nodes(1).last_heartbeat_unix_ms(),
            absl::ToUnixMillis(env.Now()))
      << "liveness is not durable: an alive node counts as heard from at load";
  EXPECT_EQ(*s->NextRegionId(), 1002u) << "ids are never handed out twice";
  auto regions = s->ListRegions("");
  ASSERT_TRUE(regions.ok());
  ASSERT_EQ(regions->size(), 2u);
  EXPECT_EQ((*regions)[0].name(), "w/y");
  EXPECT_EQ((*regions)[1].name(), "z");
  EXPECT_EQ((*regions)[1].region_id(), 1000u);
  EXPECT_EQ(*s->UpsertNode(Node("c", 33)), 5u) << "the epoch continues";
}

TEST_F(EtcdTest, AForgottenNodeStaysForgottenForANewProcess) {
  {
    auto s = Open();
    ASSERT_NE(s, nullptr);
    ASSERT_EQ(*s->UpsertNode(Node("a", 11)), 1u);
    ASSERT_EQ(*s->UpsertNode(Node("b", 22)), 2u);
    ASSERT_EQ(*s->MarkDead("a"), 3u);
    ASSERT_EQ(*s->RemoveNode("a"), 4u);
    EXPECT_EQ(s->RemoveNode("a").status().code(), absl::StatusCode::kNotFound);
  }
  auto s = Open();
  ASSERT_NE(s, nullptr);
  auto map = s->Snapshot();
  ASSERT_TRUE(map.ok());
  EXPECT_EQ(map->epoch(), 4u);
  ASSERT_EQ(map->nodes_size(), 1);
  EXPECT_EQ(map->nodes(0).info().node_id(), "b");
}

TEST_F(EtcdTest, AWriteFencedByALostLeadChangesNothing) {
  std::shared_ptr<EtcdClient> client = Client();
  etcdserverpb::TxnRequest take;
  etcdserverpb::PutRequest* put = take.add_success()->mutable_request_put();
  put->set_key("/meshpool/leader");
  put->set_value("me");
  take.add_success()->mutable_request_range()->set_key("/meshpool/leader");
  auto taken = client->Txn(take);
  ASSERT_TRUE(taken.ok()) << taken.status();
  const int64_t revision =
      taken->responses(1).response_range().kvs(0).create_revision();

  EtcdStateOptions fenced;
  fenced.guard = EtcdStateOptions::Guard{"/meshpool/leader", revision};
  auto s = Open(fenced);
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->PutRegion(RegionNamed("kept", 1)).ok());
  // Another coordinator takes the lead (the key is made anew).
  etcdserverpb::TxnRequest retake;
  retake.add_success()->mutable_request_delete_range()->set_key(
      "/meshpool/leader");
  ASSERT_TRUE(client->Txn(retake).ok());
  etcdserverpb::TxnRequest other;
  other.add_success()->mutable_request_put()->set_key("/meshpool/leader");
  ASSERT_TRUE(client->Txn(other).ok());

  absl::Status refused = s->PutRegion(RegionNamed("lost", 2));
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "another one leads"))
      << refused;
  EXPECT_EQ(s->UpsertNode(Node("n", 1)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // The fenced process undid its failed change in its mirror.
  EXPECT_EQ(s->FindRegion("lost").status().code(), absl::StatusCode::kNotFound);
  auto fresh = Open();
  ASSERT_NE(fresh, nullptr);
  EXPECT_TRUE(fresh->FindRegion("kept").ok());
  EXPECT_EQ(fresh->FindRegion("lost").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(fresh->Snapshot()->nodes_size(), 0);
}

TEST_F(EtcdTest, CorruptKeysAreDataLossNamingTheKey) {
  std::shared_ptr<EtcdClient> client = Client();
  etcdserverpb::TxnRequest txn;
  etcdserverpb::PutRequest* put = txn.add_success()->mutable_request_put();
  put->set_key("/meshpool/regions/bad");
  put->set_value("not a region");
  ASSERT_TRUE(client->Txn(txn).ok());
  auto s = OpenEtcdCoordinatorState(client, EtcdStateOptions());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss) << s.status();
  EXPECT_TRUE(absl::StrContains(s.status().message(), "/meshpool/regions/bad"))
      << s.status();
  // Another prefix is another state.
  EtcdStateOptions other;
  other.prefix = "/other/";
  EXPECT_TRUE(OpenEtcdCoordinatorState(client, other).ok());
  other.prefix = "/no-slash";
  EXPECT_EQ(OpenEtcdCoordinatorState(client, other).status().code(),
            absl::StatusCode::kInvalidArgument);
}

EtcdLeadership::Options Lead(const std::string& address, bool wait) {
  EtcdLeadership::Options o;
  o.key = "/meshpool/leader";
  o.address = address;
  o.wait = wait;
  return o;
}

TEST_F(EtcdTest, AStandbyLeadsOnceTheLeaderGivesUp) {
  auto a = EtcdLeadership::Acquire(Client(), Lead("a:1", true));
  ASSERT_TRUE(a.ok()) << a.status();
  auto refused = EtcdLeadership::Acquire(Client(), Lead("b:2", false));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "a:1"))
      << refused.status();

  std::atomic<bool> led{false};
  std::unique_ptr<EtcdLeadership> b;
  std::thread standby([&] {
    auto got = EtcdLeadership::Acquire(Client(), Lead("b:2", true));
    ASSERT_TRUE(got.ok()) << got.status();
    b = *std::move(got);
    led = true;
  });
  absl::SleepFor(4 * kLeaderPollEvery);
  EXPECT_FALSE(led.load()) << "two leaders at once";
  const int64_t a_revision = (*a)->create_revision();
  a->reset();  // gives the key up (revokes its lease)
  standby.join();
  ASSERT_TRUE(led.load());
  EXPECT_GT(b->create_revision(), a_revision);
  EXPECT_FALSE(b->lost());
}

TEST_F(EtcdTest, ALeaderThatDiesIsReplacedWithinTheLeaseTtl) {
  // A leader that died without giving up: its key on a lease nobody
  // renews.
  std::shared_ptr<EtcdClient> client = Client();
  auto lease = client->LeaseGrant(kLeaderLeaseTtl);
  ASSERT_TRUE(lease.ok()) << lease.status();
  etcdserverpb::TxnRequest txn;
  etcdserverpb::PutRequest* put = txn.add_success()->mutable_request_put();
  put->set_key("/meshpool/leader");
  put->set_value("dead:1");
  put->set_lease(*lease);
  ASSERT_TRUE(client->Txn(txn).ok());
  const absl::Time died = absl::Now();
  auto b = EtcdLeadership::Acquire(Client(), Lead("b:2", true));
  ASSERT_TRUE(b.ok()) << b.status();
  const absl::Duration took = absl::Now() - died;
  std::cout << "a dead leader's key expired and the standby led after " << took
            << "\n";
  EXPECT_LT(took, absl::Seconds(5)) << "the issue's bound for a failover";
}

TEST_F(EtcdTest, ACoordinatorStartedAgainFindsItsNodesAndRegions) {
  auto run = [&](auto&& body) {
    CoordinatorOptions options;
    options.etcd = etcd_->endpoint();
    auto nodes = std::make_unique<testing::FakeNodes>();
    nodes->Add("n1", 16);
    options.region_nodes = std::move(nodes);
    auto coordinator = Coordinator::Start(std::move(options));
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    auto client =
        placement::CoordinatorClient::Connect((*coordinator)->address());
    ASSERT_TRUE(client.ok()) << client.status();
    body(**client);
  };
  run([](placement::CoordinatorClient& c) {
    auto registered = c.RegisterNode(NodeN1());
    ASSERT_TRUE(registered.ok()) << registered.status();
    proto::CreateRegionRequest request;
    request.set_name("kept");
    request.set_size(8 << 20);
    auto created = c.CreateRegion(request);
    ASSERT_TRUE(created.ok()) << created.status();
  });
  run([](placement::CoordinatorClient& c) {
    auto map = c.GetClusterMap();
    ASSERT_TRUE(map.ok()) << map.status();
    ASSERT_EQ(map->nodes_size(), 1);
    EXPECT_EQ(map->nodes(0).info().node_id(), "n1");
    EXPECT_EQ(map->nodes(0).state(), proto::NODE_ALIVE);
    auto region = c.GetRegion("kept");
    ASSERT_TRUE(region.ok()) << region.status();
    EXPECT_EQ(region->size(), 8u << 20);
  });
}

// Starts a coordinator on etcd in its own thread (Start blocks while it
// stands by); standing_by() is its address once it found another leading.
class BackgroundCoordinator {
 public:
  BackgroundCoordinator(const std::string& etcd, std::atomic<bool>* stop) {
    CoordinatorOptions options;
    options.etcd = etcd;
    auto nodes = std::make_unique<testing::FakeNodes>();
    nodes->Add("n1", 16);
    options.region_nodes = std::move(nodes);
    options.on_standby = [this](const std::string& address) {
      absl::MutexLock lock(&mu_);
      standby_address_ = address;
    };
    options.stop_waiting = [this, stop] { return stop->load() || quitting_; };
    thread_ = std::thread([this, options = std::move(options)]() mutable {
      auto started = Coordinator::Start(std::move(options));
      absl::MutexLock lock(&mu_);
      started_ = std::move(started);
    });
  }
  // Stops it waiting (a failed test must not hang here).
  ~BackgroundCoordinator() {
    quitting_ = true;
    thread_.join();
  }

  // Waits (up to 10 s) until it stands by; its address, or empty.
  std::string StandingBy() {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(
        absl::Condition(
            +[](std::string* a) { return !a->empty(); }, &standby_address_),
        absl::Seconds(10));
    return standby_address_;
  }
  // Waits (up to 10 s) for Start to return.
  absl::StatusOr<std::unique_ptr<Coordinator>>* Started() {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(
        absl::Condition(
            +[](std::optional<absl::StatusOr<std::unique_ptr<Coordinator>>>*
                    s) { return s->has_value(); },
            &started_),
        absl::Seconds(10));
    return started_.has_value() ? &*started_ : nullptr;
  }

 private:
  absl::Mutex mu_;
  std::string standby_address_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::StatusOr<std::unique_ptr<Coordinator>>> started_
      ABSL_GUARDED_BY(mu_);
  std::atomic<bool> quitting_{false};
  std::thread thread_;
};

TEST_F(EtcdTest, AStandbySendsClientsToTheLeaderThenTakesItsPlace) {
  CoordinatorOptions options;
  options.etcd = etcd_->endpoint();
  auto nodes = std::make_unique<testing::FakeNodes>();
  nodes->Add("n1", 16);
  options.region_nodes = std::move(nodes);
  auto leader = Coordinator::Start(std::move(options));
  ASSERT_TRUE(leader.ok()) << leader.status();

  std::atomic<bool> never{false};
  BackgroundCoordinator standby(etcd_->endpoint(), &never);
  const std::string standby_address = standby.StandingBy();
  ASSERT_FALSE(standby_address.empty())
      << "the second coordinator never stood by";

  // A client given only the standby's address: every call is sent on to
  // the leader, writes included, and so is the watch.
  auto client = placement::CoordinatorClient::Connect(standby_address);
  ASSERT_TRUE(client.ok()) << client.status();
  auto registered = (*client)->RegisterNode(NodeN1());
  ASSERT_TRUE(registered.ok()) << registered.status();
  proto::CreateRegionRequest request;
  request.set_name("through-a-standby");
  request.set_size(4 << 20);
  auto created = (*client)->CreateRegion(request);
  ASSERT_TRUE(created.ok()) << created.status();
  absl::Mutex mu;
  uint64_t watched = 0;
  auto watch = (*client)->WatchClusterMap(0, [&](const proto::ClusterMap& m) {
    absl::MutexLock lock(&mu);
    watched = m.epoch();
  });
  ASSERT_TRUE(watch.ok()) << watch.status();
  {
    absl::MutexLock lock(&mu);
    EXPECT_TRUE(
        mu.AwaitWithTimeout(absl::Condition(
                                +[](uint64_t* w) { return *w > 0; }, &watched),
                            absl::Seconds(10)))
        << "no map came through the standby";
  }

  // The leader goes; the standby leads on the port it stood by on, and the
  // same client reaches it there.
  (*leader)->Shutdown();
  auto* started = standby.Started();
  ASSERT_NE(started, nullptr) << "the standby did not take over";
  ASSERT_TRUE(started->ok()) << started->status();
  EXPECT_EQ((**started)->address(), standby_address);
  absl::StatusOr<proto::RegionInfo> region;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  do {
    region = (*client)->GetRegion("through-a-standby");
  } while (!region.ok() && absl::IsUnavailable(region.status()) &&
           absl::Now() < deadline);
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_EQ(region->size(), 4u << 20);
}

TEST_F(EtcdTest, AStandbyToldToStopReturnsCancelledAndFreesItsPort) {
  CoordinatorOptions options;
  options.etcd = etcd_->endpoint();
  options.region_nodes = std::make_unique<testing::FakeNodes>();
  auto leader = Coordinator::Start(std::move(options));
  ASSERT_TRUE(leader.ok()) << leader.status();

  std::atomic<bool> stop{false};
  BackgroundCoordinator standby(etcd_->endpoint(), &stop);
  const std::string address = standby.StandingBy();
  ASSERT_FALSE(address.empty());
  stop = true;
  auto* started = standby.Started();
  ASSERT_NE(started, nullptr) << "a standby told to stop kept waiting";
  EXPECT_EQ(started->status().code(), absl::StatusCode::kCancelled)
      << started->status();
  // Its port is free again: a coordinator without etcd binds it.
  CoordinatorOptions again;
  again.listen = address;
  again.region_nodes = std::make_unique<testing::FakeNodes>();
  auto rebound = Coordinator::Start(std::move(again));
  EXPECT_TRUE(rebound.ok()) << rebound.status();
}

}  // namespace
}  // namespace meshpool::coordinator
