// store/node_service: DigestRanges on a NodeServer over a small pool in
// ordinary memory (no coordinator, no one-sided traffic: the test writes
// the region's bytes itself).
#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "common/common.h"
#include "format/layout.h"
#include "gtest/gtest.h"
#include "proto/proto.h"
#include "rdma/rdma.h"
#include "rdma/tcp.h"
#include "store/node_service.h"
#include "store/slab_manager.h"
#include "store/store.h"
#include "xxhash.h"

namespace meshpool::store {
namespace {

constexpr uint64_t kIncarnation = 42;
constexpr uint64_t kSlabBytes = 1 << 20;

class DigestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<format::PoolLayout> layout =
        format::ComputeLayout(uint64_t{10} << 20, kSlabBytes, 1024);
    ASSERT_TRUE(layout.ok()) << layout.status();
    ASSERT_GE(layout->slab_count, 4u);
    layout_ = *layout;
    memory_.assign(layout_.pool_bytes / 8, 0);
    SlabManagerOptions options;
    options.layout = layout_;
    absl::StatusOr<std::unique_ptr<SlabManager>> slabs =
        SlabManager::Create(options, memory_.data());
    ASSERT_TRUE(slabs.ok()) << slabs.status();
    slabs_ = *std::move(slabs);
    absl::StatusOr<std::unique_ptr<rdma::Transport>> transport =
        rdma::CreateTcpTransport();
    ASSERT_TRUE(transport.ok()) << transport.status();
    transport_ = *std::move(transport);
    NodeServiceDeps deps;
    deps.slabs = slabs_.get();
    deps.pool = pool();
    deps.transport = transport_.get();
    deps.incarnation = kIncarnation;
    deps.stats = [] { return proto::NodeStats(); };
    absl::StatusOr<std::unique_ptr<NodeServer>> server =
        NodeServer::Start("127.0.0.1:0", {}, std::move(deps));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    stub_ = proto::Node::NewStub(grpc::CreateChannel(
        server_->address(), grpc::InsecureChannelCredentials()));
  }

  char* pool() { return reinterpret_cast<char*>(memory_.data()); }

  // (offset, length) pairs -> digests.
  absl::StatusOr<std::vector<uint64_t>> Digest(
      const std::vector<std::pair<uint64_t, uint64_t>>& ranges,
      uint64_t incarnation = kIncarnation) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
    proto::DigestRangesRequest request;
    request.set_incarnation(incarnation);
    for (auto [offset, length] : ranges) {
      proto::DigestRange* r = request.add_ranges();
      r->set_offset(offset);
      r->set_length(length);
    }
    proto::DigestRangesReply reply;
    MESHPOOL_RETURN_IF_ERROR(
        FromGrpc(stub_->DigestRanges(&ctx, request, &reply), "DigestRanges"));
    return std::vector<uint64_t>(reply.digests().begin(),
                                 reply.digests().end());
  }

  format::PoolLayout layout_;
  std::vector<uint64_t> memory_;
  std::unique_ptr<SlabManager> slabs_;
  std::unique_ptr<rdma::Transport> transport_;
  std::unique_ptr<NodeServer> server_;
  std::unique_ptr<proto::Node::Stub> stub_;
};

TEST_F(DigestTest, DigestsAreXxh3OfWhatWasWrittenInOrder) {
  absl::StatusOr<std::vector<uint64_t>> taken = slabs_->AllocateRegion(7, 2);
  ASSERT_TRUE(taken.ok()) << taken.status();
  const uint64_t seed = std::random_device()();
  std::cout << "seed " << seed << "\n";
  std::mt19937_64 rng(seed);
  for (uint64_t slab : *taken) {
    char* p = pool() + layout_.slab_offset(slab);
    for (uint64_t i = 0; i < kSlabBytes; ++i) p[i] = static_cast<char>(rng());
  }
  const uint64_t a = layout_.slab_offset((*taken)[0]);
  const uint64_t b = layout_.slab_offset((*taken)[1]);
  std::vector<std::pair<uint64_t, uint64_t>> ranges = {
      {b, kSlabBytes}, {a + 4096, 12345}, {a, 1}, {a, kSlabBytes}};
  absl::StatusOr<std::vector<uint64_t>> digests = Digest(ranges);
  ASSERT_TRUE(digests.ok()) << digests.status();
  ASSERT_EQ(digests->size(), ranges.size());
  for (size_t i = 0; i < ranges.size(); ++i) {
    EXPECT_EQ((*digests)[i],
              XXH3_64bits(pool() + ranges[i].first, ranges[i].second))
        << "range " << i;
  }
  EXPECT_NE((*digests)[0], (*digests)[3]);
  pool()[a + 4096 + 77] ^= 1;  // one bit changed: that digest changes
  absl::StatusOr<std::vector<uint64_t>> again = Digest(ranges);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_NE((*again)[1], (*digests)[1]);
  EXPECT_EQ((*again)[0], (*digests)[0]);
  absl::StatusOr<std::vector<uint64_t>> none = Digest({});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
}

TEST_F(DigestTest, RangesOutsideRegionSlabsAreInvalidArgument) {
  absl::StatusOr<std::vector<uint64_t>> taken = slabs_->AllocateRegion(7, 2);
  ASSERT_TRUE(taken.ok()) << taken.status();
  ASSERT_TRUE(slabs_->Grant("c").ok());
  const uint64_t a = layout_.slab_offset((*taken)[0]);
  const uint64_t granted = layout_.slab_offset(2);
  ASSERT_EQ(slabs_->state(2), SlabState::kGranted);
  for (auto [what, offset, length] : {
           std::tuple<const char*, uint64_t, uint64_t>{"spans two slabs",
                                                       a + kSlabBytes - 1, 2},
           {"empty", a, 0},
           {"granted slab", granted, 64},
           {"free slab", layout_.slab_offset(layout_.slab_count - 1), 64},
           {"index", layout_.index_offset, 64},
           {"past the pool", layout_.pool_bytes - 8, 64},
       }) {
    // A good range first: one bad range fails the whole call.
    absl::StatusOr<std::vector<uint64_t>> d =
        Digest({{a, 8}, {offset, length}});
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_NE(d.status().message().find(std::to_string(offset)),
              std::string::npos)
        << what << ": " << d.status();
  }
}

TEST_F(DigestTest, MoreThanKMaxDigestBytesIsInvalidArgument) {
  absl::StatusOr<std::vector<uint64_t>> taken = slabs_->AllocateRegion(7, 1);
  ASSERT_TRUE(taken.ok()) << taken.status();
  const uint64_t a = layout_.slab_offset((*taken)[0]);
  std::vector<std::pair<uint64_t, uint64_t>> ranges(
      format::kMaxDigestBytes / kSlabBytes, {a, kSlabBytes});
  absl::StatusOr<std::vector<uint64_t>> d = Digest(ranges);  // exactly the cap
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->size(), ranges.size());
  ranges.push_back({a, 1});
  EXPECT_EQ(Digest(ranges).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(DigestTest, StaleIncarnationIsFailedPrecondition) {
  absl::StatusOr<std::vector<uint64_t>> taken = slabs_->AllocateRegion(7, 1);
  ASSERT_TRUE(taken.ok()) << taken.status();
  absl::StatusOr<std::vector<uint64_t>> d =
      Digest({{layout_.slab_offset((*taken)[0]), 8}}, kIncarnation + 1);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(d.status().message().find("node restarted"), std::string::npos)
      << d.status();
}

TEST_F(DigestTest, FreedRegionIsNoLongerDigested) {
  absl::StatusOr<std::vector<uint64_t>> taken = slabs_->AllocateRegion(7, 1);
  ASSERT_TRUE(taken.ok()) << taken.status();
  const uint64_t a = layout_.slab_offset((*taken)[0]);
  ASSERT_TRUE(Digest({{a, 8}}).ok());
  slabs_->FreeRegion(7);
  EXPECT_EQ(Digest({{a, 8}}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace meshpool::store
