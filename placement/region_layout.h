// meshpool/placement/region_layout.h: where a region's bytes live, and how
// the coordinator places them. Shared by the coordinator (placement) and the
// client (reads and writes): the RegionInfo message is the contract between
// them (proto/meshpool.proto, "Regions").
//
// Everything here is a pure function of its arguments or an immutable value:
// thread-safe.
#ifndef MESHPOOL_PLACEMENT_REGION_LAYOUT_H_
#define MESHPOOL_PLACEMENT_REGION_LAYOUT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/meshpool.pb.h"

namespace meshpool::placement {

inline constexpr uint64_t kDefaultStripeBytes = uint64_t{4} << 20;
// Stripe sizes are multiples of this (so stripes stay 8-byte aligned for
// atomics and page-friendly for registration).
inline constexpr uint64_t kStripeAlign = 4096;
inline constexpr uint32_t kMaxReplicas = 8;
inline constexpr size_t kMaxRegionNameBytes = 256;
// Extents are named by uint16 indices in RegionInfo.stripe_extents.
inline constexpr size_t kMaxRegionExtents = 65535;
// Bounds the region table's size: 2 bytes per stripe per replica travel in
// every GetRegion (2^22 stripes of 4 MiB = 16 TiB; 8 MiB per replica).
inline constexpr uint64_t kMaxRegionStripes = uint64_t{1} << 22;
static_assert(kDefaultStripeBytes % kStripeAlign == 0);
static_assert(kStripeAlign % 8 == 0, "atomics need 8-byte aligned stripes");
static_assert(kMaxReplicas >= 1 && kMaxRegionExtents <= UINT16_MAX);

// The largest RegionInfo: 2 bytes per stripe copy (stripe_extents), at most
// one slab offset per copy (a varint of at most 10 bytes, plus framing),
// and per extent its node id and fields. Control-plane channels that carry
// a RegionInfo or an AllocateRegionReply accept messages up to this size.
inline constexpr uint64_t kMaxRegionInfoBytes =
    kMaxRegionStripes * kMaxReplicas * (2 + 11) + kMaxRegionExtents * 128 +
    (1 << 20);
static_assert(kMaxRegionInfoBytes < (uint64_t{1} << 31),
              "gRPC message sizes are int");

// OK for 1..kMaxRegionNameBytes bytes of printable ASCII without spaces
// (letters, digits and any of "._-/:@+=#"); InvalidArgument saying which
// character or length is wrong otherwise.
absl::Status ValidateRegionName(absl::string_view name);
// A tenant's region as an admin without a tenant addresses it:
// "~TENANT/NAME" (coordinator/tenants.h); '~' is no name character.
inline constexpr char kTenantScopeMark = '~';
// ValidateRegionName, or for "~TENANT/NAME" that of NAME and that TENANT is
// not empty (the coordinator checks the tenant, and who may address it).
absl::Status ValidateAddressedRegionName(absl::string_view name);

// Where one copy of one stripe lives.
struct StripeCopy {
  int extent = -1;           // index into RegionInfo.extents
  uint64_t pool_offset = 0;  // in that extent's node's pool
};

// The decoded, checked form of a RegionInfo: for every (stripe, replica),
// the extent and pool offset of that copy. Immutable; cheap to share.
class RegionLayout {
 public:
  // Decodes `info` (rules in proto/meshpool.proto) and checks it is
  // self-consistent: size > 0, stripe_bytes a positive multiple of
  // kStripeAlign and at most every extent's slab_bytes, 1..kMaxReplicas
  // replicas, one stripe_extents entry per replica of 2 bytes per stripe,
  // every index naming an extent, the copies of a stripe on distinct
  // extents, and every extent having slabs enough for its copies.
  // InvalidArgument naming the first violation otherwise.
  static absl::StatusOr<RegionLayout> Create(const proto::RegionInfo& info);

  uint64_t size() const { return size_; }
  uint64_t stripe_bytes() const { return stripe_bytes_; }
  uint64_t stripes() const { return stripes_; }
  uint32_t replicas() const { return replicas_; }
  // Bytes of `stripe` (the last one may be short).
  uint64_t StripeLength(uint64_t stripe) const;
  // REQUIRES: stripe < stripes(), replica < replicas().
  StripeCopy Copy(uint64_t stripe, uint32_t replica) const {
    return copies_[stripe * replicas_ + replica];
  }
  // How many stripe copies extent `extent` holds (what AllocateRegion was
  // asked for).
  uint64_t CopiesOn(int extent) const { return copies_on_[extent]; }

 private:
  RegionLayout() = default;
  uint64_t size_ = 0;
  uint64_t stripe_bytes_ = 0;
  uint64_t stripes_ = 0;
  uint32_t replicas_ = 0;
  std::vector<StripeCopy> copies_;   // stripes_ * replicas_, stripe-major
  std::vector<uint64_t> copies_on_;  // per extent
};

// A node the coordinator may place stripe copies on.
struct PlacementCandidate {
  std::string node_id;
  uint64_t free_stripes = 0;  // copies of this stripe size it can still take
};

// Chooses a node for every copy of every stripe: copies of one stripe go to
// distinct candidates, and each candidate gets a share of all copies
// proportional to its free_stripes (spread evenly along the region, so a
// sequential read touches every node), never more than its free_stripes.
// Deterministic for equal inputs. Returns one vector per replica, each
// holding one candidate index per stripe.
// Errors: InvalidArgument (stripes == 0 or > kMaxRegionStripes, replicas
// outside 1..kMaxReplicas, more than kMaxRegionExtents candidates),
// FailedPrecondition (fewer candidates with free space than replicas),
// ResourceExhausted (not enough free space in all; the message gives what
// is needed and what is free).
absl::StatusOr<std::vector<std::vector<uint16_t>>> PlaceStripes(
    absl::Span<const PlacementCandidate> candidates, uint64_t stripes,
    uint32_t replicas);

}  // namespace meshpool::placement

#endif  // MESHPOOL_PLACEMENT_REGION_LAYOUT_H_
