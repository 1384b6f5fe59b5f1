// store/ micro-benchmarks: the client-side index lookup arithmetic, slab
// grant + release on the node, client sessions and the evictor's pin scan
// at thousands of sessions, and object checksumming.
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "format/layout.h"
#include "store/pin_tables.h"
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

// A 1 GiB node's pin tables (4,096 sessions of 256 pins by default) with
// `sessions` open, each holding `pins` live pins. The pool is mapped but
// only its pin area is touched.
struct PinBench {
  testing::FakeEnv env{absl::FromUnixSeconds(1'700'000'000)};
  format::PoolLayout layout;
  std::optional<Pool> pool;
  std::unique_ptr<PinTables> tables;
  std::vector<SessionGrant> open;

  bool Start(int sessions, int pins, benchmark::State& state) {
    absl::StatusOr<format::PoolLayout> l =
        format::ComputeLayout(uint64_t{1} << 30);
    absl::StatusOr<Pool> p = l.ok() ? Pool::Create(l->pool_bytes, false)
                                    : absl::StatusOr<Pool>(l.status());
    if (!p.ok()) {
      state.SkipWithError("cannot lay out a 1 GiB pool");
      return false;
    }
    layout = *l;
    pool.emplace(*std::move(p));
    PinTablesOptions options;
    options.layout = layout;
    options.env = &env;
    options.lease = absl::Milliseconds(kMaxSessionLeaseMs);  // time jumps
    absl::StatusOr<std::unique_ptr<PinTables>> t =
        PinTables::Create(options, pool->data());
    if (!t.ok()) {
      state.SkipWithError("cannot create the pin tables");
      return false;
    }
    tables = *std::move(t);
    for (int i = 0; i < sessions; ++i) {
      absl::StatusOr<SessionGrant> g =
          tables->Open("engine-" + std::to_string(i));
      if (!g.ok()) {
        state.SkipWithError("cannot open the sessions");
        return false;
      }
      for (int e = 0; e < pins && e < static_cast<int>(g->entries); ++e) {
        const uint64_t slab = (i * 31 + e) % layout.slab_count;
        format::PinEntry pin{layout.slab_offset(slab), format::kPinForever};
        std::memcpy(pool->data() + g->table_offset + e * format::kPinEntryBytes,
                    &pin, sizeof(pin));
      }
      open.push_back(*g);
    }
    state.counters["sessions"] = sessions;
    state.counters["pin_area_MiB"] =
        static_cast<double>(layout.pin_area_entries() *
                            format::kPinEntryBytes) /
        (1 << 20);
    return true;
  }
};

// Open + close one more session beside `range(0)` open ones (the cost the
// node's OpenSession/CloseSession handlers pay under the tables' lock).
// Closed tables rest a quarantine: once every free table rests, the clock
// jumps past it, untimed.
void BM_SessionOpenClose(benchmark::State& state) {
  PinBench b;
  const int sessions = static_cast<int>(state.range(0));
  if (!b.Start(sessions, 0, state)) return;
  const int64_t free_tables =
      static_cast<int64_t>(b.layout.pin_sessions) - sessions;
  int64_t resting = 0;
  for (auto _ : state) {
    absl::StatusOr<SessionGrant> g = b.tables->Open("one more");
    if (!g.ok()) {
      state.SkipWithError("open failed");
      return;
    }
    benchmark::DoNotOptimize(b.tables->Close(g->session, g->token, {}));
    if (++resting == free_tables) {
      state.PauseTiming();
      b.env.Advance(kPinTableQuarantine);
      resting = 0;
      state.ResumeTiming();
    }
  }
}
BENCHMARK(BM_SessionOpenClose)->Arg(256)->Arg(4000);

// The evictor's question, which slabs are pinned, with `range(0)` sessions
// of 256 entries open and `range(1)` live pins in each: one pass over every
// entry of every live table.
void BM_PinScan(benchmark::State& state) {
  PinBench b;
  if (!b.Start(static_cast<int>(state.range(0)),
               static_cast<int>(state.range(1)), state)) {
    return;
  }
  std::vector<uint64_t> slabs(b.layout.slab_count);
  for (uint64_t i = 0; i < slabs.size(); ++i) slabs[i] = i;
  for (auto _ : state) {
    benchmark::DoNotOptimize(b.tables->PinnedSlabs(slabs));
  }
  state.counters["entries_per_s"] = benchmark::Counter(
      static_cast<double>(state.range(0)) * b.layout.pins_per_session,
      benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_PinScan)
    ->Args({256, 16})
    ->Args({4096, 0})
    ->Args({4096, 16})
    ->Args({4096, 256})
    ->Unit(benchmark::kMicrosecond);

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
