#include "format/layout.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/common.h"
#include "format/xxh3.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace meshpool::format {
namespace {

constexpr uint64_t kOffsetMask = (1ull << kOffsetBits) - 1;
constexpr uint64_t kSizeCodeMask = (1ull << kSizeCodeBits) - 1;
// Size code: 6-bit exponent, 4-bit mantissa over 64-byte units.
constexpr int kMantissaBits = 4;

uint64_t RoundUp(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

uint64_t EncodeSize(uint64_t object_bytes) {
  uint64_t units = RoundUp(object_bytes, kObjectAlign) / kObjectAlign;
  if (units < (1u << kMantissaBits)) return units;  // exponent 0: exact
  // Normalise the mantissa into [8, 16): at most 1/8 over-approximation.
  int exponent = std::bit_width(units) - kMantissaBits;
  uint64_t mantissa = (units + (1ull << exponent) - 1) >> exponent;
  if (mantissa == (1u << kMantissaBits)) {
    ++exponent;
    mantissa >>= 1;
  }
  return (static_cast<uint64_t>(exponent) << kMantissaBits) | mantissa;
}

uint64_t DecodeSize(uint64_t code) {
  uint64_t exponent = code >> kMantissaBits;
  uint64_t mantissa = code & ((1u << kMantissaBits) - 1);
  return (mantissa << exponent) * kObjectAlign;
}

uint64_t HeaderChecksum(const ObjectHeader& h) {
  return XXH3_64bits(&h, offsetof(ObjectHeader, header_checksum));
}

uint64_t ChunkDigest(const char* data, size_t len, uint64_t header_checksum,
                     uint64_t chunk) {
  // Seeding with the header's checksum binds the value to its header: a new
  // header over an old value (or the reverse) never verifies.
  return internal::Xxh3WithSeed(data, len, header_checksum ^ chunk);
}

}  // namespace

uint64_t PoolLayout::slab_of(uint64_t offset) const {
  if (offset < slab_area_offset) return slab_count;
  uint64_t slab = (offset - slab_area_offset) / slab_bytes;
  return slab < slab_count ? slab : slab_count;
}

namespace {

constexpr uint64_t kAreaAlign = 4096;  // every area starts on a page

// Bytes of the pin area, or InvalidArgument when the choice cannot fit.
absl::StatusOr<uint64_t> PinAreaBytes(uint64_t pool_bytes,
                                      uint32_t& pin_sessions,
                                      uint32_t& pins_per_session) {
  const bool default_sessions = pin_sessions == 0;
  if (default_sessions) pin_sessions = kDefaultPinSessions;
  if (pins_per_session == 0) {
    uint64_t per = pool_bytes / 64 / (kPinEntryBytes * pin_sessions);
    per = std::bit_floor(std::max<uint64_t>(per, 1));
    pins_per_session = static_cast<uint32_t>(
        std::clamp<uint64_t>(per, kMinPinsPerSession, kMaxPinsPerSession));
  }
  if (default_sessions) {
    // A small pool holds fewer default tables rather than a pin area over
    // 1/64 of it.
    const uint64_t fit =
        pool_bytes / 64 / (kPinEntryBytes * uint64_t{pins_per_session});
    if (fit < pin_sessions) {
      pin_sessions =
          static_cast<uint32_t>(std::bit_floor(std::max<uint64_t>(fit, 1)));
    }
  }
  // Both factors are below 2^32, so the product fits; the entry size is
  // applied only once it is known to be below the pool.
  const uint64_t entries = uint64_t{pin_sessions} * pins_per_session;
  if (entries > pool_bytes / kPinEntryBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        pin_sessions, " pin tables of ", pins_per_session,
        " entries do not fit a pool of ", pool_bytes,
        " bytes; ask for fewer sessions or pins, or a larger pool"));
  }
  return entries * kPinEntryBytes;
}

}  // namespace

absl::StatusOr<PoolLayout> ComputeLayout(uint64_t pool_bytes,
                                         uint64_t slab_bytes,
                                         uint64_t bucket_count,
                                         uint32_t pin_sessions,
                                         uint32_t pins_per_session) {
  if (pool_bytes > kMaxPoolBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("pool of ", pool_bytes, " bytes exceeds the addressable ",
                     kMaxPoolBytes, " bytes; use a smaller pool"));
  }
  if (slab_bytes == 0) {
    // Fine slabs (1/64 of the pool) make eviction and reclamation
    // granular; but never under 4 MiB (or 1/16 of a small pool), since a
    // slab is also the largest value.
    slab_bytes = std::bit_floor(std::max<uint64_t>(pool_bytes / 64, 1));
    slab_bytes = std::max<uint64_t>(
        slab_bytes,
        std::min<uint64_t>(
            4 << 20, std::bit_floor(std::max<uint64_t>(pool_bytes / 16, 1))));
    slab_bytes = std::clamp<uint64_t>(slab_bytes, 1 << 20, 64 << 20);
  }
  if (slab_bytes % kObjectAlign != 0 || slab_bytes < 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("slab size ", slab_bytes, " must be a multiple of ",
                     kObjectAlign, " and at least 4KiB"));
  }
  if (bucket_count == 0) {
    bucket_count = std::max<uint64_t>(1024, pool_bytes / 4096);
  }
  if (bucket_count > pool_bytes / kBucketBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "an index of ", bucket_count, " buckets does not fit a pool of ",
        pool_bytes, " bytes; ask for fewer buckets or a larger pool"));
  }
  MESHPOOL_ASSIGN_OR_RETURN(
      const uint64_t pin_bytes,
      PinAreaBytes(pool_bytes, pin_sessions, pins_per_session));
  PoolLayout layout;
  layout.pool_bytes = pool_bytes;
  layout.index_offset = kSuperblockBytes;
  layout.bucket_count = bucket_count;
  layout.slab_bytes = slab_bytes;
  layout.pin_sessions = pin_sessions;
  layout.pins_per_session = pins_per_session;
  layout.slab_meta_offset =
      RoundUp(layout.index_offset + bucket_count * kBucketBytes, kAreaAlign);
  // The slab table grows with the slab count: start from the count that
  // ignores it and step down until table, pin area and slabs fit (a slab is
  // at least 4 KiB and its entry 16 bytes, so this takes a step or two).
  const uint64_t pin_rounded = RoundUp(pin_bytes, kAreaAlign);
  uint64_t count = 0;
  if (pool_bytes > layout.slab_meta_offset + pin_rounded) {
    count = (pool_bytes - layout.slab_meta_offset - pin_rounded) / slab_bytes;
  }
  auto end_of_slabs = [&](uint64_t n) {
    return layout.slab_meta_offset + RoundUp(n * kSlabMetaBytes, kAreaAlign) +
           pin_rounded + n * slab_bytes;
  };
  while (count > 0 && end_of_slabs(count) > pool_bytes) --count;
  layout.slab_count = count;
  layout.pin_area_offset =
      RoundUp(layout.slab_meta_offset + count * kSlabMetaBytes, kAreaAlign);
  layout.slab_area_offset = layout.pin_area_offset + pin_rounded;
  if (layout.slab_count < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a pool of ", pool_bytes, " bytes cannot hold an index of ",
        bucket_count, " buckets, ", pin_sessions, " pin tables of ",
        pins_per_session, " entries and two slabs of ", slab_bytes,
        " bytes; use a larger pool or smaller slabs"));
  }
  return layout;
}

absl::Status ValidateLayout(const PoolLayout& l, uint64_t pool_length) {
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("pool layout of ", l.pool_bytes, " bytes (region of ",
                     pool_length, " bytes): ", what,
                     "; the node is misconfigured or not a meshpool "
                     "node: refusing to use it"));
  };
  if (l.pool_bytes == 0 || l.pool_bytes > kMaxPoolBytes) {
    return bad(absl::StrCat("pool_bytes is outside 1..", kMaxPoolBytes));
  }
  if (l.pool_bytes > pool_length) {
    return bad("pool_bytes exceeds the registered region");
  }
  // Each area [offset, offset + count * unit) must start where the one
  // before it ended (or later) and end inside the pool; the counts are
  // bounded by division first, so no product overflows.
  uint64_t end = kSuperblockBytes;
  auto area = [&](uint64_t offset, uint64_t count, uint64_t unit,
                  absl::string_view name) -> absl::Status {
    if (offset < end || offset > l.pool_bytes || offset % kObjectAlign != 0) {
      return bad(absl::StrCat(name, " starts at ", offset,
                              ", overlapping the area before it, outside the "
                              "pool, or unaligned"));
    }
    if (unit != 0 && count > (l.pool_bytes - offset) / unit) {
      return bad(absl::StrCat(name, " of ", count, " x ", unit,
                              " bytes does not fit the pool"));
    }
    end = offset + count * unit;
    return absl::OkStatus();
  };
  if (l.bucket_count == 0) return bad("no index buckets");
  if (l.slab_bytes < 4096 || l.slab_bytes % kObjectAlign != 0) {
    return bad(absl::StrCat("slab_bytes ", l.slab_bytes,
                            " is under 4KiB or not a multiple of ",
                            kObjectAlign));
  }
  if (l.slab_count < 2) return bad("fewer than two slabs");
  if (l.pins_per_session > kMaxPinsPerSession ||
      (l.pin_sessions > 0 && l.pins_per_session == 0)) {
    return bad(
        absl::StrCat("pins_per_session is outside 1..", kMaxPinsPerSession));
  }
  absl::Status s = area(l.index_offset, l.bucket_count, kBucketBytes, "index");
  if (s.ok()) {
    s = area(l.slab_meta_offset, l.slab_count, kSlabMetaBytes, "slab table");
  }
  if (s.ok()) {
    // pin_sessions x pins_per_session entries, bounded one factor at a time.
    const uint64_t per_session = l.pins_per_session * kPinEntryBytes;
    s = area(l.pin_area_offset, l.pin_sessions, per_session, "pin area");
  }
  if (s.ok()) s = area(l.slab_area_offset, l.slab_count, l.slab_bytes, "slabs");
  return s;
}

KeyHash HashKey(absl::string_view key, uint64_t key_space) {
  // Seed 0 is XXH3's unseeded hash: keys of no tenant hash as they always
  // did.
  XXH128_hash_t h = XXH3_128bits_withSeed(key.data(), key.size(), key_space);
  return {h.low64, h.high64};
}

uint64_t DigestBytes(absl::Span<const char> bytes) {
  return internal::Xxh3WithSeed(bytes.data(), bytes.size(), 0);
}

uint64_t KeySpaceOf(absl::string_view tenant) {
  if (tenant.empty()) return 0;
  constexpr uint64_t kTenantSeed = 0x746e616e6574ull;  // "tenant"
  const uint64_t space =
      XXH3_64bits_withSeed(tenant.data(), tenant.size(), kTenantSeed);
  return space != 0 ? space : 1;
}

BucketPair BucketsFor(const KeyHash& hash, uint64_t bucket_count) {
  uint64_t first = hash.lo % bucket_count;
  uint64_t second = (hash.hi >> 8) % bucket_count;
  if (second == first && bucket_count > 1) second = (first + 1) % bucket_count;
  return {first, second};
}

uint8_t Fingerprint(const KeyHash& hash) {
  return static_cast<uint8_t>(hash.hi >> 56);
}

uint64_t SlotSizeBound(uint64_t object_bytes) {
  return DecodeSize(EncodeSize(object_bytes));
}

uint64_t EncodeSlot(uint8_t fingerprint, uint64_t object_bytes,
                    uint64_t offset) {
  return (static_cast<uint64_t>(fingerprint) << (kOffsetBits + kSizeCodeBits)) |
         ((EncodeSize(object_bytes) & kSizeCodeMask) << kOffsetBits) |
         ((offset / kObjectAlign) & kOffsetMask);
}

Slot DecodeSlot(uint64_t word) {
  Slot slot;
  slot.fingerprint =
      static_cast<uint8_t>(word >> (kOffsetBits + kSizeCodeBits));
  slot.size_bound = DecodeSize((word >> kOffsetBits) & kSizeCodeMask);
  slot.offset = (word & kOffsetMask) * kObjectAlign;
  return slot;
}

uint64_t DigestCount(uint64_t value_length) {
  return value_length == 0
             ? 1
             : (value_length + kDigestChunkBytes - 1) / kDigestChunkBytes;
}

uint64_t ValueOffset(uint64_t key_length) {
  return kObjectHeaderBytes + RoundUp(key_length, 8);
}

uint64_t ObjectBytes(uint64_t key_length, uint64_t value_length) {
  return RoundUp(ValueOffset(key_length) + RoundUp(value_length, 8) +
                     8 * DigestCount(value_length),
                 kObjectAlign);
}

uint64_t ObjectMapEpoch(const ObjectHeader& header) {
  return (uint64_t{header.map_epoch_high} << 32) | header.map_epoch_low;
}

uint64_t DigestOffset(uint64_t key_length, uint64_t value_length) {
  return ValueOffset(key_length) + RoundUp(value_length, 8);
}

uint64_t EncodeObjectPrefix(absl::Span<char> dst, absl::string_view key,
                            const KeyHash& hash, uint64_t value_length,
                            uint64_t incarnation, uint64_t sequence,
                            uint64_t map_epoch) {
  ObjectHeader h{};
  h.magic = kObjectMagic;
  h.version = kFormatVersion;
  // An epoch past 48 bits (never reached: see kLostHistoryEpochGap) would
  // be recorded as the largest, never as an older one.
  map_epoch = std::min(map_epoch, kMaxObjectMapEpoch);
  h.map_epoch_high = static_cast<uint16_t>(map_epoch >> 32);
  h.map_epoch_low = static_cast<uint32_t>(map_epoch);
  h.key_length = static_cast<uint32_t>(key.size());
  h.value_length = value_length;
  h.key_hash_lo = hash.lo;
  h.key_hash_hi = hash.hi;
  h.incarnation = incarnation;
  h.sequence = sequence;
  h.header_checksum = HeaderChecksum(h);
  char* p = dst.data();
  std::memcpy(p, &h, sizeof(h));
  std::memcpy(p + kObjectHeaderBytes, key.data(), key.size());
  std::memset(p + kObjectHeaderBytes + key.size(), 0,
              ValueOffset(key.size()) - kObjectHeaderBytes - key.size());
  return h.header_checksum;
}

void EncodeDigests(absl::string_view value, uint64_t header_checksum,
                   absl::Span<char> dst) {
  uint64_t chunks = DigestCount(value.size());
  for (uint64_t c = 0; c < chunks; ++c) {
    size_t begin = c * kDigestChunkBytes;
    size_t len = std::min<size_t>(kDigestChunkBytes, value.size() - begin);
    uint64_t d = ChunkDigest(value.data() + begin, len, header_checksum, c);
    std::memcpy(dst.data() + 8 * c, &d, 8);
  }
}

void EncodeObject(absl::Span<char> dst, absl::string_view key,
                  const KeyHash& hash, absl::string_view value,
                  uint64_t incarnation, uint64_t sequence, uint64_t map_epoch) {
  char* p = dst.data();
  uint64_t checksum = EncodeObjectPrefix(dst, key, hash, value.size(),
                                         incarnation, sequence, map_epoch);
  uint64_t value_off = ValueOffset(key.size());
  if (!value.empty()) std::memcpy(p + value_off, value.data(), value.size());
  uint64_t digest_off = DigestOffset(key.size(), value.size());
  std::memset(p + value_off + value.size(), 0,
              digest_off - value_off - value.size());
  EncodeDigests(value, checksum, dst.subspan(digest_off));
  uint64_t end = digest_off + 8 * DigestCount(value.size());
  std::memset(p + end, 0, ObjectBytes(key.size(), value.size()) - end);
}

absl::string_view VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kValid:
      return "valid";
    case Verdict::kOtherKey:
      return "another key's object";
    case Verdict::kStale:
      return "torn, reused or from another incarnation";
    case Verdict::kShort:
      return "read shorter than the object";
  }
  return "unknown verdict";
}

namespace {

// Shared by both verifiers: header sanity, incarnation, key identity.
Verdict CheckHeaderAndKey(absl::Span<const char> bytes, absl::string_view key,
                          const KeyHash& hash, uint64_t incarnation,
                          ObjectHeader* header) {
  if (bytes.size() < kObjectHeaderBytes) return Verdict::kShort;
  ObjectHeader& h = *header;
  std::memcpy(&h, bytes.data(), sizeof(h));
  if (h.magic != kObjectMagic || h.version != kFormatVersion ||
      h.header_checksum != HeaderChecksum(h) || h.incarnation != incarnation) {
    return Verdict::kStale;
  }
  if (h.key_hash_lo != hash.lo || h.key_hash_hi != hash.hi ||
      h.key_length != key.size()) {
    return Verdict::kOtherKey;
  }
  if (bytes.size() < kObjectHeaderBytes + key.size()) return Verdict::kShort;
  if (std::memcmp(bytes.data() + kObjectHeaderBytes, key.data(), key.size()) !=
      0) {
    return Verdict::kOtherKey;  // same hash, different key bytes
  }
  return Verdict::kValid;
}

}  // namespace

Verdict VerifyHeaderAndKey(absl::Span<const char> bytes, absl::string_view key,
                           const KeyHash& hash, uint64_t incarnation,
                           ObjectHeader* header) {
  ObjectHeader h;
  return CheckHeaderAndKey(bytes, key, hash, incarnation,
                           header != nullptr ? header : &h);
}

Verdict VerifyValue(const ObjectHeader& header, absl::Span<const char> value,
                    absl::Span<const char> digests) {
  uint64_t chunks = DigestCount(header.value_length);
  if (value.size() != header.value_length || digests.size() < 8 * chunks) {
    return Verdict::kShort;
  }
  for (uint64_t c = 0; c < chunks; ++c) {
    size_t begin = c * kDigestChunkBytes;
    size_t len = std::min<size_t>(kDigestChunkBytes, value.size() - begin);
    uint64_t stored;
    std::memcpy(&stored, digests.data() + 8 * c, 8);
    if (stored !=
        ChunkDigest(value.data() + begin, len, header.header_checksum, c)) {
      return Verdict::kStale;
    }
  }
  return Verdict::kValid;
}

Verdict VerifyObject(absl::Span<const char> bytes, absl::string_view key,
                     const KeyHash& hash, uint64_t incarnation,
                     absl::string_view* value) {
  ObjectHeader h;
  Verdict head = CheckHeaderAndKey(bytes, key, hash, incarnation, &h);
  if (head != Verdict::kValid) return head;
  if (h.value_length > bytes.size() ||
      ObjectBytes(h.key_length, h.value_length) > bytes.size()) {
    return Verdict::kShort;
  }
  absl::Span<const char> v =
      bytes.subspan(ValueOffset(h.key_length), h.value_length);
  Verdict body = VerifyValue(
      h, v, bytes.subspan(DigestOffset(h.key_length, h.value_length)));
  if (body == Verdict::kValid) *value = absl::string_view(v.data(), v.size());
  return body;
}

}  // namespace meshpool::format
