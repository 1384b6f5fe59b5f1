// The batched protocols: each phase of a batch is one post per node (one
// doorbell), and a key that needs more takes the single-key path.
#include <cstring>
#include <utility>

#include "client/kv_protocol.h"
#include "client/kv_session.h"

namespace meshpool::client_internal {

void BatchGetValues(NodeConnection& node, absl::Span<const KeyRef> keys,
                    absl::Span<const absl::Span<char>> outs,
                    int max_verify_retries,
                    absl::Span<absl::StatusOr<size_t>> results) {
  auto fail_all = [&](const absl::Status& st) {
    for (auto& r : results) r = st;
  };
  absl::StatusOr<Session> session = OpenSession(node);
  if (!session.ok()) return fail_all(session.status());
  Session& s = *session;
  absl::Time start = absl::Now();
  std::vector<Buckets> buckets;
  if (absl::Status st = ReadAllBuckets(s, keys, &buckets); !st.ok()) {
    return fail_all(st);
  }
  // Phase 2: every key's candidate objects in one post; a key that needs
  // more (torn object, lease passed) takes the single-key path.
  std::vector<CandidatePlan> plans(keys.size());
  uint64_t total = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    plans[i] = PlanCandidates(s, keys[i], buckets[i], &total);
  }
  absl::StatusOr<absl::Span<char>> staging = s.Staging(total);
  if (!staging.ok()) return fail_all(staging.status());
  std::vector<rdma::WorkRequest> wrs;
  for (size_t i = 0; i < keys.size(); ++i) {
    AddCandidateReads(s, buckets[i], plans[i], staging->data(), wrs);
  }
  if (absl::Status st = s.Run(wrs); !st.ok()) return fail_all(st);
  bool lease_passed = ReadLeasePassed(s, start);
  for (size_t i = 0; i < keys.size(); ++i) {
    size_t length = 0;
    auto copy_out = [&](absl::string_view value) {
      return CopyValueTo(value, outs[i], &length);
    };
    absl::Status st =
        lease_passed
            ? ReadLeaseExpired()
            : VerifyCandidates(s, keys[i], buckets[i], plans[i],
                               staging->data(), copy_out);
    if (IsRetryableRead(st)) {
      st = GetValue(node, keys[i], max_verify_retries, copy_out);
    }
    if (st.ok()) {
      results[i] = length;
    } else {
      results[i] = st;
    }
  }
}

void BatchKeysExist(NodeConnection& node, absl::Span<const KeyRef> keys,
                    int max_verify_retries,
                    absl::Span<absl::StatusOr<bool>> results) {
  auto fail_all = [&](const absl::Status& st) {
    for (auto& r : results) r = st;
  };
  absl::StatusOr<Session> session = OpenSession(node);
  if (!session.ok()) return fail_all(session.status());
  Session& s = *session;
  std::vector<Buckets> buckets;
  if (absl::Status st = ReadAllBuckets(s, keys, &buckets); !st.ok()) {
    return fail_all(st);
  }
  // Phase 2: header and key of every candidate of every key in one post.
  struct Probe {
    size_t key;
    uint64_t at;  // in staging
    uint64_t length;
    uint64_t offset;  // in the pool
  };
  std::vector<Probe> probes;
  uint64_t total = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    uint64_t want = store::ValueOffset(keys[i].key.size());
    for (int c : buckets[i].Candidates(keys[i], node.layout())) {
      uint64_t word = buckets[i].words[c];
      uint64_t length = std::min(want, s.ObjectReadLength(word));
      probes.push_back({i, total, length, store::DecodeSlot(word).offset});
      total += length;
    }
  }
  absl::StatusOr<absl::Span<char>> staging = s.Staging(total);
  if (!staging.ok()) return fail_all(staging.status());
  std::vector<rdma::WorkRequest> wrs;
  for (const Probe& p : probes) {
    s.AddRead(wrs, staging->data() + p.at, p.offset, p.length);
  }
  if (absl::Status st = s.Run(wrs); !st.ok()) return fail_all(st);
  enum : uint8_t { kAbsent, kPresent, kStale };
  std::vector<uint8_t> verdict(keys.size(), kAbsent);
  for (const Probe& p : probes) {
    absl::Status v = store::VerifyHeaderAndKey(
        absl::MakeConstSpan(staging->data() + p.at, p.length),
        keys[p.key].key, keys[p.key].hash, node.incarnation());
    if (v.ok()) {
      verdict[p.key] = kPresent;
    } else if (v.code() == absl::StatusCode::kAborted &&
               verdict[p.key] == kAbsent) {
      verdict[p.key] = kStale;
    }
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    results[i] = verdict[i] == kStale
                     ? KeyExists(node, keys[i], max_verify_retries)
                     : absl::StatusOr<bool>(verdict[i] == kPresent);
  }
}

void BatchPutValues(NodeConnection& node, absl::Span<const KeyRef> keys,
                    absl::Span<const absl::string_view> values,
                    uint64_t first_sequence,
                    absl::Span<absl::Status> results) {
  absl::StatusOr<Session> session = OpenSession(node);
  if (!session.ok()) {
    for (auto& r : results) r = session.status();
    return;
  }
  Session& s = *session;
  // Phase 1: allocate and write every object, then one flush READ.
  std::vector<NodeConnection::Allocation> allocs(keys.size());
  std::vector<uint64_t> sizes(keys.size()), staged(keys.size());
  std::vector<bool> written(keys.size(), false);
  uint64_t total = 0;
  // A node that is full or unreachable fails every later key the same way;
  // asking again per key would only wait out the same timeout again.
  absl::Status node_failure;
  for (size_t i = 0; i < keys.size(); ++i) {
    sizes[i] = store::ObjectBytes(keys[i].key.size(), values[i].size());
    if (!node_failure.ok()) {
      results[i] = node_failure;
      continue;
    }
    absl::StatusOr<NodeConnection::Allocation> a = node.Allocate(sizes[i]);
    if (!a.ok()) {
      results[i] = a.status();
      if (a.status().code() != absl::StatusCode::kInvalidArgument) {
        node_failure = a.status();
      }
      continue;
    }
    allocs[i] = *std::move(a);
    staged[i] = total;
    total += sizes[i];
    written[i] = true;
  }
  absl::StatusOr<absl::Span<char>> staging = s.Staging(total + 8);
  std::vector<rdma::WorkRequest> wrs;
  int64_t last = -1;
  for (size_t i = 0; staging.ok() && i < keys.size(); ++i) {
    if (!written[i]) continue;
    store::EncodeObject(staging->subspan(staged[i], sizes[i]), keys[i].key,
                        values[i], node.incarnation(), first_sequence + i);
    s.AddWrite(wrs, staging->data() + staged[i], allocs[i].offset(), sizes[i]);
    last = static_cast<int64_t>(i);
  }
  absl::Status st = staging.status();
  if (st.ok() && last >= 0) {
    s.AddRead(wrs, staging->data() + total,
              allocs[last].offset() + sizes[last] - 8, 8);
    st = s.Run(wrs);
  }
  // Phase 2: publish each.
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!written[i]) continue;
    if (!st.ok()) {
      results[i] = st;
      continue;
    }
    uint64_t word = store::EncodeSlot(store::Fingerprint(keys[i].hash),
                                      sizes[i], allocs[i].offset());
    results[i] = Publish(s, keys[i], word, allocs[i].publish_deadline());
    allocs[i] = {};  // published or abandoned: the slab may be released
    if (results[i].code() == absl::StatusCode::kAborted) {
      results[i] = PutValue(node, keys[i], values[i], first_sequence + i);
    }
  }
}

}  // namespace meshpool::client_internal
