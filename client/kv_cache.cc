// The Client's batches (synchronous and async) and the KV-cache calls of
// <meshpool/kv_cache.h>: prefix match, pins, counters. Each routes its
// keys by home node and runs one
// part per node, in parallel (client_impl.h RunGroups, or the batch
// threads for the async calls).
#include "client/meshpool/kv_cache.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/client_access.h"
#include "client/client_impl.h"
#include "client/kv_pins.h"
#include "client/kv_protocol.h"

namespace meshpool {

using client_internal::BatchState;
using client_internal::KeyRef;
using client_internal::NodeConnection;

namespace {

absl::Status SizeMismatch(size_t keys, size_t others, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("batch has ", keys,
                                                 " keys but ", others, " ",
                                                 what, "; pass one per key"));
}

// The handle a caller holds: shares the state with the parts in flight,
// so dropping it early is safe.
class HandleRef final : public BatchHandle {
 public:
  explicit HandleRef(std::shared_ptr<BatchState> state)
      : state_(std::move(state)) {}
  bool done() const override { return state_->done(); }
  void Wait() const override { state_->Wait(); }
  bool WaitFor(absl::Duration t) const override { return state_->WaitFor(t); }
  const std::vector<absl::Status>& statuses() const override {
    return state_->statuses();
  }
  const std::vector<size_t>& lengths() const override {
    return state_->lengths();
  }

 private:
  std::shared_ptr<BatchState> state_;
};

}  // namespace

void Client::Impl::PutPart(Group& g, absl::Span<const absl::string_view> values,
                           std::vector<absl::Status>& statuses,
                           std::vector<size_t>* lengths) {
  Impl& impl = *this;
  std::vector<client_internal::PutSource> sources;
  sources.reserve(g.indices.size());
  for (size_t i : g.indices) {
    sources.push_back(
        {values[i],
         impl.RegisteredLkey(values[i].data(), values[i].size(), *g.node)});
  }
  std::vector<absl::Status> out(g.refs.size());
  client_internal::BatchPutValues(*g.node, g.refs, sources,
                                  impl.NextSequence(g.refs.size()),
                                  absl::MakeSpan(out));
  for (size_t j = 0; j < g.indices.size(); ++j) {
    size_t i = g.indices[j];
    g.node->counters().CountPut(out[j], values[i].size());
    if (lengths != nullptr) (*lengths)[i] = out[j].ok() ? values[i].size() : 0;
    statuses[i] = std::move(out[j]);
  }
}

void Client::Impl::GetPart(Group& g, absl::Span<const absl::Span<char>> outs,
                           std::vector<absl::StatusOr<size_t>>& results) {
  Impl& impl = *this;
  std::vector<client_internal::GetTarget> targets;
  targets.reserve(g.indices.size());
  for (size_t i : g.indices) {
    targets.push_back({outs[i], impl.RegisteredLkey(outs[i].data(),
                                                    outs[i].size(), *g.node)});
  }
  std::vector<absl::StatusOr<size_t>> out(g.refs.size());
  client_internal::BatchGetValues(*g.node, g.refs, targets,
                                  impl.options().max_verify_retries,
                                  absl::MakeSpan(out));
  for (size_t j = 0; j < g.indices.size(); ++j) {
    g.node->counters().CountGet(out[j].status(), out[j].ok() ? *out[j] : 0);
    results[g.indices[j]] = std::move(out[j]);
  }
}

std::vector<absl::Status> Client::BatchPut(
    absl::Span<const absl::string_view> keys,
    absl::Span<const absl::string_view> values) {
  std::vector<absl::Status> results(keys.size());
  if (keys.size() != values.size()) {
    for (auto& r : results)
      r = SizeMismatch(keys.size(), values.size(), "values");
    return results;
  }
  std::vector<Impl::Group> groups = impl_->GroupByNode(
      keys, [&](size_t i, absl::Status s) { results[i] = std::move(s); });
  impl_->RunGroups(groups, [&](Impl::Group& g) {
    impl_->PutPart(g, values, results, nullptr);
  });
  return results;
}

std::vector<absl::StatusOr<size_t>> Client::BatchGet(
    absl::Span<const absl::string_view> keys,
    absl::Span<const absl::Span<char>> outs) {
  std::vector<absl::StatusOr<size_t>> results(keys.size());
  if (keys.size() != outs.size()) {
    for (auto& r : results)
      r = SizeMismatch(keys.size(), outs.size(), "buffers");
    return results;
  }
  std::vector<Impl::Group> groups = impl_->GroupByNode(
      keys, [&](size_t i, absl::Status s) { results[i] = std::move(s); });
  impl_->RunGroups(groups,
                   [&](Impl::Group& g) { impl_->GetPart(g, outs, results); });
  return results;
}

std::vector<absl::StatusOr<bool>> Client::BatchExists(
    absl::Span<const absl::string_view> keys) {
  std::vector<absl::StatusOr<bool>> results(keys.size());
  std::vector<Impl::Group> groups = impl_->GroupByNode(
      keys, [&](size_t i, absl::Status s) { results[i] = std::move(s); });
  impl_->RunGroups(groups, [&](Impl::Group& g) {
    std::vector<absl::StatusOr<bool>> out(g.refs.size());
    client_internal::BatchKeysExist(*g.node, g.refs,
                                    impl_->options().max_verify_retries,
                                    absl::MakeSpan(out));
    for (size_t j = 0; j < g.indices.size(); ++j) {
      results[g.indices[j]] = std::move(out[j]);
    }
  });
  return results;
}

std::unique_ptr<BatchHandle> Client::Impl::StartAsync(
    std::shared_ptr<BatchState> state, absl::Status mismatch,
    std::function<void(Group&, BatchState&)> part) {
  if (!mismatch.ok()) {
    for (auto& s : state->mutable_statuses()) s = mismatch;
    state->Start(0);
    return std::make_unique<HandleRef>(std::move(state));
  }
  auto groups = std::make_shared<std::vector<Group>>(
      GroupByNode(state->keys(), [&](size_t i, absl::Status s) {
        state->mutable_statuses()[i] = std::move(s);
      }));
  state->Start(groups->size());
  auto shared_part = std::make_shared<std::function<void(Group&, BatchState&)>>(
      std::move(part));
  for (size_t k = 0; k < groups->size(); ++k) {
    executor_->Submit([state, groups, k, shared_part] {
      (*shared_part)((*groups)[k], *state);
      state->PartDone();
    });
  }
  return std::make_unique<HandleRef>(std::move(state));
}

std::unique_ptr<BatchHandle> Client::BatchPutAsync(
    absl::Span<const absl::string_view> keys,
    absl::Span<const absl::string_view> values, BatchCallback on_done) {
  auto state = std::make_shared<BatchState>(keys, std::move(on_done));
  absl::Status mismatch =
      keys.size() == values.size()
          ? absl::OkStatus()
          : SizeMismatch(keys.size(), values.size(), "values");
  std::vector<absl::string_view> vals(values.begin(), values.end());
  Impl* impl = impl_.get();
  return impl_->StartAsync(
      std::move(state), mismatch,
      [impl, vals = std::move(vals)](Impl::Group& g, BatchState& s) {
        impl->PutPart(g, vals, s.mutable_statuses(), &s.mutable_lengths());
      });
}

std::unique_ptr<BatchHandle> Client::BatchGetAsync(
    absl::Span<const absl::string_view> keys,
    absl::Span<const absl::Span<char>> outs, BatchCallback on_done) {
  auto state = std::make_shared<BatchState>(keys, std::move(on_done));
  absl::Status mismatch =
      keys.size() == outs.size()
          ? absl::OkStatus()
          : SizeMismatch(keys.size(), outs.size(), "buffers");
  std::vector<absl::Span<char>> bufs(outs.begin(), outs.end());
  Impl* impl = impl_.get();
  return impl_->StartAsync(
      std::move(state), mismatch,
      [impl, bufs = std::move(bufs)](Impl::Group& g, BatchState& s) {
        std::vector<absl::StatusOr<size_t>> results(s.keys().size());
        impl->GetPart(g, bufs, results);
        for (size_t i : g.indices) {
          s.mutable_statuses()[i] = results[i].status();
          s.mutable_lengths()[i] = results[i].ok() ? *results[i] : 0;
        }
      });
}

absl::StatusOr<size_t> PrefixMatch(Client& client,
                                   absl::Span<const absl::string_view> keys,
                                   absl::Duration pin_ttl) {
  auto& impl = ClientAccess::Impl(client);
  if (pin_ttl < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("pin_ttl must not be negative");
  }
  // Every key is looked up (in parallel per node); the prefix ends at the
  // first key that is absent or whose node failed.
  std::vector<absl::Status> status(keys.size());
  std::vector<client_internal::FoundSlot> found(keys.size());
  auto groups = impl.GroupByNode(
      keys, [&](size_t i, absl::Status s) { status[i] = std::move(s); });
  for (size_t i = 0; i < keys.size(); ++i) {
    if (status[i].code() == absl::StatusCode::kInvalidArgument) {
      return status[i];
    }
  }
  impl.RunGroups(groups, [&](auto& g) {
    std::vector<absl::StatusOr<bool>> present(g.refs.size());
    std::vector<client_internal::FoundSlot> slots;
    client_internal::BatchKeysExist(*g.node, g.refs,
                                    impl.options().max_verify_retries,
                                    absl::MakeSpan(present), &slots);
    for (size_t j = 0; j < g.indices.size(); ++j) {
      size_t i = g.indices[j];
      found[i] = slots[j];
      status[i] = !present[j].ok() ? present[j].status()
                  : *present[j]    ? absl::OkStatus()
                                   : absl::NotFoundError("key not found");
    }
  });
  size_t prefix = 0;
  while (prefix < keys.size() && status[prefix].ok()) ++prefix;
  if (prefix == 0 && !keys.empty() &&
      status[0].code() == absl::StatusCode::kUnavailable) {
    return status[0];
  }
  if (pin_ttl == absl::ZeroDuration() || prefix == 0) return prefix;
  // Pin the prefix (one more post per node, on the nodes the lookup used);
  // a pin that does not hold (the block is being evicted) ends the prefix.
  std::vector<bool> fresh(keys.size(), false);
  impl.RunGroups(groups, [&](auto& g) {
    std::vector<KeyRef> refs;
    std::vector<client_internal::FoundSlot> slots;
    std::vector<size_t> which;
    for (size_t j = 0; j < g.indices.size(); ++j) {
      if (g.indices[j] >= prefix) continue;
      which.push_back(g.indices[j]);
      refs.push_back(g.refs[j]);
      slots.push_back(found[g.indices[j]]);
    }
    if (which.empty()) return;
    std::vector<absl::Status> pinned(which.size());
    std::vector<bool> placed;
    client_internal::LookUpAndPin(*g.node, refs, std::move(slots), pin_ttl,
                                  impl.options().max_verify_retries,
                                  absl::MakeSpan(pinned), &placed);
    for (size_t j = 0; j < which.size(); ++j) {
      status[which[j]] = std::move(pinned[j]);
      fresh[which[j]] = placed[j];
    }
  });
  size_t held = 0;
  while (held < prefix && status[held].ok()) ++held;
  // Pins this call placed past the prefix it returns hold blocks the
  // caller will not read: take them back (pins held before stay).
  std::vector<absl::string_view> placed_past;
  for (size_t i = held; i < prefix; ++i) {
    if (status[i].ok() && fresh[i]) placed_past.push_back(keys[i]);
  }
  if (!placed_past.empty()) Unpin(client, placed_past);
  return held;
}

std::vector<absl::Status> Pin(Client& client,
                              absl::Span<const absl::string_view> keys,
                              absl::Duration ttl) {
  auto& impl = ClientAccess::Impl(client);
  std::vector<absl::Status> results(keys.size());
  if (ttl <= absl::ZeroDuration()) {
    for (auto& r : results) {
      r = absl::InvalidArgumentError(
          "pin ttl must be positive (kHardPin for no expiry)");
    }
    return results;
  }
  auto groups = impl.GroupByNode(
      keys, [&](size_t i, absl::Status s) { results[i] = std::move(s); });
  impl.RunGroups(groups, [&](auto& g) {
    std::vector<absl::Status> out(g.refs.size());
    client_internal::LookUpAndPin(*g.node, g.refs, {}, ttl,
                                  impl.options().max_verify_retries,
                                  absl::MakeSpan(out));
    for (size_t j = 0; j < g.indices.size(); ++j) {
      results[g.indices[j]] = std::move(out[j]);
    }
  });
  return results;
}

std::vector<absl::Status> Unpin(Client& client,
                                absl::Span<const absl::string_view> keys) {
  auto& impl = ClientAccess::Impl(client);
  std::vector<absl::Status> results(keys.size());
  auto groups = impl.GroupByNode(
      keys, [&](size_t i, absl::Status s) { results[i] = std::move(s); });
  impl.RunGroups(groups, [&](auto& g) {
    std::vector<absl::Status> out(g.refs.size());
    client_internal::UnpinKeys(*g.node, g.refs, absl::MakeSpan(out));
    for (size_t j = 0; j < g.indices.size(); ++j) {
      results[g.indices[j]] = std::move(out[j]);
    }
  });
  return results;
}

KvCounters KvStatistics(const Client& client) {
  KvCounters result;
  const auto& impl = ClientAccess::Impl(client);
  impl.core()->ForEachConnection([&](NodeConnection& c) {
    proto::KvClientStats p = c.counters().ToProto();
    KvStats& n = result.per_node[c.info().node_id()];
    for (KvStats* s : {&n, &result.total}) {
      s->hits += p.hits();
      s->misses += p.misses();
      s->puts += p.puts();
      s->bytes_in += p.bytes_in();
      s->bytes_out += p.bytes_out();
      s->pins += p.pins();
    }
  });
  return result;
}

}  // namespace meshpool
