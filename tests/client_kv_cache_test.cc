// The KV-cache API end to end: a coordinator and memory nodes in this
// process, the data path on the simulated fabric. Block keys, batched
// zero-copy put/get, async batches, prefix match, pins and leases under
// eviction pressure, a fill to three times the pool, engines sharing blocks.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <iostream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "client/client_test_peer.h"
#include "client/node_connection.h"
#include "format/layout.h"
#include "gtest/gtest.h"
#include "meshpool/client.h"
#include "meshpool/kv_cache.h"
#include "placement/coordinator_client.h"
#include "placement/placement.h"
#include "rdma/rdma.h"
#include "rdma/sim.h"
#include "store/store.h"
#include "tests/sim_cluster.h"
#include "tests/test_seed.h"

namespace meshpool {
namespace {

std::vector<absl::string_view> Views(const std::vector<std::string>& v) {
  return {v.begin(), v.end()};
}

// A block's bytes: its key's hash spread over it, so a block read under the
// wrong key, or torn, never matches.
std::string BlockFor(absl::string_view key, size_t size) {
  std::string out(size, '\0');
  uint64_t x = format::HashKey(key).lo | 1;
  for (size_t i = 0; i + 8 <= size; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(&out[i], &x, 8);
  }
  return out;
}

// ---- Block keys: pure -----------------------------------------------------

TEST(BlockKeysTest,
     EqualPrefixesShareKeysAndTheFirstDifferenceChangesEveryLaterKey) {
  BlockKeyOptions o{.model = "llama-3-8b", .block_tokens = 4};
  std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};
  std::vector<int32_t> b = a;
  b[5] = 99;  // inside block 1
  auto ka = BlockKeys(o, a);
  auto kb = BlockKeys(o, b);
  ASSERT_TRUE(ka.ok() && kb.ok());
  ASSERT_EQ(ka->size(), 3u);  // 13 tokens: 3 full blocks, 1 pending
  EXPECT_EQ((*ka)[0], (*kb)[0]);
  EXPECT_NE((*ka)[1], (*kb)[1]);
  EXPECT_NE((*ka)[2], (*kb)[2]);
  EXPECT_EQ((*ka)[0].substr(0, 4), "kv1:");
  EXPECT_EQ((*ka)[0].size(), 4u + 32u);
}

TEST(BlockKeysTest, IncrementalChainMatchesOneShot) {
  BlockKeyOptions o{.model = "m", .block_tokens = 16};
  std::vector<int32_t> tokens(100);
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<int32_t>(i * 7);
  auto chain = BlockKeyChain::Create(o);
  ASSERT_TRUE(chain.ok());
  std::vector<std::string> got;
  for (size_t i = 0; i < tokens.size(); i += 5) {
    size_t n = std::min<size_t>(5, tokens.size() - i);
    for (auto& k : chain->Append(absl::MakeConstSpan(tokens).subspan(i, n))) {
      got.push_back(k);
    }
  }
  EXPECT_EQ(chain->pending_tokens(), 100u % 16u);
  auto once = BlockKeys(o, tokens);
  ASSERT_TRUE(once.ok());
  EXPECT_EQ(got, *once);
  EXPECT_EQ(chain->keys(), *once);
}

TEST(BlockKeysTest, ModelRankSaltAndBlockSizeNamespaceTheKeys) {
  std::vector<int32_t> t(32, 5);
  BlockKeyOptions base{.model = "m", .block_tokens = 16};
  auto k0 = BlockKeys(base, t);
  ASSERT_TRUE(k0.ok());
  std::vector<BlockKeyOptions> others(5, base);
  others[0].model = "m2";
  others[1].tp_size = 2;
  others[1].tp_rank = 1;
  others[2].pp_size = 4;
  others[3].salt = "tenant-a";
  others[4].block_tokens = 8;
  for (const BlockKeyOptions& o : others) {
    auto k = BlockKeys(o, t);
    ASSERT_TRUE(k.ok()) << k.status();
    EXPECT_NE(k->front(), k0->front());
  }
  auto again = BlockKeys(base, t);
  EXPECT_EQ(*again, *k0);  // deterministic
}

TEST(BlockKeysTest, BadOptionsAreInvalidArgument) {
  EXPECT_EQ(BlockKeyChain::Create({.model = ""}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BlockKeyChain::Create({.model = "m", .tp_rank = 2, .tp_size = 2})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      BlockKeyChain::Create({.model = "m", .block_tokens = 0}).status().code(),
      absl::StatusCode::kInvalidArgument);
}

// ---- A cluster on the simulated fabric --------------------------------------

class KvCacheSimTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kCapacity = 16 << 20;
  static constexpr uint64_t kSlab = 1 << 20;

  void SetUp() override {
    auto cluster = testing::SimCluster::Start(testing::TestSeed());
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    fabric_ = &cluster_->fabric();
  }

  void StartNodes(int n, uint64_t capacity = kCapacity) {
    for (int i = 0; i < n; ++i) {
      store::NodeOptions o;
      o.capacity_bytes = capacity;
      o.slab_bytes = kSlab;
      o.node_id = absl::StrCat("node-", i);
      // Short leases: evicted memory comes back fast, and a dead client's
      // session lapses within the test.
      o.slab_lease = absl::Seconds(2);
      o.max_read_lease = absl::Milliseconds(200);
      o.reclaim_interval = absl::Milliseconds(20);
      o.session_lease = absl::Seconds(1);
      auto node = cluster_->AddNode(o);
      ASSERT_TRUE(node.ok()) << node.status();
      nodes_.push_back(*node);
    }
  }

  std::unique_ptr<Client> Connect(const std::string& name, int threads = 4) {
    ClientOptions options = testing::SimCluster::DefaultClientOptions();
    options.batch_threads = threads;
    auto client = cluster_->Connect(name, options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }

  // Keys whose home is node `node` in the current map.
  std::vector<std::string> KeysOn(int node, int count, absl::string_view tag) {
    auto cc = placement::CoordinatorClient::Connect(cluster_->address(),
                                                    absl::Seconds(3));
    EXPECT_TRUE(cc.ok());
    auto map = (*cc)->GetClusterMap();
    EXPECT_TRUE(map.ok());
    std::vector<std::string> keys;
    for (int i = 0; keys.size() < static_cast<size_t>(count); ++i) {
      std::string k = absl::StrCat(tag, "-", i);
      format::KeyHash h = format::HashKey(k);
      int home = placement::HomeNode(*map, h.lo, h.hi);
      if (map->nodes(home).info().node_id() == absl::StrCat("node-", node)) {
        keys.push_back(k);
      }
    }
    return keys;
  }

  // Puts `keys` (blocks of `size`) in batches of 32; every status must be OK.
  void PutAll(Client& c, const std::vector<std::string>& keys, size_t size) {
    for (size_t i = 0; i < keys.size(); i += 32) {
      std::vector<std::string> k(keys.begin() + i,
                                 keys.begin() + std::min(keys.size(), i + 32));
      std::vector<std::string> v;
      for (const auto& key : k) v.push_back(BlockFor(key, size));
      std::vector<absl::Status> st = c.BatchPut(Views(k), Views(v));
      for (size_t j = 0; j < st.size(); ++j) {
        ASSERT_TRUE(st[j].ok()) << k[j] << ": " << st[j];
      }
    }
  }

  // GET of one block: OK with exactly its bytes, or NotFound.
  absl::Status GetBlock(Client& c, const std::string& key, size_t size) {
    std::string out(size, '\0');
    absl::StatusOr<size_t> n = c.Get(key, absl::MakeSpan(out));
    if (!n.ok()) return n.status();
    if (*n != size || out != BlockFor(key, size)) {
      return absl::DataLossError(absl::StrCat("wrong bytes for ", key));
    }
    return absl::OkStatus();
  }

  std::unique_ptr<testing::SimCluster> cluster_;
  rdma::SimFabric* fabric_ = nullptr;
  std::vector<store::Node*> nodes_;
};

TEST_F(KvCacheSimTest, PrefixMatchCountsOnlyLeadingPresentKeys) {
  StartNodes(2);
  auto c = Connect("engine");
  std::vector<std::string> keys;
  for (int i = 0; i < 10; ++i) keys.push_back(absl::StrCat("blk-", i));
  std::vector<std::string> present = keys;
  present.erase(present.begin() + 4);  // a gap at 4
  PutAll(*c, present, 1000);
  auto all = Views(keys);
  EXPECT_EQ(*PrefixMatch(*c, all), 4u);  // 5..9 are present but after the gap
  EXPECT_EQ(*PrefixMatch(*c, absl::MakeSpan(all).first(4)), 4u);  // all present
  EXPECT_EQ(*PrefixMatch(*c, {}), 0u);                            // empty
  EXPECT_EQ(*PrefixMatch(*c, absl::MakeSpan(all).subspan(4)),
            0u);  // first missing
  EXPECT_EQ(*PrefixMatch(*c, absl::MakeSpan(all).subspan(5)), 5u);
  std::vector<absl::string_view> bad = {all[0], ""};
  EXPECT_EQ(PrefixMatch(*c, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(KvCacheSimTest, BatchRoundTripsRegisteredAndPlainBuffersAtEverySize) {
  StartNodes(3, 64 << 20);
  auto c = Connect("engine");
  for (size_t size : {size_t{100}, size_t{16} << 10, size_t{256} << 10}) {
    SCOPED_TRACE(size);
    std::vector<std::string> keys, values;
    for (int i = 0; i < 32; ++i) {
      keys.push_back(absl::StrCat("rt-", size, "-", i));
      values.push_back(BlockFor(keys.back(), size));
    }
    // Half the values come from registered memory.
    std::vector<char> arena(16 * size);
    auto reg_in = c->RegisterBuffer(arena.data(), arena.size());
    ASSERT_TRUE(reg_in.ok());
    std::vector<absl::string_view> vals;
    for (int i = 0; i < 32; ++i) {
      if (i % 2 == 0) {
        char* at = arena.data() + (i / 2) * size;
        std::memcpy(at, values[i].data(), size);
        vals.emplace_back(at, size);
      } else {
        vals.push_back(values[i]);
      }
    }
    for (const absl::Status& s : c->BatchPut(Views(keys), vals)) {
      ASSERT_TRUE(s.ok()) << s;
    }
    // Outputs: registered for even keys, plain for odd, one too small.
    std::vector<char> out_arena(16 * size + 64);
    auto reg_out = c->RegisterBuffer(out_arena.data(), out_arena.size());
    ASSERT_TRUE(reg_out.ok());
    std::vector<std::string> plain(16, std::string(size, '\0'));
    std::vector<absl::Span<char>> outs;
    for (int i = 0; i < 32; ++i) {
      if (i % 2 == 0) {
        outs.emplace_back(out_arena.data() + (i / 2) * size, size);
      } else {
        outs.emplace_back(plain[i / 2].data(), i == 31 ? size - 1 : size);
      }
    }
    auto got = c->BatchGet(Views(keys), outs);
    for (int i = 0; i < 32; ++i) {
      if (i == 31) {
        EXPECT_EQ(got[i].status().code(), absl::StatusCode::kOutOfRange);
        continue;
      }
      ASSERT_TRUE(got[i].ok()) << keys[i] << ": " << got[i].status();
      ASSERT_EQ(*got[i], size);
      ASSERT_EQ(absl::string_view(outs[i].data(), size), values[i]) << keys[i];
    }
  }
  KvCounters stats = KvStatistics(*c);
  EXPECT_EQ(stats.total.puts, 96u);
  EXPECT_EQ(stats.total.hits, 93u);
}

TEST_F(KvCacheSimTest, AsyncBatchesCompleteOutOfOrder) {
  StartNodes(2);
  auto c = Connect("engine", /*threads=*/4);
  std::vector<std::string> slow = KeysOn(0, 8, "slow");
  std::vector<std::string> fast = KeysOn(1, 8, "fast");
  PutAll(*c, slow, 4096);
  PutAll(*c, fast, 4096);
  // Requests to node-0 wait until released.
  std::atomic<bool> hold{true};
  fabric_->SetBeforeExecute(
      [&](absl::string_view node, const rdma::WorkRequest&) {
        while (node == "node-0" && hold.load())
          absl::SleepFor(absl::Milliseconds(1));
      });
  std::vector<std::string> slow_out(8, std::string(4096, '\0'));
  std::vector<std::string> fast_out(8, std::string(4096, '\0'));
  std::vector<absl::Span<char>> so, fo;
  for (auto& s : slow_out) so.push_back(absl::MakeSpan(s));
  for (auto& s : fast_out) fo.push_back(absl::MakeSpan(s));
  absl::Mutex mu;
  std::vector<std::string> order;
  auto first = c->BatchGetAsync(Views(slow), so, [&](const BatchHandle&) {
    absl::MutexLock l(&mu);
    order.push_back("slow");
  });
  auto second = c->BatchGetAsync(Views(fast), fo, [&](const BatchHandle&) {
    absl::MutexLock l(&mu);
    order.push_back("fast");
  });
  ASSERT_TRUE(second->WaitFor(absl::Seconds(5)));
  EXPECT_FALSE(first->done());
  hold = false;
  first->Wait();
  ASSERT_EQ(order, (std::vector<std::string>{"fast", "slow"}));
  for (int i = 0; i < 8; ++i) {
    EXPECT_TRUE(first->statuses()[i].ok()) << first->statuses()[i];
    EXPECT_EQ(first->lengths()[i], 4096u);
    EXPECT_EQ(slow_out[i], BlockFor(slow[i], 4096));
    EXPECT_TRUE(second->statuses()[i].ok());
    EXPECT_EQ(fast_out[i], BlockFor(fast[i], 4096));
  }
}

TEST_F(KvCacheSimTest, AsyncPutThenGetWithPollingHandles) {
  StartNodes(2);
  auto c = Connect("engine");
  std::vector<std::string> keys, values;
  for (int i = 0; i < 40; ++i) {
    keys.push_back(absl::StrCat("async-", i));
    values.push_back(BlockFor(keys.back(), 20000));
  }
  auto put = c->BatchPutAsync(Views(keys), Views(values));
  while (!put->done()) absl::SleepFor(absl::Milliseconds(1));
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(put->statuses()[i].ok()) << put->statuses()[i];
    EXPECT_EQ(put->lengths()[i], 20000u);
  }
  std::vector<std::string> out(keys.size(), std::string(20000, '\0'));
  std::vector<absl::Span<char>> outs;
  for (auto& o : out) outs.push_back(absl::MakeSpan(o));
  auto get = c->BatchGetAsync(Views(keys), outs);
  get->Wait();
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(get->statuses()[i].ok()) << get->statuses()[i];
    EXPECT_EQ(out[i], values[i]);
  }
  // A size mismatch completes at once with InvalidArgument per key.
  auto bad = c->BatchGetAsync(Views(keys), absl::MakeSpan(outs).first(3));
  bad->Wait();
  EXPECT_EQ(bad->statuses()[0].code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(KvCacheSimTest, FillToThreeTimesCapacityOnlyMissesNeverErrs) {
  StartNodes(1);
  auto c = Connect("engine");
  const size_t kBlock = 64 << 10;
  std::vector<std::string> keys;
  for (uint64_t i = 0; i < 3 * kCapacity / kBlock; ++i) {
    keys.push_back(absl::StrCat("fill-", i));
  }
  PutAll(*c, keys, kBlock);  // every PUT OK: eviction made room
  int hits = 0, misses = 0;
  for (const std::string& k : keys) {
    absl::Status s = GetBlock(*c, k, kBlock);
    if (s.ok()) {
      ++hits;
    } else {
      ASSERT_EQ(s.code(), absl::StatusCode::kNotFound) << k << ": " << s;
      ++misses;
    }
  }
  std::cout << "hits=" << hits << " misses=" << misses << std::endl;
  EXPECT_GT(hits, 0);
  EXPECT_GT(misses, static_cast<int>(keys.size() / 2));  // at most 1/3 fits
  // The most recent blocks are the ones kept (FIFO).
  EXPECT_TRUE(GetBlock(*c, keys.back(), kBlock).ok());
  EXPECT_EQ(GetBlock(*c, keys.front(), kBlock).code(),
            absl::StatusCode::kNotFound);
  proto::NodeStats stats = nodes_[0]->Stats();
  EXPECT_GT(stats.slabs_evicted(), 0u);
  EXPECT_LE(stats.used_bytes(), kCapacity);
}

TEST_F(KvCacheSimTest, PinnedBlocksSurviveEvictionPressure) {
  StartNodes(1);
  auto c = Connect("engine");
  const size_t kBlock = 64 << 10;
  std::vector<std::string> hard = {"hard-0", "hard-1"};
  std::vector<std::string> leased = {"ttl-0", "ttl-1"};
  PutAll(*c, hard, kBlock);
  PutAll(*c, leased, kBlock);
  for (const absl::Status& s : Pin(*c, Views(hard), kHardPin))
    ASSERT_TRUE(s.ok()) << s;
  // PrefixMatch pins in the same step.
  ASSERT_EQ(*PrefixMatch(*c, Views(leased), absl::Seconds(60)), 2u);
  std::vector<std::string> fill;
  for (uint64_t i = 0; i < 3 * kCapacity / kBlock; ++i) {
    fill.push_back(absl::StrCat("pressure-", i));
  }
  PutAll(*c, fill, kBlock);
  for (const auto& k : hard) EXPECT_TRUE(GetBlock(*c, k, kBlock).ok()) << k;
  for (const auto& k : leased) EXPECT_TRUE(GetBlock(*c, k, kBlock).ok()) << k;
  // Around them the pool turned over (blocks sharing a pinned block's slab
  // stay with it: eviction is per slab).
  size_t gone = 0;
  for (size_t i = 0; i < fill.size() / 3; ++i) {
    gone += GetBlock(*c, fill[i], kBlock).code() == absl::StatusCode::kNotFound;
  }
  EXPECT_GT(gone, fill.size() / 3 * 8 / 10);
  EXPECT_EQ(nodes_[0]->Stats().pinned_objects(), 4u);
  // Unpinned, they go like any other block.
  for (const absl::Status& s : Unpin(*c, Views(hard))) EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(Unpin(*c, Views(hard))[0].code(), absl::StatusCode::kNotFound);
}

// A client's pin table on a node is as large as it asked
// (ClientOptions.pins_per_node), else the node's default: past it, a pin
// fails ResourceExhausted for that key and the earlier ones hold.
TEST_F(KvCacheSimTest, PinsPerNodeSizesTheClientsPinTable) {
  StartNodes(1);  // 16 MiB: default tables of 64 entries
  ClientOptions options = testing::SimCluster::DefaultClientOptions();
  options.pins_per_node = 128;
  absl::StatusOr<std::unique_ptr<Client>> wide =
      cluster_->Connect("wide", options);
  ASSERT_TRUE(wide.ok()) << wide.status();
  auto plain = Connect("plain");
  std::vector<std::string> keys;
  for (int i = 0; i < 129; ++i) keys.push_back(absl::StrCat("block-", i));
  PutAll(**wide, keys, 1024);
  std::vector<absl::Status> pinned = Pin(**wide, Views(keys), kHardPin);
  for (int i = 0; i < 128; ++i) ASSERT_TRUE(pinned[i].ok()) << i << pinned[i];
  EXPECT_EQ(pinned[128].code(), absl::StatusCode::kResourceExhausted)
      << pinned[128];
  pinned = Pin(*plain, Views(keys), kHardPin);
  for (int i = 0; i < 64; ++i) ASSERT_TRUE(pinned[i].ok()) << i << pinned[i];
  for (int i = 64; i < 129; ++i) {
    EXPECT_EQ(pinned[i].code(), absl::StatusCode::kResourceExhausted)
        << i << pinned[i];
  }
  EXPECT_EQ(nodes_[0]->Stats().pinned_objects(), 128u);
  options.pins_per_node = 16385;
  EXPECT_EQ(cluster_->Connect("too many", options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(KvCacheSimTest, PinsLapseWhenTheirClientStopsRenewing) {
  StartNodes(1);
  auto dead = Connect("dead-engine");
  auto live = Connect("live-engine");
  const size_t kBlock = 64 << 10;
  std::vector<std::string> pinned = {"orphan-0", "orphan-1"};
  {
    // Written by a client that is gone: its slab is sealed, not leased.
    auto writer = Connect("writer");
    PutAll(*writer, pinned, kBlock);
  }
  for (const absl::Status& s : Pin(*dead, Views(pinned), kHardPin)) {
    ASSERT_TRUE(s.ok()) << s;
  }
  ClientTestPeer::StopRenewingSessions(*dead);
  absl::SleepFor(absl::Seconds(2));  // session lease (1 s) runs out
  std::vector<std::string> fill;
  for (uint64_t i = 0; i < 3 * kCapacity / kBlock; ++i) {
    fill.push_back(absl::StrCat("after-", i));
  }
  PutAll(*live, fill, kBlock);
  for (const auto& k : pinned) {
    EXPECT_EQ(GetBlock(*live, k, kBlock).code(), absl::StatusCode::kNotFound)
        << k << " outlived its dead client's pin";
  }
}

TEST_F(KvCacheSimTest, TtlPinsLapseByThemselves) {
  StartNodes(1);
  auto c = Connect("engine");
  const size_t kBlock = 64 << 10;
  std::vector<std::string> pinned = {"short-0"};
  PutAll(*c, pinned, kBlock);
  ASSERT_TRUE(Pin(*c, Views(pinned), absl::Milliseconds(300))[0].ok());
  absl::SleepFor(absl::Milliseconds(600));
  std::vector<std::string> fill;
  for (uint64_t i = 0; i < 3 * kCapacity / kBlock; ++i) {
    fill.push_back(absl::StrCat("later-", i));
  }
  PutAll(*c, fill, kBlock);
  EXPECT_EQ(GetBlock(*c, pinned[0], kBlock).code(),
            absl::StatusCode::kNotFound);
}

TEST_F(KvCacheSimTest, PutIntoAFullyPinnedPoolIsResourceExhausted) {
  StartNodes(1);
  auto c = Connect("engine");
  const size_t kBlock = 256 << 10;
  // Fill and hard-pin everything that fits.
  std::vector<absl::Status> last;
  int stored = 0;
  for (int i = 0; i < 200; ++i) {
    std::string k = absl::StrCat("all-", i);
    std::string v = BlockFor(k, kBlock);
    absl::Status put = c->Put(k, v);
    if (!put.ok()) {
      EXPECT_EQ(put.code(), absl::StatusCode::kResourceExhausted) << put;
      break;
    }
    std::vector<absl::string_view> one = {k};
    ASSERT_TRUE(Pin(*c, one, kHardPin)[0].ok());
    ++stored;
  }
  EXPECT_GT(stored, 0);
  EXPECT_LT(stored, 200);
  // Everything pinned is still there.
  for (int i = 0; i < stored; ++i) {
    std::string k = absl::StrCat("all-", i);
    EXPECT_TRUE(GetBlock(*c, k, kBlock).ok()) << k;
  }
}

// How often a client marks one slab read.
absl::Duration NodeConnectionTouchInterval() {
  return client_internal::NodeConnection::kTouchInterval;
}

// The slab table's evicting word of the slab holding `key`'s object on
// `node` (in-process: the node's pool is this process's memory), as the
// evictor sets it when it starts evicting that slab.
uint64_t* EvictingWordOf(const store::Node& node, absl::string_view key) {
  const proto::NodeInfo& info = node.info();
  const proto::PoolLayout& l = info.layout();
  format::PoolLayout layout{l.pool_bytes(),       l.index_offset(),
                            l.bucket_count(),     l.slab_area_offset(),
                            l.slab_bytes(),       l.slab_count(),
                            l.slab_meta_offset(), l.pin_area_offset(),
                            l.pin_sessions(),     l.pins_per_session()};
  char* pool = reinterpret_cast<char*>(info.pool().addr());
  format::KeyHash hash = format::HashKey(key);
  format::BucketPair pair = format::BucketsFor(hash, layout.bucket_count);
  for (uint64_t bucket : {pair.first, pair.second}) {
    const uint64_t* slots =
        reinterpret_cast<const uint64_t*>(pool + layout.bucket_offset(bucket));
    for (size_t i = 0; i < format::kSlotsPerBucket; ++i) {
      if (slots[i] == 0) continue;
      format::Slot slot = format::DecodeSlot(slots[i]);
      if (slot.fingerprint != format::Fingerprint(hash)) continue;
      uint64_t slab = layout.slab_of(slot.offset);
      return reinterpret_cast<uint64_t*>(pool + layout.slab_meta(slab));
    }
  }
  return nullptr;
}

TEST_F(KvCacheSimTest, APinThatDoesNotHoldLeavesTheEarlierPinInPlace) {
  StartNodes(1);
  auto c = Connect("engine");
  std::vector<std::string> key = {"twice"};
  PutAll(*c, key, 4096);
  ASSERT_TRUE(Pin(*c, Views(key), kHardPin)[0].ok());
  uint64_t* evicting = EvictingWordOf(*nodes_[0], key[0]);
  ASSERT_NE(evicting, nullptr);
  // The evictor marked the slab after the first pin landed (it will see
  // that pin and keep the slab): a second pin now does not hold...
  *evicting = 1;
  EXPECT_EQ(Pin(*c, Views(key), absl::Seconds(5))[0].code(),
            absl::StatusCode::kNotFound);
  *evicting = 0;
  // ...and the first one still does.
  EXPECT_EQ(nodes_[0]->Stats().pinned_objects(), 1u);
  EXPECT_TRUE(Unpin(*c, Views(key))[0].ok());
  EXPECT_EQ(nodes_[0]->Stats().pinned_objects(), 0u);
}

TEST_F(KvCacheSimTest, PrefixMatchLeavesNoPinsPastThePrefixItReturns) {
  StartNodes(1);
  auto c = Connect("engine");
  // Blocks of over half a slab: each in its own slab.
  const size_t kBig = kSlab / 2 + 4096;
  std::vector<std::string> keys;
  for (int i = 0; i < 5; ++i) keys.push_back(absl::StrCat("chain-", i));
  PutAll(*c, keys, kBig);
  uint64_t* evicting = EvictingWordOf(*nodes_[0], keys[2]);
  ASSERT_NE(evicting, nullptr);
  *evicting = 1;  // block 2 is being evicted
  absl::StatusOr<size_t> n = PrefixMatch(*c, Views(keys), kHardPin);
  *evicting = 0;
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 2u);
  // Blocks 0 and 1 are pinned; 3 and 4 (past the prefix) are not.
  EXPECT_EQ(nodes_[0]->Stats().pinned_objects(), 2u);
  std::vector<absl::string_view> tail = {keys[3], keys[4]};
  for (const absl::Status& s : Unpin(*c, tail)) {
    EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  }
}

TEST_F(KvCacheSimTest, ReadsMarkTheirSlabForTheSecondChance) {
  StartNodes(1);
  auto writer = Connect("writer");
  std::vector<std::string> key = {"hot"};
  PutAll(*writer, key, 4096);
  uint64_t* touched = EvictingWordOf(*nodes_[0], key[0]) + 1;
  std::string out(4096, '\0');
  std::vector<absl::Span<char>> outs = {absl::MakeSpan(out)};
  // A single-key Get, a batched one that finds the slot in the index, and
  // (a second later: touches are rate-limited per slab) one served by the
  // slot cache's hint: each marks the slab.
  auto reader = Connect("reader");
  *touched = 0;
  ASSERT_TRUE(reader->Get(key[0], absl::MakeSpan(out)).ok());
  EXPECT_NE(*touched, 0u) << "single-key Get";
  auto batch_reader = Connect("batch-reader");
  *touched = 0;
  ASSERT_TRUE(batch_reader->BatchGet(Views(key), outs)[0].ok());
  EXPECT_NE(*touched, 0u) << "BatchGet";
  absl::SleepFor(NodeConnectionTouchInterval() + absl::Milliseconds(100));
  *touched = 0;
  ASSERT_TRUE(batch_reader->BatchGet(Views(key), outs)[0].ok());
  EXPECT_NE(*touched, 0u) << "BatchGet through the slot cache";
}

TEST_F(KvCacheSimTest, ConcurrentEnginesShareBlocks) {
  StartNodes(2);
  constexpr int kEngines = 4;
  const size_t kBlock = 16 << 10;
  BlockKeyOptions o{.model = "shared-model", .block_tokens = 16};
  std::vector<int32_t> system_prompt(128);
  for (size_t i = 0; i < system_prompt.size(); ++i) system_prompt[i] = i;
  std::vector<std::unique_ptr<Client>> engines;
  for (int e = 0; e < kEngines; ++e)
    engines.push_back(Connect(absl::StrCat("eng-", e)));
  std::atomic<int> failures{0};
  std::atomic<int> found_shared{0};  // rounds whose lookup found the prompt
  std::vector<std::thread> threads;
  for (int e = 0; e < kEngines; ++e) {
    threads.emplace_back([&, e] {
      for (int round = 0; round < 5; ++round) {
        std::vector<int32_t> tokens = system_prompt;
        for (int t = 0; t < 64; ++t)
          tokens.push_back(1000 * e + 10 * round + t);
        auto keys = BlockKeys(o, tokens);
        if (!keys.ok()) {
          ++failures;
          return;
        }
        Client& c = *engines[e];
        size_t have = *PrefixMatch(c, Views(*keys), absl::Seconds(30));
        if (have >= system_prompt.size() / 16) ++found_shared;
        // Store what is missing, then read the whole chain back.
        std::vector<std::string> missing(keys->begin() + have, keys->end());
        std::vector<std::string> vals;
        for (const auto& k : missing) vals.push_back(BlockFor(k, kBlock));
        for (const auto& s : c.BatchPut(Views(missing), Views(vals))) {
          if (!s.ok()) ++failures;
        }
        std::vector<std::string> out(keys->size(), std::string(kBlock, '\0'));
        std::vector<absl::Span<char>> outs;
        for (auto& x : out) outs.push_back(absl::MakeSpan(x));
        auto got = c.BatchGet(Views(*keys), outs);
        for (size_t i = 0; i < keys->size(); ++i) {
          if (!got[i].ok() || out[i] != BlockFor((*keys)[i], kBlock))
            ++failures;
        }
        Unpin(c, Views(*keys));
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  // The system prompt's blocks were shared: every round after an engine's
  // first, at the latest, found them stored.
  EXPECT_GE(found_shared.load(), kEngines * 4);
}

TEST_F(KvCacheSimTest, StatsReachTheNodeWithTheSessionRenewal) {
  StartNodes(1);
  auto c = Connect("stats-engine");
  std::vector<std::string> keys = {"s-0", "s-1"};
  PutAll(*c, keys, 1000);
  std::string out(1000, '\0');
  ASSERT_TRUE(c->Get("s-0", absl::MakeSpan(out)).ok());
  EXPECT_EQ(c->Get("nope", absl::MakeSpan(out)).status().code(),
            absl::StatusCode::kNotFound);
  KvCounters mine = KvStatistics(*c);
  EXPECT_EQ(mine.total.hits, 1u);
  EXPECT_EQ(mine.total.misses, 1u);
  EXPECT_EQ(mine.total.puts, 2u);
  EXPECT_EQ(mine.total.bytes_in, 2000u);
  EXPECT_EQ(mine.per_node["node-0"].bytes_out, 1000u);
  // The keeper renews every quarter lease (250 ms here) with the counters.
  bool seen = false;
  for (int i = 0; i < 40 && !seen; ++i) {
    absl::SleepFor(absl::Milliseconds(100));
    auto status = c->Status();
    ASSERT_TRUE(status.ok());
    for (const SessionStatus& s : status->nodes[0].sessions) {
      seen |= s.stats.hits == 1 && s.stats.misses == 1 && s.stats.puts == 2;
    }
  }
  EXPECT_TRUE(seen) << "the node never reported this client's counters";
}

}  // namespace
}  // namespace meshpool
