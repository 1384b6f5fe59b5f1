// Shared by the multi-process integration tests: a local cluster of real
// `meshpool` processes and a client connected to it.
#ifndef MESHPOOL_TESTS_INTEGRATION_UTIL_H_
#define MESHPOOL_TESTS_INTEGRATION_UTIL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "meshpool/client.h"
#include "tests/verbs_test_util.h"
#include "tools/local_cluster.h"

namespace meshpool::testing {

// The data transport the tests exercise: "tcp"; "uc" (over UDP); "shm" (tcp
// nodes that also serve same-host clients over shared memory, which this
// process then uses); or, in builds whose every test needs an RDMA device,
// "verbs" and "uc_verbs" (uc on UC queue pairs, thunderbolt profile). Only the
// shm build lets nodes serve shm: clients on the same host would otherwise take
// it over tcp and verbs.
inline constexpr absl::string_view kTestTransport = MESHPOOL_TEST_TRANSPORT;
inline const bool kVerbsEnvironmentAdded =
    (kTestTransport == "verbs" || kTestTransport == "uc_verbs") &&
    ::testing::AddGlobalTestEnvironment(new VerbsEnvironment) != nullptr;

// `same_host_shm`: the nodes also serve this host over shared memory even
// in the tcp and verbs builds (the shm build always does).
inline std::unique_ptr<tools::LocalCluster> StartCluster(
    tools::LocalClusterOptions options, bool same_host_shm = false) {
  options.binary = MESHPOOL_BINARY;
  if (kTestTransport == "shm") {
    options.node_args.insert(options.node_args.begin(), {"--transport", "tcp"});
  } else if (kTestTransport == "uc_verbs") {
    options.node_args.insert(options.node_args.begin(),
                             {"--transport", "uc", "--profile", "thunderbolt"});
    if (!same_host_shm) options.node_args.push_back("--no-shm");
  } else {
    options.node_args.insert(options.node_args.begin(),
                             {"--transport", std::string(kTestTransport)});
    if (!same_host_shm) options.node_args.push_back("--no-shm");
  }
  auto cluster = tools::LocalCluster::Start(options);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  return cluster.ok() ? *std::move(cluster) : nullptr;
}

inline std::unique_ptr<Client> ConnectClient(const std::string& coordinator) {
  ClientOptions options;
  options.coordinator = coordinator;
  auto client = Client::Connect(options);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? *std::move(client) : nullptr;
}

// Nodes count objects at their periodic index scan (every 200 ms by
// default, backing off to 2 s while idle), so a test waits for the count it
// expects, up to a deadline.
template <typename Predicate>
bool WaitForStatus(Client& client, Predicate done,
                   absl::Duration timeout = absl::Seconds(20)) {
  absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    absl::StatusOr<ClusterStatus> status = client.Status();
    if (status.ok() && done(*status)) return true;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return false;
}

// A value that names its key and version, so a reader can tell a torn or
// foreign value from a real one.
inline std::string MakeValue(const std::string& key, uint64_t version,
                             size_t size) {
  std::string v = key + "#" + std::to_string(version) + "#";
  uint64_t x = std::hash<std::string>()(v);
  while (v.size() < size) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    v.push_back(static_cast<char>('a' + (x >> 59)));
  }
  v.resize(size);
  return v;
}

}  // namespace meshpool::testing

#endif  // MESHPOOL_TESTS_INTEGRATION_UTIL_H_
