// Races and failures against a real local cluster: concurrent writers and
// readers of the same keys while memory is reclaimed and reused, a node
// killed with SIGKILL mid-workload, and a client process killed with
// SIGKILL mid-workload (the nodes go back to idle).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/process_info.h"
#include "format/layout.h"
#include "gtest/gtest.h"
#include "meshpool/client.h"
#include "placement/coordinator_client.h"
#include "placement/placement.h"
#include "tests/integration_util.h"
#include "tests/node_info.h"

namespace meshpool {
namespace {

using testing::ConnectClient;
using testing::MakeValue;
using testing::StartCluster;

constexpr size_t kRaceValueBytes = 16 << 10;

// True when `value` is exactly some MakeValue(key, version, size).
bool IsAValueOf(const std::string& key, const std::string& value) {
  std::vector<std::string> parts = absl::StrSplit(value, absl::MaxSplits('#', 2));
  uint64_t version;
  if (parts.size() != 3 || parts[0] != key ||
      !absl::SimpleAtoi(parts[1], &version)) {
    return false;
  }
  return value == MakeValue(key, version, kRaceValueBytes);
}

TEST(RaceTest, ConcurrentPutsAndGetsOfSameKeysNeverSeeTornOrForeignValues) {
  uint64_t seed = std::random_device()();
  std::cout << "seed=" << seed << std::endl;
  tools::LocalClusterOptions options;
  options.nodes = 2;
  // A small pool, short slab leases and a short read lease make slabs fill,
  // seal, get reclaimed and reused many times during the test.
  options.capacity_bytes = 12 << 20;
  options.slab_bytes = 1 << 20;
  options.node_args = {"--slab-lease", "1s", "--read-lease", "150ms"};
  auto cluster = StartCluster(options);
  ASSERT_NE(cluster, nullptr);
  auto writer_client = ConnectClient(cluster->coordinator_address());
  auto reader_client = ConnectClient(cluster->coordinator_address());
  ASSERT_NE(writer_client, nullptr);
  ASSERT_NE(reader_client, nullptr);

  constexpr int kKeys = 8;
  constexpr int kWriters = 3;
  constexpr int kReaders = 3;
  // 3 x 700 x 16 KiB = 33 MiB into 2 x 12 MiB pools: the writers can only
  // finish if freed memory is reclaimed and reused.
  constexpr int kPutsPerWriter = 700;
  std::vector<std::string> keys;
  for (int k = 0; k < kKeys; ++k) keys.push_back(absl::StrCat("race-", k));
  for (const std::string& k : keys) {
    ASSERT_TRUE(writer_client->Put(k, MakeValue(k, 0, kRaceValueBytes)).ok());
  }
  std::atomic<bool> writing{true};
  std::atomic<int> bad_values{0}, get_errors{0}, put_errors{0}, gets{0};
  std::atomic<int> full_retries{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937_64 rng(seed + w);
      for (int i = 1; i <= kPutsPerWriter; ++i) {
        const std::string& key = keys[rng() % kKeys];
        uint64_t version = static_cast<uint64_t>(w) * 1000000 + i;
        absl::Status s;
        // The pool may be full until sealed slabs are reclaimed (lease,
        // margin and grace: a few seconds); a generous deadline, since CI
        // machines are slow and shared.
        absl::Time deadline = absl::Now() + absl::Seconds(60);
        while (true) {
          s = writer_client->Put(key, MakeValue(key, version, kRaceValueBytes));
          if (s.code() != absl::StatusCode::kResourceExhausted ||
              absl::Now() > deadline) {
            break;
          }
          ++full_retries;
          absl::SleepFor(absl::Milliseconds(10));
        }
        if (!s.ok()) {
          if (put_errors++ == 0) std::cerr << "put: " << s << "\n";
        }
      }
    });
  }
  for (int r = 0; r < kReaders; ++r) {
    threads.emplace_back([&, r] {
      std::mt19937_64 rng(seed ^ (0x1000 + r));
      while (writing.load()) {
        const std::string& key = keys[rng() % kKeys];
        absl::StatusOr<std::string> v = reader_client->Get(key);
        ++gets;
        if (!v.ok()) {
          if (get_errors++ == 0) std::cerr << "get: " << v.status() << "\n";
          continue;
        }
        if (!IsAValueOf(key, *v)) ++bad_values;
      }
    });
  }
  for (int w = 0; w < kWriters; ++w) threads[w].join();
  writing = false;
  for (size_t t = kWriters; t < threads.size(); ++t) threads[t].join();

  auto status = reader_client->Status();
  ASSERT_TRUE(status.ok());
  uint64_t reclaimed = 0;
  for (const NodeStatus& n : status->nodes) reclaimed += n.slabs_reclaimed;
  std::cout << "gets=" << gets << " reclaimed slabs=" << reclaimed
            << " full retries=" << full_retries << std::endl;
  EXPECT_EQ(bad_values, 0) << "a GET returned bytes that were never put";
  EXPECT_EQ(get_errors, 0);
  EXPECT_EQ(put_errors, 0);
  EXPECT_GT(gets, 0);
  EXPECT_GT(reclaimed, 0u) << "memory was never reused: the test proved little";
  for (const std::string& k : keys) {
    absl::StatusOr<std::string> v = reader_client->Get(k);
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_TRUE(IsAValueOf(k, *v));
  }
}

// True once `pid` has exited (a zombie or gone): its files, sockets and
// RDMA resources are closed by then. Does not reap it.
bool WaitUntilExited(pid_t pid, absl::Duration timeout = absl::Seconds(30)) {
  absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (ProcessHasExited(pid)) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return false;
}

// CPU seconds `pid` has used (user and system); -1 if gone.
double CpuSeconds(pid_t pid) {
  absl::StatusOr<double> s = ProcessCpuSeconds(pid);
  return s.ok() ? *s : -1;
}

double NodesCpuSeconds(const tools::LocalCluster& cluster) {
  double total = 0;
  for (pid_t pid : cluster.node_pids()) total += CpuSeconds(pid);
  return total;
}

TEST(ClientFailureTest, KilledClientLeavesTheNodesIdle) {
  tools::LocalClusterOptions options;
  options.nodes = 2;
  options.capacity_bytes = 64 << 20;
  auto cluster = StartCluster(options);
  ASSERT_NE(cluster, nullptr);
  // A real client process keeps the nodes busy, and is killed mid-batch:
  // it says no goodbye, and its requests and answers are left in flight.
  const std::string coordinator = cluster->coordinator_address();
  std::vector<std::string> args = {
      MESHPOOL_BINARY, "bench",  "--coordinator", coordinator,
      "--value-size",  "256KiB", "--threads",     "2",
      "--batch",       "8",      "--duration",    "60s"};
  // What idle nodes spend anyway (heartbeats, the control plane's threads;
  // far more under the VM's emulation than on hardware).
  double baseline = NodesCpuSeconds(*cluster);
  absl::SleepFor(absl::Seconds(2));
  baseline = NodesCpuSeconds(*cluster) - baseline;
  const double before = NodesCpuSeconds(*cluster);
  const pid_t bench = fork();
  ASSERT_GE(bench, 0);
  if (bench == 0) {
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  absl::SleepFor(absl::Seconds(3));
  ASSERT_EQ(kill(bench, SIGKILL), 0);
  int wstatus = 0;
  ASSERT_EQ(waitpid(bench, &wstatus, 0), bench);
  ASSERT_TRUE(WIFSIGNALED(wstatus)) << "the bench ended before it was killed";
  const double busy = NodesCpuSeconds(*cluster) - before;
  // Within the liveness bound (2 s on uc) the nodes give up on the dead
  // client's sessions; then, over 2 s, they use almost no CPU.
  absl::SleepFor(absl::Seconds(3));
  const double start = NodesCpuSeconds(*cluster);
  absl::SleepFor(absl::Seconds(2));
  const double idle = NodesCpuSeconds(*cluster) - start;
  std::cout << "nodes' CPU: " << baseline << " s in 2 s idle, " << busy
            << " s while serving for 3 s, " << idle
            << " s in the 2 s after the client was given up on" << std::endl;
  // A node still working for the dead client would spend a core's worth.
  EXPECT_LT(idle, baseline + 0.1) << "the nodes keep working for a dead client";
  // And they serve the next client.
  auto client = ConnectClient(coordinator);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Put("after", "the kill").ok());
  EXPECT_EQ(*client->Get("after"), "the kill");
}

// Anyone who reaches the coordinator of a cluster without TLS can register
// a node. One claiming a trillion slabs once made every client routed to it
// allocate a table for them and die; one claiming a huge capacity drew
// every key to itself. The coordinator refuses both, and the cluster
// serves on (clients check layouts too: client_node_layout_test).
TEST(HostileNodeTest, AHostileRegistrationIsRefusedAndTheClusterServesOn) {
  tools::LocalClusterOptions options;
  options.nodes = 2;
  options.capacity_bytes = 32 << 20;
  auto cluster = StartCluster(options);
  ASSERT_NE(cluster, nullptr);
  auto coordinator =
      placement::CoordinatorClient::Connect(cluster->coordinator_address());
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  proto::NodeInfo fake;
  fake.set_node_id("fake");
  fake.set_incarnation(1);
  fake.set_control_address("127.0.0.1:1");
  fake.add_transport_addresses("tcp://127.0.0.1:1");
  fake.mutable_pool()->set_addr(0x10000);
  fake.mutable_pool()->set_rkey(7);
  testing::SetPool(&fake, 32 << 20);
  proto::NodeInfo slabs = fake;
  slabs.mutable_layout()->set_slab_count(uint64_t{1} << 40);
  proto::NodeInfo greedy = fake;
  greedy.set_capacity_bytes(uint64_t{1} << 44);
  for (const proto::NodeInfo* info : {&slabs, &greedy}) {
    absl::StatusOr<proto::RegisterNodeReply> reply =
        (*coordinator)->RegisterNode(*info);
    EXPECT_EQ(reply.status().code(), absl::StatusCode::kInvalidArgument)
        << reply.status();
    EXPECT_TRUE(absl::StrContains(reply.status().message(), "pool layout"))
        << reply.status();
  }
  auto map = (*coordinator)->GetClusterMap();
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ(map->nodes_size(), 2) << "a refused node stays out of the map";
  auto client = ConnectClient(cluster->coordinator_address());
  ASSERT_NE(client, nullptr);
  for (int i = 0; i < 20; ++i) {
    const std::string key = absl::StrCat("hostile-", i);
    ASSERT_TRUE(client->Put(key, "value").ok()) << key;
    EXPECT_EQ(*client->Get(key), "value");
  }
}

TEST(NodeFailureTest, KilledNodeLosesOnlyItsKeysAndNothingCrashes) {
  tools::LocalClusterOptions options;
  options.nodes = 3;
  options.capacity_bytes = 32 << 20;
  options.slab_bytes = 1 << 20;
  options.coordinator_args = {"--dead-after", "1500ms", "--heartbeat-interval",
                              "200ms"};
  auto cluster = StartCluster(options);
  ASSERT_NE(cluster, nullptr);
  auto client = ConnectClient(cluster->coordinator_address());
  ASSERT_NE(client, nullptr);
  auto coordinator =
      placement::CoordinatorClient::Connect(cluster->coordinator_address());
  ASSERT_TRUE(coordinator.ok());

  constexpr int kKeys = 300;
  auto key_of = [](int i) { return absl::StrCat("k", i); };
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_TRUE(client->Put(key_of(i), MakeValue(key_of(i), 1, 512)).ok());
  }
  // Which node holds each key, per the map the client used.
  auto map = (*coordinator)->GetClusterMap();
  ASSERT_TRUE(map.ok());
  std::vector<std::string> home(kKeys);
  for (int i = 0; i < kKeys; ++i) {
    format::KeyHash h = format::HashKey(key_of(i));
    home[i] = map->nodes(placement::HomeNode(*map, h.lo, h.hi)).info().node_id();
  }
  // node-2 is the second node process started.
  const std::string victim = "node-2";
  pid_t victim_pid = cluster->node_pids()[1];

  // Readers keep going while the node dies.
  std::atomic<bool> stop{false};
  std::atomic<int> wrong{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&, r] {
      int i = r;
      while (!stop.load()) {
        i = (i + 7) % kKeys;
        absl::StatusOr<std::string> v = client->Get(key_of(i));
        if (v.ok() && *v != MakeValue(key_of(i), 1, 512)) ++wrong;
        if (!v.ok() && home[i] != victim) ++wrong;
        if (!v.ok() && v.status().code() != absl::StatusCode::kNotFound &&
            v.status().code() != absl::StatusCode::kUnavailable) {
          ++wrong;
        }
      }
    });
  }
  absl::SleepFor(absl::Milliseconds(100));  // let readers get going
  ASSERT_EQ(kill(victim_pid, SIGKILL), 0);
  ASSERT_TRUE(WaitUntilExited(victim_pid));

  // Keys on live nodes keep working; the victim's fail cleanly. For a short
  // while after the process has exited its memory may still answer
  // one-sided READs: rxe (like a real NIC's driver) tears a dead process's
  // QPs and MRs down asynchronously after its files close. Those answers are
  // the victim's last values, never other bytes; within seconds every victim
  // key must fail.
  const absl::Time answering_deadline = absl::Now() + absl::Seconds(10);
  int victim_keys = 0;
  int still_answering = 0;
  int passes = 0;
  do {
    ++passes;
    victim_keys = 0;
    still_answering = 0;
    for (int i = 0; i < kKeys; ++i) {
      absl::StatusOr<std::string> v = client->Get(key_of(i));
      if (home[i] != victim) {
        ASSERT_TRUE(v.ok()) << key_of(i) << " on " << home[i] << ": "
                            << v.status();
        ASSERT_EQ(*v, MakeValue(key_of(i), 1, 512));
        continue;
      }
      ++victim_keys;
      if (v.ok()) {
        ASSERT_EQ(*v, MakeValue(key_of(i), 1, 512))
            << "a dead node's memory answered with bytes never put";
        ++still_answering;
        continue;
      }
      EXPECT_TRUE(v.status().code() == absl::StatusCode::kUnavailable ||
                  v.status().code() == absl::StatusCode::kNotFound)
          << v.status();
    }
    if (still_answering > 0) absl::SleepFor(absl::Milliseconds(20));
  } while (still_answering > 0 && absl::Now() < answering_deadline);
  std::cout << "victim keys " << victim_keys << ", passes until all failed "
            << passes << std::endl;
  EXPECT_GT(victim_keys, 0);
  EXPECT_EQ(still_answering, 0)
      << "a killed node's keys still answered 10 s after it exited";

  // Once the coordinator declares it dead, its keys are plain misses and
  // can be written again on the surviving nodes.
  absl::Time deadline = absl::Now() + absl::Seconds(30);
  bool dead = false;
  while (!dead && absl::Now() < deadline) {
    auto m = (*coordinator)->GetClusterMap();
    ASSERT_TRUE(m.ok());
    for (const auto& e : m->nodes()) {
      if (e.info().node_id() == victim && e.state() == proto::NODE_DEAD) {
        dead = true;
      }
    }
    if (!dead) absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_TRUE(dead) << "coordinator never declared " << victim << " dead";
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(wrong, 0);
  for (int i = 0; i < kKeys; ++i) {
    if (home[i] != victim) continue;
    absl::StatusOr<std::string> v = client->Get(key_of(i));
    EXPECT_EQ(v.status().code(), absl::StatusCode::kNotFound) << v.status();
    ASSERT_TRUE(client->Put(key_of(i), "rewritten").ok());
    EXPECT_EQ(*client->Get(key_of(i)), "rewritten");
  }
}

}  // namespace
}  // namespace meshpool
