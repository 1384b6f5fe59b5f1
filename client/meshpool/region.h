// <meshpool/region.h>: regions, the shared-memory face of meshpool: named,
// fixed-size memory striped across the memory nodes, read and written at
// any offset with one-sided operations, with 8-byte atomics. Model weights
// (<meshpool/weights.h>) live in regions.
//
// Thread-safety: the functions below are thread-safe (as the Client is); a
// Region is thread-safe.
#ifndef MESHPOOL_REGION_H_
#define MESHPOOL_REGION_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "meshpool/client.h"

namespace meshpool {

// Stripe size of a region created with RegionOptions.stripe_bytes = 0 (the
// coordinator caps it at the smallest slab of the nodes it places on).
inline constexpr uint64_t kDefaultStripeBytes = uint64_t{4} << 20;
// Longest region name, in bytes.
inline constexpr size_t kMaxRegionNameBytes = 256;

struct RegionOptions {
  // Bytes per stripe: a multiple of 4 KiB, at most the nodes' slab size.
  // 0: kDefaultStripeBytes, capped at the smallest slab.
  uint64_t stripe_bytes = 0;
  // Copies of every stripe, each on a different node (1..8).
  uint32_t replicas = 1;
};

// Whether a region's copies are all on live nodes.
enum class RegionHealthState {
  kUnknown,   // an old coordinator that does not say
  kHealthy,   // every stripe has all its copies
  kDegraded,  // some stripe lost a copy (a node died); every stripe still
              // has one, so reads succeed; the coordinator copies the lost
              // copies to other live nodes (re-replication)
  kLost,      // some stripe has no copy left: those bytes are gone
};
// "healthy", "degraded", "lost" or "unknown".
const char* RegionHealthName(RegionHealthState state);

struct RegionHealth {
  RegionHealthState state = RegionHealthState::kUnknown;
  uint64_t stripes_degraded = 0;  // stripes missing a copy, one left
  uint64_t stripes_lost = 0;      // stripes with no copy left
  // The re-replication in progress (0 of 0: none): bytes it is copying and
  // has copied.
  uint64_t repair_bytes_total = 0;
  uint64_t repair_bytes_done = 0;
  // Why the last repair attempt failed (e.g. no other node has free
  // memory); empty when none did.
  std::string repair_error;
};

// A region as ListRegions describes it.
struct RegionDescription {
  std::string name;
  uint64_t size = 0;
  uint64_t stripe_bytes = 0;
  uint32_t replicas = 1;
  std::vector<std::string> nodes;  // node ids holding any of its stripes
  absl::Time created;
  RegionHealth health;  // as of the listing
};

// Regions: named, fixed-size memory striped across the memory nodes (the
// shared-memory face of meshpool; model weights live in them). Stripes are
// placed by the coordinator in proportion to the nodes' free memory, each
// with `replicas` copies on distinct nodes. Region memory is hard-pinned:
// never evicted, never reclaimed until the region is deleted. It starts
// zero-filled. Reads and writes are one-sided, split over stripes and nodes
// and issued in parallel; no control-plane call per operation.
//
// Consistency: a Write is not atomic as a whole (a concurrent Read may see
// part of it); the 8-byte atomics are atomic with each other on the same
// word. With replicas, a Write goes to every live copy and a Read is served
// by the first live copy of each stripe.
//
// Re-replication: when a node dies, the coordinator copies the stripe
// copies it held from surviving copies to other live nodes, checks them,
// and publishes the new placement; a Region handle picks it up at its next
// operation after the cluster map changes (one GetRegion call, up to 3 s
// when the coordinator does not answer, after which the old placement
// keeps serving). Reads never wait for a repair. A Write that races a
// repair may miss the new copy; the coordinator checks the new copies
// again a second after publishing them, and Verify tells a writer that
// must know.
//
// Error codes of Region operations:
//   OutOfRange         - offset + length past the region's size.
//   InvalidArgument    - an atomic's offset is not 8-byte aligned.
//   FailedPrecondition - an atomic on a region with more than one replica
//                        (copies would diverge): use replicas = 1.
//   DataLoss           - every node holding some stripe's copies died: the
//                        bytes are gone; delete and recreate the region.
//                        Also a Write or atomic whose region was deleted
//                        while it was stalled longer than the nodes' read
//                        lease: it may have reached memory reused since.
//   Unavailable        - a node failed mid-operation: retry.
//   NotFound           - (Open/Delete/Rename) no region of that name; also
//                        from Read, Write and atomics on a Region deleted or
//                        replaced since it was opened: open it again by name.
//
// Lifetime: a Region handle stays usable while its Client lives. Once its
// region is deleted (from any client), or replaced under its name, the
// handle's Read, Write and atomics fail NotFound: they never return or
// overwrite bytes of whatever reuses the memory (a READ of each node's
// region word follows its requests; see docs/ARCHITECTURE.md, "Deleted and
// replaced regions"). A Read that fails so leaves `out` unspecified. Verify
// is not checked so: on a deleted region it reports a mismatch. Publish
// new contents under a new name and RenameRegion instead of rewriting a
// region others read.
//
// Thread-safety: a Region is thread-safe; calls proceed in parallel.
class Region {
 public:
  virtual ~Region() = default;

  virtual const std::string& name() const = 0;
  virtual uint64_t size() const = 0;
  virtual uint64_t stripe_bytes() const = 0;
  virtual uint32_t replicas() const = 0;

  // Copies [offset, offset + out.size()) into `out`. When `out` lies inside
  // a buffer registered with Client::RegisterBuffer the bytes move straight
  // from the nodes into it; otherwise they are staged.
  virtual absl::Status Read(uint64_t offset, absl::Span<char> out) = 0;

  // Writes `data` at `offset` (every live copy). Registered memory moves
  // without staging, like Read.
  virtual absl::Status Write(uint64_t offset, absl::Span<const char> data) = 0;

  // Checks that every live copy of [offset, offset + data.size()) holds
  // exactly `data`: each node hashes its copies (XXH3-64) and this client
  // compares with the hash of `data`, so nothing is read back over the
  // network (the nodes' CPUs do this work, only when asked). DataLoss
  // naming the stripe and node on a mismatch; otherwise the Read errors.
  // For writers that must know their bytes landed, on every copy.
  virtual absl::Status Verify(uint64_t offset, absl::Span<const char> data) = 0;

  // Atomically: if the 8-byte word at `offset` equals `expected`, set it to
  // `desired`. Returns the old value either way (success: old == expected).
  // Words are host byte order. REQUIRES: offset % 8 == 0.
  virtual absl::StatusOr<uint64_t> CompareAndSwap(uint64_t offset,
                                                  uint64_t expected,
                                                  uint64_t desired) = 0;
  // Atomically adds `delta` to the word at `offset`; returns the old value.
  virtual absl::StatusOr<uint64_t> FetchAdd(uint64_t offset,
                                            uint64_t delta) = 0;
};

// Names are per tenant (docs/security.md, "Tenants"): a client whose
// certificate acts for a tenant creates, opens, renames, deletes and lists
// only that tenant's regions, under their plain names; clients without a
// tenant see no tenant's regions; an admin without a tenant lists every
// region and may name a tenant's as "~TENANT/NAME" (others get
// InvalidArgument for such a name).
//
// Creates a region of `size` bytes (> 0), zero-filled. Errors:
// InvalidArgument (empty or over-long name, bad stripe size or replica
// count; the message says what to use), AlreadyExists (the name is
// taken), ResourceExhausted (the nodes' free memory cannot hold it; it
// says how much is free; or the tenant's --region-quota would be
// exceeded, it says which limit), FailedPrecondition (fewer live nodes than
// replicas), Unavailable (coordinator or a node unreachable: retry; when
// the coordinator did not answer within 60 s the create may still have
// completed, which OpenRegion tells).
absl::StatusOr<std::unique_ptr<Region>> CreateRegion(
    Client& client, absl::string_view name, uint64_t size,
    const RegionOptions& options = {});
// Opens an existing region. NotFound if there is none of that name.
absl::StatusOr<std::unique_ptr<Region>> OpenRegion(Client& client,
                                                   absl::string_view name);
// Deletes a region and frees its memory on the nodes (after a grace
// period, so reads in flight finish). NotFound if absent.
absl::Status DeleteRegion(Client& client, absl::string_view name);
// Atomically renames `from` to `to`: a reader opening `to` sees the old
// region or the new one, never neither (with replace) nor a mix. When `to`
// exists: AlreadyExists, unless `replace`, which deletes the region `to`
// named. NotFound when `from` is absent.
absl::Status RenameRegion(Client& client, absl::string_view from,
                          absl::string_view to, bool replace = false);
// The caller's tenant's regions whose name starts with `prefix`, sorted by
// name.
absl::StatusOr<std::vector<RegionDescription>> ListRegions(
    Client& client, absl::string_view prefix = "");

}  // namespace meshpool

#endif  // MESHPOOL_REGION_H_
