// store/pin_tables: client sessions, their pin tables, and what the node
// reads from them, on a pool in ordinary memory with a fake clock.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "format/layout.h"
#include "gtest/gtest.h"
#include "store/pin_tables.h"
#include "store/pool.h"
#include "tests/fake_env.h"

namespace meshpool::store {
namespace {

constexpr uint64_t kSlabs = 4;
constexpr uint32_t kSessions = 3;
constexpr uint32_t kPins = 16;
constexpr uint64_t kIncarnation = 5;
constexpr absl::Duration kLease = absl::Seconds(10);

class SessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<format::PoolLayout> layout = format::ComputeLayout(
        4 * 4096 + kSlabs * 4096, 4096, 16, kSessions, kPins);
    ASSERT_TRUE(layout.ok()) << layout.status();
    layout_ = *layout;
    memory_.assign(layout_.pool_bytes / 8, 0);
    PinTablesOptions options;
    options.layout = layout_;
    options.incarnation = kIncarnation;
    options.lease = kLease;
    options.env = &env_;
    absl::StatusOr<std::unique_ptr<PinTables>> pins =
        PinTables::Create(options, pool());
    ASSERT_TRUE(pins.ok()) << pins.status();
    pins_ = *std::move(pins);
  }

  char* pool() { return reinterpret_cast<char*>(memory_.data()); }
  uint64_t NowMs() const { return absl::ToUnixMillis(env_.Now()); }

  void WritePin(const SessionGrant& s, uint64_t entry, uint64_t offset,
                uint64_t expiry_ms) {
    format::PinEntry pin{offset, expiry_ms};
    std::memcpy(pool() + s.table_offset + entry * format::kPinEntryBytes, &pin,
                sizeof(pin));
  }
  bool TableIsZero(const SessionGrant& s) const {
    for (uint64_t w = 0; w < kPins * format::kPinEntryBytes / 8; ++w) {
      if (memory_[s.table_offset / 8 + w] != 0) return false;
    }
    return true;
  }
  // Writes an object (as a client's PUT would) at `offset`; returns its size.
  uint64_t PutObject(uint64_t offset, const std::string& key,
                     size_t value_bytes) {
    const uint64_t bytes = format::ObjectBytes(key.size(), value_bytes);
    format::EncodeObject(absl::MakeSpan(pool() + offset, bytes), key,
                         format::HashKey(key), std::string(value_bytes, 'v'),
                         kIncarnation, 1);
    return bytes;
  }
  SessionGrant Open(const std::string& client) {
    absl::StatusOr<SessionGrant> s = pins_->Open(client);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : SessionGrant{};
  }

  mutable testing::FakeEnv env_{absl::FromUnixSeconds(1'700'000'000)};
  format::PoolLayout layout_;
  std::vector<uint64_t> memory_;
  std::unique_ptr<PinTables> pins_;
};

proto::KvClientStats Stats(uint64_t hits, uint64_t puts) {
  proto::KvClientStats s;
  s.set_hits(hits);
  s.set_misses(1);
  s.set_puts(puts);
  s.set_bytes_in(10 * puts);
  s.set_bytes_out(10 * hits);
  s.set_pins(2);
  return s;
}

TEST_F(SessionTest, OpenAnswersItsTableTokenLeaseAndClock) {
  SessionGrant s = Open("client-a");
  EXPECT_LT(s.session, kSessions);
  EXPECT_NE(s.token, 0u);
  EXPECT_GE(s.table_offset, layout_.pin_area_offset);
  EXPECT_LE(s.table_offset + s.entries * format::kPinEntryBytes,
            layout_.pin_entry(layout_.pin_area_entries()));
  EXPECT_EQ(s.entries, kPins);
  EXPECT_EQ(s.lease, kLease);
  EXPECT_EQ(s.node_clock_ms, NowMs());
  SessionGrant t = Open("client-b");
  EXPECT_NE(t.session, s.session);
  EXPECT_NE(t.token, s.token);
  EXPECT_EQ(pins_->open_sessions(), 2u);
  EXPECT_EQ(pins_->next_expiry(), env_.Now() + kLease);
}

TEST_F(SessionTest, EmptyClientIdIsInvalidArgument) {
  EXPECT_EQ(pins_->Open("").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SessionTest, RenewExtendsTheLeaseAndCloseEndsTheSession) {
  SessionGrant s = Open("c");
  env_.Advance(kLease * 3 / 4);
  absl::StatusOr<uint64_t> clock =
      pins_->Renew(s.session, s.token, Stats(1, 1));
  ASSERT_TRUE(clock.ok()) << clock.status();
  EXPECT_EQ(*clock, NowMs());
  env_.Advance(kLease * 3 / 4);  // 1.5 leases after open, 0.75 after renewal
  EXPECT_EQ(pins_->ExpireStale(), 0u);
  ASSERT_TRUE(pins_->Renew(s.session, s.token, Stats(2, 2)).ok());
  ASSERT_TRUE(pins_->Close(s.session, s.token, Stats(3, 3)).ok());
  EXPECT_EQ(pins_->open_sessions(), 0u);
  EXPECT_EQ(pins_->Renew(s.session, s.token, Stats(3, 3)).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(pins_->Close(s.session, s.token, Stats(3, 3)).code(),
            absl::StatusCode::kNotFound);
}

TEST_F(SessionTest, WrongTokenOrUnknownSessionIsNotFound) {
  SessionGrant s = Open("c");
  absl::Status renew =
      pins_->Renew(s.session, s.token + 1, Stats(0, 0)).status();
  EXPECT_EQ(renew.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(renew.message().find("open a new session"), std::string::npos);
  EXPECT_EQ(pins_->Close(s.session, s.token ^ 1, Stats(0, 0)).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(pins_->Renew(kSessions, s.token, Stats(0, 0)).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(pins_->Renew(UINT32_MAX, 0, Stats(0, 0)).status().code(),
            absl::StatusCode::kNotFound);
  // The session itself is untouched by the bad calls.
  EXPECT_TRUE(pins_->Renew(s.session, s.token, Stats(0, 0)).ok());
}

TEST_F(SessionTest, AFullPinAreaIsResourceExhaustedAndFreedTablesRestFirst) {
  std::vector<SessionGrant> open;
  for (uint32_t i = 0; i < kSessions; ++i) open.push_back(Open("c"));
  absl::Status full = pins_->Open("one too many").status();
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(full.message(), "no free pin table of 16"))
      << full;
  EXPECT_TRUE(absl::StrContains(full.message(), "3 open sessions hold 48"))
      << full;
  ASSERT_TRUE(pins_->Close(open[2].session, open[2].token, {}).ok());
  ASSERT_TRUE(pins_->Close(open[0].session, open[0].token, {}).ok());
  // Freed tables rest first (a dead client's late WRITE lands meanwhile).
  absl::Status soon = pins_->Open("too soon").status();
  EXPECT_EQ(soon.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(soon.message(), "32 rest for")) << soon;
  env_.Advance(kPinTableQuarantine - absl::Milliseconds(1));
  EXPECT_EQ(pins_->Open("still too soon").status().code(),
            absl::StatusCode::kResourceExhausted);
  env_.Advance(absl::Milliseconds(1));
  const SessionGrant d = Open("d");
  const SessionGrant e = Open("e");
  // The freed entries come back, each to one table.
  std::vector<uint64_t> offsets = {d.table_offset, e.table_offset};
  std::sort(offsets.begin(), offsets.end());
  EXPECT_EQ(offsets, (std::vector<uint64_t>{open[0].table_offset,
                                            open[2].table_offset}));
  EXPECT_EQ(pins_->open_sessions(), 3u);
}

TEST_F(SessionTest, AReissuedTableIsZeroedAgain) {
  SessionGrant s = Open("c");
  ASSERT_TRUE(pins_->Close(s.session, s.token, {}).ok());
  // A late WRITE from the closed session, while the table rests.
  WritePin(s, 1, layout_.slab_offset(1), format::kPinForever);
  env_.Advance(kPinTableQuarantine);
  bool reissued = false;
  for (uint32_t i = 0; i < kSessions; ++i) {
    SessionGrant again = Open("next");
    if (again.table_offset == s.table_offset) {
      reissued = true;
      EXPECT_TRUE(TableIsZero(again));
    }
  }
  EXPECT_TRUE(reissued);
}

TEST_F(SessionTest, CloseZeroesTheTable) {
  SessionGrant s = Open("c");
  WritePin(s, 0, layout_.slab_offset(1), format::kPinForever);
  WritePin(s, kPins - 1, layout_.slab_offset(2), NowMs() + 1000);
  ASSERT_FALSE(TableIsZero(s));
  ASSERT_TRUE(pins_->Close(s.session, s.token, {}).ok());
  EXPECT_TRUE(TableIsZero(s));
}

TEST_F(SessionTest, ExpiredSessionStopsProtectingAndItsTableIsZeroed) {
  SessionGrant s = Open("dies");
  SessionGrant other = Open("lives");
  WritePin(s, 3, layout_.slab_offset(1) + 64, format::kPinForever);
  WritePin(other, 0, layout_.slab_offset(2), format::kPinForever);
  const std::vector<uint64_t> slabs = {1, 2};
  EXPECT_EQ(pins_->PinnedSlabs(slabs), (std::vector<bool>{true, true}));
  env_.Advance(kLease / 2);
  ASSERT_TRUE(pins_->Renew(other.session, other.token, {}).ok());
  env_.Advance(kLease / 2);  // `dies` never renewed: its lease just passed
  // Its pins no longer count, even before the node expires it.
  EXPECT_EQ(pins_->PinnedSlabs(slabs), (std::vector<bool>{false, true}));
  EXPECT_FALSE(TableIsZero(s));
  EXPECT_EQ(pins_->ExpireStale(), 1u);
  EXPECT_TRUE(TableIsZero(s));
  EXPECT_FALSE(TableIsZero(other));
  EXPECT_EQ(pins_->Renew(s.session, s.token, {}).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(pins_->open_sessions(), 1u);
}

TEST_F(SessionTest, RenewAfterTheLeasePassedIsNotFoundAndEndsTheSession) {
  SessionGrant s = Open("late");
  WritePin(s, 0, layout_.slab_offset(0), format::kPinForever);
  env_.Advance(kLease);
  absl::Status late = pins_->Renew(s.session, s.token, {}).status();
  EXPECT_EQ(late.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(late.message().find("expired"), std::string::npos);
  EXPECT_TRUE(TableIsZero(s));
  EXPECT_EQ(pins_->open_sessions(), 0u);
}

TEST_F(SessionTest, PinnedSlabsCountsHardAndUnexpiredPinsOnly) {
  SessionGrant s = Open("c");
  WritePin(s, 0, layout_.slab_offset(0) + 128, format::kPinForever);
  WritePin(s, 1, layout_.slab_offset(1), NowMs() + 1);
  WritePin(s, 2, layout_.slab_offset(2), NowMs());      // lapsed
  WritePin(s, 3, layout_.slab_offset(3), NowMs() - 5);  // lapsed
  WritePin(s, 4, 0, format::kPinForever);               // unused entry
  WritePin(s, 5, layout_.index_offset, format::kPinForever);  // not in a slab
  EXPECT_EQ(pins_->PinnedSlabs({0, 1, 2, 3}),
            (std::vector<bool>{true, true, false, false}));
  env_.Advance(absl::Milliseconds(1));  // the TTL pin lapses too
  EXPECT_EQ(pins_->PinnedSlabs({3, 1, 0}),
            (std::vector<bool>{false, false, true}));
  EXPECT_EQ(pins_->PinnedSlabs({}), std::vector<bool>{});
}

TEST_F(SessionTest, StatsCountDistinctPinnedObjectsAndSkipGarbage) {
  SessionGrant a = Open("a");
  SessionGrant b = Open("b");
  const uint64_t o1 = layout_.slab_offset(0);
  const uint64_t o2 = layout_.slab_offset(1) + 256;
  const uint64_t bytes1 = PutObject(o1, "first", 300);
  const uint64_t bytes2 = PutObject(o2, "second", 1000);
  WritePin(a, 0, o1, format::kPinForever);
  WritePin(a, 1, o1, NowMs() + 100);  // the same object twice
  WritePin(a, 2, o2, NowMs() + 100);
  WritePin(b, 0, o2, format::kPinForever);  // and by another session
  WritePin(b, 1, layout_.slab_offset(2),
           format::kPinForever);                        // zeros: no object
  WritePin(b, 2, o1 + 64, format::kPinForever);         // inside an object
  WritePin(b, 3, o2, NowMs() - 1);                      // lapsed
  // A torn header: its checksum no longer matches.
  const uint64_t o3 = layout_.slab_offset(3);
  PutObject(o3, "torn", 10);
  memory_[o3 / 8 + 2] ^= 1;
  WritePin(b, 4, o3, format::kPinForever);
  proto::NodeStats stats;
  pins_->FillStats(&stats);
  EXPECT_EQ(stats.pinned_objects(), 2u);
  EXPECT_EQ(stats.pinned_bytes(), bytes1 + bytes2);
  ASSERT_EQ(stats.sessions_size(), 2);
  for (const proto::SessionStats& s : stats.sessions()) {
    if (s.client_id() == "a") {
      EXPECT_EQ(s.session(), a.session);
      EXPECT_EQ(s.pinned_objects(), 2u);
      EXPECT_EQ(s.pinned_bytes(), bytes1 + bytes2);
    } else {
      EXPECT_EQ(s.client_id(), "b");
      EXPECT_EQ(s.pinned_objects(), 1u);
      EXPECT_EQ(s.pinned_bytes(), bytes2);
    }
  }
}

TEST_F(SessionTest, ClientTotalsIncludeClosedAndExpiredSessions) {
  SessionGrant a = Open("a");
  SessionGrant b = Open("b");
  SessionGrant c = Open("c");
  ASSERT_TRUE(pins_->Renew(a.session, a.token, Stats(5, 1)).ok());
  ASSERT_TRUE(pins_->Renew(a.session, a.token, Stats(7, 2)).ok());  // replaces
  ASSERT_TRUE(pins_->Renew(b.session, b.token, Stats(10, 0)).ok());
  ASSERT_TRUE(pins_->Close(b.session, b.token, Stats(11, 4)).ok());
  ASSERT_TRUE(pins_->Renew(c.session, c.token, Stats(100, 0)).ok());
  env_.Advance(kLease / 2);
  ASSERT_TRUE(pins_->Renew(a.session, a.token, Stats(7, 2)).ok());
  env_.Advance(kLease / 2);
  ASSERT_EQ(pins_->ExpireStale(), 1u);  // c
  proto::NodeStats stats;
  pins_->FillStats(&stats);
  EXPECT_EQ(stats.clients_total().hits(), 7u + 11u + 100u);
  EXPECT_EQ(stats.clients_total().puts(), 2u + 4u);
  EXPECT_EQ(stats.clients_total().misses(), 3u);
  EXPECT_EQ(stats.clients_total().bytes_in(), 60u);
  EXPECT_EQ(stats.clients_total().bytes_out(), 1180u);
  EXPECT_EQ(stats.clients_total().pins(), 6u);
  ASSERT_EQ(stats.sessions_size(), 1);
  EXPECT_EQ(stats.sessions(0).client_id(), "a");
  EXPECT_EQ(stats.sessions(0).stats().hits(), 7u);
}

// One tenant at its cap of sessions leaves the other tables to the others;
// a closed or lapsed session no longer counts.
TEST_F(SessionTest, ATenantAtItsSessionCapLeavesTheOtherTablesToOthers) {
  PinTablesOptions options;
  options.layout = layout_;
  options.incarnation = kIncarnation;
  options.lease = kLease;
  options.env = &env_;
  options.max_sessions_per_tenant = 1;
  absl::StatusOr<std::unique_ptr<PinTables>> pins =
      PinTables::Create(options, pool());
  ASSERT_TRUE(pins.ok()) << pins.status();
  absl::StatusOr<SessionGrant> a1 = (*pins)->Open("a-1", "team-a");
  ASSERT_TRUE(a1.ok()) << a1.status();
  absl::StatusOr<SessionGrant> a2 = (*pins)->Open("a-2", "team-a");
  EXPECT_EQ(a2.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(
      absl::StrContains(a2.status().message(),
                        "'team-a' hold 1 of this node's 1 client sessions"))
      << a2.status();
  absl::StatusOr<SessionGrant> b1 = (*pins)->Open("b-1", "team-b");
  ASSERT_TRUE(b1.ok()) << b1.status();
  ASSERT_TRUE((*pins)->Close(a1->session, a1->token, {}).ok());
  a2 = (*pins)->Open("a-2", "team-a");
  ASSERT_TRUE(a2.ok()) << a2.status();
  env_.Advance(kLease + absl::Milliseconds(1));  // a2 and b1 lapse
  ASSERT_TRUE((*pins)->Renew(b1->session, b1->token, {}).status().code() ==
              absl::StatusCode::kNotFound);
  EXPECT_TRUE((*pins)->Open("a-3", "team-a").ok());
}

TEST(PinTablesCreate, RejectsLayoutsWithoutPinAreaAndBadLeases) {
  std::vector<uint64_t> memory(1 << 20);
  absl::StatusOr<format::PoolLayout> layout = format::ComputeLayout(8 << 20);
  ASSERT_TRUE(layout.ok());
  PinTablesOptions options;
  options.layout = *layout;
  options.layout.pin_sessions = 0;
  char* pool = reinterpret_cast<char*>(memory.data());
  EXPECT_EQ(PinTables::Create(options, pool).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.layout = *layout;
  options.lease = absl::ZeroDuration();
  EXPECT_EQ(PinTables::Create(options, pool).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.lease = absl::Hours(25);
  EXPECT_EQ(PinTables::Create(options, pool).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.lease = absl::Seconds(1);
  EXPECT_EQ(PinTables::Create(options, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

std::unique_ptr<PinTables> MakeTables(const format::PoolLayout& layout,
                                      char* pool, Env* env) {
  PinTablesOptions options;
  options.layout = layout;
  options.incarnation = kIncarnation;
  options.lease = kLease;
  options.env = env;
  absl::StatusOr<std::unique_ptr<PinTables>> pins =
      PinTables::Create(options, pool);
  EXPECT_TRUE(pins.ok()) << pins.status();
  return pins.ok() ? *std::move(pins) : nullptr;
}

// Sessions ask for the table size they need; the area gives what it has,
// halving, and refuses only when not even the floor is free.
TEST(PinTablesSizes, SessionsGetTheTableTheyAskForOrLessWhenShort) {
  testing::FakeEnv env{absl::FromUnixSeconds(1'700'000'000)};
  // Room for 4 default tables of 256 entries: 1,024 entries.
  absl::StatusOr<format::PoolLayout> layout =
      format::ComputeLayout(8 << 20, 0, 0, 4, 256);
  ASSERT_TRUE(layout.ok()) << layout.status();
  // Mapped, not touched: the tables touch only the pin area.
  absl::StatusOr<Pool> pool = Pool::Create(layout->pool_bytes, false);
  ASSERT_TRUE(pool.ok()) << pool.status();
  std::unique_ptr<PinTables> pins = MakeTables(*layout, pool->data(), &env);
  ASSERT_NE(pins, nullptr);
  absl::StatusOr<SessionGrant> big = pins->Open("big", "", 512);
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(big->entries, 512u);
  absl::StatusOr<SessionGrant> plain = pins->Open("default");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->entries, 256u);  // the layout's pins_per_session
  // 256 left: asking 40,000 (clamped to 16,384) halves down to 256.
  absl::StatusOr<SessionGrant> greedy = pins->Open("greedy", "", 40000);
  ASSERT_TRUE(greedy.ok()) << greedy.status();
  EXPECT_EQ(greedy->entries, 256u);
  absl::Status none = pins->Open("late", "", 64).status();
  EXPECT_EQ(none.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(none.message(), "no free pin table of 64"))
      << none;
  // The tables are disjoint and inside the pin area.
  std::vector<std::pair<uint64_t, uint64_t>> tables;
  for (const SessionGrant& g : {*big, *plain, *greedy}) {
    tables.push_back(
        {g.table_offset, g.table_offset + g.entries * format::kPinEntryBytes});
  }
  std::sort(tables.begin(), tables.end());
  EXPECT_GE(tables.front().first, layout->pin_area_offset);
  EXPECT_LE(tables.back().second,
            layout->pin_entry(layout->pin_area_entries()));
  for (size_t i = 1; i < tables.size(); ++i) {
    EXPECT_LE(tables[i - 1].second, tables[i].first);
  }
}

// A 1 GiB node's default layout opens 4,096 sessions of 256 pins; the
// 4,097th is refused; the evictor's scan sees a pin in the last table; the
// entries of closed neighbours merge into tables twice as large.
TEST(PinTablesSizes, FourThousandSessionsOpenOnAGibNodeAndTheScanSeesThemAll) {
  testing::FakeEnv env{absl::FromUnixSeconds(1'700'000'000)};
  absl::StatusOr<format::PoolLayout> layout =
      format::ComputeLayout(uint64_t{1} << 30);
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_EQ(layout->pin_sessions, 4096u);
  ASSERT_EQ(layout->pins_per_session, 256u);
  // Mapped, not touched: the tables touch only the pin area.
  absl::StatusOr<Pool> pool = Pool::Create(layout->pool_bytes, false);
  ASSERT_TRUE(pool.ok()) << pool.status();
  std::unique_ptr<PinTables> pins = MakeTables(*layout, pool->data(), &env);
  ASSERT_NE(pins, nullptr);
  std::vector<SessionGrant> open;
  for (int i = 0; i < 4096; ++i) {
    absl::StatusOr<SessionGrant> s = pins->Open(absl::StrCat("engine-", i));
    ASSERT_TRUE(s.ok()) << i << ": " << s.status();
    ASSERT_EQ(s->entries, 256u);
    open.push_back(*s);
  }
  EXPECT_EQ(pins->open_sessions(), 4096u);
  EXPECT_EQ(pins->Open("one more").status().code(),
            absl::StatusCode::kResourceExhausted);
  // A hard pin in the last table's last entry protects slab 7.
  const SessionGrant& last = open.back();
  format::PinEntry pin{layout->slab_offset(7), format::kPinForever};
  std::memcpy(pool->data() + last.table_offset + 255 * format::kPinEntryBytes,
              &pin, sizeof(pin));
  std::vector<bool> pinned = pins->PinnedSlabs({6, 7});
  EXPECT_EQ(pinned, (std::vector<bool>{false, true}));
  // Close the lower half; once it rested, its entries hold 1,024 tables of
  // 512 (it is one run of 524,288 entries).
  std::sort(open.begin(), open.end(), [](const auto& a, const auto& b) {
    return a.table_offset < b.table_offset;
  });
  for (int i = 0; i < 2048; ++i) {
    ASSERT_TRUE(pins->Close(open[i].session, open[i].token, {}).ok());
  }
  env.Advance(kPinTableQuarantine);
  for (int i = 0; i < 1024; ++i) {
    absl::StatusOr<SessionGrant> s = pins->Open("wide", "", 512);
    ASSERT_TRUE(s.ok()) << i << ": " << s.status();
    ASSERT_EQ(s->entries, 512u) << i;
  }
  EXPECT_EQ(pins->open_sessions(), 2048u + 1024u);
  EXPECT_EQ(pins->free_pin_entries(), 0u);
}

}  // namespace
}  // namespace meshpool::store
