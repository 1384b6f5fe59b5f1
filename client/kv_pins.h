// Internal to client/: the pin protocol on one node (docs/ARCHITECTURE.md,
// "Eviction, sessions and pins"). A pin is an entry {object offset,
// expiry} this client WRITEs into its session's pin table in the node's
// pool; the node's evictor reads the tables and keeps pinned slabs. In the
// same post as the WRITE the client reads the entry back (the flush: the
// entry is in node memory before what follows), then the key's slot and
// the slab's "evicting" word. The pin holds only when the slot still points
// at the object and the slab is not being evicted: an evictor that marked
// the slab before the entry landed is seen here; one that marks it after
// sees the entry.
//
// Thread-safe as the NodeConnection is.
#ifndef MESHPOOL_CLIENT_KV_PINS_H_
#define MESHPOOL_CLIENT_KV_PINS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/kv_protocol.h"
#include "client/kv_retry.h"
#include "client/node_connection.h"

namespace meshpool::client_internal {

// Pins each key whose slot `found` names (word != 0) for `ttl` (kHardPin:
// no expiry). results[i]: OK (pinned), NotFound (absent, or being
// evicted), Retry(kRereadIndex) (the slot changed meanwhile: look the key
// up again),
// ResourceExhausted (pin table full, or no session free on the node),
// Unavailable.
// With `fresh`, (*fresh)[i] tells whether key i's pin is new (this client
// held none on it before) — what a caller may undo without dropping an
// older pin. A pin that does not hold leaves the client's earlier pin on
// the key (if any) as it was.
void PinFound(NodeConnection& node, absl::Span<const KeyRef> keys,
              absl::Span<const FoundSlot> found, absl::Duration ttl,
              absl::Span<absl::Status> results,
              std::vector<bool>* fresh = nullptr);

// Looks `keys` up and pins those present; a key replaced meanwhile is
// looked up and pinned again (a few times), then reads as NotFound.
// `found`, when not empty, is a lookup already made.
void LookUpAndPin(NodeConnection& node, absl::Span<const KeyRef> keys,
                  std::vector<FoundSlot> found, absl::Duration ttl,
                  int max_verify_retries, absl::Span<absl::Status> results,
                  std::vector<bool>* fresh = nullptr);

// Drops this client's pins of `keys`: NotFound for a key it had no live
// pin on.
void UnpinKeys(NodeConnection& node, absl::Span<const KeyRef> keys,
               absl::Span<absl::Status> results);

}  // namespace meshpool::client_internal

#endif  // MESHPOOL_CLIENT_KV_PINS_H_
