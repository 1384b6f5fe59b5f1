// store/layout: slot encoding, layout computation, object encode/verify.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "store/layout.h"

namespace meshpool::store {
namespace {

// The slot promises: the bound covers the object and over-approximates the
// object's 64-byte-rounded size by at most 1/8.
bool BoundIsTight(uint64_t size, uint64_t bound) {
  uint64_t rounded = (size + kObjectAlign - 1) / kObjectAlign * kObjectAlign;
  return bound >= size && bound * 8 <= rounded * 9;
}

// Random per run; MESHPOOL_SEED=<n> replays a printed seed.
uint64_t TestSeed() {
  const char* fixed = std::getenv("MESHPOOL_SEED");
  uint64_t seed = fixed != nullptr ? std::strtoull(fixed, nullptr, 10)
                                   : std::random_device{}();
  std::cout << "seed=" << seed << std::endl;
  return seed;
}

std::vector<char> Encode(absl::string_view key, absl::string_view value,
                         uint64_t incarnation) {
  std::vector<char> bytes(ObjectBytes(key.size(), value.size()));
  EncodeObject(absl::MakeSpan(bytes), key, value, incarnation, 7);
  return bytes;
}

TEST(StoreLayout, SlotRoundTripsRandomFingerprintSizeAndOffset) {
  std::mt19937_64 rng(TestSeed());
  for (int i = 0; i < 100000; ++i) {
    uint8_t fingerprint = static_cast<uint8_t>(rng());
    uint64_t size = 1 + rng() % (uint64_t{1} << (1 + rng() % 36));
    uint64_t offset = kObjectAlign * (1 + rng() % ((kMaxPoolBytes / kObjectAlign) - 1));
    uint64_t word = EncodeSlot(fingerprint, size, offset);
    ASSERT_NE(word, 0u);
    Slot slot = DecodeSlot(word);
    ASSERT_EQ(slot.fingerprint, fingerprint) << "size=" << size;
    ASSERT_EQ(slot.offset, offset) << "size=" << size;
    ASSERT_EQ(slot.size_bound, SlotSizeBound(size));
    ASSERT_TRUE(BoundIsTight(size, slot.size_bound))
        << "size=" << size << " bound=" << slot.size_bound;
  }
}

TEST(StoreLayout, SizeBoundIsTightForEveryObjectSizeUpTo4MiB) {
  for (uint64_t size = 1; size <= (4u << 20); size += 61) {
    uint64_t bound = SlotSizeBound(size);
    ASSERT_TRUE(BoundIsTight(size, bound)) << "size=" << size << " bound=" << bound;
    ASSERT_EQ(bound % kObjectAlign, 0u);
  }
}

TEST(StoreLayout, ComputeLayoutRejectsPoolTooSmallForIndexAndTwoSlabs) {
  absl::StatusOr<PoolLayout> layout = ComputeLayout(64 << 10);
  EXPECT_EQ(layout.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(layout.status().message().find("capacity"), std::string::npos);
}

TEST(StoreLayout, ComputeLayoutRejectsUnalignedSlabSize) {
  EXPECT_EQ(ComputeLayout(64 << 20, 4096 + 8).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(StoreLayout, ComputeLayoutRejectsPoolBeyondSlotAddressing) {
  EXPECT_EQ(ComputeLayout(kMaxPoolBytes + 1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(StoreLayout, DefaultLayoutPlacesIndexAfterSuperblockAndSlabsAfterIndex) {
  absl::StatusOr<PoolLayout> layout = ComputeLayout(256ull << 20);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->index_offset, kSuperblockBytes);
  EXPECT_EQ(layout->bucket_count, (256ull << 20) / 4096);
  EXPECT_EQ(layout->slab_bytes, 16ull << 20);
  EXPECT_GE(layout->slab_area_offset,
            layout->index_offset + layout->bucket_count * kBucketBytes);
  EXPECT_LE(layout->slab_offset(layout->slab_count), layout->pool_bytes);
  EXPECT_EQ(layout->slab_of(layout->slab_area_offset), 0u);
  EXPECT_EQ(layout->slab_of(layout->slab_offset(3) + 100), 3u);
  EXPECT_EQ(layout->slab_of(layout->index_offset), layout->slab_count);
  EXPECT_EQ(layout->slab_of(layout->pool_bytes + 64), layout->slab_count);
}

TEST(StoreLayout, ObjectsOfEveryShapeVerify) {
  std::mt19937_64 rng(TestSeed());
  const uint64_t incarnation = 0x1234;
  for (size_t size : {size_t{0}, size_t{1}, size_t{100}, size_t{1} << 20,
                      (size_t{5} << 20) / 2}) {
    std::string key = "key-" + std::to_string(size);
    std::string value(size, '\0');
    for (char& c : value) c = static_cast<char>(rng());
    std::vector<char> bytes = Encode(key, value, incarnation);
    ASSERT_EQ(bytes.size() % kObjectAlign, 0u);
    ASSERT_LE(bytes.size(), SlotSizeBound(bytes.size()));
    absl::string_view got;
    ASSERT_TRUE(VerifyObject(bytes, key, HashKey(key), incarnation, &got).ok())
        << "size=" << size;
    EXPECT_EQ(got, value) << "size=" << size;
    EXPECT_TRUE(VerifyHeaderAndKey(bytes, key, HashKey(key), incarnation).ok());
  }
}

TEST(StoreLayout, EveryFlippedByteOfSmallObjectIsCaught) {
  const std::string key = "flip-me";
  const std::string value = "a value of some length, 41 bytes long..!";
  const uint64_t incarnation = 99;
  const std::vector<char> good = Encode(key, value, incarnation);
  // Header, key, value and digest; padding after the key and value is not
  // covered (and not part of the object's meaning).
  std::vector<size_t> covered;
  for (size_t i = 0; i < kObjectHeaderBytes + key.size(); ++i) covered.push_back(i);
  const size_t value_off = ValueOffset(key.size());
  for (size_t i = 0; i < value.size(); ++i) covered.push_back(value_off + i);
  const size_t digest_off = value_off + (value.size() + 7) / 8 * 8;
  for (size_t i = 0; i < 8; ++i) covered.push_back(digest_off + i);
  for (size_t i : covered) {
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<char> bad = good;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      absl::string_view got;
      absl::Status s = VerifyObject(bad, key, HashKey(key), incarnation, &got);
      ASSERT_TRUE(s.code() == absl::StatusCode::kAborted ||
                  s.code() == absl::StatusCode::kNotFound)
          << "byte " << i << " bit " << bit << ": " << s;
    }
  }
}

TEST(StoreLayout, ObjectOfAnotherIncarnationIsAborted) {
  std::vector<char> bytes = Encode("k", "v", 1);
  absl::string_view got;
  EXPECT_EQ(VerifyObject(bytes, "k", HashKey("k"), 2, &got).code(),
            absl::StatusCode::kAborted);
}

TEST(StoreLayout, DifferentKeyOfSameLengthIsNotFound) {
  std::vector<char> bytes = Encode("key-a", "value", 1);
  absl::string_view got;
  EXPECT_EQ(VerifyObject(bytes, "key-b", HashKey("key-b"), 1, &got).code(),
            absl::StatusCode::kNotFound);
}

TEST(StoreLayout, SameHashButDifferentKeyBytesIsNotFound) {
  // A reader passing the stored key's hash with other bytes of equal length
  // (a 128-bit collision) still gets NotFound from the byte comparison.
  std::vector<char> bytes = Encode("key-a", "value", 1);
  absl::string_view got;
  EXPECT_EQ(VerifyObject(bytes, "key-b", HashKey("key-a"), 1, &got).code(),
            absl::StatusCode::kNotFound);
}

TEST(StoreLayout, TruncatedReadIsOutOfRange) {
  std::string value(5000, 'x');
  std::vector<char> bytes = Encode("k", value, 1);
  absl::string_view got;
  EXPECT_EQ(VerifyObject(absl::MakeSpan(bytes.data(), 1000), "k", HashKey("k"),
                         1, &got)
                .code(),
            absl::StatusCode::kOutOfRange);
}

TEST(StoreLayout, BucketsForGivesTwoDistinctBucketsInRange) {
  std::mt19937_64 rng(TestSeed());
  for (int i = 0; i < 10000; ++i) {
    uint64_t count = 2 + rng() % 5000;
    KeyHash h = HashKey(std::to_string(rng()));
    BucketPair p = BucketsFor(h, count);
    ASSERT_LT(p.first, count);
    ASSERT_LT(p.second, count);
    ASSERT_NE(p.first, p.second);
  }
}

TEST(StoreLayout, GatheredPiecesMatchTheWholeObjectAndVerifyApart) {
  const std::string key = "gather";
  for (size_t size : {size_t{0}, size_t{13}, size_t{(1 << 20) + 5}}) {
    std::string value(size, 'g');
    for (size_t i = 0; i < size; ++i) value[i] = static_cast<char>(i * 31);
    std::vector<char> whole(ObjectBytes(key.size(), size));
    EncodeObject(absl::MakeSpan(whole), key, value, 9, 4);
    std::vector<char> prefix(ValueOffset(key.size()));
    uint64_t checksum =
        EncodeObjectPrefix(absl::MakeSpan(prefix), key, size, 9, 4);
    std::vector<char> digests(8 * DigestCount(size));
    EncodeDigests(value, checksum, absl::MakeSpan(digests));
    EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), whole.begin()));
    EXPECT_TRUE(std::equal(digests.begin(), digests.end(),
                           whole.begin() + DigestOffset(key.size(), size)));

    ObjectHeader header;
    ASSERT_TRUE(VerifyHeaderAndKey(absl::MakeConstSpan(prefix), key,
                                   HashKey(key), 9, &header)
                    .ok());
    EXPECT_EQ(header.value_length, size);
    EXPECT_TRUE(VerifyValue(header, value, digests).ok());
    if (size > 0) {
      value[size / 2] ^= 1;
      EXPECT_EQ(VerifyValue(header, value, digests).code(),
                absl::StatusCode::kAborted);
    }
    EXPECT_EQ(VerifyValue(header, absl::string_view(value).substr(0, size / 2),
                          digests)
                  .code(),
              size == 0 ? absl::StatusCode::kOk : absl::StatusCode::kOutOfRange);
  }
}

}  // namespace
}  // namespace meshpool::store
