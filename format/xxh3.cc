// XXH3 through libxxhash's x86 dispatcher (Debian's libxxhash exports the
// *_dispatch entry points; they choose AVX-512, AVX2 or SSE2 at the first
// call). The inline build in layout.cc is compiled for the baseline
// x86-64 (SSE2): on a 4 KiB value it costs about twice the instructions.
// This file includes xxhash.h without XXH_INLINE_ALL so that the library's
// functions are the ones called.
#include "format/xxh3.h"

#if defined(__x86_64__) && __has_include(<xxh_x86dispatch.h>)
#define XXH_DISPATCH_DISABLE_REPLACE
#include <xxh_x86dispatch.h>
#define MESHPOOL_XXH3_DISPATCH 1
#else
#include <xxhash.h>
#endif

namespace meshpool::format::internal {

uint64_t Xxh3WithSeed(const void* data, size_t length, uint64_t seed) {
#ifdef MESHPOOL_XXH3_DISPATCH
  if (length >= kDispatchMinBytes) {
    return XXH3_64bits_withSeed_dispatch(data, length, seed);
  }
#endif
  return XXH3_64bits_withSeed(data, length, seed);
}

}  // namespace meshpool::format::internal
