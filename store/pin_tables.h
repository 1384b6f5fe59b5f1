// meshpool/store/pin_tables.h: client sessions and the pin tables they own
// in the pool's pin area (format/layout.h).
//
// A session is a client's lease on one pin table. The client writes pin
// entries {object offset, expiry} into its table one-sidedly; the node never
// writes a live table, it only reads it (the evictor asks PinnedSlabs) and
// zeroes it when the session ends: the client closes it, or stops renewing
// it for a lease (it died or hung) and the node expires it. So every pin a
// client holds, hard ones included, ends at most one lease after the client
// stops renewing. Pins of a session whose lease has passed never protect
// anything, even before ExpireStale has run.
//
// Sessions carry the client's own counters (KvClientStats, cumulative per
// session); the node sums them into clients_total, closed and expired
// sessions included.
//
// A session's table is carved out of the pin area when it opens, as long as
// the client asked (store/pin_area.h): the area is sized for
// layout.pin_sessions tables of the default size, and holds more sessions
// that ask for fewer pins, fewer that ask for more. A freed table's entries
// are not granted again within kPinTableQuarantine of being freed: a client
// checks its session's time right before posting pin WRITEs, and a WRITE
// lands within its op timeout (below kLeaseMargin), so a late WRITE from a
// client whose session just ended lands before its entries are reissued —
// and a table is zeroed again when granted, so such a WRITE never shows in
// another client's table.
//
// Thread-safety: PinTables is thread-safe; one mutex covers sessions and the
// scans of their tables.
#ifndef MESHPOOL_STORE_PIN_TABLES_H_
#define MESHPOOL_STORE_PIN_TABLES_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/random/random.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/env.h"
#include "format/layout.h"
#include "proto/meshpool.pb.h"
#include "store/pin_area.h"
#include "store/slab_manager.h"

namespace meshpool::store {

// How long a freed pin table rests before it is reissued (see the file
// comment): longer than any client op may take to land.
inline constexpr absl::Duration kPinTableQuarantine = format::kLeaseMargin;

inline constexpr absl::Duration kDefaultSessionLease = absl::Seconds(10);
// Open sessions per node, at most; each also needs a table of at least
// min(asked, kMinPinsPerSession) free entries.
inline constexpr uint32_t kMaxOpenSessions = 65536;
static_assert(kMaxOpenSessions >= format::kDefaultPinSessions);
// Leases travel as uint32 milliseconds (OpenSessionReply.lease_ms).
inline constexpr int64_t kMaxSessionLeaseMs = int64_t{24} * 3600 * 1000;
static_assert(kMaxSessionLeaseMs <= UINT32_MAX);

struct PinTablesOptions {
  format::PoolLayout layout;  // where the pin area is
  uint64_t incarnation = 0;  // objects counted as pinned must name it
  absl::Duration lease = kDefaultSessionLease;
  Env* env = nullptr;  // clock (not owned; outlives this); null: Env::Default()
  // At most this many open sessions per tenant key (Open's `tenant`); 0:
  // no cap. Keeps one tenant from taking every pin table.
  uint32_t max_sessions_per_tenant = 0;
};

// What OpenSession answers.
struct SessionGrant {
  uint32_t session = 0;       // names it, with the token (a slot index)
  uint64_t token = 0;         // nonzero, random
  uint64_t table_offset = 0;  // pool offset of the table
  uint32_t entries = 0;       // entries in it
  absl::Duration lease;
  uint64_t node_clock_ms = 0;  // the node's clock when opened (unix ms)
};

class PinTables {
 public:
  // REQUIRES: pool covers options.layout.pool_bytes, is 8-byte aligned and
  // outlives this. Errors: InvalidArgument (null pool, a layout without pin
  // tables or whose pin area overruns the pool, lease not in
  // (0, kMaxSessionLeaseMs]).
  static absl::StatusOr<std::unique_ptr<PinTables>> Create(
      PinTablesOptions options, char* pool);

  // Opens a session for `client_id`, charged to `tenant` (a key the
  // caller's identity gives, see store/node_service.h; "" for callers the
  // node cannot tell apart), with a table of `pins` entries (0: the
  // layout's pins_per_session; more than kMaxPinsPerSession: that many).
  // When no free run is that long, the table is the longest power of two,
  // halving from `pins` down to kMinPinsPerSession, that one holds: the
  // grant says how many it got. Errors: InvalidArgument (empty client_id),
  // ResourceExhausted (not even min(pins, kMinPinsPerSession) entries are
  // free in one run, or kMaxOpenSessions are open: the message says how
  // many sessions hold how much; or `tenant` holds max_sessions_per_tenant
  // sessions already, the message says so).
  absl::StatusOr<SessionGrant> Open(absl::string_view client_id,
                                    absl::string_view tenant = "",
                                    uint32_t pins = 0);

  // Extends the lease by a full lease from now and replaces the session's
  // reported counters. Returns the node clock (unix ms). NotFound when the
  // session is unknown, closed, expired (its lease passed: it is expired
  // now) or the token does not match.
  absl::StatusOr<uint64_t> Renew(uint32_t session, uint64_t token,
                                 const proto::KvClientStats& stats);

  // Ends the session: zeroes its table, keeps its counters in the totals.
  // NotFound as for Renew.
  absl::Status Close(uint32_t session, uint64_t token,
                     const proto::KvClientStats& stats);

  // Ends every session whose lease has passed, as Close would. Returns how
  // many ended.
  size_t ExpireStale();

  // For each of `slabs`, whether an entry of a live session (lease not
  // passed) points into it and holds: a hard pin, or expiry > now (ms).
  // With `referenced`, only entries whose object it says an index slot
  // still points at count: a pin holds the value the key had when pinned,
  // and a replaced or deleted one (whose memory is reclaimed and reused)
  // protects nothing.
  std::vector<bool> PinnedSlabs(
      absl::Span<const uint64_t> slabs,
      const std::function<bool(uint64_t offset)>& referenced = nullptr) const;

  // Fills pinned_objects/pinned_bytes (distinct objects that live pins
  // name and whose header verifies; entries pointing at anything else are
  // skipped), clients_total and sessions.
  void FillStats(proto::NodeStats* stats) const;

  size_t open_sessions() const;
  // Entries of the pin area in no table and not resting after a close (as
  // of the last Open, which frees those that rested long enough).
  uint64_t free_pin_entries() const;
  // Earliest lease end of an open session (InfiniteFuture: none open).
  absl::Time next_expiry() const;
  absl::Duration lease() const { return options_.lease; }
  uint64_t NowMs() const;

 private:
  struct Session {
    bool open = false;
    uint64_t token = 0;
    PinArea::Run table;  // valid while open
    std::string client_id;
    std::string tenant;
    absl::Time lease_end;
    proto::KvClientStats stats;
  };
  // Zeroes a table word by word (a client may still be writing).
  void ZeroTable(PinArea::Run table) const;
  char* TableStart(const Session& s) const {
    return pool_ + options_.layout.pin_entry(s.table.first);
  }
  // A live entry's object: its pool offset and size.
  struct PinnedObject {
    uint64_t offset;
    uint64_t bytes;
  };

  PinTables(PinTablesOptions options, char* pool);
  absl::Time Now() const { return options_.env->Now(); }
  // The session named by (session, token) if open and within its lease;
  // one whose lease passed is ended first. NotFound otherwise.
  absl::StatusOr<Session*> FindLocked(uint32_t session, uint64_t token,
                                      absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndLocked(uint32_t session) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool LiveLocked(const Session& s, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Calls fn(object_offset) for every live entry of `s`'s table.
  template <typename Fn>
  void ForEachLivePin(const Session& s, uint64_t now_ms, Fn fn) const;
  // The size of the object at `offset` if a verified header is there.
  bool ObjectAt(uint64_t offset, uint64_t* bytes) const;

  const PinTablesOptions options_;
  char* const pool_;

  mutable absl::Mutex mu_;
  // Indexed by session id; grows as sessions open, up to kMaxOpenSessions.
  std::vector<Session> sessions_ ABSL_GUARDED_BY(mu_);
  std::vector<uint32_t> free_ids_ ABSL_GUARDED_BY(mu_);  // closed slots
  PinArea area_ ABSL_GUARDED_BY(mu_);
  proto::KvClientStats ended_ ABSL_GUARDED_BY(mu_);  // closed and expired
  absl::BitGen rng_ ABSL_GUARDED_BY(mu_);
};

// a += b, field by field.
void AddClientStats(const proto::KvClientStats& b, proto::KvClientStats* a);

}  // namespace meshpool::store

#endif  // MESHPOOL_STORE_PIN_TABLES_H_
