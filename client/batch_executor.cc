#include "client/batch_executor.h"

#include <utility>

namespace meshpool::client_internal {
namespace {
thread_local const BatchExecutor* current_executor = nullptr;
}  // namespace

BatchExecutor::BatchExecutor(int threads) {
  for (int i = 0; i < threads; ++i) {
    threads_.emplace_back([this] { Run(); });
  }
}

BatchExecutor::~BatchExecutor() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void BatchExecutor::Submit(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(task));
}

bool BatchExecutor::OnWorker() const { return current_executor == this; }

void BatchExecutor::Run() {
  current_executor = this;
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](BatchExecutor* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(e->mu_) {
            return e->stop_ || !e->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // stopping, and nothing left to run
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

BatchState::BatchState(absl::Span<const absl::string_view> keys,
                       BatchCallback on_done)
    : keys_(keys.begin(), keys.end()),
      statuses_(keys.size()),
      lengths_(keys.size(), 0),
      on_done_(std::move(on_done)) {
  views_.assign(keys_.begin(), keys_.end());
}

bool BatchState::done() const {
  absl::MutexLock lock(&mu_);
  return done_;
}

void BatchState::Wait() const {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&done_));
}

bool BatchState::WaitFor(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(&done_), timeout);
}

void BatchState::Start(size_t parts) {
  {
    absl::MutexLock lock(&mu_);
    pending_ = parts;
  }
  if (parts == 0) Complete();
}

void BatchState::PartDone() {
  {
    absl::MutexLock lock(&mu_);
    if (--pending_ > 0) return;
  }
  Complete();
}

void BatchState::Complete() {
  // The callback runs before waiters wake, so once done() is true the
  // callback has returned: a caller may destroy what it used.
  if (on_done_) on_done_(*this);
  absl::MutexLock lock(&mu_);
  done_ = true;
}

}  // namespace meshpool::client_internal
