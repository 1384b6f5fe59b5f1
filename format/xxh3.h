// meshpool/format: internal to format/. XXH3-64 of long inputs through
// libxxhash's runtime dispatch, for the value digests every GET, PUT,
// weights load and DigestRanges computes.
//
// Thread-safe: a pure function (the dispatcher picks its code once).
#ifndef MESHPOOL_FORMAT_XXH3_H_
#define MESHPOOL_FORMAT_XXH3_H_

#include <cstddef>
#include <cstdint>

namespace meshpool::format::internal {

// Inputs at least this long go through the dispatcher; shorter ones are
// hashed inline (XXH3's short paths use no vector code, and a call through
// the dispatcher's pointer would cost more than it saves).
inline constexpr size_t kDispatchMinBytes = 1024;

// XXH3_64bits_withSeed(data, length, seed), computed with the widest
// vector unit the CPU has (AVX-512, AVX2 or SSE2 on x86-64; the portable
// code elsewhere). The same value on every machine: XXH3's result does not
// depend on how it is vectorised.
uint64_t Xxh3WithSeed(const void* data, size_t length, uint64_t seed);

}  // namespace meshpool::format::internal

#endif  // MESHPOOL_FORMAT_XXH3_H_
