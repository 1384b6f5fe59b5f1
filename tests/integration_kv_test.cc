// The KV cache over real `meshpool` processes (tcp here; verbs in the
// Soft-RoCE VM, where the nodes clear index slots through their own
// loopback queue pair): zero-copy batches, a fill to three times the pool,
// pins that hold under pressure, the pins of a killed client lapsing, and
// nodes whose tcp responder is hoarded with idle sockets.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "meshpool/client.h"
#include "meshpool/kv_cache.h"
#include "meshpool/region.h"
#include "placement/coordinator_client.h"
#include "tests/integration_util.h"
#include "tests/raw_socket.h"
#include "tests/shell_util.h"

namespace meshpool {
namespace {

constexpr uint64_t kCapacity = 32 << 20;
constexpr size_t kBlock = 256 << 10;

std::vector<absl::string_view> Views(const std::vector<std::string>& v) {
  return {v.begin(), v.end()};
}

class KvIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tools::LocalClusterOptions options;
    options.nodes = 2;
    options.capacity_bytes = kCapacity;
    options.node_args = {"--slab-size",  "1MiB", "--read-lease",    "300ms",
                         "--slab-lease", "3s",   "--session-lease", "1s"};
    cluster_ = testing::StartCluster(options);
    ASSERT_NE(cluster_, nullptr);
    client_ = testing::ConnectClient(cluster_->coordinator_address());
    ASSERT_NE(client_, nullptr);
  }

  // Stores `keys` in batches of 32 from registered memory; all must be OK.
  void PutAll(const std::vector<std::string>& keys) { PutAll(*client_, keys); }
  void PutAll(Client& client, const std::vector<std::string>& keys) {
    std::vector<char> arena(32 * kBlock);
    auto reg = client.RegisterBuffer(arena.data(), arena.size());
    ASSERT_TRUE(reg.ok()) << reg.status();
    for (size_t i = 0; i < keys.size(); i += 32) {
      std::vector<std::string> k(keys.begin() + i,
                                 keys.begin() + std::min(keys.size(), i + 32));
      std::vector<absl::string_view> v;
      for (size_t j = 0; j < k.size(); ++j) {
        std::string block = testing::MakeValue(k[j], 1, kBlock);
        std::memcpy(arena.data() + j * kBlock, block.data(), kBlock);
        v.emplace_back(arena.data() + j * kBlock, kBlock);
      }
      std::vector<absl::Status> st = client.BatchPut(Views(k), v);
      for (size_t j = 0; j < st.size(); ++j) {
        ASSERT_TRUE(st[j].ok()) << k[j] << ": " << st[j];
      }
    }
  }

  // Reads `keys` into registered memory: each is its exact block or
  // NotFound. Returns how many were found.
  size_t GetAll(const std::vector<std::string>& keys) {
    std::vector<char> arena(32 * kBlock);
    auto reg = client_->RegisterBuffer(arena.data(), arena.size());
    EXPECT_TRUE(reg.ok()) << reg.status();
    size_t found = 0;
    for (size_t i = 0; i < keys.size(); i += 32) {
      std::vector<std::string> k(keys.begin() + i,
                                 keys.begin() + std::min(keys.size(), i + 32));
      std::vector<absl::Span<char>> outs;
      for (size_t j = 0; j < k.size(); ++j) {
        outs.emplace_back(arena.data() + j * kBlock, kBlock);
      }
      auto got = client_->BatchGet(Views(k), outs);
      for (size_t j = 0; j < k.size(); ++j) {
        if (!got[j].ok()) {
          EXPECT_EQ(got[j].status().code(), absl::StatusCode::kNotFound)
              << k[j] << ": " << got[j].status();
          continue;
        }
        ++found;
        EXPECT_EQ(absl::string_view(outs[j].data(), kBlock),
                  testing::MakeValue(k[j], 1, kBlock))
            << k[j];
      }
    }
    return found;
  }

  std::vector<std::string> Keys(absl::string_view tag, size_t n) {
    std::vector<std::string> keys;
    for (size_t i = 0; i < n; ++i) keys.push_back(absl::StrCat(tag, "-", i));
    return keys;
  }

  testing::ShellResult Meshpool(const std::string& args) {
    return testing::Shell(absl::StrCat(MESHPOOL_BINARY, " ", args,
                                       " --coordinator ",
                                       cluster_->coordinator_address()));
  }

  std::unique_ptr<tools::LocalCluster> cluster_;
  std::unique_ptr<Client> client_;
};

// Whether the nodes have evicted, and hold no more than their capacity.
bool EvictedWithinCapacity(const ClusterStatus& s) {
  uint64_t evicted = 0;
  for (const NodeStatus& n : s.nodes) {
    if (n.used_bytes > n.capacity_bytes) return false;
    evicted += n.slabs_evicted;
  }
  return evicted > 0;
}

// Whether this process maps a node's pool (the shared-memory path);
// nullopt where the OS does not list mappings by file (only Linux's
// /proc/self/maps is read).
std::optional<bool> MapsANodePool() {
#ifdef __linux__
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (absl::StrContains(line, "memfd:meshpool-pool")) return true;
  }
  return false;
#else
  std::cout << "NOT CHECKED: whether the client maps a node's pool (reads "
               "Linux's /proc/self/maps)\n";
  return std::nullopt;
#endif
}

// Whether the nodes' evictions have stopped: no slab evicted in the last
// `quiet` (the evictor keeps going for a while after writes stop, since
// its watermarks sit lower while it expects more writes), and each node
// within its capacity.
bool WaitForEvictionToSettle(Client& client, absl::Duration quiet) {
  uint64_t last = UINT64_MAX;
  absl::Time since = absl::Now();
  return testing::WaitForStatus(
      client,
      [&](const ClusterStatus& s) {
        uint64_t evicted = 0;
        for (const NodeStatus& n : s.nodes) evicted += n.slabs_evicted;
        if (evicted != last) {
          last = evicted;
          since = absl::Now();
        }
        return EvictedWithinCapacity(s) && absl::Now() - since >= quiet;
      },
      absl::Seconds(60));
}

TEST_F(KvIntegrationTest, FillToThreeTimesThePoolOnlyMisses) {
  std::vector<std::string> keys = Keys("fill", 3 * 2 * kCapacity / kBlock);
  PutAll(keys);
  // The shm build reaches the nodes through their memory; the others must
  // not (they test their own transport).
  EXPECT_EQ(MapsANodePool().value_or(testing::kTestTransport == "shm"),
            testing::kTestTransport == "shm");
  // Reads wait until eviction is over: an eviction round running while
  // GetAll reads oldest first would see the newest slabs not yet read
  // (untouched) and evict them before the older ones GetAll just touched,
  // so the tail below would be gone (seen under ASan).
  ASSERT_TRUE(WaitForEvictionToSettle(*client_, absl::Seconds(2)));
  size_t found = GetAll(keys);
  EXPECT_GT(found, 0u);
  EXPECT_LT(found, keys.size() / 2);
  // The prefix of the chain is gone, its tail is there.
  std::vector<absl::string_view> all = Views(keys);
  EXPECT_EQ(*PrefixMatch(*client_, all), 0u);
  EXPECT_GT(*PrefixMatch(*client_, absl::MakeSpan(all).last(4)), 0u);
}

// 600 idle sockets from another host on every node (more than the tcp
// responder once served at all, two threads each) lock out neither this
// client, whose lanes open after them, nor the nodes' own evictors, which
// connect to their node when they first evict.
TEST_F(KvIntegrationTest, HoardedIdleSocketsLockOutNeitherClientsNorEvictors) {
  if (testing::kTestTransport != "tcp" && testing::kTestTransport != "shm") {
    GTEST_SKIP() << "the nodes of the " << testing::kTestTransport
                 << " build serve no tcp responder to hoard sockets on";
  }
  auto coordinator =
      placement::CoordinatorClient::Connect(cluster_->coordinator_address());
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  auto map = (*coordinator)->GetClusterMap();
  ASSERT_TRUE(map.ok()) << map.status();
  std::vector<std::unique_ptr<testing::RawSocket>> hoard;
  for (const auto& node : map->nodes()) {
    for (const std::string& address : node.info().transport_addresses()) {
      if (!absl::StartsWith(address, "tcp://")) continue;
      uint32_t port = 0;
      ASSERT_TRUE(
          absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port));
      for (int i = 0; i < 600; ++i) {
        hoard.push_back(std::make_unique<testing::RawSocket>(
            static_cast<uint16_t>(port), "127.0.0.2"));
        ASSERT_TRUE(hoard.back()->connected());
      }
    }
  }
  ASSERT_EQ(hoard.size(), 600 * map->nodes_size());
  std::vector<std::string> keys = Keys("hoarded", 3 * 2 * kCapacity / kBlock);
  PutAll(keys);
  ASSERT_TRUE(testing::WaitForStatus(*client_, EvictedWithinCapacity))
      << "the evictors never ran";
  EXPECT_GT(GetAll(std::vector<std::string>(keys.end() - 4, keys.end())), 0u);
  size_t open = 0;
  for (auto& socket : hoard) open += !socket->ClosedByPeer();
  std::cout << open << " of " << hoard.size() << " hoarded sockets still open"
            << std::endl;
}

TEST_F(KvIntegrationTest, PinsOfAKilledClientLapseAndLiveOnesHold) {
  std::vector<std::string> orphaned = Keys("orphan", 4);
  std::vector<std::string> kept = Keys("kept", 4);
  {
    // Another client writes `orphaned` into slabs of its own (and releases
    // them when it goes), so no pin on `kept` keeps them.
    auto writer = testing::ConnectClient(cluster_->coordinator_address());
    ASSERT_NE(writer, nullptr);
    PutAll(*writer, orphaned);
  }
  PutAll(kept);
  ASSERT_EQ(Pin(*client_, Views(kept), kHardPin)[0], absl::OkStatus());
  // Another process hard-pins `orphaned`, holds them, and is killed.
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], STDOUT_FILENO);
    ::close(fds[0]);
    std::vector<std::string> args = {
        MESHPOOL_BINARY, "pin",           "--hard",
        "--hold",        "--coordinator", cluster_->coordinator_address()};
    for (const auto& k : orphaned) args.push_back(k);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(MESHPOOL_BINARY, argv.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  char line[256] = {0};
  FILE* in = ::fdopen(fds[0], "r");
  ASSERT_NE(std::fgets(line, sizeof(line), in), nullptr);
  EXPECT_TRUE(absl::StrContains(line, "pinned 4 of 4")) << line;
  ASSERT_TRUE(testing::WaitForStatus(*client_, [](const ClusterStatus& s) {
    uint64_t pinned = 0;
    for (const NodeStatus& n : s.nodes) pinned += n.pinned_objects;
    return pinned >= 8;
  })) << "the nodes never counted both clients' pins";
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  std::fclose(in);
  // One session lease (1 s) later the dead client's pins are gone.
  ASSERT_TRUE(testing::WaitForStatus(*client_, [](const ClusterStatus& s) {
    uint64_t pinned = 0;
    for (const NodeStatus& n : s.nodes) pinned += n.pinned_objects;
    return pinned == 4;
  })) << "the killed client's pins never lapsed";
  PutAll(Keys("pressure", 3 * 2 * kCapacity / kBlock));
  EXPECT_EQ(GetAll(kept), kept.size());
  EXPECT_EQ(GetAll(orphaned), 0u);
  testing::ShellResult stat = Meshpool("stat");
  EXPECT_EQ(stat.exit_code, 0) << stat.output;
  EXPECT_TRUE(absl::StrContains(stat.output, "PINNED")) << stat.output;
}

// A same-host client of nodes that also serve shared memory: data moves by
// memcpy, while every atomic (publishing CASes, region atomics) goes
// through the nodes' own transport — on verbs, the device, since its
// atomics are not atomic with the CPU's — and eviction still works.
TEST(KvSameHostTest, SharedMemoryClientKeepsAtomicsOnTheNodesTransport) {
  tools::LocalClusterOptions options;
  options.nodes = 1;
  options.capacity_bytes = kCapacity;
  options.node_args = {"--slab-size", "1MiB",         "--read-lease",
                       "300ms",       "--slab-lease", "3s"};
  auto cluster = testing::StartCluster(options, /*same_host_shm=*/true);
  ASSERT_NE(cluster, nullptr);
  auto client = testing::ConnectClient(cluster->coordinator_address());
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Put("k", "v").ok());
  EXPECT_TRUE(MapsANodePool().value_or(true))
      << "the client did not take the shm path";
  EXPECT_EQ(*client->Get("k"), "v");
  // Region atomics from two clients interleave on one word.
  auto region = CreateRegion(*client, "counter", 4096);
  ASSERT_TRUE(region.ok()) << region.status();
  auto other = testing::ConnectClient(cluster->coordinator_address());
  auto other_region = OpenRegion(*other, "counter");
  ASSERT_TRUE(other_region.ok()) << other_region.status();
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE((*region)->FetchAdd(0, 1).ok());
    ASSERT_TRUE((*other_region)->FetchAdd(0, 2).ok());
  }
  EXPECT_EQ(*(*region)->FetchAdd(0, 0), 150u);
  auto swapped = (*other_region)->CompareAndSwap(0, 150, 7);
  ASSERT_TRUE(swapped.ok());
  EXPECT_EQ(*swapped, 150u);
  EXPECT_EQ(*(*region)->FetchAdd(0, 0), 7u);
  // Batches, a fill past the pool (eviction), and pins.
  std::vector<std::string> keys;
  for (uint64_t i = 0; i < 3 * kCapacity / kBlock; ++i) {
    keys.push_back(absl::StrCat("same-host-", i));
  }
  std::vector<std::string> first = {keys.front()};
  for (size_t i = 0; i < keys.size(); i += 32) {
    std::vector<std::string> k(keys.begin() + i,
                               keys.begin() + std::min(keys.size(), i + 32));
    std::vector<std::string> v;
    for (const auto& key : k) v.push_back(testing::MakeValue(key, 1, kBlock));
    for (const absl::Status& st : client->BatchPut(Views(k), Views(v))) {
      ASSERT_TRUE(st.ok()) << st;
    }
    if (i == 0) {
      ASSERT_TRUE(Pin(*client, Views(first), kHardPin)[0].ok());
    }
  }
  EXPECT_EQ(*client->Get(keys.front()),
            testing::MakeValue(keys.front(), 1, kBlock));
  EXPECT_EQ(client->Get(keys[40]).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(KvIntegrationTest, PrefixCommandCountsLeadingKeys) {
  PutAll(Keys("chain", 3));
  testing::ShellResult r =
      Meshpool("prefix chain-0 chain-1 chain-2 chain-9 chain-3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "3\n");
}

}  // namespace
}  // namespace meshpool
