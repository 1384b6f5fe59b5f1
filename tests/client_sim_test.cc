// GET/PUT/DELETE protocols against a real node and coordinator in this
// process, with the data path on the simulated fabric. The fabric's
// before-execute hook lets a test change node memory exactly between two of
// a client's one-sided operations: the interleavings the protocol must
// survive but a real network produces only rarely.
#include <atomic>
#include <cstring>
#include <iostream>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/client_test_peer.h"
#include "coordinator/coordinator.h"
#include "format/layout.h"
#include "gtest/gtest.h"
#include "meshpool/client.h"
#include "rdma/rdma.h"
#include "rdma/sim.h"
#include "store/slab_manager.h"
#include "store/store.h"
#include "tests/sim_cluster.h"
#include "tests/test_seed.h"

namespace meshpool {
namespace {

constexpr char kNodeName[] = "node-a";

class ClientSimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cluster = testing::SimCluster::Start(testing::TestSeed());
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    fabric_ = &cluster_->fabric();
    store::NodeOptions options;
    options.capacity_bytes = 16 << 20;
    options.slab_bytes = 1 << 20;
    Configure(options);
    auto node = cluster_->AddNode(options, kNodeName);
    ASSERT_TRUE(node.ok()) << node.status();
    node_ = *node;
    a_ = Connect("client-a");
    b_ = Connect("client-b");
    ASSERT_NE(a_, nullptr);
    ASSERT_NE(b_, nullptr);
  }
  // Lets a derived fixture change the node's options.
  virtual void Configure(store::NodeOptions& options) {}

  std::unique_ptr<Client> Connect(const std::string& name) {
    auto client = cluster_->Connect(name);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }

  // Runs `action` once, right before the first request matching `match`
  // executes; requests issued by `action` itself are not intercepted.
  void InterceptOnce(std::function<bool(const rdma::WorkRequest&)> match,
                     std::function<void(const rdma::WorkRequest&)> action) {
    fabric_->SetBeforeExecute(
        [this, match, action](absl::string_view, const rdma::WorkRequest& wr) {
          if (in_hook_ || fired_ > 0 || !match(wr)) return;
          in_hook_ = true;
          ++fired_;
          action(wr);
          in_hook_ = false;
        });
  }

  // Records every request the fabric executes until StopRecording().
  void StartRecording() {
    fabric_->SetBeforeExecute(
        [this](absl::string_view, const rdma::WorkRequest& wr) {
          absl::MutexLock lock(&recorded_mu_);
          recorded_.push_back(wr);
        });
  }
  std::vector<rdma::WorkRequest> StopRecording() {
    fabric_->SetBeforeExecute(nullptr);
    absl::MutexLock lock(&recorded_mu_);
    return std::move(recorded_);
  }
  static std::vector<rdma::WorkRequest> Cases(
      const std::vector<rdma::WorkRequest>& requests) {
    std::vector<rdma::WorkRequest> out;
    for (const rdma::WorkRequest& wr : requests) {
      if (wr.opcode == rdma::Opcode::kCompareSwap) out.push_back(wr);
    }
    return out;
  }

  // The index words `key` may live in: both its buckets, in bucket order.
  std::vector<uint64_t*> KeySlotWords(absl::string_view key) {
    const proto::NodeInfo& info = node_->info();
    format::BucketPair pair =
        format::BucketsFor(format::HashKey(key), info.layout().bucket_count());
    std::vector<uint64_t*> out;
    for (uint64_t bucket : {pair.first, pair.second}) {
      auto* words = reinterpret_cast<uint64_t*>(info.pool().addr() +
                                                info.layout().index_offset() +
                                                bucket * format::kBucketBytes);
      for (size_t i = 0; i < format::kSlotsPerBucket; ++i) {
        out.push_back(words + i);
      }
    }
    return out;
  }
  static int SlotsInUse(const std::vector<uint64_t*>& slots) {
    int n = 0;
    for (const uint64_t* w : slots) n += *w != 0;
    return n;
  }

  // An object READ: bucket READs are exactly one bucket long.
  static bool IsObjectRead(const rdma::WorkRequest& wr) {
    return wr.opcode == rdma::Opcode::kRead &&
           wr.length != format::kBucketBytes && wr.length != 8;
  }

  std::unique_ptr<testing::SimCluster> cluster_;  // before the clients
  rdma::SimFabric* fabric_ = nullptr;
  store::Node* node_ = nullptr;
  std::unique_ptr<Client> a_, b_;
  std::atomic<bool> in_hook_{false};
  std::atomic<int> fired_{0};
  absl::Mutex recorded_mu_;
  std::vector<rdma::WorkRequest> recorded_ ABSL_GUARDED_BY(recorded_mu_);
};

TEST_F(ClientSimTest, GetRetriesWhenObjectReplacedMidRead) {
  ASSERT_TRUE(a_->Put("k", std::string(1000, '1')).ok());
  // Between A's index READ and its object READ, B replaces the value and
  // the old object's memory is reused (scribbled over).
  InterceptOnce(IsObjectRead, [&](const rdma::WorkRequest& wr) {
    ASSERT_TRUE(b_->Put("k", std::string(1000, '2')).ok());
    std::memset(reinterpret_cast<void*>(wr.remote_addr), 0xEE,
                format::kObjectHeaderBytes);
  });
  absl::StatusOr<std::string> v = a_->Get("k");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, std::string(1000, '2'));
  EXPECT_EQ(fired_, 1);
}

TEST_F(ClientSimTest, GetNeverReturnsAValueWhoseBytesChangedMidRead) {
  ASSERT_TRUE(a_->Put("k", std::string(5000, 'a')).ok());
  // The old object's value bytes change under the READ (reuse without a
  // header change): the digest must catch it, then the re-read finds B's.
  InterceptOnce(IsObjectRead, [&](const rdma::WorkRequest& wr) {
    ASSERT_TRUE(b_->Put("k", std::string(5000, 'b')).ok());
    char* value =
        reinterpret_cast<char*>(wr.remote_addr) + format::ValueOffset(1);
    std::memset(value + 100, 'X', 10);
  });
  absl::StatusOr<std::string> v = a_->Get("k");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, std::string(5000, 'b'));
}

TEST_F(ClientSimTest, GetReturnsDataLossWhenObjectNeverVerifies) {
  ASSERT_TRUE(a_->Put("k", std::string(300, 'v')).ok());
  InterceptOnce(IsObjectRead, [&](const rdma::WorkRequest& wr) {
    // Persistent corruption of one value byte.
    reinterpret_cast<char*>(wr.remote_addr)[format::ValueOffset(1) + 7] ^= 1;
  });
  absl::StatusOr<std::string> v = a_->Get("k");
  EXPECT_EQ(v.status().code(), absl::StatusCode::kDataLoss) << v.status();
  // The rest of the store is unaffected.
  ASSERT_TRUE(a_->Put("other", "fine").ok());
  EXPECT_EQ(*b_->Get("other"), "fine");
}

TEST_F(ClientSimTest, PutThatLosesItsCasRaceRetriesAndPublishesOnce) {
  ASSERT_TRUE(a_->Put("k", "first").ok());
  InterceptOnce(
      [](const rdma::WorkRequest& wr) {
        return wr.opcode == rdma::Opcode::kCompareSwap;
      },
      [&](const rdma::WorkRequest&) {
        ASSERT_TRUE(b_->Put("k", "from-b").ok());
      });
  ASSERT_TRUE(a_->Put("k", "from-a").ok());
  EXPECT_EQ(fired_, 1);
  EXPECT_EQ(*b_->Get("k"), "from-a");
  // Exactly one slot held the key: one delete removes it.
  ASSERT_TRUE(a_->Delete("k").ok());
  EXPECT_EQ(b_->Get("k").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ClientSimTest, ConcurrentInsertOfANewKeyLeavesOneSlot) {
  // A is about to CAS an empty slot for a new key; B inserts the same key
  // first. A's CAS fails, it finds B's slot and replaces it.
  InterceptOnce(
      [](const rdma::WorkRequest& wr) {
        return wr.opcode == rdma::Opcode::kCompareSwap && wr.compare_add == 0;
      },
      [&](const rdma::WorkRequest&) {
        ASSERT_TRUE(b_->Put("new", "b").ok());
      });
  ASSERT_TRUE(a_->Put("new", "a").ok());
  EXPECT_EQ(*a_->Get("new"), "a");
  ASSERT_TRUE(b_->Delete("new").ok());
  EXPECT_FALSE(*a_->Exists("new"));
}

// A client remembers where it last saw each key's slot and, on its next
// GET, fetches that object in the same round trip as the index. Another
// client's writes make the hint stale; a stale hint is never served.
TEST_F(ClientSimTest, GetWithAStaleSlotHintReturnsTheCurrentValue) {
  ASSERT_TRUE(a_->Put("k", "v1").ok());
  ASSERT_EQ(*a_->Get("k"), "v1");         // A's hint: v1's slot and word
  ASSERT_TRUE(b_->Put("k", "v2").ok());  // the slot now holds another word
  EXPECT_EQ(*a_->Get("k"), "v2");
  ASSERT_TRUE(b_->Delete("k").ok());
  EXPECT_EQ(a_->Get("k").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(b_->Put("k", "v3").ok());  // back, in whichever slot is free
  EXPECT_EQ(*a_->Get("k"), "v3");
  EXPECT_EQ(*a_->Get("k"), "v3");        // and now through the fresh hint
}

TEST_F(ClientSimTest, GetWhoseHintedObjectIsReplacedInTheSameRoundTrip) {
  ASSERT_TRUE(a_->Put("k", std::string(2000, '1')).ok());  // A's hint
  // A's one-round-trip GET posts the buckets and the hinted object together;
  // B replaces the value and scribbles over the old object right before
  // A's object READ executes (after its bucket READs saw the old word).
  InterceptOnce(IsObjectRead, [&](const rdma::WorkRequest& wr) {
    ASSERT_TRUE(b_->Put("k", std::string(2000, '2')).ok());
    std::memset(
        reinterpret_cast<char*>(wr.remote_addr) + format::ValueOffset(1) + 10,
        'X', 10);
  });
  absl::StatusOr<std::string> v = a_->Get("k");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, std::string(2000, '2'));
  EXPECT_EQ(fired_, 1);
}

TEST_F(ClientSimTest, PutWithAStaleSlotHintReplacesTheCurrentValue) {
  ASSERT_TRUE(a_->Put("k", "a1").ok());  // A's hint
  ASSERT_TRUE(b_->Put("k", "b1").ok());
  ASSERT_TRUE(a_->Put("k", "a2").ok());  // hint stale: the full path
  EXPECT_EQ(*b_->Get("k"), "a2");
  // A's hint is fresh when its buckets are read with the object WRITE, and
  // stale by its CAS: the CAS fails and A publishes over B's value.
  InterceptOnce(
      [](const rdma::WorkRequest& wr) {
        return wr.opcode == rdma::Opcode::kCompareSwap;
      },
      [&](const rdma::WorkRequest&) {
        ASSERT_TRUE(b_->Put("k", "b2").ok());
      });
  ASSERT_TRUE(a_->Put("k", "a3").ok());
  EXPECT_EQ(fired_, 1);
  EXPECT_EQ(*b_->Get("k"), "a3");
  EXPECT_EQ(*a_->Get("k"), "a3");
  ASSERT_TRUE(a_->Delete("k").ok());
  EXPECT_FALSE(*b_->Exists("k"));
}

// A slot word does not name a key: after reclamation the same offset can
// hold another key's object whose fingerprint collides, so the slot holds
// the same word again. A PUT must not replace that slot on the strength of
// its hint (it would unlink the other key).
TEST_F(ClientSimTest, PutNeverReplacesAnotherKeysObjectBehindAnUnchangedSlotWord) {
  const std::string v1(100, '1'), v2(100, '2'), other(100, 'o');
  ASSERT_TRUE(a_->Put("k", v1).ok());
  std::atomic<uint64_t> object{0};
  InterceptOnce(IsObjectRead,
                [&](const rdma::WorkRequest& wr) { object = wr.remote_addr; });
  ASSERT_EQ(*a_->Get("k"), v1);  // A's hint now names k's slot and word
  ASSERT_NE(object.load(), 0u);
  // Same size, same offset, another key: what reclamation and reuse by a
  // key with a colliding fingerprint would leave behind.
  const proto::NodeInfo& info = node_->info();
  const uint64_t bytes = format::ObjectBytes(1, v1.size());
  format::EncodeObject(
      absl::MakeSpan(reinterpret_cast<char*>(object.load()), bytes), "x",
      format::HashKey("x"), other, info.incarnation(), 77);
  const uint64_t word =
      format::EncodeSlot(format::Fingerprint(format::HashKey("k")), bytes,
                         object.load() - info.pool().addr());
  auto count_word = [&] {
    const uint64_t* index = reinterpret_cast<const uint64_t*>(
        info.pool().addr() + info.layout().index_offset());
    int n = 0;
    for (uint64_t i = 0; i < info.layout().bucket_count() * 8; ++i) {
      n += index[i] == word;
    }
    return n;
  };
  ASSERT_EQ(count_word(), 1);
  // A's hint is young: its CAS goes fenced in the post that writes the
  // object and lands (the word is unchanged); the header READ before it
  // shows another key, so A puts the word back and publishes elsewhere.
  StartRecording();
  ASSERT_TRUE(a_->Put("k", v2).ok());
  std::vector<rdma::WorkRequest> cases = Cases(StopRecording());
  ASSERT_FALSE(cases.empty());
  EXPECT_TRUE(cases.front().fence) << "the PUT did not speculate";
  EXPECT_EQ(count_word(), 1) << "the other key's slot was replaced";
  EXPECT_EQ(*b_->Get("k"), v2);
  EXPECT_EQ(*a_->Get("k"), v2);
}

// A PUT of a key whose slot this client saw within the read lease publishes
// with a fenced CAS in the post that writes the object: one round trip.
TEST_F(ClientSimTest, PutWithAYoungHintPublishesInTheRoundTripThatWritesIt) {
  ASSERT_TRUE(a_->Put("k", "v1").ok());  // A's hint: the slot it published
  StartRecording();
  ASSERT_TRUE(a_->Put("k", "v2").ok());
  std::vector<rdma::WorkRequest> requests = StopRecording();
  // WRITE, flush READ, two bucket READs, the hinted header READ, the CAS.
  ASSERT_EQ(requests.size(), 6u);
  EXPECT_EQ(requests.front().opcode, rdma::Opcode::kWrite);
  EXPECT_EQ(Cases(requests).size(), 1u);
  EXPECT_EQ(requests.back().opcode, rdma::Opcode::kCompareSwap);
  EXPECT_TRUE(requests.back().fence);
  EXPECT_EQ(*b_->Get("k"), "v2");
  EXPECT_EQ(SlotsInUse(KeySlotWords("k")), 1);
  // And again from the hint that publish left.
  ASSERT_TRUE(a_->Put("k", "v3").ok());
  EXPECT_EQ(*b_->Get("k"), "v3");
  EXPECT_EQ(SlotsInUse(KeySlotWords("k")), 1);
}

// The hinted slot holds a copy of the key behind its first slot (left by two
// racing first inserts): readers see the first. A speculative CAS that
// lands on the hidden copy must still make the PUT visible.
TEST_F(ClientSimTest,
       SpeculativePutThatLandsOnAHiddenDuplicateTakesTheFirstSlot) {
  std::vector<uint64_t*> slots = KeySlotWords("k");
  ASSERT_TRUE(a_->Put("k", "old").ok());
  ASSERT_NE(*slots[0], 0u);
  const uint64_t old_word = *slots[0];
  const size_t later = slots.size() - 1;
  // Move the key to the last slot and let A see it there (its hint).
  *slots[later] = old_word;
  *slots[0] = 0;
  ASSERT_EQ(*a_->Get("k"), "old");
  ASSERT_TRUE(b_->Put("k", "newer").ok());  // replaces the last slot
  const uint64_t newer_word = *slots[later];
  ASSERT_NE(newer_word, old_word);
  // Readers now find "newer" first; the old object is a hidden duplicate
  // in the slot A's hint names, still holding A's hinted word.
  *slots[0] = newer_word;
  *slots[later] = old_word;
  ASSERT_EQ(*b_->Get("k"), "newer");
  StartRecording();
  ASSERT_TRUE(a_->Put("k", "mine").ok());
  std::vector<rdma::WorkRequest> cases = Cases(StopRecording());
  ASSERT_FALSE(cases.empty());
  EXPECT_TRUE(cases.front().fence) << "the PUT did not speculate";
  EXPECT_EQ(*b_->Get("k"), "mine");
  EXPECT_EQ(*a_->Get("k"), "mine");
  EXPECT_EQ(SlotsInUse(slots), 1) << "the duplicate was left behind";
  ASSERT_TRUE(a_->Delete("k").ok());
  EXPECT_FALSE(*b_->Exists("k"));
}

// Lost requests in a one-round-trip PUT: the fenced CAS never runs behind a
// lost WRITE or flush, so the key always reads as a value that was put.
TEST_F(ClientSimTest, HintedPutsWithLostRequestsNeverPublishAnUnwrittenObject) {
  std::string current = "v-start";
  ASSERT_TRUE(a_->Put("k", current).ok());
  rdma::SimFaults faults;
  faults.drop_probability = 0.2;
  int failed = 0;
  for (int i = 0; i < 60; ++i) {
    const std::string value = absl::StrCat("v", i, std::string(200, 'x'));
    fabric_->SetFaults(faults);
    absl::Status put = a_->Put("k", value);
    fabric_->SetFaults({});
    absl::StatusOr<std::string> got = b_->Get("k");
    ASSERT_TRUE(got.ok()) << "after put " << i << " (" << put
                          << "): " << got.status();
    if (put.ok()) {
      EXPECT_EQ(*got, value) << "put " << i;
    } else {
      ++failed;
      EXPECT_TRUE(*got == value || *got == current) << "put " << i;
    }
    current = *got;
  }
  EXPECT_GT(failed, 0) << "no request was lost";
}

// True when `wr` moves bytes straight to or from `buffer`.
bool TouchesBuffer(const rdma::WorkRequest& wr, absl::Span<const char> buffer) {
  const char* local = static_cast<const char*>(wr.local);
  return local >= buffer.data() && local < buffer.data() + buffer.size();
}

TEST_F(ClientSimTest, RegisteredBuffersMoveLargeValuesWithoutStaging) {
  std::vector<char> memory(1 << 20);
  auto registered = a_->RegisterBuffer(memory.data(), memory.size());
  ASSERT_TRUE(registered.ok()) << registered.status();
  absl::Span<char> buffer = (*registered)->span();
  const size_t kValue = 300 << 10;
  for (size_t i = 0; i < kValue; ++i) buffer[i] = static_cast<char>(i * 7);
  std::string expected(buffer.data(), kValue);

  std::atomic<int> direct_writes{0}, direct_reads{0};
  fabric_->SetBeforeExecute([&](absl::string_view, const rdma::WorkRequest& wr) {
    if (!TouchesBuffer(wr, buffer)) return;
    if (wr.opcode == rdma::Opcode::kWrite && wr.length == kValue) ++direct_writes;
    if (wr.opcode == rdma::Opcode::kRead && wr.length == kValue) ++direct_reads;
  });
  ASSERT_TRUE(a_->Put("big", absl::string_view(buffer.data(), kValue)).ok());
  EXPECT_EQ(direct_writes, 1) << "the value was not gathered from the buffer";
  EXPECT_EQ(*b_->Get("big"), expected);  // b_ reads through staging

  absl::Span<char> out = buffer.subspan(kValue + 4096);
  absl::StatusOr<size_t> n = a_->Get("big", out);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(direct_reads, 1) << "the value was not read into the buffer";
  EXPECT_EQ(absl::string_view(out.data(), *n), expected);

  // A registered buffer too small: OutOfRange, as with a plain one.
  EXPECT_EQ(a_->Get("big", out.subspan(0, 1000)).status().code(),
            absl::StatusCode::kOutOfRange);
}

TEST_F(ClientSimTest, ZeroCopyGetRetriesWhenValueReusedMidRead) {
  std::vector<char> memory(1 << 20);
  auto registered = a_->RegisterBuffer(memory.data(), memory.size());
  ASSERT_TRUE(registered.ok());
  absl::Span<char> out = (*registered)->span();
  ASSERT_TRUE(a_->Put("big", std::string(100 << 10, 'o')).ok());
  // Right before the value lands in the caller's buffer, B replaces the key
  // and the old value's bytes are overwritten.
  InterceptOnce(
      [&](const rdma::WorkRequest& wr) {
        return wr.opcode == rdma::Opcode::kRead && TouchesBuffer(wr, out);
      },
      [&](const rdma::WorkRequest& wr) {
        ASSERT_TRUE(b_->Put("big", std::string(100 << 10, 'n')).ok());
        std::memset(reinterpret_cast<void*>(wr.remote_addr), 'X', 64);
      });
  absl::StatusOr<size_t> n = a_->Get("big", out);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(fired_, 1);
  EXPECT_EQ(absl::string_view(out.data(), *n), std::string(100 << 10, 'n'));
}

TEST_F(ClientSimTest, DeadNodeMakesOperationsUnavailableNotHang) {
  ASSERT_TRUE(a_->Put("k", "v").ok());
  fabric_->KillNode(kNodeName);
  absl::StatusOr<std::string> v = a_->Get("k");
  EXPECT_EQ(v.status().code(), absl::StatusCode::kUnavailable) << v.status();
  EXPECT_NE(v.status().message().find("retry"), std::string::npos);
  EXPECT_EQ(a_->Put("k2", "v").code(), absl::StatusCode::kUnavailable);
}

TEST_F(ClientSimTest, BrokenEndpointsReconnectOnTheNextCall) {
  ASSERT_TRUE(a_->Put("k", "v").ok());
  fabric_->BreakEndpoints(kNodeName);
  absl::StatusOr<std::string> first = a_->Get("k");
  EXPECT_EQ(first.status().code(), absl::StatusCode::kUnavailable);
  absl::StatusOr<std::string> second = a_->Get("k");
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(*second, "v");
}

TEST_F(ClientSimTest, BatchPutWhoseEndpointBreaksMidBatchFailsTheRestCleanly) {
  // The endpoint breaks right before the first publishing CAS: that key and
  // every later key of the batch fail Unavailable; nothing is half-visible.
  InterceptOnce(
      [](const rdma::WorkRequest& wr) {
        return wr.opcode == rdma::Opcode::kCompareSwap;
      },
      [&](const rdma::WorkRequest&) { fabric_->BreakEndpoints(kNodeName); });
  std::vector<std::string> names = {"b0", "b1", "b2", "b3"};
  std::vector<absl::string_view> keys(names.begin(), names.end());
  std::vector<absl::string_view> values = {"v0", "v1", "v2", "v3"};
  std::vector<absl::Status> put = a_->BatchPut(keys, values);
  ASSERT_EQ(put.size(), 4u);
  for (const absl::Status& s : put) {
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  }
  for (absl::string_view k : keys) {
    EXPECT_EQ(b_->Get(k).status().code(), absl::StatusCode::kNotFound);
  }
  put = a_->BatchPut(keys, values);
  for (const absl::Status& s : put) EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(*b_->Get("b3"), "v3");
}

TEST_F(ClientSimTest, DroppedRequestsFailTheCallAndLeaveNoHalfPut) {
  rdma::SimFaults faults;
  faults.drop_probability = 1.0;
  fabric_->SetFaults(faults);
  EXPECT_EQ(a_->Put("k", "v").code(), absl::StatusCode::kUnavailable);
  fabric_->SetFaults({});
  EXPECT_EQ(a_->Get("k").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(a_->Put("k", "v").ok());
  EXPECT_EQ(*a_->Get("k"), "v");
}

TEST_F(ClientSimTest, DelayedRequestsStillCompleteInOrder) {
  rdma::SimFaults faults;
  faults.delay_probability = 0.5;
  faults.max_delay_polls = 3;
  fabric_->SetFaults(faults);
  for (int i = 0; i < 50; ++i) {
    std::string key = absl::StrCat("d", i);
    ASSERT_TRUE(a_->Put(key, key + "-value").ok()) << key;
  }
  for (int i = 0; i < 50; ++i) {
    std::string key = absl::StrCat("d", i);
    EXPECT_EQ(*b_->Get(key), key + "-value");
  }
}

TEST_F(ClientSimTest, SlabIsReleasedOnlyAfterItsLastObjectIsPublished) {
  // While "first" is about to be published, a second PUT does not fit in
  // the rest of the slab and takes a new one. The old slab must stay leased
  // until "first" is published: sealed earlier, it could be reclaimed and
  // reused under the pending CAS.
  uint64_t sealed_during = ~0ull;
  InterceptOnce(
      [](const rdma::WorkRequest& wr) {
        return wr.opcode == rdma::Opcode::kCompareSwap;
      },
      [&](const rdma::WorkRequest&) {
        ASSERT_TRUE(a_->Put("second", std::string(700 << 10, 's')).ok());
        sealed_during = node_->Stats().slabs_sealed();
      });
  ASSERT_TRUE(a_->Put("first", std::string(400 << 10, 'f')).ok());
  EXPECT_EQ(fired_, 1);
  EXPECT_EQ(sealed_during, 0u) << "slab sealed while an object in it was "
                                  "still to be published";
  EXPECT_EQ(node_->Stats().slabs_sealed(), 1u)
      << "the replaced slab should be released once its last object is in";
  EXPECT_EQ(*b_->Get("first"), std::string(400 << 10, 'f'));
  EXPECT_EQ(*b_->Get("second"), std::string(700 << 10, 's'));
}

// A node with short leases: 300 ms slabs (a 225 ms publish window) and a
// 20 ms read lease.
class ShortLeaseSimTest : public ClientSimTest {
 protected:
  void Configure(store::NodeOptions& options) override {
    options.slab_lease = absl::Milliseconds(300);
    options.max_read_lease = absl::Milliseconds(20);
  }
};

TEST_F(ShortLeaseSimTest, GetSlowerThanTheReadLeaseIsUnavailableNotDataLoss) {
  ASSERT_TRUE(a_->Put("k", std::string(1000, 'v')).ok());
  fabric_->SetBeforeExecute([](absl::string_view, const rdma::WorkRequest& wr) {
    if (IsObjectRead(wr)) absl::SleepFor(absl::Milliseconds(30));
  });
  absl::StatusOr<std::string> v = a_->Get("k");
  EXPECT_EQ(v.status().code(), absl::StatusCode::kUnavailable) << v.status();
  EXPECT_NE(v.status().message().find("read lease"), std::string::npos)
      << v.status();
  fabric_->SetBeforeExecute(nullptr);
  EXPECT_EQ(*a_->Get("k"), std::string(1000, 'v'));
}

// A hint older than the read lease may name a slot whose object was
// reclaimed and reused: such a PUT publishes after reading, unfenced.
TEST_F(ShortLeaseSimTest, PutWithAHintOlderThanTheReadLeaseDoesNotSpeculate) {
  ASSERT_TRUE(a_->Put("k", "v1").ok());
  absl::SleepFor(absl::Milliseconds(60));  // three read leases
  StartRecording();
  ASSERT_TRUE(a_->Put("k", "v2").ok());
  std::vector<rdma::WorkRequest> cases = Cases(StopRecording());
  ASSERT_EQ(cases.size(), 1u);
  EXPECT_FALSE(cases.front().fence);
  EXPECT_EQ(*b_->Get("k"), "v2");
}

TEST_F(ShortLeaseSimTest, PutWhoseLeaseEndsBeforeItsCasWritesAgainInANewSlab) {
  // The publish step stalls past the slab's publish window: the lease is
  // checked again right before the CAS, so the object is written again into
  // a fresh slab and published from there, never into the expiring one.
  std::vector<uint64_t> object_writes;
  std::atomic<bool> stalled{false};
  fabric_->SetBeforeExecute([&](absl::string_view, const rdma::WorkRequest& wr) {
    if (wr.opcode == rdma::Opcode::kWrite && wr.length > 1000) {
      object_writes.push_back(wr.remote_addr);
    }
    if (wr.opcode == rdma::Opcode::kRead && wr.length == format::kBucketBytes &&
        !object_writes.empty() && !stalled.exchange(true)) {
      absl::SleepFor(absl::Milliseconds(400));
    }
  });
  ASSERT_TRUE(a_->Put("k", std::string(2000, 'v')).ok());
  fabric_->SetBeforeExecute(nullptr);
  ASSERT_EQ(object_writes.size(), 2u) << "the object was not written again";
  uint64_t slab_bytes = node_->info().layout().slab_bytes();
  EXPECT_NE(object_writes[0] / slab_bytes, object_writes[1] / slab_bytes);
  EXPECT_EQ(*b_->Get("k"), std::string(2000, 'v'));
}

TEST(ClientConnect, OpTimeoutAtOrAboveTheNodesLeaseMarginIsInvalidArgument) {
  ClientOptions options;
  options.coordinator = "127.0.0.1:1";
  options.op_timeout = format::kLeaseMargin;
  auto client = Client::Connect(options);
  EXPECT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument)
      << client.status();
}

// A transport that, like verbs, must exchange a request and reply with the
// node over the control plane before an endpoint works.
class HandshakingTransport : public rdma::Transport {
 public:
  explicit HandshakingTransport(std::unique_ptr<rdma::Transport> inner)
      : inner_(std::move(inner)) {}
  rdma::TransportKind kind() const override { return inner_->kind(); }
  absl::StatusOr<std::unique_ptr<rdma::MemoryRegion>> RegisterMemory(
      void* addr, size_t length) override {
    return inner_->RegisterMemory(addr, length);
  }
  absl::StatusOr<std::string> Listen(absl::string_view bind) override {
    return inner_->Listen(bind);
  }
  absl::StatusOr<std::string> AcceptHandshake(
      absl::string_view request, const rdma::DataAccess&) override {
    ++accepted;
    return absl::StrCat("welcome ", request);
  }
  absl::StatusOr<std::unique_ptr<rdma::Endpoint>> Connect(
      absl::string_view peer, const rdma::Handshake& handshake) override {
    if (!handshake) return absl::FailedPreconditionError("no handshake given");
    absl::StatusOr<std::string> reply = handshake("qp 17");
    if (!reply.ok()) return reply.status();
    if (*reply != "welcome qp 17") {
      return absl::InternalError(absl::StrCat("bad handshake reply ", *reply));
    }
    return inner_->Connect(peer, handshake);
  }
  std::atomic<int> accepted{0};

 private:
  std::unique_ptr<rdma::Transport> inner_;
};

TEST(ClientBootstrapTest, EndpointHandshakeTravelsOverTheNodeControlPlane) {
  uint64_t seed = std::random_device()();
  std::cout << "seed=" << seed << std::endl;
  auto fabric = rdma::SimFabric::Create(seed);
  auto coordinator = coordinator::Coordinator::Start({});
  ASSERT_TRUE(coordinator.ok());
  auto node_transport =
      std::make_unique<HandshakingTransport>(fabric->CreateTransport("n"));
  HandshakingTransport* node_side = node_transport.get();
  store::NodeOptions options;
  options.coordinator = (*coordinator)->address();
  options.capacity_bytes = 8 << 20;
  options.slab_bytes = 1 << 20;
  options.huge_pages = false;
  auto node = store::Node::Start(options, std::move(node_transport));
  ASSERT_TRUE(node.ok()) << node.status();
  ClientOptions client_options;
  client_options.coordinator = (*coordinator)->address();
  auto client = ClientTestPeer::ConnectThrough(
      client_options,
      std::make_shared<HandshakingTransport>(fabric->CreateTransport("c")));
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Put("k", "v").ok());
  EXPECT_EQ(*(*client)->Get("k"), "v");
  EXPECT_GE(node_side->accepted.load(), 1);
}

}  // namespace
}  // namespace meshpool
