#include "client/kv_pins.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "client/kv_lane_op.h"
#include "client/kv_retry.h"

namespace meshpool::client_internal {
namespace {

uint64_t ExpiryMs(uint64_t now_ms, absl::Duration ttl) {
  if (ttl == absl::InfiniteDuration()) return format::kPinForever;
  uint64_t ms = static_cast<uint64_t>(absl::ToInt64Milliseconds(ttl));
  return std::min(now_ms + std::max<uint64_t>(ms, 1), format::kPinForever - 1);
}

// WRITEs each entry's new contents (one post, then a flush READ), and
// records them locally (an empty entry is freed).
absl::Status WriteEntries(
    LaneOp& s, PinTable& table,
    absl::Span<const std::pair<uint32_t, format::PinEntry>> entries) {
  if (entries.empty()) return absl::OkStatus();
  MESHPOOL_ASSIGN_OR_RETURN(
      absl::Span<char> staging,
      s.Staging(format::kPinEntryBytes * entries.size() + 8));
  rdma::WorkRequests wrs;
  for (size_t j = 0; j < entries.size(); ++j) {
    char* at = staging.data() + j * format::kPinEntryBytes;
    std::memcpy(at, &entries[j].second, format::kPinEntryBytes);
    s.AddWrite(wrs, at, table.entry_offset(entries[j].first),
               format::kPinEntryBytes);
  }
  s.AddRead(wrs, staging.data() + format::kPinEntryBytes * entries.size(),
            table.entry_offset(entries.back().first), 8);
  absl::Status st = s.Run(wrs);
  for (const auto& [index, entry] : entries) {
    if (entry.object_offset == 0) {
      table.Clear(index);
    } else {
      table.Set(index, entry);
    }
  }
  return st;
}

}  // namespace

void PinFound(NodeConnection& node, absl::Span<const KeyRef> keys,
              absl::Span<const FoundSlot> found, absl::Duration ttl,
              absl::Span<absl::Status> results, std::vector<bool>* fresh) {
  if (fresh != nullptr) fresh->assign(keys.size(), false);
  absl::StatusOr<std::shared_ptr<PinTable>> table = node.session().Table();
  absl::StatusOr<LaneOp> op =
      table.ok() ? StartLaneOp(node) : absl::StatusOr<LaneOp>(table.status());
  if (!op.ok()) {
    for (size_t i = 0; i < keys.size(); ++i) {
      results[i] = found[i].word == 0 ? absl::NotFoundError("key not found")
                                      : op.status();
    }
    return;
  }
  LaneOp& s = *op;
  const format::PoolLayout& layout = node.layout();
  const uint64_t now_ms = node.session().NodeNowMs();
  const uint64_t expiry = ExpiryMs(now_ms, ttl);
  // Per pinned key: its entry, what the entry held before (restored if the
  // pin does not hold), and what it will hold.
  struct Pending {
    size_t key;
    uint32_t entry;
    format::PinEntry previous;
    format::PinEntry pin;
  };
  std::vector<Pending> pending;
  for (size_t i = 0; i < keys.size(); ++i) {
    // (An object outside the slab area is no object: never pinned.)
    if (found[i].word == 0 ||
        layout.slab_of(format::DecodeSlot(found[i].word).offset) >=
            layout.slab_count) {
      results[i] = absl::NotFoundError("key not found");
      continue;
    }
    absl::StatusOr<uint32_t> entry = (*table)->Reserve(keys[i].hash, now_ms);
    if (!entry.ok()) {
      results[i] = entry.status();
      continue;
    }
    // Pinning again never shortens this client's pin (a hard pin stays
    // hard).
    format::PinEntry previous = (*table)->entry(*entry);
    if (previous.object_offset != 0 &&
        previous.expiry_ms != format::kPinForever &&
        previous.expiry_ms <= now_ms) {
      previous = {0, 0};  // lapsed: as good as free
    }
    pending.push_back({i,
                       *entry,
                       previous,
                       {format::DecodeSlot(found[i].word).offset,
                        std::max(expiry, previous.expiry_ms)}});
    if (fresh != nullptr) (*fresh)[i] = previous.object_offset == 0;
  }
  if (pending.empty()) return;
  // Staging: entries | flush word | per key: slot word, evicting word.
  const uint64_t entries_bytes = format::kPinEntryBytes * pending.size();
  absl::StatusOr<absl::Span<char>> staging =
      s.Staging(entries_bytes + 8 + 16 * pending.size());
  auto forget = [&](const absl::Status& st) {
    for (const Pending& p : pending) {
      results[p.key] = st;
      if (p.previous.object_offset == 0) (*table)->Clear(p.entry);
    }
  };
  if (!staging.ok()) return forget(staging.status());
  char* base = staging->data();
  rdma::WorkRequests wrs;
  for (size_t j = 0; j < pending.size(); ++j) {
    std::memcpy(base + j * format::kPinEntryBytes, &pending[j].pin,
                format::kPinEntryBytes);
    s.AddWrite(wrs, base + j * format::kPinEntryBytes,
               (*table)->entry_offset(pending[j].entry),
               format::kPinEntryBytes);
  }
  // On one endpoint a READ observes the WRITEs before it: the entries are
  // in node memory before the checks below are read.
  s.AddRead(wrs, base + entries_bytes,
            (*table)->entry_offset(pending.back().entry), 8);
  char* checks = base + entries_bytes + 8;
  for (size_t j = 0; j < pending.size(); ++j) {
    const Pending& p = pending[j];
    s.AddRead(wrs, checks + 16 * j, found[p.key].slot_offset, 8);
    uint64_t slab = layout.slab_of(p.pin.object_offset);
    s.AddRead(wrs, checks + 16 * j + 8, layout.slab_meta(slab), 8);
  }
  // Checked right before posting: the table is still this session's, and
  // the session has time left (the node reissues an expired session's
  // table only after a quarantine longer than any op takes to land).
  if (absl::Status w = node.session().CheckWritable(table->get()); !w.ok()) {
    return forget(w);
  }
  if (absl::Status st = s.Run(wrs); !st.ok()) {
    // The entries may have landed: keep them, so Unpin can clear them.
    for (const Pending& p : pending) {
      results[p.key] = st;
      (*table)->Set(p.entry, p.pin);
    }
    return;
  }
  std::vector<std::pair<uint32_t, format::PinEntry>> restore;
  for (size_t j = 0; j < pending.size(); ++j) {
    const Pending& p = pending[j];
    uint64_t slot, evicting;
    std::memcpy(&slot, checks + 16 * j, 8);
    std::memcpy(&evicting, checks + 16 * j + 8, 8);
    if (slot == found[p.key].word && evicting == 0) {
      (*table)->Set(p.entry, p.pin);
      node.counters().pins.fetch_add(1, std::memory_order_relaxed);
      results[p.key] = absl::OkStatus();
      continue;
    }
    results[p.key] = evicting != 0
                         ? absl::NotFoundError("key is being evicted")
                         : Retry(RetryReason::kRereadIndex,
                                 "key was replaced or deleted meanwhile");
    // The pin this client held before (if any) stands as it was.
    restore.push_back({p.entry, p.previous});
    if (fresh != nullptr) (*fresh)[p.key] = false;
  }
  // Best effort: a pin that did not hold pins nothing the node cares about
  // (its slab is going, or the object is no longer reachable).
  WriteEntries(s, **table, restore).IgnoreError();
}

void LookUpAndPin(NodeConnection& node, absl::Span<const KeyRef> keys,
                  std::vector<FoundSlot> found, absl::Duration ttl,
                  int max_verify_retries, absl::Span<absl::Status> results,
                  std::vector<bool>* fresh) {
  constexpr int kMaxAttempts = 4;
  if (fresh != nullptr) fresh->assign(keys.size(), false);
  std::vector<size_t> todo(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) todo[i] = i;
  for (int attempt = 0; attempt < kMaxAttempts && !todo.empty(); ++attempt) {
    std::vector<KeyRef> refs;
    for (size_t i : todo) refs.push_back(keys[i]);
    std::vector<FoundSlot> slots;
    std::vector<absl::Status> looked(todo.size());
    if (attempt == 0 && !found.empty()) {
      for (size_t i : todo) slots.push_back(found[i]);
    } else {
      std::vector<absl::StatusOr<bool>> present(todo.size());
      BatchKeysExist(node, refs, max_verify_retries, absl::MakeSpan(present),
                     &slots);
      for (size_t j = 0; j < todo.size(); ++j) {
        if (!present[j].ok()) {
          looked[j] = present[j].status();
        } else if (*present[j] && slots[j].word == 0) {
          // Present, but its slot was not seen (a torn candidate): again.
          looked[j] = Retry(RetryReason::kRereadIndex, "slot not seen");
        }
      }
    }
    std::vector<absl::Status> pinned(todo.size());
    std::vector<bool> new_pin;
    PinFound(node, refs, slots, ttl, absl::MakeSpan(pinned), &new_pin);
    std::vector<size_t> again;
    for (size_t j = 0; j < todo.size(); ++j) {
      absl::Status st = looked[j].ok() ? pinned[j] : looked[j];
      if (fresh != nullptr && st.ok()) (*fresh)[todo[j]] = new_pin[j];
      if (IsRetry(st, RetryReason::kRereadIndex)) {
        again.push_back(todo[j]);
        st = absl::NotFoundError("key kept changing while being pinned");
      }
      results[todo[j]] = std::move(st);
    }
    todo = std::move(again);
  }
}

void UnpinKeys(NodeConnection& node, absl::Span<const KeyRef> keys,
               absl::Span<absl::Status> results) {
  absl::StatusOr<std::shared_ptr<PinTable>> table = node.session().Table();
  if (!table.ok()) {
    for (auto& r : results) r = table.status();
    return;
  }
  const uint64_t now_ms = node.session().NodeNowMs();
  std::vector<uint32_t> entries;
  std::vector<size_t> which;
  for (size_t i = 0; i < keys.size(); ++i) {
    std::optional<uint32_t> e = (*table)->Find(keys[i].hash, now_ms);
    if (!e.has_value()) {
      results[i] = absl::NotFoundError("this client holds no pin on the key");
      continue;
    }
    entries.push_back(*e);
    which.push_back(i);
  }
  if (entries.empty()) return;
  absl::StatusOr<LaneOp> op = StartLaneOp(node);
  std::vector<std::pair<uint32_t, format::PinEntry>> zeros;
  for (uint32_t e : entries) zeros.push_back({e, format::PinEntry{0, 0}});
  absl::Status st = op.ok() ? WriteEntries(*op, **table, zeros) : op.status();
  for (size_t i : which) results[i] = st;
}

}  // namespace meshpool::client_internal
