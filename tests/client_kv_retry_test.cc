// The client's internal retry outcomes (client/kv_retry.h): typed, so a
// plain Aborted from elsewhere is never taken for "read the index again".
#include "absl/status/statusor.h"
#include "client/kv_retry.h"
#include "gtest/gtest.h"

namespace meshpool::client_internal {
namespace {

TEST(KvRetry, EachReasonRoundTripsThroughStatusAndStatusOr) {
  for (RetryReason r :
       {RetryReason::kRereadIndex, RetryReason::kReadLeasePassed,
        RetryReason::kAllocateAgain}) {
    absl::Status s = Retry(r, "why");
    EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
    EXPECT_EQ(s.message(), "why");
    EXPECT_EQ(RetryReasonOf(s), r);
    absl::StatusOr<int> carried = s;  // what FindKeySlots-style steps return
    EXPECT_EQ(RetryReasonOf(carried.status()), r);
    EXPECT_TRUE(IsRetry(s, r));
  }
}

TEST(KvRetry, PlainAbortedAndOtherCodesAreResultsNotRetries) {
  EXPECT_EQ(RetryReasonOf(absl::AbortedError("from a node")), std::nullopt);
  EXPECT_EQ(RetryReasonOf(absl::OkStatus()), std::nullopt);
  EXPECT_EQ(RetryReasonOf(absl::DeadlineExceededError("slow")), std::nullopt);
  EXPECT_FALSE(IsRetryableRead(absl::AbortedError("from a node")));
  EXPECT_FALSE(IsRetryableRead(absl::DeadlineExceededError("slow")));
  // A payload under another URL is not ours either.
  absl::Status other = absl::AbortedError("x");
  other.SetPayload("example.com/other", absl::Cord("i"));
  EXPECT_EQ(RetryReasonOf(other), std::nullopt);
}

TEST(KvRetry, OnlyReadReasonsAreRetryableReads) {
  EXPECT_TRUE(IsRetryableRead(StaleRead()));
  EXPECT_TRUE(IsRetryableRead(ReadLeaseExpired()));
  EXPECT_FALSE(IsRetryableRead(Retry(RetryReason::kAllocateAgain, "late")));
  EXPECT_FALSE(IsRetry(StaleRead(), RetryReason::kAllocateAgain));
}

}  // namespace
}  // namespace meshpool::client_internal
