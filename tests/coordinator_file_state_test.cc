// The durable coordinator state (coordinator/file_state.h) and its files
// (coordinator/state_log.h): what survives a reopen, torn tails cut off at
// every byte, corruption refused, compaction and its crash points.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "coordinator/file_state.h"
#include "coordinator/state_log.h"
#include "gtest/gtest.h"
#include "tests/fake_env.h"
#include "tests/state_entries.h"
#include "tests/temp_dir.h"
#include "tests/test_seed.h"

namespace meshpool::coordinator {
namespace {

using testing::ScopedTempDir;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::vector<std::string> LogFiles(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::string name = e.path().filename().string();
    if (absl::StartsWith(name, "state.log.")) out.push_back(name);
  }
  return out;
}

// ---- StateLog ----------------------------------------------------------------

TEST(StateLog, RecordsSurviveReopenInOrder) {
  ScopedTempDir dir;
  {
    StateLog::Contents c;
    auto log = StateLog::Open(dir.path(), 0, &c);
    ASSERT_TRUE(log.ok()) << log.status();
    EXPECT_TRUE(c.records.empty());
    for (const std::string& r :
         std::vector<std::string>{"one", "", std::string(100000, 'x'), "four"}) {
      ASSERT_TRUE(log->Append(r).ok());
    }
  }
  StateLog::Contents c;
  ASSERT_TRUE(StateLog::Open(dir.path(), 0, &c).ok());
  EXPECT_EQ(c.records, (std::vector<std::string>{"one", "", std::string(100000, 'x'), "four"}));
  EXPECT_EQ(c.dropped_tail_bytes, 0u);
}

TEST(StateLog, TornTailIsCutAtEveryByteOfTheLastRecord) {
  ScopedTempDir dir;
  const std::string path = dir.path() + "/state.log.0";
  {
    StateLog::Contents c;
    auto log = StateLog::Open(dir.path(), 0, &c);
    ASSERT_TRUE(log.ok());
    ASSERT_TRUE(log->Append("first").ok());
    ASSERT_TRUE(log->Append("second record").ok());
  }
  const std::string whole = ReadFile(path);
  const size_t last = whole.size() - kStateFrameBytes - std::string("second record").size();
  for (size_t cut = last; cut < whole.size(); ++cut) {
    WriteFile(path, whole.substr(0, cut));
    StateLog::Contents c;
    auto log = StateLog::Open(dir.path(), 0, &c);
    ASSERT_TRUE(log.ok()) << "cut at " << cut << ": " << log.status();
    ASSERT_EQ(c.records, std::vector<std::string>{"first"}) << "cut at " << cut;
    EXPECT_EQ(c.dropped_tail_bytes, cut - last);
    EXPECT_EQ(ReadFile(path).size(), last) << "the torn bytes are truncated away";
    // Appending after the cut continues a clean log.
    ASSERT_TRUE(log->Append("again").ok());
    StateLog::Contents again;
    ASSERT_TRUE(StateLog::Open(dir.path(), 0, &again).ok());
    EXPECT_EQ(again.records, (std::vector<std::string>{"first", "again"}));
  }
}

TEST(StateLog, ZerosAfterTheLastRecordAreATornTail) {
  ScopedTempDir dir;
  const std::string path = dir.path() + "/state.log.0";
  {
    StateLog::Contents c;
    auto log = StateLog::Open(dir.path(), 0, &c);
    ASSERT_TRUE(log.ok());
    ASSERT_TRUE(log->Append("kept").ok());
  }
  WriteFile(path, ReadFile(path) + std::string(4096, '\0'));
  StateLog::Contents c;
  ASSERT_TRUE(StateLog::Open(dir.path(), 0, &c).ok());
  EXPECT_EQ(c.records, std::vector<std::string>{"kept"});
  EXPECT_EQ(c.dropped_tail_bytes, 4096u);
}

TEST(StateLog, DamageInTheMiddleIsDataLossNamingFileAndOffset) {
  ScopedTempDir dir;
  const std::string path = dir.path() + "/state.log.0";
  {
    StateLog::Contents c;
    auto log = StateLog::Open(dir.path(), 0, &c);
    ASSERT_TRUE(log.ok());
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(log->Append(absl::StrCat("record ", i)).ok());
  }
  const std::string good = ReadFile(path);
  const size_t second = 8 + kStateFrameBytes + 8;  // magic, frame, "record 0"
  // A flipped payload byte, checksum byte, length byte and marker byte of
  // the second record: each leaves a valid third record after it.
  for (size_t at : {second + kStateFrameBytes + 2, second + 9, second + 4, second}) {
    std::string bad = good;
    bad[at] ^= 0x40;
    WriteFile(path, bad);
    StateLog::Contents c;
    auto log = StateLog::Open(dir.path(), 0, &c);
    ASSERT_EQ(log.status().code(), absl::StatusCode::kDataLoss) << "byte " << at;
    EXPECT_TRUE(absl::StrContains(log.status().message(), path)) << log.status();
    EXPECT_TRUE(absl::StrContains(log.status().message(), absl::StrCat("offset ", second)))
        << log.status();
    EXPECT_EQ(ReadFile(path), bad) << "a refused log is left as it was";
  }
}

TEST(StateLog, NotAStateFileIsDataLoss) {
  ScopedTempDir dir;
  WriteFile(dir.path() + "/state.log.0", "this is some other file");
  StateLog::Contents c;
  EXPECT_EQ(StateLog::Open(dir.path(), 0, &c).status().code(), absl::StatusCode::kDataLoss);
  WriteFile(dir.path() + "/state.snapshot", "garbage!garbage!garbage!");
  EXPECT_EQ(StateLog::ReadSnapshot(dir.path()).status().code(), absl::StatusCode::kDataLoss);
}

TEST(StateLog, CompactionSwitchesGenerationAndDropsTheOldLog) {
  ScopedTempDir dir;
  StateLog::Contents c;
  auto log = StateLog::Open(dir.path(), 0, &c);
  ASSERT_TRUE(log.ok());
  ASSERT_TRUE(log->Append("before").ok());
  ASSERT_TRUE(log->Compact("snapshot of generation 1").ok());
  ASSERT_TRUE(log->Append("after").ok());
  EXPECT_EQ(log->generation(), 1u);
  EXPECT_EQ(LogFiles(dir.path()), std::vector<std::string>{"state.log.1"});
  auto snapshot = StateLog::ReadSnapshot(dir.path());
  ASSERT_TRUE(snapshot.ok());
  EXPECT_EQ(*snapshot, "snapshot of generation 1");
  StateLog::Contents after;
  ASSERT_TRUE(StateLog::Open(dir.path(), 1, &after).ok());
  EXPECT_EQ(after.records, std::vector<std::string>{"after"});
}

TEST(StateLog, ALogLeftByACompactionThatCrashedBeforeItsCommitIsDropped) {
  ScopedTempDir dir;
  {
    StateLog::Contents c;
    auto log = StateLog::Open(dir.path(), 0, &c);
    ASSERT_TRUE(log.ok());
    ASSERT_TRUE(log->Append("still current").ok());
  }
  // The crash left the next generation's empty log and a temporary
  // snapshot, but never renamed the snapshot into place.
  WriteFile(dir.path() + "/state.log.1", "MPSTATE1");
  WriteFile(dir.path() + "/state.snapshot.tmp", "half");
  auto snapshot = StateLog::ReadSnapshot(dir.path());
  ASSERT_TRUE(snapshot.ok());
  EXPECT_EQ(*snapshot, "");  // no snapshot: generation 0 is current
  StateLog::Contents c;
  ASSERT_TRUE(StateLog::Open(dir.path(), 0, &c).ok());
  EXPECT_EQ(c.records, std::vector<std::string>{"still current"});
  EXPECT_EQ(LogFiles(dir.path()), std::vector<std::string>{"state.log.0"});
}

// ---- FileCoordinatorState ----------------------------------------------------

proto::NodeEntry Node(const std::string& id, uint64_t incarnation) {
  return testing::StateNode(id, incarnation);
}

proto::RegionInfo RegionNamed(const std::string& name, uint64_t id) {
  return testing::StateRegion(name, id);
}

std::unique_ptr<CoordinatorState> Open(const std::string& dir, FileStateLoad* load = nullptr,
                                       size_t compact_after = 4096, Env* env = nullptr) {
  FileStateOptions o;
  o.dir = dir;
  o.first_region_id = 1000;
  o.compact_after_records = compact_after;
  o.env = env;
  auto state = OpenFileCoordinatorState(o, load);
  EXPECT_TRUE(state.ok()) << state.status();
  return state.ok() ? *std::move(state) : nullptr;
}

TEST(FileCoordinatorState, EveryDurableFieldSurvivesAReopen) {
  ScopedTempDir dir;
  testing::FakeEnv env;
  {
    FileStateLoad load;
    auto s = Open(dir.path(), &load);
    ASSERT_NE(s, nullptr);
    EXPECT_TRUE(load.fresh);
    ASSERT_EQ(*s->UpsertNode(Node("a", 11)), 1u);
    ASSERT_EQ(*s->UpsertNode(Node("b", 22)), 2u);
    ASSERT_EQ(*s->MarkDead("a"), 3u);
    ASSERT_EQ(*s->BumpEpoch(), 4u);
    ASSERT_TRUE(s->RecordHeartbeat("b", 999, proto::NodeStats()).ok());
    EXPECT_EQ(*s->NextRegionId(), 1000u);
    EXPECT_EQ(*s->NextRegionId(), 1001u);
    ASSERT_TRUE(s->PutRegion(RegionNamed("x", 1000)).ok());
    ASSERT_TRUE(s->PutRegion(RegionNamed("y", 1001)).ok());
    ASSERT_TRUE(s->RenameRegion("x", "z", false).ok());
    ASSERT_TRUE(s->RemoveRegion("y").ok());
    EXPECT_EQ(s->RemoveRegion("y").status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(s->MarkDead("nobody").status().code(), absl::StatusCode::kNotFound);
  }
  FileStateLoad load;
  auto s = Open(dir.path(), &load, 4096, &env);
  ASSERT_NE(s, nullptr);
  EXPECT_FALSE(load.fresh);
  EXPECT_EQ(load.records_replayed, 10u);  // the failed calls logged nothing
  auto map = s->Snapshot();
  ASSERT_TRUE(map.ok());
  EXPECT_EQ(map->epoch(), 4u);
  ASSERT_EQ(map->nodes_size(), 2);
  EXPECT_EQ(map->nodes(0).info().incarnation(), 11u);
  EXPECT_EQ(map->nodes(0).state(), proto::NODE_DEAD) << "a fenced node stays fenced";
  EXPECT_EQ(map->nodes(1).state(), proto::NODE_ALIVE);
  // Liveness is not durable: an alive node counts as heard from at load.
  EXPECT_EQ(map->nodes(1).last_heartbeat_unix_ms(), absl::ToUnixMillis(env.Now()));
  EXPECT_EQ(*s->NextRegionId(), 1002u) << "ids are never handed out twice";
  auto regions = s->ListRegions("");
  ASSERT_TRUE(regions.ok());
  ASSERT_EQ(regions->size(), 1u);
  EXPECT_EQ((*regions)[0].name(), "z");
  EXPECT_EQ((*regions)[0].region_id(), 1000u);
  EXPECT_EQ(*s->UpsertNode(Node("c", 33)), 5u) << "the epoch continues";
}

TEST(FileCoordinatorState, AForgottenNodeStaysForgottenAfterAReopen) {
  ScopedTempDir dir;
  {
    auto s = Open(dir.path());
    ASSERT_NE(s, nullptr);
    ASSERT_EQ(*s->UpsertNode(Node("a", 11)), 1u);
    ASSERT_EQ(*s->UpsertNode(Node("b", 22)), 2u);
    ASSERT_EQ(*s->MarkDead("a"), 3u);
    ASSERT_EQ(*s->RemoveNode("a"), 4u);
    EXPECT_EQ(s->RemoveNode("a").status().code(), absl::StatusCode::kNotFound);
  }
  auto s = Open(dir.path());
  ASSERT_NE(s, nullptr);
  auto map = s->Snapshot();
  ASSERT_TRUE(map.ok());
  EXPECT_EQ(map->epoch(), 4u);
  ASSERT_EQ(map->nodes_size(), 1);
  EXPECT_EQ(map->nodes(0).info().node_id(), "b");
  EXPECT_EQ(s->FindNode("a").status().code(), absl::StatusCode::kNotFound);
}

TEST(FileCoordinatorState,
     DeparturesAndARestartedHistorySurviveAReopenAndACompaction) {
  for (const size_t compact_after : {size_t{4096}, size_t{2}}) {
    SCOPED_TRACE(absl::StrCat("compact after ", compact_after, " records"));
    ScopedTempDir dir;
    proto::NodeEntry a = Node("a", 11);
    a.mutable_info()->set_capacity_bytes(1 << 20);
    proto::NodeEntry b = Node("b", 22);
    b.mutable_info()->set_capacity_bytes(2 << 20);
    {
      auto s = Open(dir.path(), nullptr, compact_after);
      ASSERT_NE(s, nullptr);
      ASSERT_EQ(*s->UpsertNode(a), 1u);
      ASSERT_EQ(*s->MarkDead("a"), 2u);
      ASSERT_EQ(*s->RestartHistory(100), 100u);
      ASSERT_EQ(*s->UpsertNode(b), 101u);
      b.mutable_info()->set_capacity_bytes(3 << 20);
      ASSERT_EQ(*s->UpsertNode(b), 102u);
      ASSERT_EQ(*s->MarkDead("b"), 103u);
    }
    auto s = Open(dir.path(), nullptr, compact_after);
    ASSERT_NE(s, nullptr);
    const proto::ClusterMap map = *s->Snapshot();
    EXPECT_EQ(map.epoch(), 103u);
    EXPECT_EQ(map.history_epoch(), 100u);
    ASSERT_EQ(map.departures_size(), 2) << "a's left with the old history";
    EXPECT_EQ(map.departures(0).node_id(), "b");
    EXPECT_EQ(map.departures(0).capacity_bytes(), 2u << 20);
    EXPECT_EQ(map.departures(0).epoch(), 102u);
    EXPECT_EQ(map.departures(1).capacity_bytes(), 3u << 20);
    EXPECT_EQ(map.departures(1).epoch(), 103u);
  }
}

TEST(FileCoordinatorState, RenameOntoAnExistingNameFollowsReplace) {
  ScopedTempDir dir;
  {
    auto s = Open(dir.path());
    ASSERT_TRUE(s->PutRegion(RegionNamed("a", 1)).ok());
    ASSERT_TRUE(s->PutRegion(RegionNamed("b", 2)).ok());
    EXPECT_EQ(s->RenameRegion("a", "b", false).status().code(),
              absl::StatusCode::kAlreadyExists);
    auto replaced = s->RenameRegion("a", "b", true);
    ASSERT_TRUE(replaced.ok());
    ASSERT_TRUE(replaced->has_value());
    EXPECT_EQ((*replaced)->region_id(), 2u);
  }
  auto s = Open(dir.path());
  auto b = s->FindRegion("b");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->region_id(), 1u);
  EXPECT_EQ(s->FindRegion("a").status().code(), absl::StatusCode::kNotFound);
}

// A crash can cut the log at any byte: whatever the cut, the state loaded
// is exactly the state after the whole records before it, and an
// acknowledged change is never lost (all records are whole at the end).
TEST(FileCoordinatorState, ACutAtAnyByteLoadsExactlyTheWholeRecordsBeforeIt) {
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  ScopedTempDir dir;
  std::vector<std::string> after;  // the durable state after each change
  auto describe = [](CoordinatorState& s) {
    const proto::ClusterMap map = *s.Snapshot();
    const std::vector<proto::RegionInfo> regions = *s.ListRegions("");
    std::string out = absl::StrCat("epoch ", map.epoch());
    for (const auto& n : map.nodes()) {
      absl::StrAppend(&out, " ", n.info().node_id(), "/", n.info().incarnation(), "/",
                      n.state());
    }
    for (const auto& r : regions) absl::StrAppend(&out, " ", r.name(), "#", r.region_id());
    return out;
  };
  {
    auto s = Open(dir.path());
    after.push_back(describe(*s));
    for (int i = 0; i < 60; ++i) {
      std::string node = absl::StrCat("n", rng() % 4);
      std::string region = absl::StrCat("r", rng() % 5);
      absl::Status st;
      switch (rng() % 5) {
        case 0: st = s->UpsertNode(Node(node, rng())).status(); break;
        case 1: st = s->MarkDead(node).status(); break;
        case 2: st = s->PutRegion(RegionNamed(region, i + 1)); break;
        case 3: st = s->RemoveRegion(region).status(); break;
        case 4: st = s->RenameRegion(region, absl::StrCat("r", rng() % 5), rng() % 2).status(); break;
      }
      if (st.ok() && describe(*s) != after.back()) after.push_back(describe(*s));
    }
  }
  const std::string path = dir.path() + "/state.log.0";
  const std::string whole = ReadFile(path);
  // Record boundaries, from the frames.
  std::vector<size_t> ends = {8};
  while (ends.back() < whole.size()) {
    uint32_t len;
    std::memcpy(&len, whole.data() + ends.back() + 4, 4);
    ends.push_back(ends.back() + kStateFrameBytes + len);
  }
  ASSERT_EQ(ends.back(), whole.size());
  ASSERT_EQ(ends.size(), after.size()) << "one record per change that changed something";
  for (size_t cut = 8; cut <= whole.size(); cut += 1 + rng() % 7) {
    WriteFile(path, whole.substr(0, cut));
    size_t whole_records = std::upper_bound(ends.begin(), ends.end(), cut) - ends.begin() - 1;
    auto s = Open(dir.path());
    ASSERT_NE(s, nullptr) << "cut " << cut << " seed " << seed;
    ASSERT_EQ(describe(*s), after[whole_records]) << "cut " << cut << " seed " << seed;
  }
}

TEST(FileCoordinatorState, CompactionKeepsTheStateAndBoundsTheLog) {
  ScopedTempDir dir;
  {
    auto s = Open(dir.path(), nullptr, /*compact_after=*/16);
    for (int i = 0; i < 100; ++i) {
      ASSERT_TRUE(s->PutRegion(RegionNamed(absl::StrCat("r", i % 7), i + 1)).ok());
      ASSERT_TRUE(s->UpsertNode(Node(absl::StrCat("n", i % 3), i)).ok());
    }
  }
  EXPECT_EQ(LogFiles(dir.path()).size(), 1u);
  FileStateLoad load;
  auto s = Open(dir.path(), &load, 16);
  EXPECT_GT(load.generation, 5u);
  EXPECT_LT(load.records_replayed, 16u);
  EXPECT_EQ(s->Snapshot()->epoch(), 100u);
  EXPECT_EQ(s->ListRegions("")->size(), 7u);
  EXPECT_EQ(s->FindRegion("r1")->region_id(), 100u);  // last written at i = 99
}

TEST(FileCoordinatorState, CorruptStateIsRefusedNotLoaded) {
  ScopedTempDir dir;
  {
    auto s = Open(dir.path());
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(s->UpsertNode(Node(absl::StrCat("n", i), i)).ok());
  }
  const std::string path = dir.path() + "/state.log.0";
  std::string bytes = ReadFile(path);
  bytes[8 + kStateFrameBytes + 3] ^= 1;  // inside the first record
  WriteFile(path, bytes);
  FileStateOptions o;
  o.dir = dir.path();
  auto s = OpenFileCoordinatorState(o);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(s.status().message(), "state.log.0")) << s.status();
}

}  // namespace
}  // namespace meshpool::coordinator
