// format/layout: slot encoding, layout computation, object encode/verify.
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "format/layout.h"
#include "format/xxh3.h"
#include "gtest/gtest.h"
#include "tests/test_seed.h"

namespace meshpool::format {
namespace {

// The slot promises: the bound covers the object and over-approximates the
// object's 64-byte-rounded size by at most 1/8.
bool BoundIsTight(uint64_t size, uint64_t bound) {
  uint64_t rounded = (size + format::kObjectAlign - 1) / format::kObjectAlign * format::kObjectAlign;
  return bound >= size && bound * 8 <= rounded * 9;
}

using testing::TestSeed;

std::vector<char> Encode(absl::string_view key, absl::string_view value,
                         uint64_t incarnation) {
  std::vector<char> bytes(format::ObjectBytes(key.size(), value.size()));
  format::EncodeObject(absl::MakeSpan(bytes), key, format::HashKey(key), value,
                       incarnation, 7);
  return bytes;
}

TEST(FormatLayout, SlotRoundTripsRandomFingerprintSizeAndOffset) {
  std::mt19937_64 rng(TestSeed());
  for (int i = 0; i < 100000; ++i) {
    uint8_t fingerprint = static_cast<uint8_t>(rng());
    uint64_t size = 1 + rng() % (uint64_t{1} << (1 + rng() % 36));
    uint64_t offset =
        format::kObjectAlign * (1 + rng() % ((format::kMaxPoolBytes / format::kObjectAlign) - 1));
    uint64_t word = format::EncodeSlot(fingerprint, size, offset);
    ASSERT_NE(word, 0u);
    format::Slot slot = format::DecodeSlot(word);
    ASSERT_EQ(slot.fingerprint, fingerprint) << "size=" << size;
    ASSERT_EQ(slot.offset, offset) << "size=" << size;
    ASSERT_EQ(slot.size_bound, format::SlotSizeBound(size));
    ASSERT_TRUE(BoundIsTight(size, slot.size_bound))
        << "size=" << size << " bound=" << slot.size_bound;
  }
}

TEST(FormatLayout, SizeBoundIsTightForEveryObjectSizeUpTo4MiB) {
  for (uint64_t size = 1; size <= (4u << 20); size += 61) {
    uint64_t bound = format::SlotSizeBound(size);
    ASSERT_TRUE(BoundIsTight(size, bound))
        << "size=" << size << " bound=" << bound;
    ASSERT_EQ(bound % format::kObjectAlign, 0u);
  }
}

TEST(FormatLayout, ComputeLayoutRejectsPoolTooSmallForIndexAndTwoSlabs) {
  absl::StatusOr<format::PoolLayout> layout = format::ComputeLayout(64 << 10);
  EXPECT_EQ(layout.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(layout.status().message().find("larger pool"), std::string::npos);
}

TEST(FormatLayout, ValidateLayoutAcceptsEveryComputedLayout) {
  for (uint64_t pool : {uint64_t{8} << 20, uint64_t{64} << 20,
                        uint64_t{3} << 30, uint64_t{1} << 40}) {
    for (uint64_t slab : {uint64_t{0}, uint64_t{1} << 20}) {
      absl::StatusOr<format::PoolLayout> l = format::ComputeLayout(pool, slab);
      ASSERT_TRUE(l.ok()) << pool << ": " << l.status();
      EXPECT_TRUE(format::ValidateLayout(*l, pool).ok())
          << pool << ": " << format::ValidateLayout(*l, pool);
    }
  }
}

TEST(FormatLayout, ValidateLayoutRefusesLayoutsThatDoNotFitTheirPool) {
  absl::StatusOr<format::PoolLayout> good = format::ComputeLayout(64 << 20);
  ASSERT_TRUE(good.ok());
  const uint64_t pool = good->pool_bytes;
  struct Case {
    const char* what;
    std::function<void(format::PoolLayout&)> change;
    uint64_t region = 0;  // 0: the pool's own length
  };
  const Case cases[] = {
      {"slab count in the trillions",
       [](format::PoolLayout& l) { l.slab_count = uint64_t{1} << 40; }},
      {"slabs past the pool's end",
       [](format::PoolLayout& l) { l.slab_count += 1; }},
      {"an index whose size overflows",
       [](format::PoolLayout& l) { l.bucket_count = ~uint64_t{0} / 8; }},
      {"the slab table inside the index",
       [](format::PoolLayout& l) { l.slab_meta_offset = l.index_offset; }},
      {"a pool larger than its region", [](format::PoolLayout&) {}, pool / 2},
      {"a pool beyond slot addressing",
       [](format::PoolLayout& l) { l.pool_bytes = format::kMaxPoolBytes * 2; },
       format::kMaxPoolBytes * 2},
      {"zero slab bytes", [](format::PoolLayout& l) { l.slab_bytes = 0; }},
      {"unaligned slabs",
       [](format::PoolLayout& l) { l.slab_area_offset += 8; }},
      {"pin tables in the trillions",
       [](format::PoolLayout& l) { l.pin_sessions = uint64_t{1} << 40; }},
      {"no buckets", [](format::PoolLayout& l) { l.bucket_count = 0; }},
  };
  for (const Case& c : cases) {
    format::PoolLayout l = *good;
    c.change(l);
    const absl::Status s =
        format::ValidateLayout(l, c.region != 0 ? c.region : pool);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_NE(s.message().find("refusing to use it"), std::string::npos)
        << c.what << ": " << s;
  }
}

TEST(FormatLayout, ComputeLayoutRejectsUnalignedSlabSize) {
  EXPECT_EQ(format::ComputeLayout(64 << 20, 4096 + 8).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(FormatLayout, ComputeLayoutRejectsPoolBeyondSlotAddressing) {
  EXPECT_EQ(format::ComputeLayout(format::kMaxPoolBytes + 1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(FormatLayout, DefaultLayoutPlacesIndexAfterSuperblockAndSlabsAfterIndex) {
  absl::StatusOr<format::PoolLayout> layout = format::ComputeLayout(256ull << 20);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->index_offset, format::kSuperblockBytes);
  EXPECT_EQ(layout->bucket_count, (256ull << 20) / 4096);
  EXPECT_EQ(layout->slab_bytes, 4ull << 20);  // pool / 64
  EXPECT_GE(layout->slab_area_offset,
            layout->index_offset + layout->bucket_count * format::kBucketBytes);
  EXPECT_LE(layout->slab_offset(layout->slab_count), layout->pool_bytes);
  EXPECT_EQ(layout->slab_of(layout->slab_area_offset), 0u);
  EXPECT_EQ(layout->slab_of(layout->slab_offset(3) + 100), 3u);
  EXPECT_EQ(layout->slab_of(layout->index_offset), layout->slab_count);
  EXPECT_EQ(layout->slab_of(layout->pool_bytes + 64), layout->slab_count);
}

// The areas of a v2 layout, in pool order: [begin, end) each.
void ExpectAreasAlignedAndDisjoint(const format::PoolLayout& l) {
  struct Area {
    const char* name;
    uint64_t begin;
    uint64_t end;
  };
  const Area areas[] = {
      {"superblock", 0, format::kSuperblockBytes},
      {"index", l.index_offset, l.index_offset + l.bucket_count * format::kBucketBytes},
      {"slab table", l.slab_meta_offset,
       l.slab_meta_offset + l.slab_count * format::kSlabMetaBytes},
      {"pin area", l.pin_area_offset,
       l.pin_area_offset +
           l.pin_sessions * l.pins_per_session * format::kPinEntryBytes},
      {"slabs", l.slab_area_offset, l.slab_offset(l.slab_count)},
  };
  for (size_t i = 0; i < std::size(areas); ++i) {
    EXPECT_EQ(areas[i].begin % 4096, 0u) << areas[i].name;
    EXPECT_LE(areas[i].begin, areas[i].end) << areas[i].name;
    if (i > 0) {
      EXPECT_GE(areas[i].begin, areas[i - 1].end)
          << areas[i].name << " overlaps " << areas[i - 1].name;
    }
  }
  EXPECT_LE(areas[std::size(areas) - 1].end, l.pool_bytes);
  EXPECT_EQ(l.slab_meta(l.slab_count), areas[2].end);
  EXPECT_EQ(l.pin_entry(l.pin_area_entries()), areas[3].end);
}

TEST(FormatLayout, V2AreasAreAlignedAndDisjointForManyPoolSizes) {
  for (uint64_t pool :
       {uint64_t{4} << 20, uint64_t{8} << 20, (uint64_t{12} << 20) + 4096 * 3,
        uint64_t{256} << 20, uint64_t{1} << 30, uint64_t{64} << 30}) {
    SCOPED_TRACE(pool);
    absl::StatusOr<format::PoolLayout> layout = format::ComputeLayout(pool);
    ASSERT_TRUE(layout.ok()) << layout.status();
    ExpectAreasAlignedAndDisjoint(*layout);
    // The default sessions, or fewer when their tables would take over
    // 1/64 of the pool.
    EXPECT_LE(layout->pin_sessions, format::kDefaultPinSessions);
    EXPECT_EQ(std::popcount(layout->pin_sessions), 1);
    if (layout->pin_sessions < format::kDefaultPinSessions) {
      EXPECT_LE(layout->pin_area_entries() * format::kPinEntryBytes, pool / 64);
    }
    EXPECT_GE(layout->pins_per_session, format::kMinPinsPerSession);
    EXPECT_LE(layout->pins_per_session, format::kMaxPinsPerSession);
    EXPECT_EQ(std::popcount(layout->pins_per_session), 1);
    // No slab more fits (its table entry may need another page).
    const uint64_t n = layout->slab_count + 1;
    const uint64_t pin_bytes =
        layout->slab_area_offset - layout->pin_area_offset;
    const uint64_t table_bytes = (n * format::kSlabMetaBytes + 4095) / 4096 * 4096;
    EXPECT_GT(layout->slab_meta_offset + table_bytes + pin_bytes +
                  n * layout->slab_bytes,
              layout->pool_bytes);
  }
}

TEST(FormatLayout, PinAreaDefaultsFollowThePoolSizeWithinBounds) {
  absl::StatusOr<format::PoolLayout> small = format::ComputeLayout(8 << 20);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(small->pins_per_session, format::kMinPinsPerSession);
  // 8 MiB / 64 / (16 B x 64 pins): 128 tables, not 4,096.
  EXPECT_EQ(small->pin_sessions, 128u);
  absl::StatusOr<format::PoolLayout> gib = format::ComputeLayout(uint64_t{1} << 30);
  ASSERT_TRUE(gib.ok()) << gib.status();
  // 1 GiB / 64 / (16 B x 4,096 sessions) = 256 entries each.
  EXPECT_EQ(gib->pin_sessions, format::kDefaultPinSessions);
  EXPECT_EQ(gib->pins_per_session, 256u);
  absl::StatusOr<format::PoolLayout> huge = format::ComputeLayout(uint64_t{1} << 40);
  ASSERT_TRUE(huge.ok()) << huge.status();
  EXPECT_EQ(huge->pins_per_session, format::kMaxPinsPerSession);
  EXPECT_EQ(huge->pin_sessions, format::kDefaultPinSessions);
  // Explicit table sizes with default sessions: as many as 1/64 holds.
  absl::StatusOr<format::PoolLayout> wide =
      format::ComputeLayout(uint64_t{1} << 30, 0, 0, 0, 16384);
  ASSERT_TRUE(wide.ok()) << wide.status();
  EXPECT_EQ(wide->pin_sessions, 64u);
  absl::StatusOr<format::PoolLayout> chosen = format::ComputeLayout(8 << 20, 0, 0, 3, 100);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_EQ(chosen->pin_sessions, 3u);
  EXPECT_EQ(chosen->pins_per_session, 100u);
  ExpectAreasAlignedAndDisjoint(*chosen);
}

TEST(FormatLayout, SmallPoolWithSmallPinAreaStillLaysOut) {
  // Four 4 KiB slabs behind one page each of index, slab table, pin area.
  const uint64_t pool = format::kSuperblockBytes + 3 * 4096 + 4 * 4096;
  absl::StatusOr<format::PoolLayout> layout = format::ComputeLayout(pool, 4096, 16, 2, 16);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->slab_count, 4u);
  ExpectAreasAlignedAndDisjoint(*layout);
  // One page less: three slabs.
  layout = format::ComputeLayout(pool - 4096, 4096, 16, 2, 16);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->slab_count, 3u);
  ExpectAreasAlignedAndDisjoint(*layout);
}

TEST(FormatLayout, SlabTableGrowsByPagesAsSlabsAreAdded) {
  // 300 slabs need 4800 bytes of table: two pages.
  const uint64_t pool = format::kSuperblockBytes + 4096 + 2 * 4096 + 4096 + 300 * 4096;
  absl::StatusOr<format::PoolLayout> layout = format::ComputeLayout(pool, 4096, 16, 1, 16);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->slab_count, 300u);
  EXPECT_EQ(layout->pin_area_offset - layout->slab_meta_offset, 2 * 4096u);
  ExpectAreasAlignedAndDisjoint(*layout);
}

TEST(FormatLayout, PinAreaThatCannotFitIsInvalidArgument) {
  absl::StatusOr<format::PoolLayout> layout =
      format::ComputeLayout(8 << 20, 0, 0, 1u << 20, 1u << 20);
  EXPECT_EQ(layout.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(layout.status().message().find("pin tables"), std::string::npos)
      << layout.status();
  // Fits alone, but leaves no room for two slabs.
  layout = format::ComputeLayout(8 << 20, 1 << 20, 0, 64, 7000);
  EXPECT_EQ(layout.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(layout.status().message().find("larger pool"), std::string::npos);
}

TEST(FormatLayout, ObjectsOfEveryShapeVerify) {
  std::mt19937_64 rng(TestSeed());
  const uint64_t incarnation = 0x1234;
  for (size_t size : {size_t{0}, size_t{1}, size_t{100}, size_t{1} << 20,
                      (size_t{5} << 20) / 2}) {
    std::string key = "key-" + std::to_string(size);
    std::string value(size, '\0');
    for (char& c : value) c = static_cast<char>(rng());
    std::vector<char> bytes = Encode(key, value, incarnation);
    ASSERT_EQ(bytes.size() % format::kObjectAlign, 0u);
    ASSERT_LE(bytes.size(), format::SlotSizeBound(bytes.size()));
    absl::string_view got;
    ASSERT_EQ(format::VerifyObject(bytes, key, format::HashKey(key), incarnation, &got),
              format::Verdict::kValid)
        << "size=" << size;
    EXPECT_EQ(got, value) << "size=" << size;
    EXPECT_EQ(format::VerifyHeaderAndKey(bytes, key, format::HashKey(key), incarnation),
              format::Verdict::kValid);
  }
}

TEST(FormatLayout, EveryFlippedByteOfSmallObjectIsCaught) {
  const std::string key = "flip-me";
  const std::string value = "a value of some length, 41 bytes long..!";
  const uint64_t incarnation = 99;
  const std::vector<char> good = Encode(key, value, incarnation);
  // Header, key, value and digest; padding after the key and value is not
  // covered (and not part of the object's meaning).
  std::vector<size_t> covered;
  for (size_t i = 0; i < format::kObjectHeaderBytes + key.size(); ++i)
    covered.push_back(i);
  const size_t value_off = format::ValueOffset(key.size());
  for (size_t i = 0; i < value.size(); ++i) covered.push_back(value_off + i);
  const size_t digest_off = value_off + (value.size() + 7) / 8 * 8;
  for (size_t i = 0; i < 8; ++i) covered.push_back(digest_off + i);
  for (size_t i : covered) {
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<char> bad = good;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      absl::string_view got;
      format::Verdict v = format::VerifyObject(bad, key, format::HashKey(key), incarnation, &got);
      ASSERT_TRUE(v == format::Verdict::kStale || v == format::Verdict::kOtherKey)
          << "byte " << i << " bit " << bit << ": " << format::VerdictName(v);
    }
  }
}

TEST(FormatLayout, ObjectOfAnotherIncarnationIsStale) {
  std::vector<char> bytes = Encode("k", "v", 1);
  absl::string_view got;
  EXPECT_EQ(format::VerifyObject(bytes, "k", format::HashKey("k"), 2, &got),
            format::Verdict::kStale);
}

TEST(FormatLayout, DifferentKeyOfSameLengthIsAnotherKey) {
  std::vector<char> bytes = Encode("key-a", "value", 1);
  absl::string_view got;
  EXPECT_EQ(format::VerifyObject(bytes, "key-b", format::HashKey("key-b"), 1, &got),
            format::Verdict::kOtherKey);
}

TEST(FormatLayout, SameHashButDifferentKeyBytesIsAnotherKey) {
  // A reader passing the stored key's hash with other bytes of equal length
  // (a 128-bit collision) is still another key's object by the byte comparison.
  std::vector<char> bytes = Encode("key-a", "value", 1);
  absl::string_view got;
  EXPECT_EQ(format::VerifyObject(bytes, "key-b", format::HashKey("key-a"), 1, &got),
            format::Verdict::kOtherKey);
}

TEST(FormatLayout, TruncatedReadIsShort) {
  std::string value(5000, 'x');
  std::vector<char> bytes = Encode("k", value, 1);
  absl::string_view got;
  EXPECT_EQ(format::VerifyObject(absl::MakeSpan(bytes.data(), 1000), "k", format::HashKey("k"),
                                 1, &got),
            format::Verdict::kShort);
}

TEST(FormatLayout, BucketsForGivesTwoDistinctBucketsInRange) {
  std::mt19937_64 rng(TestSeed());
  for (int i = 0; i < 10000; ++i) {
    uint64_t count = 2 + rng() % 5000;
    format::KeyHash h = format::HashKey(std::to_string(rng()));
    format::BucketPair p = format::BucketsFor(h, count);
    ASSERT_LT(p.first, count);
    ASSERT_LT(p.second, count);
    ASSERT_NE(p.first, p.second);
  }
}

TEST(FormatLayout, GatheredPiecesMatchTheWholeObjectAndVerifyApart) {
  const std::string key = "gather";
  for (size_t size : {size_t{0}, size_t{13}, size_t{(1 << 20) + 5}}) {
    std::string value(size, 'g');
    for (size_t i = 0; i < size; ++i) value[i] = static_cast<char>(i * 31);
    std::vector<char> whole(format::ObjectBytes(key.size(), size));
    format::EncodeObject(absl::MakeSpan(whole), key, format::HashKey(key),
                         value, 9, 4);
    std::vector<char> prefix(format::ValueOffset(key.size()));
    uint64_t checksum = format::EncodeObjectPrefix(
        absl::MakeSpan(prefix), key, format::HashKey(key), size, 9, 4);
    std::vector<char> digests(8 * format::DigestCount(size));
    format::EncodeDigests(value, checksum, absl::MakeSpan(digests));
    EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), whole.begin()));
    EXPECT_TRUE(std::equal(digests.begin(), digests.end(),
                           whole.begin() + format::DigestOffset(key.size(), size)));

    format::ObjectHeader header;
    ASSERT_EQ(format::VerifyHeaderAndKey(absl::MakeConstSpan(prefix), key, format::HashKey(key),
                                         9, &header),
              format::Verdict::kValid);
    EXPECT_EQ(header.value_length, size);
    EXPECT_EQ(format::VerifyValue(header, value, digests), format::Verdict::kValid);
    if (size > 0) {
      value[size / 2] ^= 1;
      EXPECT_EQ(format::VerifyValue(header, value, digests), format::Verdict::kStale);
    }
    EXPECT_EQ(format::VerifyValue(header, absl::string_view(value).substr(0, size / 2), digests),
              size == 0 ? format::Verdict::kValid : format::Verdict::kShort);
  }
}

}  // namespace
TEST(FormatLayout, AnObjectRecordsItsMapEpochUnderTheHeaderChecksum) {
  const std::string key = "epoch";
  for (uint64_t epoch : {uint64_t{0}, uint64_t{7}, (uint64_t{1} << 32) + 3,
                         format::kMaxObjectMapEpoch}) {
    std::vector<char> bytes(format::ObjectBytes(key.size(), 10));
    format::EncodeObject(absl::MakeSpan(bytes), key, format::HashKey(key),
                         "0123456789", 1, 2, epoch);
    format::ObjectHeader header;
    ASSERT_EQ(format::VerifyHeaderAndKey(bytes, key, format::HashKey(key), 1,
                                         &header),
              format::Verdict::kValid);
    EXPECT_EQ(format::ObjectMapEpoch(header), epoch);
    // The epoch's bytes are covered: a changed epoch is a torn header.
    bytes[offsetof(format::ObjectHeader, map_epoch_low)] ^= 1;
    EXPECT_EQ(format::VerifyHeaderAndKey(bytes, key, format::HashKey(key), 1),
              format::Verdict::kStale);
  }
  std::vector<char> bytes(format::ObjectBytes(key.size(), 1));
  format::EncodeObject(absl::MakeSpan(bytes), key, format::HashKey(key), "x", 1,
                       2, format::kMaxObjectMapEpoch + 5);
  format::ObjectHeader header;
  std::memcpy(&header, bytes.data(), sizeof(header));
  EXPECT_EQ(format::ObjectMapEpoch(header), format::kMaxObjectMapEpoch)
      << "past 48 bits it records the largest, never a wrapped older one";
}

// The dispatched XXH3 (AVX-512 or AVX2 where the CPU has them) must give
// exactly what the portable one gives: objects written by one machine are
// verified by another.
TEST(FormatLayout, DispatchedDigestsEqualThePortableXxh3AtEveryLength) {
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  std::string bytes(300000, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 4200; n += 1 + n / 8) lengths.push_back(n);
  for (int i = 0; i < 200; ++i) lengths.push_back(rng() % bytes.size());
  lengths.push_back(bytes.size());
  for (size_t length : lengths) {
    const size_t offset =
        length < bytes.size() ? rng() % (bytes.size() - length + 1) : 0;
    const uint64_t digest_seed = rng();
    ASSERT_EQ(format::internal::Xxh3WithSeed(bytes.data() + offset, length,
                                             digest_seed),
              XXH3_64bits_withSeed(bytes.data() + offset, length, digest_seed))
        << "length " << length << " offset " << offset;
    ASSERT_EQ(
        format::DigestBytes(absl::MakeConstSpan(bytes.data() + offset, length)),
        XXH3_64bits(bytes.data() + offset, length));
  }
}

}  // namespace meshpool::format
