// store/ micro-benchmarks: the client-side index lookup arithmetic, slab
// grant + release on the node, and object checksumming.
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "format/layout.h"
#include "store/pool.h"
#include "store/slab_manager.h"
#include "tests/fake_env.h"

namespace meshpool::store {
namespace {

// HashKey + BucketsFor + a fingerprint scan of both 64-byte buckets, as a
// GET does once its one batched READ of the two buckets has returned.
void BM_IndexLookup(benchmark::State& state) {
  constexpr uint64_t kBuckets = 1 << 16;
  std::vector<uint64_t> index(kBuckets * format::kSlotsPerBucket);
  std::mt19937_64 rng(42);
  std::vector<std::string> keys(4096);
  for (size_t i = 0; i < keys.size(); ++i) {
    keys[i] = "user:" + std::to_string(rng());
    format::KeyHash h = format::HashKey(keys[i]);
    format::BucketPair b = format::BucketsFor(h, kBuckets);
    index[b.first * format::kSlotsPerBucket + i % format::kSlotsPerBucket] =
        format::EncodeSlot(format::Fingerprint(h), 256,
                           format::kObjectAlign * (i + 1));
  }
  size_t i = 0;
  for (auto _ : state) {
    const std::string& key = keys[i++ % keys.size()];
    format::KeyHash h = format::HashKey(key);
    format::BucketPair b = format::BucketsFor(h, kBuckets);
    uint8_t fp = format::Fingerprint(h);
    uint64_t found = 0;
    for (uint64_t bucket : {b.first, b.second}) {
      const uint64_t* slots = &index[bucket * format::kSlotsPerBucket];
      for (size_t s = 0; s < format::kSlotsPerBucket; ++s) {
        if (slots[s] != 0 && format::DecodeSlot(slots[s]).fingerprint == fp) {
          found = slots[s];
        }
      }
    }
    benchmark::DoNotOptimize(found);
  }
}
BENCHMARK(BM_IndexLookup);

void BM_SlabGrantRelease(benchmark::State& state) {
  absl::StatusOr<format::PoolLayout> layout =
      format::ComputeLayout(256 << 20, 64 << 10);
  absl::StatusOr<Pool> pool = Pool::Create(256 << 20, false);
  if (!layout.ok() || !pool.ok()) {
    state.SkipWithError("cannot lay out the pool");
    return;
  }
  testing::FakeEnv env(absl::UnixEpoch());  // time moves only by hand
  SlabManagerOptions options;
  options.layout = *layout;
  options.env = &env;
  auto slabs = SlabManager::Create(options, pool->data());
  if (!slabs.ok()) {
    state.SkipWithError("cannot create the slab manager");
    return;
  }
  SlabManager& m = **slabs;
  for (auto _ : state) {
    absl::StatusOr<SlabGrant> g = m.Grant("bench");
    if (!g.ok()) {  // every slab sealed: reclaim them all, untimed
      state.PauseTiming();
      m.Reclaim();
      env.Advance(m.grace());
      m.Reclaim();
      state.ResumeTiming();
      g = m.Grant("bench");
    }
    benchmark::DoNotOptimize(m.Release(g->slab, g->token));
  }
  state.counters["slabs"] = static_cast<double>(layout->slab_count);
}
BENCHMARK(BM_SlabGrantRelease);

void BM_EncodeObject(benchmark::State& state) {
  const std::string key = "bench-key";
  const std::string value(state.range(0), 'v');
  const format::KeyHash hash = format::HashKey(key);
  std::vector<char> buffer(format::ObjectBytes(key.size(), value.size()));
  for (auto _ : state) {
    format::EncodeObject(absl::MakeSpan(buffer), key, hash, value, 1, 1);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_EncodeObject)->Arg(4 << 10)->Arg(1 << 20);

void BM_VerifyObject(benchmark::State& state) {
  const std::string key = "bench-key";
  const std::string value(state.range(0), 'v');
  std::vector<char> buffer(format::ObjectBytes(key.size(), value.size()));
  const format::KeyHash hash = format::HashKey(key);
  format::EncodeObject(absl::MakeSpan(buffer), key, hash, value, 1, 1);
  for (auto _ : state) {
    absl::string_view got;
    if (format::VerifyObject(buffer, key, hash, 1, &got) !=
        format::Verdict::kValid) {
      state.SkipWithError("object did not verify");
      break;
    }
    benchmark::DoNotOptimize(got);
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_VerifyObject)->Arg(4 << 10)->Arg(1 << 20);

}  // namespace
}  // namespace meshpool::store
