// meshpool/format/layout.h: the on-memory format of a memory node's pool,
// shared by the node (which lays it out) and clients (which read and write it
// with one-sided operations). Every byte layout here is part of the wire
// contract.
//
//   pool:   [ superblock 4 KiB | index: bucket_count x 64 B |
//             slab table: slab_count x 16 B | pin area | slabs ... ]
//           (each area starts on a 4 KiB boundary)
//   bucket: 8 slots of 8 bytes. A key may live in either of two buckets.
//   slot:   0 = empty, else [63:56] fingerprint | [55:46] size code |
//           [45:0] object offset in 64-byte units from the pool start.
//   object: [ header 64 B | key, padded to 8 | value, padded to 8 |
//             digests: one XXH3-64 per 1 MiB chunk of value (at least one) ]
//           padded to 64 B. Objects are immutable once published.
//
//   slab table entry (SlabMeta), one per slab:
//           [ evicting: 8 B, written by the node only | touched: 8 B,
//             written by clients (any nonzero value), cleared by the node ]
//   pin area: pin_sessions x pins_per_session PinEntry (16 B): room for
//           pin_sessions tables of the default size pins_per_session. The
//           node carves tables out of it on demand, each a run of entries
//           as long as its session asked (store/pin_area.h); a client
//           session owns one table (OpenSession) and is its only writer;
//           the node only reads it (and clears it when the session ends or
//           expires).
//   pin entry: [ object offset (pool offset of a pinned object; 0 = unused) |
//               expiry (node clock, unix ms; kPinForever = hard pin) ]
//
// The size code over-approximates the object's size by at most 1/8 so that a
// reader can fetch the whole object with a single READ.
//
// All functions are pure and thread-safe.
#ifndef MESHPOOL_FORMAT_LAYOUT_H_
#define MESHPOOL_FORMAT_LAYOUT_H_

#include <bit>
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace meshpool::format {

inline constexpr uint64_t kSuperblockMagic = 0x4c4f4f504853454dull;  // MESHPOOL
inline constexpr uint32_t kObjectMagic = 0x4a424f4du;                // MOBJ
// 2: slab table, pin area; 3: a slab's region word; 4: objects carry the
// map epoch they were written under.
inline constexpr uint32_t kFormatVersion = 4;
inline constexpr size_t kSuperblockBytes = 4096;
inline constexpr size_t kSlotBytes = 8;
inline constexpr size_t kSlotsPerBucket = 8;
inline constexpr size_t kBucketBytes = kSlotBytes * kSlotsPerBucket;
inline constexpr size_t kObjectAlign = 64;
inline constexpr size_t kObjectHeaderBytes = 64;
inline constexpr size_t kDigestChunkBytes = 1 << 20;
inline constexpr size_t kMaxKeyBytes = 4096;
inline constexpr size_t kSlabMetaBytes = 24;
inline constexpr size_t kPinEntryBytes = 16;
// A pin entry whose expiry is this never expires (a hard pin): it holds
// until its client unpins it or its session ends (the client closed it or
// died and stopped renewing it).
inline constexpr uint64_t kPinForever = ~uint64_t{0};
// Defaults of ComputeLayout: client sessions the pin area is sized for, and
// the default pins per session (the pin area is at most about 1/64 of the
// pool, within these bounds). A session may ask for any table size in
// [kMinPinsPerSession, kMaxPinsPerSession] (store/pin_tables.h).
inline constexpr uint32_t kDefaultPinSessions = 4096;
inline constexpr uint32_t kMinPinsPerSession = 64;
inline constexpr uint32_t kMaxPinsPerSession = 16384;
inline constexpr int kOffsetBits = 46;
inline constexpr int kSizeCodeBits = 10;
inline constexpr int kFingerprintBits = 8;
static_assert(kBucketBytes == 64, "a bucket is one cache line / one READ");
static_assert(kOffsetBits + kSizeCodeBits + kFingerprintBits == 64);
static_assert(kObjectHeaderBytes % 8 == 0 && kObjectAlign % 8 == 0);
static_assert(kSuperblockBytes % kObjectAlign == 0);
static_assert(kMaxKeyBytes >= 1024, "the contract promises 1 KiB keys");
static_assert(kSlabMetaBytes == 3 * 8 && kPinEntryBytes == 2 * 8,
              "8-byte words, written and read as whole words");
static_assert(kMinPinsPerSession <= kMaxPinsPerSession);
static_assert(std::has_single_bit(kMinPinsPerSession) &&
              std::has_single_bit(kMaxPinsPerSession));

// Largest pool a slot can address.
inline constexpr uint64_t kMaxPoolBytes = (1ull << kOffsetBits) * kObjectAlign;

struct Superblock {
  uint64_t magic;
  uint32_t version;
  uint32_t reserved;
  uint64_t incarnation;
  uint64_t pool_bytes;
  uint64_t index_offset;
  uint64_t bucket_count;
  uint64_t slab_area_offset;
  uint64_t slab_bytes;
  uint64_t slab_count;
  uint64_t slab_meta_offset;
  uint64_t pin_area_offset;
  uint64_t pin_sessions;
  uint64_t pins_per_session;
};
static_assert(sizeof(Superblock) <= kSuperblockBytes);

// One slab's entry in the slab table.
struct SlabMeta {
  // Nonzero from the moment the node starts evicting the slab's objects
  // until the slab is handed out again. A pin on an object in a slab whose
  // `evicting` a client reads as nonzero after its pin entry landed does
  // not hold (the node may not have seen it).
  uint64_t evicting;
  // Set (nonzero) by clients when they read an object in the slab; the
  // evictor gives a touched slab a second chance and clears the word.
  uint64_t touched;
  // The id of the region holding the slab, 0 when none does. The node sets
  // it once the region's slabs are cleared, before AllocateRegion answers,
  // and clears it for every slab of the region before FreeRegion frees any,
  // so a region handle that reads its id here after its own requests knows
  // they touched the region's memory, not memory reused since (region ids
  // are never reused).
  uint64_t region;
};
static_assert(sizeof(SlabMeta) == kSlabMetaBytes);

struct PinEntry {
  uint64_t object_offset;  // 0: unused
  uint64_t expiry_ms;      // node clock (unix ms); kPinForever: hard pin
};
static_assert(sizeof(PinEntry) == kPinEntryBytes);

// Where things are in a pool; published with the node's registration.
struct PoolLayout {
  uint64_t pool_bytes = 0;
  uint64_t index_offset = 0;
  uint64_t bucket_count = 0;
  uint64_t slab_area_offset = 0;
  uint64_t slab_bytes = 0;
  uint64_t slab_count = 0;
  uint64_t slab_meta_offset = 0;  // slab table: slab_count x SlabMeta
  uint64_t pin_area_offset = 0;   // pin_sessions x pins_per_session x PinEntry
  uint64_t pin_sessions = 0;      // sessions the area is sized for
  uint64_t pins_per_session = 0;  // a session's table unless it asks

  uint64_t bucket_offset(uint64_t bucket) const {
    return index_offset + bucket * kBucketBytes;
  }
  uint64_t slab_offset(uint64_t slab) const {
    return slab_area_offset + slab * slab_bytes;
  }
  uint64_t slab_meta(uint64_t slab) const {
    return slab_meta_offset + slab * kSlabMetaBytes;
  }
  uint64_t pin_area_entries() const { return pin_sessions * pins_per_session; }
  uint64_t pin_entry(uint64_t index) const {
    return pin_area_offset + index * kPinEntryBytes;
  }
  // Slab holding pool offset `offset`, or slab_count if outside the slabs.
  uint64_t slab_of(uint64_t offset) const;
};

// Lays out a pool of `pool_bytes`. `slab_bytes` 0 picks pool/64 rounded
// down to a power of two, at least min(4 MiB, pool/16), within [1 MiB,
// 64 MiB]; `bucket_count` 0
// picks pool_bytes / 4096 (index = 1/64 of the pool), at least 1024.
// `pins_per_session` 0 picks pool / 64 / (16 x pin_sessions) rounded down
// to a power of two, clamped to [kMinPinsPerSession, kMaxPinsPerSession].
// `pin_sessions` 0 picks kDefaultPinSessions, or fewer (a power of two, at
// least one) where that many tables of pins_per_session would take more
// than 1/64 of the pool: under 256 MiB with the default table size.
// InvalidArgument when the pool cannot hold the index, the slab table, the
// pin area and two slabs, or when slab_bytes is not a multiple of
// kObjectAlign.
absl::StatusOr<PoolLayout> ComputeLayout(uint64_t pool_bytes,
                                         uint64_t slab_bytes = 0,
                                         uint64_t bucket_count = 0,
                                         uint32_t pin_sessions = 0,
                                         uint32_t pins_per_session = 0);

// Checks a layout that came from elsewhere (a node's registration, through
// the cluster map) before anything is sized or addressed by it: every area
// (index, slab table, pin area, slabs) inside a pool of at most
// kMaxPoolBytes and `pool_length` (the length of the region the node
// registered), in ComputeLayout's order and without overlap, with at least
// two slabs of a valid size. InvalidArgument naming the first field that
// does not hold.
absl::Status ValidateLayout(const PoolLayout& layout, uint64_t pool_length);

// 128-bit XXH3 of the key bytes, seeded with the key's space.
struct KeyHash {
  uint64_t lo = 0;
  uint64_t hi = 0;
  bool operator==(const KeyHash&) const = default;
};
// `key_space` names the keyspace: 0 for keys of no tenant, KeySpaceOf(t)
// for tenant t's. The same key bytes in two spaces hash apart, so they are
// two keys (they share a slot only on a 128-bit collision, and verifiers
// compare the whole hash).
KeyHash HashKey(absl::string_view key, uint64_t key_space = 0);
// The key space of `tenant`'s keys: 0 for "" (no tenant), never 0 else.
uint64_t KeySpaceOf(absl::string_view tenant);

// XXH3-64 (seed 0) of `bytes`, computed with the widest vector unit the CPU
// has (the same value everywhere): the digest of region ranges
// (DigestRanges, Region verification) and weights chunks.
uint64_t DigestBytes(absl::Span<const char> bytes);

// The two buckets a key may live in (distinct when bucket_count > 1).
struct BucketPair {
  uint64_t first;
  uint64_t second;
};
BucketPair BucketsFor(const KeyHash& hash, uint64_t bucket_count);
uint8_t Fingerprint(const KeyHash& hash);

// Slot encoding.
struct Slot {
  uint8_t fingerprint = 0;
  uint64_t size_bound = 0;  // >= the object's size, <= 1.125x of it
  uint64_t offset = 0;      // bytes from the pool start
};
// REQUIRES: offset % kObjectAlign == 0, 0 < offset < kMaxPoolBytes.
uint64_t EncodeSlot(uint8_t fingerprint, uint64_t object_bytes,
                    uint64_t offset);
// REQUIRES: word != 0.
Slot DecodeSlot(uint64_t word);
// Size bound a slot records for an object of `object_bytes`.
uint64_t SlotSizeBound(uint64_t object_bytes);

// The map epoch an object records is 48 bits wide (ObjectMapEpoch).
inline constexpr uint64_t kMaxObjectMapEpoch = (uint64_t{1} << 48) - 1;

struct ObjectHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t map_epoch_high;  // bits 32..47 of the writer's map epoch
  uint32_t key_length;
  uint32_t map_epoch_low;  // bits 0..31
  uint64_t value_length;
  uint64_t key_hash_lo;
  uint64_t key_hash_hi;
  uint64_t incarnation;      // the node's; a restarted node's objects differ
  uint64_t sequence;         // writer's sequence number, for diagnostics
  uint64_t header_checksum;  // XXH3-64 of the 56 bytes above
};
static_assert(sizeof(ObjectHeader) == kObjectHeaderBytes);

// The cluster map epoch the object's writer routed its key by (0: written
// outside a cluster, or by a writer that had no map). Readers compare it
// with placement::OldestCurrentObjectEpoch.
uint64_t ObjectMapEpoch(const ObjectHeader& header);

uint64_t DigestCount(uint64_t value_length);
// Total bytes of an object, padded to kObjectAlign.
uint64_t ObjectBytes(uint64_t key_length, uint64_t value_length);
// Byte offset of the value inside an object.
uint64_t ValueOffset(uint64_t key_length);

// Byte offset of the digests inside an object.
uint64_t DigestOffset(uint64_t key_length, uint64_t value_length);

// Writes a complete object into `dst` (REQUIRES: dst.size() >=
// ObjectBytes(key.size(), value.size())). `map_epoch`: the map the writer
// routed the key by (ObjectMapEpoch; REQUIRES: at most
// kMaxObjectMapEpoch).
// `hash` is the key's (HashKey, in its space).
void EncodeObject(absl::Span<char> dst, absl::string_view key,
                  const KeyHash& hash, absl::string_view value,
                  uint64_t incarnation, uint64_t sequence,
                  uint64_t map_epoch = 0);

// The pieces of EncodeObject, for writers that gather the value straight
// from the caller's memory: the header and padded key (ValueOffset(key)
// bytes; returns the header checksum), and the digests
// (8 * DigestCount(value.size()) bytes, to go at DigestOffset).
uint64_t EncodeObjectPrefix(absl::Span<char> dst, absl::string_view key,
                            const KeyHash& hash, uint64_t value_length,
                            uint64_t incarnation, uint64_t sequence,
                            uint64_t map_epoch = 0);
void EncodeDigests(absl::string_view value, uint64_t header_checksum,
                   absl::Span<char> dst);

// What a verifier found in bytes read from a slot. Not an error: each is a
// normal result of reading memory that writers change under the reader.
enum class Verdict {
  kValid,     // the key's published object (or, for VerifyValue, its value)
  kOtherKey,  // another key's object (fingerprint or 128-bit collision)
  kStale,     // torn, reused, or from another incarnation: re-read the index
  kShort,     // the bytes end before the header, key or object does
};
// A few words for messages and test output ("valid", "stale", ...).
absl::string_view VerdictName(Verdict v);

// Checks bytes read from a slot's offset against the key the reader wants.
// When kValid, *value points into `bytes`. kShort should not happen when the
// reader fetched the slot's size bound.
Verdict VerifyObject(absl::Span<const char> bytes, absl::string_view key,
                     const KeyHash& hash, uint64_t incarnation,
                     absl::string_view* value);

// Checks only the header and key of an object (`bytes` holds at least
// ValueOffset(key.size()) bytes from its start): kValid when it is a
// published object of `key`. Enough to decide which slot holds a key, since
// objects are complete before they are published.
// When kValid and `header` is not null, *header is the object's header.
Verdict VerifyHeaderAndKey(absl::Span<const char> bytes, absl::string_view key,
                           const KeyHash& hash, uint64_t incarnation,
                           ObjectHeader* header = nullptr);

// Checks a value fetched apart from its header against the object's digests
// (read from DigestOffset): kValid, kStale when they disagree (torn or
// reused), kShort when the spans are shorter than the header says.
Verdict VerifyValue(const ObjectHeader& header, absl::Span<const char> value,
                    absl::Span<const char> digests);

}  // namespace meshpool::format

#endif  // MESHPOOL_FORMAT_LAYOUT_H_
