// Internal to client/: the threads that run batches — the async calls'
// per-node parts, and the parts of a synchronous batch beyond the first
// node (the caller runs that one) — and the state behind a BatchHandle.
//
// Thread-safe.
#ifndef MESHPOOL_CLIENT_BATCH_EXECUTOR_H_
#define MESHPOOL_CLIENT_BATCH_EXECUTOR_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "client/meshpool/client.h"

namespace meshpool::client_internal {

inline constexpr int kMaxBatchThreads = 64;

class BatchExecutor {
 public:
  // REQUIRES: 1 <= threads <= kMaxBatchThreads.
  explicit BatchExecutor(int threads);
  // Runs every task already submitted, then joins the threads.
  ~BatchExecutor();
  BatchExecutor(const BatchExecutor&) = delete;
  BatchExecutor& operator=(const BatchExecutor&) = delete;

  void Submit(std::function<void()> task);
  // True on one of this executor's threads (a synchronous batch started
  // there runs all its parts itself rather than wait on its own pool).
  bool OnWorker() const;

 private:
  void Run();

  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;  // last: joined before the rest goes
};

// A batch in flight: its keys (copied), results, and completion. Parts
// (one per node) finish in any order; the last runs the callback.
class BatchState final : public BatchHandle {
 public:
  BatchState(absl::Span<const absl::string_view> keys, BatchCallback on_done);

  bool done() const override;
  void Wait() const override;
  bool WaitFor(absl::Duration timeout) const override;
  const std::vector<absl::Status>& statuses() const override {
    return statuses_;
  }
  const std::vector<size_t>& lengths() const override { return lengths_; }

  // Keys as views into this state's own copies.
  absl::Span<const absl::string_view> keys() const { return views_; }
  // Results: parts write disjoint indices before PartDone.
  std::vector<absl::Status>& mutable_statuses() { return statuses_; }
  std::vector<size_t>& mutable_lengths() { return lengths_; }
  // Expects `parts` PartDone calls (0: completes now).
  void Start(size_t parts);
  void PartDone();

 private:
  void Complete();

  std::vector<std::string> keys_;
  std::vector<absl::string_view> views_;
  std::vector<absl::Status> statuses_;
  std::vector<size_t> lengths_;
  BatchCallback on_done_;
  mutable absl::Mutex mu_;
  size_t pending_ ABSL_GUARDED_BY(mu_) = 0;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace meshpool::client_internal

#endif  // MESHPOOL_CLIENT_BATCH_EXECUTOR_H_
