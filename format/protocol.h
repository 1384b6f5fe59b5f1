// meshpool/format/protocol.h: the limits and time relations of the control
// and data protocols that a memory node and its clients must agree on. The
// node enforces them (store/); clients plan around them (client/). Changing
// one changes the protocol.
//
// Time relations (store/slab_manager.h explains the slab lifecycle):
//   * A client is told a slab `lease`; the node seals the slab only at
//     grant time + lease + kLeaseMargin. A client checks its lease before its
//     publishing CAS; kLeaseMargin covers the time from that check until the
//     CAS lands, so no object is ever published into a slab the node sealed.
//   * grace = max_read_lease + kReclaimMargin: a GET that read a slot before
//     the node's first zero-reference pass has finished before the slab is
//     reused.
//
// Constants only; nothing here has state.
#ifndef MESHPOOL_FORMAT_PROTOCOL_H_
#define MESHPOOL_FORMAT_PROTOCOL_H_

#include <cstdint>

#include "absl/time/time.h"

namespace meshpool::format {

// Added to a lease on the node side only (see the file comment). Must exceed
// the longest time a client's publishing CAS may take to land after the
// client checked its lease: the client checks right before posting the CAS
// and waits at most its op_timeout (client: kDefaultOpTimeout, 5 s, with a
// static_assert there tying the two).
inline constexpr absl::Duration kLeaseMargin = absl::Seconds(6);
// Added to max_read_lease to form the reclamation grace.
inline constexpr absl::Duration kReclaimMargin = absl::Milliseconds(500);
inline constexpr absl::Duration kDefaultSlabLease = absl::Seconds(10);
// A GET takes microseconds to milliseconds; this bounds a slow one. It also
// bounds sustained write throughput on a full pool: freed memory is reused
// only a grace (this + kReclaimMargin) later, so writes can run at most
// (free + reclaimable bytes) / grace.
inline constexpr absl::Duration kDefaultMaxReadLease = absl::Milliseconds(500);
// Leases travel as uint32 milliseconds (GrantSlabReply.lease_ms); this also
// bounds max_read_lease (NodeInfo.max_read_lease_ms).
inline constexpr int64_t kMaxLeaseMs = int64_t{24} * 3600 * 1000;
static_assert(kMaxLeaseMs <= UINT32_MAX);
inline constexpr absl::Duration kMaxLease = absl::Milliseconds(kMaxLeaseMs);
static_assert(kLeaseMargin > absl::ZeroDuration());
static_assert(kReclaimMargin > absl::ZeroDuration());
static_assert(kDefaultSlabLease <= kMaxLease &&
              kDefaultMaxReadLease <= kMaxLease);

// The most bytes one DigestRanges call may ask a node to hash (the node's
// CPU does it on the gRPC thread, at several GB/s: this bounds a call to a
// fraction of a second). Ask more in several calls.
inline constexpr uint64_t kMaxDigestBytes = uint64_t{1} << 30;
static_assert(kMaxDigestBytes > 0 && kMaxDigestBytes <= (uint64_t{1} << 32));

}  // namespace meshpool::format

#endif  // MESHPOOL_FORMAT_PROTOCOL_H_
