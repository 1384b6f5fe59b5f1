// Regions against a real local cluster (a coordinator and memory nodes as
// `meshpool` processes): a region larger than any one node can hold, written
// by one client and read by another, renamed, listed and deleted, with the
// nodes' region memory accounted for in their stats.
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "meshpool/client.h"
#include "meshpool/region.h"
#include "tests/integration_util.h"

namespace meshpool {
namespace {

using testing::ConnectClient;
using testing::StartCluster;

constexpr uint64_t kSlabBytes = 1 << 20;
constexpr uint64_t kStripeBytes = 1 << 20;
// Each node's pool holds about 14 one-MiB slabs; the region needs 24.
constexpr uint64_t kNodeCapacity = 16 << 20;
constexpr uint64_t kRegionBytes = 24 << 20;

uint64_t RegionSlabs(const ClusterStatus& status) {
  uint64_t slabs = 0;
  for (const NodeStatus& n : status.nodes) slabs += n.slabs_region;
  return slabs;
}

uint64_t FreeSlabs(const ClusterStatus& status) {
  uint64_t slabs = 0;
  for (const NodeStatus& n : status.nodes) slabs += n.slabs_free;
  return slabs;
}

// Deterministic bytes that differ from one position (and seed) to the next.
std::string Pattern(uint64_t size, uint64_t seed) {
  std::string s(size, '\0');
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (uint64_t i = 0; i < size; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    for (uint64_t j = 0; j < 8 && i + j < size; ++j)
      s[i + j] = char(x >> (8 * j));
  }
  return s;
}

TEST(RegionClusterTest, RegionLargerThanANodeIsSharedBetweenClients) {
  tools::LocalClusterOptions options;
  options.nodes = 3;
  options.capacity_bytes = kNodeCapacity;
  options.slab_bytes = kSlabBytes;
  auto cluster = StartCluster(options);
  ASSERT_NE(cluster, nullptr);
  auto writer = ConnectClient(cluster->coordinator_address());
  auto reader = ConnectClient(cluster->coordinator_address());
  ASSERT_NE(writer, nullptr);
  ASSERT_NE(reader, nullptr);

  auto initial = writer->Status();
  ASSERT_TRUE(initial.ok()) << initial.status();
  const uint64_t free_slabs = FreeSlabs(*initial);
  ASSERT_GE(free_slabs, kRegionBytes / kSlabBytes);
  RegionOptions region_options;
  region_options.stripe_bytes = kStripeBytes;
  auto region =
      CreateRegion(*writer, "weights/v1", kRegionBytes, region_options);
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_EQ(CreateRegion(*writer, "weights/v1", 4096).status().code(),
            absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(testing::WaitForStatus(*reader, [](const ClusterStatus& s) {
    return RegionSlabs(s) == kRegionBytes / kSlabBytes;
  })) << "the nodes never reported the region's 24 slabs";

  // Written from plain memory (staged), read by the other client into
  // plain memory and into a registered buffer (straight from the nodes).
  const std::string data = Pattern(kRegionBytes, 1);
  ASSERT_TRUE((*region)->Write(0, data).ok());
  auto opened = OpenRegion(*reader, "weights/v1");
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ((*opened)->size(), kRegionBytes);
  std::string plain(kRegionBytes, 'x');
  ASSERT_TRUE((*opened)->Read(0, absl::MakeSpan(plain)).ok());
  EXPECT_TRUE(plain == data) << "staged read differs from what was written";
  std::vector<char> memory(kRegionBytes);
  auto registered = reader->RegisterBuffer(memory.data(), memory.size());
  ASSERT_TRUE(registered.ok()) << registered.status();
  ASSERT_TRUE((*opened)->Read(0, (*registered)->span()).ok());
  EXPECT_TRUE(absl::string_view(memory.data(), memory.size()) == data)
      << "zero-copy read differs from what was written";
  // A range across stripes (and nodes), then an update the writer sees.
  const uint64_t kOffset = 3 * kStripeBytes - 100;
  const std::string update = Pattern(2 * kStripeBytes + 300, 2);
  ASSERT_TRUE((*opened)->Write(kOffset, update).ok());
  std::string back(update.size(), 'x');
  ASSERT_TRUE((*region)->Read(kOffset, absl::MakeSpan(back)).ok());
  EXPECT_TRUE(back == update);
  // Atomics on a single-copy region, from both clients.
  const uint64_t kWord = kRegionBytes - 8;
  uint64_t before = 0;
  std::memcpy(&before, data.data() + kWord, sizeof(before));
  absl::StatusOr<uint64_t> old = (*region)->CompareAndSwap(kWord, before, 5);
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(*old, before);
  old = (*opened)->FetchAdd(kWord, 10);
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(*old, 5u);
  EXPECT_EQ(*(*region)->CompareAndSwap(kWord, 0, 1), 15u);

  // Publish under a new name; list; delete returns the memory.
  ASSERT_TRUE(RenameRegion(*writer, "weights/v1", "weights/current").ok());
  EXPECT_EQ(OpenRegion(*reader, "weights/v1").status().code(),
            absl::StatusCode::kNotFound);
  auto listed = ListRegions(*reader, "weights/");
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].name, "weights/current");
  EXPECT_EQ((*listed)[0].size, kRegionBytes);
  EXPECT_EQ((*listed)[0].stripe_bytes, kStripeBytes);
  EXPECT_EQ((*listed)[0].nodes.size(), 3u);
  auto current = OpenRegion(*reader, "weights/current");
  ASSERT_TRUE(current.ok()) << current.status();
  ASSERT_TRUE((*current)->Read(kOffset, absl::MakeSpan(back)).ok());
  EXPECT_TRUE(back == update);

  ASSERT_TRUE(DeleteRegion(*reader, "weights/current").ok());
  EXPECT_EQ(DeleteRegion(*writer, "weights/current").code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(ListRegions(*reader)->empty());
  EXPECT_TRUE(testing::WaitForStatus(*writer, [&](const ClusterStatus& s) {
    return RegionSlabs(s) == 0 && FreeSlabs(s) == free_slabs;
  })) << "deleting the region did not give its slabs back";
  // The memory is usable again (once the nodes' grace period passed): the
  // same size fits once more.
  auto again =
      CreateRegion(*writer, "weights/v2", kRegionBytes, region_options);
  EXPECT_TRUE(again.ok()) << again.status();
}

TEST(RegionClusterTest, RegionTooLargeForTheClusterIsResourceExhausted) {
  tools::LocalClusterOptions options;
  options.nodes = 2;
  options.capacity_bytes = kNodeCapacity;
  options.slab_bytes = kSlabBytes;
  auto cluster = StartCluster(options);
  ASSERT_NE(cluster, nullptr);
  auto client = ConnectClient(cluster->coordinator_address());
  ASSERT_NE(client, nullptr);
  auto region = CreateRegion(*client, "huge", 64 << 20);
  EXPECT_EQ(region.status().code(), absl::StatusCode::kResourceExhausted)
      << region.status();
  EXPECT_EQ(OpenRegion(*client, "huge").status().code(),
            absl::StatusCode::kNotFound);
  auto status = client->Status();
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(RegionSlabs(*status), 0u) << "a failed create left memory held";
}

}  // namespace
}  // namespace meshpool
