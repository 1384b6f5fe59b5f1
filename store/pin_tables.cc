#include "store/pin_tables.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/common.h"

namespace meshpool::store {
namespace {

constexpr size_t kWordsPerEntry = format::kPinEntryBytes / 8;
static_assert(format::kPinEntryBytes % 8 == 0);

uint64_t Load(const char* p) {
  // Clients WRITE entries concurrently (through the transport): whole words.
  return std::atomic_ref<uint64_t>(
             *reinterpret_cast<uint64_t*>(const_cast<char*>(p)))
      .load(std::memory_order_acquire);
}

}  // namespace

void AddClientStats(const proto::KvClientStats& b, proto::KvClientStats* a) {
  a->set_hits(a->hits() + b.hits());
  a->set_misses(a->misses() + b.misses());
  a->set_puts(a->puts() + b.puts());
  a->set_bytes_in(a->bytes_in() + b.bytes_in());
  a->set_bytes_out(a->bytes_out() + b.bytes_out());
  a->set_pins(a->pins() + b.pins());
}

absl::StatusOr<std::unique_ptr<PinTables>> PinTables::Create(
    PinTablesOptions options, char* pool) {
  if (pool == nullptr || reinterpret_cast<uintptr_t>(pool) % 8 != 0) {
    return absl::InvalidArgumentError("pool must be non-null and 8-aligned");
  }
  const format::PoolLayout& l = options.layout;
  if (l.pin_sessions == 0 || l.pins_per_session == 0 ||
      l.pin_sessions > UINT32_MAX || l.pins_per_session > UINT32_MAX ||
      l.pin_area_offset < format::kSuperblockBytes ||
      l.pin_area_offset % 8 != 0 ||
      l.pin_entry(l.pin_area_entries()) > l.pool_bytes) {
    return absl::InvalidArgumentError(
        "layout has no pin area or it overruns the pool; build it with "
        "ComputeLayout");
  }
  if (options.lease <= absl::ZeroDuration() ||
      options.lease > absl::Milliseconds(kMaxSessionLeaseMs) ||
      options.lease < absl::Milliseconds(1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "session lease is ", absl::FormatDuration(options.lease),
        "; give a duration in [1ms, ",
        absl::FormatDuration(absl::Milliseconds(kMaxSessionLeaseMs)), "]"));
  }
  options.env = EnvOrDefault(options.env);
  return std::unique_ptr<PinTables>(new PinTables(std::move(options), pool));
}

PinTables::PinTables(PinTablesOptions options, char* pool)
    : options_(std::move(options)),
      pool_(pool),
      area_(options_.layout.pin_area_entries(), kPinTableQuarantine) {}

uint64_t PinTables::NowMs() const {
  return static_cast<uint64_t>(std::max<int64_t>(0, absl::ToUnixMillis(Now())));
}

absl::StatusOr<SessionGrant> PinTables::Open(absl::string_view client_id,
                                             absl::string_view tenant,
                                             uint32_t pins) {
  if (client_id.empty()) {
    return absl::InvalidArgumentError("OpenSession needs a client_id");
  }
  const uint64_t want =
      pins == 0 ? options_.layout.pins_per_session
                : std::min<uint64_t>(pins, format::kMaxPinsPerSession);
  absl::Time now = Now();
  absl::MutexLock lock(&mu_);
  const uint32_t open =
      static_cast<uint32_t>(sessions_.size() - free_ids_.size());
  if (const uint32_t cap = options_.max_sessions_per_tenant; cap > 0) {
    uint32_t held = 0;
    // A session whose lease passed is over, expired yet or not.
    for (const Session& s : sessions_) {
      held += s.open && s.lease_end > now && s.tenant == tenant;
    }
    if (held >= cap) {
      return absl::ResourceExhaustedError(absl::StrCat(
          tenant.empty() ? std::string("callers without a tenant")
                         : absl::StrCat("'", tenant, "'"),
          " hold ", held, " of this node's ", open,
          " client sessions, the most one tenant may (--tenant-sessions); "
          "close idle clients of it, or wait one session lease for dead "
          "ones to expire"));
    }
  }
  auto exhausted = [&](absl::string_view what) {
    return absl::ResourceExhaustedError(absl::StrCat(
        what, ": ", open, " open sessions hold ",
        area_.entries() - area_.free_entries() - area_.resting_entries(),
        " of its ", area_.entries(), " pin entries and ",
        area_.resting_entries(), " rest for ",
        absl::FormatDuration(kPinTableQuarantine),
        " after a close; close idle clients (dead ones expire one session "
        "lease after their last renewal), ask for fewer pins per node, or "
        "give the node more pin entries"));
  };
  if (open >= kMaxOpenSessions) {
    return exhausted(absl::StrCat("this node holds its most client sessions (",
                                  kMaxOpenSessions, ")"));
  }
  std::optional<PinArea::Run> table =
      area_.Grant(want, format::kMinPinsPerSession, now);
  if (!table.has_value()) {
    return exhausted(absl::StrCat(
        "this node has no free pin table of ",
        std::min<uint64_t>(want, format::kMinPinsPerSession), " entries"));
  }
  uint32_t index;
  if (free_ids_.empty()) {
    index = static_cast<uint32_t>(sessions_.size());
    sessions_.emplace_back();
  } else {
    index = free_ids_.back();
    free_ids_.pop_back();
  }
  ZeroTable(*table);  // whatever landed while it rested
  Session& s = sessions_[index];
  s.open = true;
  s.table = *table;
  s.token = 0;
  while (s.token == 0) s.token = absl::Uniform<uint64_t>(rng_);
  s.client_id = std::string(client_id);
  s.tenant = std::string(tenant);
  s.lease_end = now + options_.lease;
  s.stats.Clear();
  SessionGrant grant;
  grant.session = index;
  grant.token = s.token;
  grant.table_offset = options_.layout.pin_entry(table->first);
  grant.entries = static_cast<uint32_t>(table->length);
  grant.lease = options_.lease;
  grant.node_clock_ms =
      static_cast<uint64_t>(std::max<int64_t>(0, absl::ToUnixMillis(now)));
  return grant;
}

void PinTables::ZeroTable(PinArea::Run table) const {
  // Word by word: a client may still be WRITEing the table through the
  // transport (it must not, but a bad client cannot tear the node's view).
  char* start = pool_ + options_.layout.pin_entry(table.first);
  const uint64_t words = table.length * kWordsPerEntry;
  for (uint64_t w = 0; w < words; ++w) {
    std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(start + 8 * w))
        .store(0, std::memory_order_relaxed);
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

bool PinTables::LiveLocked(const Session& s, absl::Time now) const {
  return s.open && now < s.lease_end;
}

absl::StatusOr<PinTables::Session*> PinTables::FindLocked(uint32_t session,
                                                          uint64_t token,
                                                          absl::Time now) {
  if (session >= sessions_.size() || !sessions_[session].open ||
      sessions_[session].token != token) {
    return absl::NotFoundError(absl::StrCat(
        "no open session ", session,
        " with this token here (closed, expired, or the node restarted); "
        "its pins are gone: open a new session"));
  }
  if (!LiveLocked(sessions_[session], now)) {
    EndLocked(session);
    return absl::NotFoundError(absl::StrCat(
        "session ", session, " expired (not renewed within its lease of ",
        absl::FormatDuration(options_.lease),
        "); its pins are gone: open a new session"));
  }
  return &sessions_[session];
}

absl::StatusOr<uint64_t> PinTables::Renew(uint32_t session, uint64_t token,
                                          const proto::KvClientStats& stats) {
  absl::Time now = Now();
  absl::MutexLock lock(&mu_);
  MESHPOOL_ASSIGN_OR_RETURN(Session * s, FindLocked(session, token, now));
  s->lease_end = now + options_.lease;
  s->stats = stats;
  return static_cast<uint64_t>(std::max<int64_t>(0, absl::ToUnixMillis(now)));
}

absl::Status PinTables::Close(uint32_t session, uint64_t token,
                              const proto::KvClientStats& stats) {
  absl::Time now = Now();
  absl::MutexLock lock(&mu_);
  MESHPOOL_ASSIGN_OR_RETURN(Session * s, FindLocked(session, token, now));
  s->stats = stats;
  EndLocked(session);
  return absl::OkStatus();
}

void PinTables::EndLocked(uint32_t session) {
  Session& s = sessions_[session];
  if (!s.open) return;
  ZeroTable(s.table);
  area_.Return(s.table, Now());
  AddClientStats(s.stats, &ended_);
  s.open = false;
  s.table = {};
  s.token = 0;
  s.client_id.clear();
  s.tenant.clear();
  s.stats.Clear();
  free_ids_.push_back(session);
}

size_t PinTables::ExpireStale() {
  absl::Time now = Now();
  absl::MutexLock lock(&mu_);
  size_t ended = 0;
  for (uint32_t i = 0; i < sessions_.size(); ++i) {
    if (sessions_[i].open && !LiveLocked(sessions_[i], now)) {
      EndLocked(i);
      ++ended;
    }
  }
  return ended;
}

template <typename Fn>
void PinTables::ForEachLivePin(const Session& s, uint64_t now_ms, Fn fn) const {
  const char* table = TableStart(s);
  for (uint64_t e = 0; e < s.table.length; ++e) {
    const char* entry = table + e * format::kPinEntryBytes;
    const uint64_t offset =
        Load(entry + offsetof(format::PinEntry, object_offset));
    if (offset == 0) continue;
    const uint64_t expiry = Load(entry + offsetof(format::PinEntry, expiry_ms));
    if (expiry == format::kPinForever || expiry > now_ms) fn(offset);
  }
}

std::vector<bool> PinTables::PinnedSlabs(
    absl::Span<const uint64_t> slabs,
    const std::function<bool(uint64_t offset)>& referenced) const {
  const format::PoolLayout& l = options_.layout;
  std::vector<bool> pinned(slabs.size(), false);
  if (slabs.empty()) return pinned;
  absl::Time now = Now();
  const uint64_t now_ms =
      static_cast<uint64_t>(std::max<int64_t>(0, absl::ToUnixMillis(now)));
  std::vector<bool> hit(l.slab_count, false);
  absl::MutexLock lock(&mu_);
  for (uint32_t i = 0; i < sessions_.size(); ++i) {
    if (!LiveLocked(sessions_[i], now)) continue;
    ForEachLivePin(sessions_[i], now_ms, [&](uint64_t offset) {
      const uint64_t slab = l.slab_of(offset);
      if (slab < l.slab_count && (!referenced || referenced(offset))) {
        hit[slab] = true;
      }
    });
  }
  for (size_t i = 0; i < slabs.size(); ++i) {
    pinned[i] = slabs[i] < l.slab_count && hit[slabs[i]];
  }
  return pinned;
}

bool PinTables::ObjectAt(uint64_t offset, uint64_t* bytes) const {
  const format::PoolLayout& l = options_.layout;
  const uint64_t slab = l.slab_of(offset);
  if (slab >= l.slab_count || offset % format::kObjectAlign != 0) return false;
  const uint64_t slab_end = l.slab_offset(slab) + l.slab_bytes;
  if (slab_end - offset < format::kObjectHeaderBytes) return false;
  format::ObjectHeader h;
  std::memcpy(&h, pool_ + offset, sizeof(h));
  if (h.magic != format::kObjectMagic || h.key_length > format::kMaxKeyBytes ||
      slab_end - offset < format::ValueOffset(h.key_length)) {
    return false;
  }
  const char* object = pool_ + offset;
  absl::string_view key(object + format::kObjectHeaderBytes, h.key_length);
  format::ObjectHeader verified;
  if (format::VerifyHeaderAndKey(
          absl::MakeConstSpan(object, format::ValueOffset(h.key_length)), key,
          format::KeyHash{h.key_hash_lo, h.key_hash_hi}, options_.incarnation,
          &verified) != format::Verdict::kValid) {
    return false;
  }
  if (verified.value_length > l.slab_bytes) return false;
  const uint64_t size =
      format::ObjectBytes(verified.key_length, verified.value_length);
  if (size > slab_end - offset) return false;
  *bytes = size;
  return true;
}

void PinTables::FillStats(proto::NodeStats* stats) const {
  absl::Time now = Now();
  const uint64_t now_ms =
      static_cast<uint64_t>(std::max<int64_t>(0, absl::ToUnixMillis(now)));
  std::set<uint64_t> all;  // distinct pinned objects over every session
  uint64_t all_bytes = 0;
  absl::MutexLock lock(&mu_);
  proto::KvClientStats total = ended_;
  for (uint32_t i = 0; i < sessions_.size(); ++i) {
    const Session& s = sessions_[i];
    if (!s.open) continue;
    AddClientStats(s.stats, &total);
    proto::SessionStats* out = stats->add_sessions();
    out->set_client_id(s.client_id);
    out->set_session(i);
    *out->mutable_stats() = s.stats;
    if (!LiveLocked(s, now)) continue;  // its pins no longer count
    std::set<uint64_t> mine;
    uint64_t my_bytes = 0;
    ForEachLivePin(sessions_[i], now_ms, [&](uint64_t offset) {
      uint64_t bytes = 0;
      if (!ObjectAt(offset, &bytes)) return;
      if (mine.insert(offset).second) my_bytes += bytes;
      if (all.insert(offset).second) all_bytes += bytes;
    });
    out->set_pinned_objects(mine.size());
    out->set_pinned_bytes(my_bytes);
  }
  stats->set_pinned_objects(all.size());
  stats->set_pinned_bytes(all_bytes);
  *stats->mutable_clients_total() = total;
}

size_t PinTables::open_sessions() const {
  absl::MutexLock lock(&mu_);
  return sessions_.size() - free_ids_.size();
}

uint64_t PinTables::free_pin_entries() const {
  absl::MutexLock lock(&mu_);
  return area_.free_entries();
}

absl::Time PinTables::next_expiry() const {
  absl::MutexLock lock(&mu_);
  absl::Time next = absl::InfiniteFuture();
  for (const Session& s : sessions_) {
    if (s.open) next = std::min(next, s.lease_end);
  }
  return next;
}

}  // namespace meshpool::store
