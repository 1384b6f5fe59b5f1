// The batched existence check (BatchExists, PrefixMatch): two posts per
// node, and a key that needs more takes the single-key path. The batched
// GET and PUT are in kv_batch_get.cc and kv_batch_put.cc.
#include <cstring>
#include <utility>

#include "client/kv_lane_op.h"
#include "client/kv_protocol.h"

namespace meshpool::client_internal {

void BatchKeysExist(NodeConnection& node, absl::Span<const KeyRef> keys,
                    int max_verify_retries,
                    absl::Span<absl::StatusOr<bool>> results,
                    std::vector<FoundSlot>* found) {
  if (found != nullptr) found->assign(keys.size(), FoundSlot{});
  auto fail_all = [&](const absl::Status& st) {
    for (auto& r : results) r = st;
  };
  absl::StatusOr<LaneOp> op = StartLaneOp(node);
  if (!op.ok()) return fail_all(op.status());
  LaneOp& s = *op;
  std::vector<Buckets> buckets;
  if (absl::Status st = ReadAllBuckets(s, keys, &buckets); !st.ok()) {
    return fail_all(st);
  }
  // Phase 2: header and key of every candidate of every key in one post.
  struct Probe {
    size_t key;
    int slot;
    uint64_t at;  // in staging
    uint64_t length;
    uint64_t offset;  // in the pool
  };
  std::vector<Probe> probes;
  uint64_t total = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    uint64_t want = format::ValueOffset(keys[i].key.size());
    for (int c : buckets[i].Candidates(keys[i], node.layout())) {
      uint64_t word = buckets[i].words[c];
      uint64_t length = std::min(want, s.ObjectReadLength(word));
      probes.push_back({i, c, total, length, format::DecodeSlot(word).offset});
      total += length;
    }
  }
  absl::StatusOr<absl::Span<char>> staging = s.Staging(total);
  if (!staging.ok()) return fail_all(staging.status());
  rdma::WorkRequests wrs;
  for (const Probe& p : probes) {
    s.AddRead(wrs, staging->data() + p.at, p.offset, p.length);
  }
  if (absl::Status st = s.Run(wrs); !st.ok()) return fail_all(st);
  enum : uint8_t { kAbsent, kPresent, kStale, kOutdated };
  std::vector<uint8_t> verdict(keys.size(), kAbsent);
  for (const Probe& p : probes) {
    format::ObjectHeader header;
    format::Verdict v = format::VerifyHeaderAndKey(
        absl::MakeConstSpan(staging->data() + p.at, p.length), keys[p.key].key,
        keys[p.key].hash, node.incarnation(), &header);
    if (v == format::Verdict::kValid && Outdated(keys[p.key], header)) {
      // The first verified candidate decides: an outdated one is absent.
      if (verdict[p.key] == kAbsent) verdict[p.key] = kOutdated;
    } else if (v == format::Verdict::kValid) {
      // The first verified candidate in bucket order is the one GETs read.
      if (found != nullptr && verdict[p.key] != kPresent) {
        (*found)[p.key] = {buckets[p.key].slot_offset[p.slot],
                           buckets[p.key].words[p.slot]};
      }
      verdict[p.key] = kPresent;
    } else if (v == format::Verdict::kStale && verdict[p.key] == kAbsent) {
      verdict[p.key] = kStale;
    }
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    results[i] = verdict[i] == kStale
                     ? KeyExists(node, keys[i], max_verify_retries)
                     : absl::StatusOr<bool>(verdict[i] == kPresent);
  }
}

}  // namespace meshpool::client_internal
