// The C++ API against a real local cluster: round trips, batches, and bad
// input that must get a specific error while the cluster keeps serving.
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "meshpool/client.h"
#include "tests/integration_util.h"

namespace meshpool {
namespace {

using testing::ConnectClient;
using testing::MakeValue;
using testing::StartCluster;

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tools::LocalClusterOptions options;
    options.nodes = 3;
    options.capacity_bytes = 64 << 20;
    options.slab_bytes = 4 << 20;
    cluster_ = StartCluster(options);
    ASSERT_NE(cluster_, nullptr);
    client_ = ConnectClient(cluster_->coordinator_address());
    ASSERT_NE(client_, nullptr);
  }
  std::unique_ptr<tools::LocalCluster> cluster_;
  std::unique_ptr<Client> client_;
};

TEST_F(ClusterTest, PutGetDeleteRoundTripAcrossNodes) {
  const std::vector<size_t> sizes = {0, 1, 63, 4096, 100000, (1 << 20) + 1};
  for (int i = 0; i < 120; ++i) {
    std::string key = absl::StrCat("key-", i);
    size_t size = sizes[i % sizes.size()];
    ASSERT_TRUE(client_->Put(key, MakeValue(key, 1, size)).ok()) << key;
  }
  for (int i = 0; i < 120; ++i) {
    std::string key = absl::StrCat("key-", i);
    absl::StatusOr<std::string> v = client_->Get(key);
    ASSERT_TRUE(v.ok()) << key << ": " << v.status();
    EXPECT_EQ(*v, MakeValue(key, 1, sizes[i % sizes.size()]));
    EXPECT_TRUE(*client_->Exists(key));
  }
  EXPECT_TRUE(testing::WaitForStatus(*client_, [](const ClusterStatus& s) {
    uint64_t objects = 0;
    int nodes_with_objects = 0;
    for (const NodeStatus& n : s.nodes) {
      objects += n.objects;
      nodes_with_objects += n.objects > 0;
    }
    return objects == 120 && nodes_with_objects == 3;
  })) << "120 objects spread over every node never showed in the stats";
  for (int i = 0; i < 120; i += 2) {
    std::string key = absl::StrCat("key-", i);
    ASSERT_TRUE(client_->Delete(key).ok());
    EXPECT_EQ(client_->Get(key).status().code(), absl::StatusCode::kNotFound);
    EXPECT_FALSE(*client_->Exists(key));
  }
  EXPECT_TRUE(client_->Get("key-1").ok());
}

TEST_F(ClusterTest, OverwriteReturnsTheLatestValue) {
  for (int version = 0; version < 20; ++version) {
    ASSERT_TRUE(
        client_->Put("counter", MakeValue("counter", version, 300)).ok());
    EXPECT_EQ(*client_->Get("counter"), MakeValue("counter", version, 300));
  }
}

TEST_F(ClusterTest, GetIntoCallerBufferAndRegisteredBuffer) {
  std::string value = MakeValue("buf", 7, 5000);
  ASSERT_TRUE(client_->Put("buf", value).ok());
  std::vector<char> plain(8192);
  absl::StatusOr<size_t> n = client_->Get("buf", absl::MakeSpan(plain));
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(std::string(plain.data(), *n), value);

  std::vector<char> pinned(8192);
  auto registered = client_->RegisterBuffer(pinned.data(), pinned.size());
  ASSERT_TRUE(registered.ok()) << registered.status();
  n = client_->Get("buf", (*registered)->span());
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(std::string(pinned.data(), *n), value);

  // Large values move straight between registered memory and the pool.
  std::string big = MakeValue("big", 1, 3 << 20);
  std::vector<char> source(big.begin(), big.end());
  auto registered_source =
      client_->RegisterBuffer(source.data(), source.size());
  ASSERT_TRUE(registered_source.ok());
  ASSERT_TRUE(
      client_->Put("big", absl::string_view(source.data(), source.size()))
          .ok());
  std::vector<char> sink(4 << 20);
  auto registered_sink = client_->RegisterBuffer(sink.data(), sink.size());
  ASSERT_TRUE(registered_sink.ok());
  n = client_->Get("big", (*registered_sink)->span());
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_TRUE(absl::string_view(sink.data(), *n) == big);

  std::vector<char> small(100);
  absl::StatusOr<size_t> short_read =
      client_->Get("buf", absl::MakeSpan(small));
  EXPECT_EQ(short_read.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(short_read.status().message().find("5000"), std::string::npos);
}

TEST_F(ClusterTest, BatchOperationsReturnOneStatusPerKey) {
  std::vector<std::string> names;
  std::vector<std::string> values;
  for (int i = 0; i < 64; ++i) {
    names.push_back(absl::StrCat("batch-", i));
    values.push_back(MakeValue(names.back(), 1, 100 + 997 * i));
  }
  names.push_back("");  // invalid
  values.push_back("x");
  std::vector<absl::string_view> keys(names.begin(), names.end());
  std::vector<absl::string_view> vals(values.begin(), values.end());
  std::vector<absl::Status> put = client_->BatchPut(keys, vals);
  ASSERT_EQ(put.size(), keys.size());
  for (int i = 0; i < 64; ++i) EXPECT_TRUE(put[i].ok()) << i << put[i];
  EXPECT_EQ(put[64].code(), absl::StatusCode::kInvalidArgument);

  keys.back() = "batch-missing";
  std::vector<std::vector<char>> buffers(keys.size(), std::vector<char>(70000));
  buffers[3].resize(10);  // too small for its value
  std::vector<absl::Span<char>> outs;
  for (auto& b : buffers) outs.push_back(absl::MakeSpan(b));
  auto got = client_->BatchGet(keys, outs);
  for (int i = 0; i < 64; ++i) {
    if (i == 3) {
      EXPECT_EQ(got[i].status().code(), absl::StatusCode::kOutOfRange);
      continue;
    }
    ASSERT_TRUE(got[i].ok()) << i << got[i].status();
    EXPECT_EQ(std::string(buffers[i].data(), *got[i]), values[i]);
  }
  EXPECT_EQ(got[64].status().code(), absl::StatusCode::kNotFound);

  auto exists = client_->BatchExists(keys);
  EXPECT_TRUE(*exists[0]);
  EXPECT_FALSE(*exists[64]);

  std::vector<absl::string_view> one_value = {"v"};
  auto mismatch = client_->BatchPut(keys, one_value);
  EXPECT_EQ(mismatch[0].code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ClusterTest, BadKeysAndValuesGetSpecificErrors) {
  EXPECT_EQ(client_->Put("", "v").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->Get("").status().code(),
            absl::StatusCode::kInvalidArgument);
  std::string longest(kMaxKeyBytes, 'k');
  EXPECT_TRUE(client_->Put(longest, "fits").ok());
  EXPECT_EQ(*client_->Get(longest), "fits");
  std::string too_long(kMaxKeyBytes + 1, 'k');
  absl::Status s = client_->Put(too_long, "v");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("4096"), std::string::npos) << s;
  // Larger than a 4 MiB slab.
  s = client_->Put("huge", std::string(5 << 20, 'h'));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("slab"), std::string::npos) << s;
  EXPECT_EQ(client_->Delete("never-put").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->Get("never-put").status().code(),
            absl::StatusCode::kNotFound);
  // Nothing above broke the cluster.
  EXPECT_TRUE(client_->Put("after", "still fine").ok());
  EXPECT_EQ(*client_->Get("after"), "still fine");
}

// With eviction off (`--no-evict`: a store that must not lose data), a full
// pool refuses writes and keeps everything it has. (With eviction on, the
// default, a full pool evicts instead: integration_kv_test.cc.)
TEST(ClusterStandaloneTest, FullPoolReturnsResourceExhaustedAndKeepsServing) {
  tools::LocalClusterOptions options;
  options.nodes = 1;
  options.capacity_bytes = 16 << 20;
  options.slab_bytes = 1 << 20;
  options.node_args = {"--no-evict"};
  auto cluster = StartCluster(options);
  ASSERT_NE(cluster, nullptr);
  auto client = ConnectClient(cluster->coordinator_address());
  ASSERT_NE(client, nullptr);
  std::string value(200 << 10, 'v');
  absl::Status s;
  int stored = 0;
  for (; stored < 1000; ++stored) {
    s = client->Put(absl::StrCat("fill-", stored), value);
    if (!s.ok()) break;
  }
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("full"), std::string::npos) << s;
  ASSERT_GT(stored, 10);
  // Everything stored is still there, for this client and a new one.
  auto other = ConnectClient(cluster->coordinator_address());
  ASSERT_NE(other, nullptr);
  for (int i = 0; i < stored; ++i) {
    std::string key = absl::StrCat("fill-", i);
    ASSERT_TRUE(client->Exists(key).value_or(false)) << key;
    ASSERT_EQ(*other->Get(key), value) << key;
  }
}

TEST(ClusterStandaloneTest, UnreachableCoordinatorIsUnavailable) {
  ClientOptions options;
  options.coordinator = "127.0.0.1:1";  // nothing listens on port 1
  options.connect_timeout = absl::Milliseconds(500);
  auto client = Client::Connect(options);
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(client.status().message().find("coordinator"), std::string::npos)
      << client.status();
}

}  // namespace
}  // namespace meshpool
