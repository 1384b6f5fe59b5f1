// Regions through the client: a coordinator and three memory nodes in this
// process, the data path on the simulated fabric. Reads and writes are
// checked against a local copy of the region; node deaths, atomics, bounds
// and the zero-copy path are exercised here where a test can watch every
// one-sided request (the fabric's before-execute hook).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/region.h"
#include "client/region_transfer.h"
#include "common/common.h"
#include "coordinator/coordinator.h"
#include "format/layout.h"
#include "gtest/gtest.h"
#include "meshpool/client.h"
#include "meshpool/region.h"
#include "placement/coordinator_client.h"
#include "placement/region_layout.h"
#include "rdma/rdma.h"
#include "rdma/sim.h"
#include "rdma/tcp.h"
#include "store/store.h"
#include "tests/sim_cluster.h"
#include "tests/test_seed.h"

namespace meshpool {
namespace {

constexpr int kNodes = 3;
constexpr uint64_t kSlabBytes = 1 << 20;
constexpr uint64_t kStripeBytes = 64 << 10;  // 16 stripes per slab

std::string NodeName(int i) { return std::string("node-") + char('a' + i); }

class RegionSimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = testing::TestSeed();
    rng_.seed(seed_);
    coordinator::CoordinatorOptions copts;
    copts.heartbeat_interval = absl::Milliseconds(100);
    copts.dead_after = absl::Milliseconds(600);
    auto cluster = testing::SimCluster::Start(seed_, std::move(copts));
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    fabric_ = &cluster_->fabric();
    for (int i = 0; i < kNodes; ++i) {
      store::NodeOptions options;
      options.capacity_bytes = 16 << 20;
      options.slab_bytes = kSlabBytes;
      options.node_id = NodeName(i);
      auto node = cluster_->AddNode(options);
      ASSERT_TRUE(node.ok()) << node.status();
      nodes_.push_back(*node);
    }
    a_ = Connect("client-a");
    b_ = Connect("client-b");
    ASSERT_NE(a_, nullptr);
    ASSERT_NE(b_, nullptr);
  }
  std::unique_ptr<Client> Connect(const std::string& name) {
    auto client = cluster_->Connect(name);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }

  std::unique_ptr<Region> Create(Client& client, const std::string& name,
                                 uint64_t size, uint32_t replicas = 1) {
    RegionOptions options;
    options.stripe_bytes = kStripeBytes;
    options.replicas = replicas;
    auto region = CreateRegion(client, name, size, options);
    EXPECT_TRUE(region.ok()) << region.status();
    return region.ok() ? *std::move(region) : nullptr;
  }

  std::string RandomBytes(size_t n) {
    std::string s(n, '\0');
    for (char& c : s) c = static_cast<char>(rng_());
    return s;
  }

  // Stops node `i` for good: its memory becomes unreachable at once, and
  // the coordinator declares it dead after dead_after. Waits until
  // `client`'s map shows that.
  void KillNode(int i, Client& client) {
    fabric_->KillNode(NodeName(i));
    nodes_[i]->Shutdown();
    absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      absl::StatusOr<ClusterStatus> status = client.Status();
      if (status.ok()) {
        for (const NodeStatus& n : status->nodes) {
          if (n.node_id == NodeName(i) && !n.alive) return;
        }
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
    ADD_FAILURE() << NodeName(i) << " was never declared dead";
  }

  uint64_t seed_;
  std::mt19937_64 rng_;
  std::unique_ptr<testing::SimCluster> cluster_;  // before the clients
  rdma::SimFabric* fabric_ = nullptr;
  std::vector<store::Node*> nodes_;
  std::unique_ptr<Client> a_, b_;
};

TEST_F(RegionSimTest, NewRegionReadsAsZeros) {
  auto region = Create(*a_, "zeros", 3 * kSlabBytes + 100);
  ASSERT_NE(region, nullptr);
  EXPECT_EQ(region->name(), "zeros");
  EXPECT_EQ(region->size(), 3 * kSlabBytes + 100);
  EXPECT_EQ(region->stripe_bytes(), kStripeBytes);
  EXPECT_EQ(region->replicas(), 1u);
  std::string out(region->size(), 'x');
  ASSERT_TRUE(region->Read(0, absl::MakeSpan(out)).ok());
  EXPECT_EQ(out, std::string(region->size(), '\0'));
}

TEST_F(RegionSimTest, RandomReadsAndWritesMatchALocalCopy) {
  // An odd size: the last stripe is short. 4 MiB over three nodes puts
  // several slabs' worth of stripes on each, so long ranges cross stripe,
  // node and slab boundaries.
  const uint64_t kSize = 4 * kSlabBytes + 12345;
  auto region = Create(*a_, "random", kSize);
  ASSERT_NE(region, nullptr);
  auto opened = OpenRegion(*b_, "random");
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::string model(kSize, '\0');
  for (int op = 0; op < 300; ++op) {
    uint64_t offset = rng_() % kSize;
    // Mostly short ranges, sometimes ones spanning many stripes.
    uint64_t max_len =
        (op % 4 == 0) ? kSize - offset
                      : std::min<uint64_t>(kSize - offset, 3 * kStripeBytes);
    uint64_t len = rng_() % (max_len + 1);
    Region& r = (op % 3 == 0) ? **opened : *region;
    if (rng_() % 2 == 0) {
      std::string data = RandomBytes(len);
      ASSERT_TRUE(r.Write(offset, data).ok()) << "op " << op;
      model.replace(offset, len, data);
    } else {
      std::string out(len, 'x');
      ASSERT_TRUE(r.Read(offset, absl::MakeSpan(out)).ok()) << "op " << op;
      ASSERT_EQ(out, model.substr(offset, len))
          << "op " << op << ": read [" << offset << ", +" << len << ")";
    }
  }
  std::string all(kSize, 'x');
  ASSERT_TRUE((*opened)->Read(0, absl::MakeSpan(all)).ok());
  EXPECT_EQ(all, model);
}

TEST_F(RegionSimTest, ReadAcrossStripeBoundariesSpansEveryNode) {
  const uint64_t kSize = 3 * kSlabBytes;
  auto region = Create(*a_, "span", kSize);
  ASSERT_NE(region, nullptr);
  std::string data = RandomBytes(kSize);
  ASSERT_TRUE(region->Write(0, data).ok());
  absl::Mutex mu;
  std::set<std::string> nodes_read;
  fabric_->SetBeforeExecute(
      [&](absl::string_view node, const rdma::WorkRequest& wr) {
        if (wr.opcode != rdma::Opcode::kRead) return;
        absl::MutexLock lock(&mu);
        nodes_read.insert(std::string(node));
      });
  // From the middle of one stripe to the middle of one eight stripes on.
  const uint64_t offset = kStripeBytes / 2 + 3;
  const uint64_t len = 8 * kStripeBytes;
  std::string out(len, 'x');
  ASSERT_TRUE(region->Read(offset, absl::MakeSpan(out)).ok());
  fabric_->SetBeforeExecute(nullptr);
  EXPECT_EQ(out, data.substr(offset, len));
  EXPECT_EQ(nodes_read.size(), static_cast<size_t>(kNodes))
      << "eight consecutive stripes should live on every node";
  // One byte on each side of a stripe boundary.
  std::string two(2, 'x');
  ASSERT_TRUE(region->Read(kStripeBytes - 1, absl::MakeSpan(two)).ok());
  EXPECT_EQ(two, data.substr(kStripeBytes - 1, 2));
}

// Each node's share (over 3 MiB) takes one lane several staging rounds;
// with requests held back and run late, a staging half must never be
// refilled while requests using it are still to run.
TEST_F(RegionSimTest, LargeStagedTransfersSurviveDelayedRequests) {
  const uint64_t kSize = 10 * kSlabBytes + 4321;
  auto region = Create(*a_, "delayed", kSize);
  ASSERT_NE(region, nullptr);
  rdma::SimFaults faults;
  faults.delay_probability = 0.5;
  faults.max_delay_polls = 3;
  fabric_->SetFaults(faults);
  for (int round = 0; round < 3; ++round) {
    std::string data = RandomBytes(kSize);
    ASSERT_TRUE(region->Write(0, data).ok());
    std::string out(kSize, 'x');
    ASSERT_TRUE(region->Read(0, absl::MakeSpan(out)).ok());
    ASSERT_TRUE(out == data) << "round " << round;
  }
  fabric_->SetFaults({});
}

// 4 KiB stripes: a node's share is hundreds of ranges, more than one post
// carries, so even a share that fits one staging half takes several posts.
TEST_F(RegionSimTest, TinyStripesTakeSeveralPostsPerLane) {
  RegionOptions options;
  options.stripe_bytes = 4096;
  for (uint64_t size : {6 * kSlabBytes, 6 * kSlabBytes + 3 * 4096 + 17}) {
    std::string name = absl::StrCat("tiny-", size);
    auto region = CreateRegion(*a_, name, size, options);
    ASSERT_TRUE(region.ok()) << region.status();
    std::string data = RandomBytes(size);
    ASSERT_TRUE((*region)->Write(0, data).ok());
    std::string out(size, 'x');
    ASSERT_TRUE((*region)->Read(0, absl::MakeSpan(out)).ok());
    ASSERT_TRUE(out == data) << name;
    ASSERT_TRUE(DeleteRegion(*a_, name).ok());
  }
}

TEST_F(RegionSimTest, AHandleOfADeletedRegionFailsNotFoundAndWritesNothing) {
  const uint64_t size = 2 * kSlabBytes;
  auto old = Create(*a_, "stale", size);
  ASSERT_NE(old, nullptr);
  ASSERT_TRUE(old->Write(0, RandomBytes(size)).ok());
  ASSERT_TRUE(DeleteRegion(*a_, "stale").ok());
  // Replaced under the same name (on other slabs: the old ones wait out
  // their grace, sealed, with their region words cleared).
  auto fresh = Create(*a_, "stale", size);
  ASSERT_NE(fresh, nullptr);
  const std::string data = RandomBytes(size);
  ASSERT_TRUE(fresh->Write(0, data).ok());

  std::string out(size, 'x');
  absl::Status read = old->Read(0, absl::MakeSpan(out));
  EXPECT_EQ(read.code(), absl::StatusCode::kNotFound) << read;
  EXPECT_NE(read.message().find("'stale'"), std::string::npos) << read;
  EXPECT_EQ(old->Write(0, RandomBytes(size)).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(old->FetchAdd(0, 1).status().code(), absl::StatusCode::kNotFound);
  // The new region is untouched, and a handle opened now reads it.
  ASSERT_TRUE(fresh->Read(0, absl::MakeSpan(out)).ok());
  EXPECT_TRUE(out == data);
  auto reopened = OpenRegion(*b_, "stale");
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  ASSERT_TRUE((*reopened)->Read(0, absl::MakeSpan(out)).ok());
  EXPECT_TRUE(out == data);
}

TEST_F(RegionSimTest, AHandleNeverReadsOrWritesItsRegionsMemoryOnceReused) {
  // Most of the cluster's slabs, so that the next region of this size must
  // take some of this one's once the nodes reclaim them.
  absl::StatusOr<ClusterStatus> status = a_->Status();
  ASSERT_TRUE(status.ok()) << status.status();
  uint64_t slabs = 0;
  for (const NodeStatus& n : status->nodes) slabs += n.slabs_total;
  const uint64_t size = slabs * 7 / 10 * kSlabBytes;
  auto old = Create(*a_, "reused", size);
  ASSERT_NE(old, nullptr);
  ASSERT_TRUE(old->Write(0, std::string(size, 'o')).ok());
  ASSERT_TRUE(DeleteRegion(*a_, "reused").ok());
  absl::StatusOr<std::unique_ptr<Region>> fresh;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  do {
    RegionOptions options;
    options.stripe_bytes = kStripeBytes;
    fresh = CreateRegion(*a_, "reused", size, options);
    if (fresh.ok() || !absl::IsResourceExhausted(fresh.status())) break;
    absl::SleepFor(absl::Milliseconds(100));  // the nodes reclaim meanwhile
  } while (absl::Now() < deadline);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  const std::string data = RandomBytes(size);
  ASSERT_TRUE((*fresh)->Write(0, data).ok());

  std::string out(size, 'x');
  // Its memory now holds the new region's bytes: the read must not succeed.
  EXPECT_EQ(old->Read(0, absl::MakeSpan(out)).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(old->Write(0, std::string(size, 'w')).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(old->CompareAndSwap(0, 0, 1).status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE((*fresh)->Read(0, absl::MakeSpan(out)).ok());
  EXPECT_TRUE(out == data) << "the stale handle wrote into the new region";
}

TEST_F(RegionSimTest, AccessPastTheEndIsOutOfRange) {
  auto region = Create(*a_, "bounds", 100000);
  ASSERT_NE(region, nullptr);
  std::string buf(10, 'x');
  absl::Status s = region->Read(100000 - 9, absl::MakeSpan(buf));
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
  EXPECT_NE(s.message().find("100000"), std::string::npos) << s;
  EXPECT_EQ(region->Write(100000 - 9, buf).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(region->Read(~uint64_t{0} - 3, absl::MakeSpan(buf)).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(region->FetchAdd(100000, 1).status().code(),
            absl::StatusCode::kOutOfRange);
  // Up to the end exactly, and empty at the end, are fine.
  EXPECT_TRUE(region->Write(100000 - 10, buf).ok());
  EXPECT_TRUE(region->Read(100000, absl::Span<char>()).ok());
}

TEST_F(RegionSimTest, CompareAndSwapAndFetchAddReturnTheOldValue) {
  auto region = Create(*a_, "atomics", 2 * kSlabBytes);
  ASSERT_NE(region, nullptr);
  auto other = OpenRegion(*b_, "atomics");
  ASSERT_TRUE(other.ok()) << other.status();
  // A word in a later stripe, on some node's second slab.
  const uint64_t kWord = 20 * kStripeBytes + 64;
  absl::StatusOr<uint64_t> old = region->CompareAndSwap(kWord, 0, 42);
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(*old, 0u);  // success: old == expected
  old = (*other)->CompareAndSwap(kWord, 7, 99);
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(*old, 42u);  // failure: the word is unchanged
  old = (*other)->FetchAdd(kWord, 8);
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(*old, 42u);
  old = region->FetchAdd(kWord, 0);
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(*old, 50u);
  uint64_t word = 0;
  ASSERT_TRUE(region
                  ->Read(kWord, absl::MakeSpan(reinterpret_cast<char*>(&word),
                                               sizeof(word)))
                  .ok());
  EXPECT_EQ(word, 50u);  // host byte order
}

TEST_F(RegionSimTest, ConcurrentFetchAddsLoseNoIncrement) {
  auto region = Create(*a_, "counter", kStripeBytes);
  ASSERT_NE(region, nullptr);
  auto other = OpenRegion(*b_, "counter");
  ASSERT_TRUE(other.ok());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    Region* r = t % 2 ? other->get() : region.get();
    threads.emplace_back([r] {
      for (int i = 0; i < 50; ++i) ASSERT_TRUE(r->FetchAdd(8, 1).ok());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(*region->FetchAdd(8, 0), 200u);
}

TEST_F(RegionSimTest, MisalignedAtomicIsInvalidArgument) {
  auto region = Create(*a_, "misaligned", kStripeBytes);
  ASSERT_NE(region, nullptr);
  EXPECT_EQ(region->CompareAndSwap(4, 0, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(region->FetchAdd(kStripeBytes - 1, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(RegionSimTest, AtomicOnAReplicatedRegionIsFailedPrecondition) {
  auto region = Create(*a_, "replicated-atomics", kStripeBytes, 2);
  ASSERT_NE(region, nullptr);
  EXPECT_EQ(region->CompareAndSwap(0, 0, 1).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(region->FetchAdd(8, 1).status().code(),
            absl::StatusCode::kFailedPrecondition);
  uint64_t word = 1;
  ASSERT_TRUE(region
                  ->Read(0, absl::MakeSpan(reinterpret_cast<char*>(&word),
                                           sizeof(word)))
                  .ok());
  EXPECT_EQ(word, 0u) << "a refused atomic changed a copy";
}

TEST_F(RegionSimTest, ReplicatedRegionReadsFromTheSurvivingCopyAfterANodeDies) {
  const uint64_t kSize = 2 * kSlabBytes;
  auto replicated = Create(*a_, "two-copies", kSize, 2);
  auto single = Create(*a_, "one-copy", kSize, 1);
  ASSERT_NE(replicated, nullptr);
  ASSERT_NE(single, nullptr);
  std::string data = RandomBytes(kSize);
  ASSERT_TRUE(replicated->Write(0, data).ok());
  ASSERT_TRUE(single->Write(0, data).ok());

  KillNode(1, *a_);
  std::string out(kSize, 'x');
  absl::Status read = replicated->Read(0, absl::MakeSpan(out));
  ASSERT_TRUE(read.ok()) << read;
  EXPECT_EQ(out, data);
  // Writes go to the copies still alive, and read back.
  std::string update = RandomBytes(3 * kStripeBytes);
  ASSERT_TRUE(replicated->Write(kStripeBytes, update).ok());
  data.replace(kStripeBytes, update.size(), update);
  auto reopened = OpenRegion(*b_, "two-copies");
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  ASSERT_TRUE((*reopened)->Read(0, absl::MakeSpan(out)).ok());
  EXPECT_EQ(out, data);

  // Without a second copy, the dead node's stripes are gone.
  absl::Status lost = single->Read(0, absl::MakeSpan(out));
  EXPECT_EQ(lost.code(), absl::StatusCode::kDataLoss) << lost;
  EXPECT_NE(lost.message().find("one-copy"), std::string::npos) << lost;
  EXPECT_NE(lost.message().find(NodeName(1)), std::string::npos) << lost;
  EXPECT_EQ(single->Write(0, data).code(), absl::StatusCode::kDataLoss);
}

TEST_F(RegionSimTest, VerifyHasEveryCopyHashedOnItsNode) {
  auto region = Create(*a_, "verified", 4 * kStripeBytes, /*replicas=*/2);
  ASSERT_NE(region, nullptr);
  std::string data = RandomBytes(4 * kStripeBytes);
  ASSERT_TRUE(region->Write(0, data).ok());
  ASSERT_TRUE(region->Verify(0, data).ok());
  ASSERT_TRUE(region->Verify(100, absl::string_view(data).substr(100, 70000)).ok());
  std::string other = data;
  other[kStripeBytes + 9] ^= 1;
  EXPECT_EQ(region->Verify(0, other).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(region->Verify(4 * kStripeBytes - 1, "ab").code(),
            absl::StatusCode::kOutOfRange);

  // Change one byte of the second copy of stripe 2, in its node's memory:
  // reads (served by the first copy) do not notice, Verify does.
  auto coordinator =
      placement::CoordinatorClient::Connect(cluster_->address());
  ASSERT_TRUE(coordinator.ok());
  auto info = (*coordinator)->GetRegion("verified");
  ASSERT_TRUE(info.ok()) << info.status();
  auto layout = placement::RegionLayout::Create(*info);
  ASSERT_TRUE(layout.ok()) << layout.status();
  placement::StripeCopy copy = layout->Copy(2, 1);
  const std::string holder = info->extents(copy.extent).node_id();
  char* byte = nullptr;
  for (const auto& node : nodes_) {
    if (node->info().node_id() == holder) {
      byte = reinterpret_cast<char*>(node->info().pool().addr() +
                                     copy.pool_offset + 5);
    }
  }
  ASSERT_NE(byte, nullptr) << holder;
  *byte ^= 0x10;
  std::string out(data.size(), '\0');
  ASSERT_TRUE(region->Read(0, absl::MakeSpan(out)).ok());
  EXPECT_EQ(out, data);
  absl::Status verify = region->Verify(0, data);
  EXPECT_EQ(verify.code(), absl::StatusCode::kDataLoss) << verify;
  EXPECT_NE(verify.message().find("stripe 2"), std::string::npos) << verify;
  EXPECT_NE(verify.message().find(holder), std::string::npos) << verify;
}

// The weights loader's Verify: digests it knows are compared with the
// nodes' as they are (a wrong one fails, so they are used, not recomputed);
// a piece across a stripe boundary and the bytes no piece covers are
// hashed here, so changed bytes there still fail.
TEST_F(RegionSimTest, VerifyWithDigestsUsesTheKnownDigestsOfWholeStripePieces) {
  auto region = Create(*a_, "known", 4 * kStripeBytes, /*replicas=*/2);
  ASSERT_NE(region, nullptr);
  std::string data = RandomBytes(4 * kStripeBytes);
  ASSERT_TRUE(region->Write(0, data).ok());
  auto digest = [&](uint64_t at, uint64_t n) {
    return format::DigestBytes(absl::string_view(data).substr(at, n));
  };
  // From byte 1000: [0, 4096) and [5000, 9000) inside stripe 0, then one
  // piece across the stripe 0/1 boundary; the rest is not covered.
  const uint64_t base = 1000;
  const uint64_t cross = kStripeBytes - base - 100;
  std::vector<client_internal::KnownDigest> known = {
      {0, 4096, digest(base, 4096)},
      {5000, 4000, digest(base + 5000, 4000)},
      {cross, 200, digest(base + cross, 200)}};
  absl::string_view span =
      absl::string_view(data).substr(base, 3 * kStripeBytes);
  ASSERT_TRUE(
      client_internal::VerifyWithDigests(*region, base, span, known).ok());
  // A wrong digest for a whole-stripe piece fails, naming the stripe.
  std::vector<client_internal::KnownDigest> wrong = known;
  wrong[1].digest ^= 1;
  absl::Status s =
      client_internal::VerifyWithDigests(*region, base, span, wrong);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("stripe 0"), std::string::npos) << s;
  // The piece across the boundary is hashed from the bytes: a changed byte
  // in it, or in the uncovered rest, fails although the digests match.
  std::string changed(span);
  changed[cross + 150] ^= 1;
  EXPECT_EQ(
      client_internal::VerifyWithDigests(*region, base, changed, known).code(),
      absl::StatusCode::kDataLoss);
  changed = std::string(span);
  changed[2 * kStripeBytes] ^= 1;
  EXPECT_EQ(
      client_internal::VerifyWithDigests(*region, base, changed, known).code(),
      absl::StatusCode::kDataLoss);
  // Pieces out of order, overlapping or past the bytes are refused.
  std::vector<client_internal::KnownDigest> unordered = {known[1], known[0]};
  EXPECT_EQ(
      client_internal::VerifyWithDigests(*region, base, span, unordered).code(),
      absl::StatusCode::kInvalidArgument);
  std::vector<client_internal::KnownDigest> past = {{span.size() - 10, 11, 0}};
  EXPECT_EQ(
      client_internal::VerifyWithDigests(*region, base, span, past).code(),
      absl::StatusCode::kInvalidArgument);
}

TEST_F(RegionSimTest, NodeThatFailsMidReadIsUnavailable) {
  auto region = Create(*a_, "fails", 2 * kSlabBytes);
  ASSERT_NE(region, nullptr);
  // The node's memory is gone but the coordinator has not noticed yet.
  fabric_->KillNode(NodeName(2));
  std::string out(2 * kSlabBytes, 'x');
  absl::Status s = region->Read(0, absl::MakeSpan(out));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_EQ(region->Write(0, out).code(), absl::StatusCode::kUnavailable);
}

// True when `wr` moves bytes straight to or from `buffer`.
bool TouchesBuffer(const rdma::WorkRequest& wr, absl::Span<const char> buffer) {
  const char* local = static_cast<const char*>(wr.local);
  return local >= buffer.data() && local < buffer.data() + buffer.size();
}

TEST_F(RegionSimTest, RegisteredBufferMovesWithoutStagingAndMatchesStaged) {
  const uint64_t kSize = 3 * kSlabBytes;
  auto region = Create(*a_, "zero-copy", kSize);
  ASSERT_NE(region, nullptr);
  std::vector<char> memory(2 * kSize);
  auto registered = a_->RegisterBuffer(memory.data(), memory.size());
  ASSERT_TRUE(registered.ok()) << registered.status();
  absl::Span<char> src = (*registered)->span().subspan(0, kSize);
  absl::Span<char> dst = (*registered)->span().subspan(kSize, kSize);
  std::string data = RandomBytes(kSize);
  std::memcpy(src.data(), data.data(), kSize);

  std::atomic<int> direct{0}, staged{0};
  fabric_->SetBeforeExecute(
      [&](absl::string_view, const rdma::WorkRequest& wr) {
        if (wr.length <= 8) return;  // write flushes
        (TouchesBuffer(wr, (*registered)->span()) ? direct : staged)++;
      });
  const uint64_t kOffset = 1000, kLen = kSize - 5000;
  ASSERT_TRUE(region->Write(kOffset, src.subspan(kOffset, kLen)).ok());
  ASSERT_TRUE(region->Read(kOffset, dst.subspan(kOffset, kLen)).ok());
  EXPECT_GT(direct, 0);
  EXPECT_EQ(staged, 0) << "registered memory went through staging";

  // The same bytes through staging (plain memory) read identically.
  direct = staged = 0;
  std::string plain(kLen, 'x');
  ASSERT_TRUE(region->Read(kOffset, absl::MakeSpan(plain)).ok());
  EXPECT_EQ(direct, 0);
  EXPECT_GT(staged, 0);
  fabric_->SetBeforeExecute(nullptr);
  EXPECT_EQ(plain, data.substr(kOffset, kLen));
  EXPECT_EQ(std::string(dst.data() + kOffset, kLen), plain);
  // And a staged write reads back through the registered buffer.
  std::string update = RandomBytes(kLen);
  ASSERT_TRUE(region->Write(kOffset, update).ok());
  ASSERT_TRUE(region->Read(kOffset, dst.subspan(kOffset, kLen)).ok());
  EXPECT_EQ(std::string(dst.data() + kOffset, kLen), update);
}

TEST_F(RegionSimTest, BadNamesAndOptionsFailFastWithInvalidArgument) {
  const std::string too_long(kMaxRegionNameBytes + 1, 'n');
  for (const std::string& name : {std::string(), std::string("has space"),
                                  std::string("tab\t"), too_long}) {
    EXPECT_EQ(CreateRegion(*a_, name, 4096).status().code(),
              absl::StatusCode::kInvalidArgument)
        << name;
    EXPECT_EQ(OpenRegion(*a_, name).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(DeleteRegion(*a_, name).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(RenameRegion(*a_, "ok", name).code(),
              absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(CreateRegion(*a_, "zero", 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      CreateRegion(*a_, "r", 4096, {.stripe_bytes = 1000}).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateRegion(*a_, "r", 4096, {.replicas = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateRegion(*a_, "r", 4096, {.replicas = 9}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(RegionSimTest, ListDescribesRegionsAndDeleteForgetsThem) {
  absl::Time before = absl::Now() - absl::Seconds(1);
  auto region = Create(*a_, "models/a", 2 * kSlabBytes);
  ASSERT_NE(region, nullptr);
  ASSERT_NE(Create(*a_, "models/b", kStripeBytes, 2), nullptr);
  ASSERT_NE(Create(*a_, "other", kStripeBytes), nullptr);
  auto listed = ListRegions(*b_, "models/");
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 2u);
  const RegionDescription& d = (*listed)[0];
  EXPECT_EQ(d.name, "models/a");
  EXPECT_EQ(d.size, 2 * kSlabBytes);
  EXPECT_EQ(d.stripe_bytes, kStripeBytes);
  EXPECT_EQ(d.replicas, 1u);
  EXPECT_EQ(d.nodes.size(), static_cast<size_t>(kNodes));
  EXPECT_GT(d.created, before);
  EXPECT_LT(d.created, absl::Now() + absl::Seconds(1));
  EXPECT_EQ((*listed)[1].replicas, 2u);
  EXPECT_EQ(ListRegions(*b_)->size(), 3u);

  ASSERT_TRUE(RenameRegion(*b_, "models/a", "models/c").ok());
  EXPECT_EQ(OpenRegion(*a_, "models/a").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(OpenRegion(*a_, "models/c").ok());
  EXPECT_EQ(RenameRegion(*b_, "models/b", "models/c").code(),
            absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(DeleteRegion(*a_, "models/c").ok());
  EXPECT_EQ(DeleteRegion(*a_, "models/c").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(OpenRegion(*b_, "models/c").status().code(),
            absl::StatusCode::kNotFound);
}

// The same client over the TCP backend on loopback, in one process, with a
// region striped over three nodes: correctness of large staged and
// zero-copy transfers, and their throughput next to one TCP lane's (the
// region spreads a node's share over several lanes, so it should not be
// bound by one). Size: MESHPOOL_REGION_BENCH_MIB (default 32).
class RegionTcpLoopbackTest : public ::testing::Test {
 protected:
  static uint64_t BenchBytes() {
    const char* env = std::getenv("MESHPOOL_REGION_BENCH_MIB");
    uint64_t mib = env != nullptr ? std::strtoull(env, nullptr, 10) : 32;
    return std::max<uint64_t>(mib, 8) << 20;
  }
};

double GBps(uint64_t bytes, absl::Duration d) {
  return static_cast<double>(bytes) / absl::ToDoubleSeconds(d) / 1e9;
}

// One TCP lane reading `total` bytes from `node`'s pool into `buffer`
// (registered), 8 MiB per READ with four in flight: the baseline.
absl::StatusOr<absl::Duration> OneLaneRead(const proto::NodeInfo& node,
                                           absl::Span<char> buffer,
                                           uint64_t total) {
  MESHPOOL_ASSIGN_OR_RETURN(auto transport, rdma::CreateTcpTransport());
  MESHPOOL_ASSIGN_OR_RETURN(
      auto mr, transport->RegisterMemory(buffer.data(), buffer.size()));
  MESHPOOL_ASSIGN_OR_RETURN(
      auto ep, transport->Connect(node.transport_addresses(0), nullptr));
  const uint64_t kChunk = 8 << 20;
  const uint64_t area = node.layout().slab_area_offset();
  const uint64_t span = (node.pool().length() - area) / kChunk * kChunk;
  std::vector<rdma::Completion> done(1);
  absl::Time start = absl::Now();
  uint64_t posted = 0, completed = 0;
  while (completed < total) {
    while (posted < total && posted - completed < 4 * kChunk) {
      rdma::WorkRequest wr;
      wr.opcode = rdma::Opcode::kRead;
      wr.local = buffer.data() + posted % buffer.size();
      wr.length = kChunk;
      wr.lkey = mr->lkey();
      wr.remote_addr = node.pool().addr() + area + posted % span;
      wr.rkey = node.pool().rkey();
      MESHPOOL_RETURN_IF_ERROR(ep->Post(absl::MakeConstSpan(&wr, 1)));
      posted += kChunk;
    }
    MESHPOOL_ASSIGN_OR_RETURN(size_t n,
                              ep->Poll(absl::MakeSpan(done), absl::Seconds(5)));
    if (n == 0) return absl::DeadlineExceededError("baseline read stalled");
    MESHPOOL_RETURN_IF_ERROR(done[0].status);
    completed += kChunk;
  }
  return absl::Now() - start;
}

TEST_F(RegionTcpLoopbackTest, LargeTransfersRoundTripAndAreNotBoundByOneLane) {
  const uint64_t kBytes = BenchBytes();
  auto coordinator = coordinator::Coordinator::Start({});
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  std::vector<std::unique_ptr<store::Node>> nodes;
  for (int i = 0; i < kNodes; ++i) {
    store::NodeOptions options;
    options.coordinator = (*coordinator)->address();
    options.capacity_bytes = kBytes / kNodes + (48 << 20);
    options.slab_bytes = 4 << 20;
    auto transport = rdma::CreateTcpTransport();
    ASSERT_TRUE(transport.ok());
    auto node = store::Node::Start(options, *std::move(transport));
    ASSERT_TRUE(node.ok()) << node.status();
    nodes.push_back(*std::move(node));
  }
  ClientOptions options;
  options.coordinator = (*coordinator)->address();
  auto client = Client::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status();
  absl::Time t0 = absl::Now();
  auto region = CreateRegion(*(*client), "bench", kBytes);
  ASSERT_TRUE(region.ok()) << region.status();
  absl::Duration create = absl::Now() - t0;

  std::string data(kBytes, '\0');
  std::mt19937_64 rng(kBytes);
  for (uint64_t i = 0; i < kBytes; i += 8) {
    uint64_t x = rng();
    std::memcpy(&data[i], &x, 8);
  }
  std::vector<char> memory(2 * kBytes);
  auto registered = (*client)->RegisterBuffer(memory.data(), memory.size());
  ASSERT_TRUE(registered.ok()) << registered.status();
  absl::Span<char> src = (*registered)->span().subspan(0, kBytes);
  absl::Span<char> dst = (*registered)->span().subspan(kBytes, kBytes);
  std::memcpy(src.data(), data.data(), kBytes);
  std::string plain(kBytes, 'x');

  t0 = absl::Now();
  ASSERT_TRUE((*region)->Write(0, data).ok());
  absl::Duration staged_write = absl::Now() - t0;
  t0 = absl::Now();
  ASSERT_TRUE((*region)->Read(0, absl::MakeSpan(plain)).ok());
  absl::Duration staged_read = absl::Now() - t0;
  EXPECT_TRUE(plain == data);
  t0 = absl::Now();
  ASSERT_TRUE((*region)->Write(0, src).ok());
  absl::Duration direct_write = absl::Now() - t0;
  t0 = absl::Now();
  ASSERT_TRUE((*region)->Read(0, dst).ok());
  absl::Duration direct_read = absl::Now() - t0;
  EXPECT_TRUE(absl::string_view(dst.data(), kBytes) == data);
  absl::StatusOr<absl::Duration> one_lane =
      OneLaneRead(nodes[0]->info(), dst, kBytes);
  ASSERT_TRUE(one_lane.ok()) << one_lane.status();
  std::cout << "region of " << (kBytes >> 20) << " MiB over " << kNodes
            << " tcp nodes (created in " << create << "): staged write "
            << GBps(kBytes, staged_write) << " GB/s, staged read "
            << GBps(kBytes, staged_read) << " GB/s, zero-copy write "
            << GBps(kBytes, direct_write) << " GB/s, zero-copy read "
            << GBps(kBytes, direct_read) << " GB/s; one lane reads "
            << GBps(kBytes, *one_lane) << " GB/s" << std::endl;
}

// A node's share of a large transfer is cut into contiguous, nearly equal
// parts, one per lane, splitting ranges where a cut falls inside one.
TEST(RegionTransferTest, SplitSegmentsCutsContiguousEqualShares) {
  char base[40] = {};
  std::vector<client_internal::Segment> segments = {
      {base, 1000, 10}, {base + 10, 5000, 25}, {base + 35, 9000, 5}};
  auto parts = client_internal::SplitSegments(segments, 40, 4);
  ASSERT_EQ(parts.size(), 4u);
  uint64_t next_local = 0;
  for (const auto& part : parts) {
    uint64_t bytes = 0;
    for (const auto& s : part) {
      EXPECT_EQ(s.local - base, static_cast<int64_t>(next_local));
      next_local += s.length;
      bytes += s.length;
    }
    EXPECT_EQ(bytes, 10u);
  }
  EXPECT_EQ(next_local, 40u);
  // The second share is the second segment's first 10 bytes.
  ASSERT_EQ(parts[1].size(), 1u);
  EXPECT_EQ(parts[1][0].pool_offset, 5000u);
  ASSERT_EQ(parts[2].size(), 1u);
  EXPECT_EQ(parts[2][0].pool_offset, 5010u);
  EXPECT_EQ(parts[3].size(), 2u);
  EXPECT_EQ(parts[3][1].pool_offset, 9000u);
  // Fewer bytes than parts: no empty shares.
  EXPECT_EQ(client_internal::SplitSegments(segments, 40, 64).size(), 40u);
  EXPECT_EQ(client_internal::SplitSegments(segments, 40, 1).size(), 1u);
}

// A region table that does not decode (here: a stripe naming an extent
// that does not exist) cannot locate the bytes: DataLoss naming the region.
TEST(RegionTableTest, MalformedTableIsDataLossNamingTheRegion) {
  proto::RegionInfo info;
  info.set_name("broken");
  info.set_size(8192);
  info.set_stripe_bytes(4096);
  info.set_replicas(1);
  proto::RegionExtent* extent = info.add_extents();
  extent->set_node_id("node-a");
  extent->set_slab_bytes(1 << 20);
  extent->add_slab_offsets(1 << 20);
  info.add_stripe_extents(std::string("\0\0\1\0", 4));  // extent 1 of 1
  auto region = client_internal::MakeRegion(nullptr, info);
  EXPECT_EQ(region.status().code(), absl::StatusCode::kDataLoss)
      << region.status();
  EXPECT_NE(region.status().message().find("broken"), std::string::npos);
  info.set_stripe_extents(0, std::string(4, '\0'));  // both on extent 0
  EXPECT_TRUE(client_internal::MakeRegion(nullptr, info).ok());
}

}  // namespace
}  // namespace meshpool
