// Internal to client/: Client::Impl, shared by client.cc (single keys,
// regions, status) and kv_cache.cc (batches, async, pins, prefix match).
// The public Client's state is a ClientCore, shared with the Regions it
// opens; Impl adds the key-routing helpers the KV calls use and the
// threads that run batches.
//
// Thread-safe.
#ifndef MESHPOOL_CLIENT_CLIENT_IMPL_H_
#define MESHPOOL_CLIENT_CLIENT_IMPL_H_

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "client/batch_executor.h"
#include "client/client_core.h"
#include "client/kv_protocol.h"
#include "client/meshpool/client.h"
#include "client/node_connection.h"

namespace meshpool {

class Client::Impl {
 public:
  using NodeConnection = client_internal::NodeConnection;
  using KeyRef = client_internal::KeyRef;

  explicit Impl(std::shared_ptr<client_internal::ClientCore> core)
      : core_(std::move(core)),
        executor_(std::make_unique<client_internal::BatchExecutor>(
            core_->options().batch_threads)) {}

  const std::shared_ptr<client_internal::ClientCore>& core() const {
    return core_;
  }
  client_internal::BatchExecutor& executor() { return *executor_; }

  // Runs `op` on the key's home node; after an Unavailable, refreshes the
  // map once and retries if the key's home changed (a node died or joined).
  template <typename Result, typename Op>
  Result OnHome(KeyRef& key, Op op) {
    absl::StatusOr<std::shared_ptr<NodeConnection>> node = core_->Route(key);
    if (!node.ok()) return node.status();
    Result result = op(**node);
    if (result.ok() ||
        StatusOf(result).code() != absl::StatusCode::kUnavailable) {
      return result;
    }
    if (!core_->RefreshMap().ok()) return result;
    absl::StatusOr<std::shared_ptr<NodeConnection>> again = core_->Route(key);
    if (!again.ok()) return again.status();
    if (*again == *node) return result;
    return op(**again);
  }

  // A batch's keys on one home node: their indices (into the batch) and
  // refs.
  struct Group {
    std::shared_ptr<NodeConnection> node;
    std::vector<size_t> indices;
    std::vector<KeyRef> refs;
  };
  // Validates and routes `keys` into groups by home node. An invalid or
  // unroutable key gets its error through fail(index, status) instead.
  template <typename Fail>
  std::vector<Group> GroupByNode(absl::Span<const absl::string_view> keys,
                                 Fail fail) {
    std::vector<Group> groups;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (absl::Status valid = client_internal::ValidateKey(keys[i]);
          !valid.ok()) {
        fail(i, valid);
        continue;
      }
      KeyRef ref = core_->MakeKeyRef(keys[i]);
      absl::StatusOr<std::shared_ptr<NodeConnection>> node = core_->Route(ref);
      if (!node.ok()) {
        fail(i, node.status());
        continue;
      }
      auto it = std::find_if(groups.begin(), groups.end(),
                             [&](const Group& g) { return g.node == *node; });
      if (it == groups.end()) it = groups.insert(groups.end(), {*node, {}, {}});
      it->indices.push_back(i);
      it->refs.push_back(ref);
    }
    return groups;
  }

  // Runs fn(group) for every group and returns when all are done: the
  // first on this thread, the others on the batch threads (all on this
  // thread when it is a batch thread itself, which must not wait on its
  // own pool).
  template <typename Fn>
  void RunGroups(std::vector<Group>& groups, Fn fn) {
    if (groups.size() <= 1 || executor_->OnWorker()) {
      for (Group& g : groups) fn(g);
      return;
    }
    // Shared with the tasks: the last one may still be unlocking when
    // this thread wakes and returns.
    struct Sync {
      absl::Mutex mu;
      size_t left ABSL_GUARDED_BY(mu) = 0;
    };
    auto sync = std::make_shared<Sync>();
    {
      absl::MutexLock lock(&sync->mu);
      sync->left = groups.size() - 1;
    }
    for (size_t i = 1; i < groups.size(); ++i) {
      executor_->Submit([sync, &fn, &groups, i] {
        fn(groups[i]);
        absl::MutexLock lock(&sync->mu);
        --sync->left;
      });
    }
    fn(groups[0]);
    absl::MutexLock lock(&sync->mu);
    sync->mu.Await(absl::Condition(
        +[](Sync* s)
             ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) { return s->left == 0; },
        sync.get()));
  }

  // One node's part of a PUT batch: results go to statuses[indices[j]]
  // (and the stored sizes to *lengths when given). kv_cache.cc.
  void PutPart(Group& g, absl::Span<const absl::string_view> values,
               std::vector<absl::Status>& statuses,
               std::vector<size_t>* lengths);
  // One node's part of a GET batch.
  void GetPart(Group& g, absl::Span<const absl::Span<char>> outs,
               std::vector<absl::StatusOr<size_t>>& results);
  // Starts an async batch: routes its keys, then one task per node running
  // part(group, state). kv_cache.cc.
  std::unique_ptr<BatchHandle> StartAsync(
      std::shared_ptr<client_internal::BatchState> state, absl::Status mismatch,
      std::function<void(Group&, client_internal::BatchState&)> part);

  std::optional<uint32_t> RegisteredLkey(const void* data, size_t size,
                                         const NodeConnection& node) const {
    return core_->RegisteredLkey(data, size, node);
  }
  uint64_t NextSequence(uint64_t n = 1) { return core_->NextSequence(n); }
  const ClientOptions& options() const { return core_->options(); }

 private:
  static absl::Status StatusOf(const absl::Status& s) { return s; }
  template <typename T>
  static absl::Status StatusOf(const absl::StatusOr<T>& s) {
    return s.status();
  }

  const std::shared_ptr<client_internal::ClientCore> core_;
  // Destroyed first: it finishes every batch in flight while the core
  // (connections, transports) still stands.
  std::unique_ptr<client_internal::BatchExecutor> executor_;
};

}  // namespace meshpool

#endif  // MESHPOOL_CLIENT_CLIENT_IMPL_H_
