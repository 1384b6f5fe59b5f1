// The simulated fabric's own promises: determinism per seed, the drop and
// delay faults, node death and endpoint breakage, and the SetBeforeExecute
// hook.
#include <cstdint>
#include <iostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "rdma/rdma.h"
#include "rdma/sim.h"

namespace meshpool::rdma {
namespace {

uint64_t TestSeed() {
  std::random_device rd;
  uint64_t seed = (uint64_t{rd()} << 32) ^ rd();
  std::cout << "seed=" << seed << std::endl;
  return seed;
}

// A fabric with a node "node" serving 64 KiB and a connected endpoint.
struct SimSetup {
  explicit SimSetup(uint64_t seed) : fabric(SimFabric::Create(seed)) {
    node = fabric->CreateTransport("node");
    client = fabric->CreateTransport("client");
    region = *node->RegisterMemory(memory.data(), memory.size() * 8);
    address = *node->Listen("");
    endpoint = *client->Connect(address, nullptr);
  }
  WorkRequest Request(Opcode op, uint64_t id, void* local, uint32_t length,
                      uint64_t offset) const {
    WorkRequest wr;
    wr.wr_id = id;
    wr.opcode = op;
    wr.local = local;
    wr.length = length;
    wr.remote_addr = region->remote().addr + offset;
    wr.rkey = region->remote().rkey;
    return wr;
  }
  size_t PollOnce() {
    Completion c[16];
    auto n = endpoint->Poll(absl::MakeSpan(c), absl::ZeroDuration());
    EXPECT_TRUE(n.ok()) << n.status();
    for (size_t i = 0; i < n.value_or(0); ++i) done.push_back(c[i]);
    return n.value_or(0);
  }

  std::vector<uint64_t> memory = std::vector<uint64_t>(8192, 0);
  std::shared_ptr<SimFabric> fabric;
  std::unique_ptr<Transport> node;
  std::unique_ptr<Transport> client;
  std::unique_ptr<MemoryRegion> region;
  std::string address;
  std::unique_ptr<Endpoint> endpoint;
  std::vector<Completion> done;
};

// (poll round, wr_id, status code) for every completion of a fixed workload.
using Outcome = std::tuple<int, uint64_t, absl::StatusCode>;
std::vector<Outcome> RunFaultyWorkload(uint64_t seed) {
  SimSetup sim(seed);
  SimFaults faults;
  faults.drop_probability = 0.2;
  faults.delay_probability = 0.3;
  faults.max_delay_polls = 2;
  sim.fabric->SetFaults(faults);
  std::vector<uint64_t> old(200);
  for (uint64_t i = 0; i < 200; i += 4) {
    std::vector<WorkRequest> batch;
    for (uint64_t j = i; j < i + 4; ++j) {
      WorkRequest wr = sim.Request(Opcode::kFetchAdd, j, &old[j], 8, 0);
      wr.compare_add = 1;
      batch.push_back(wr);
    }
    EXPECT_TRUE(sim.endpoint->Post(batch).ok());
  }
  std::vector<Outcome> outcomes;
  for (int round = 0; sim.done.size() < 200 && round < 10000; ++round) {
    size_t before = sim.done.size();
    sim.PollOnce();
    for (size_t k = before; k < sim.done.size(); ++k) {
      outcomes.emplace_back(round, sim.done[k].wr_id,
                            sim.done[k].status.code());
    }
  }
  return outcomes;
}

TEST(SimFabricTest, SameSeedGivesSameOutcomeSequenceWithFaults) {
  const uint64_t seed = TestSeed();
  std::vector<Outcome> first = RunFaultyWorkload(seed);
  std::vector<Outcome> second = RunFaultyWorkload(seed);
  ASSERT_EQ(first.size(), 200u);
  EXPECT_EQ(first, second);
  size_t dropped = 0;
  for (const auto& [round, id, code] : first) {
    dropped += code == absl::StatusCode::kDeadlineExceeded;
  }
  // 200 requests at p=0.2: zero or all drops would mean faults are off.
  EXPECT_GT(dropped, 0u);
  EXPECT_LT(dropped, 200u);
  // Without delays 200 completions take 13 rounds of up to 16.
  EXPECT_GT(std::get<0>(first.back()), 12) << "no request was delayed";
}

TEST(SimFabricTest, DroppedRequestCompletesDeadlineExceededAndDoesNotExecute) {
  SimSetup sim(TestSeed());
  SimFaults faults;
  faults.drop_probability = 1;
  sim.fabric->SetFaults(faults);
  uint64_t value = 0x1234;
  Completion c;
  absl::Status status =
      PostAndWait(*sim.endpoint, {sim.Request(Opcode::kWrite, 5, &value, 8, 0)},
                  absl::MakeSpan(&c, 1), absl::Seconds(10));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_EQ(c.wr_id, 5u);
  EXPECT_EQ(sim.memory[0], 0u);
  faults.drop_probability = 0;
  sim.fabric->SetFaults(faults);
  EXPECT_TRUE(PostAndWait(*sim.endpoint,
                          {sim.Request(Opcode::kWrite, 6, &value, 8, 0)},
                          absl::MakeSpan(&c, 1), absl::Seconds(10)).ok());
  EXPECT_EQ(sim.memory[0], 0x1234u);
}

// A fenced request never runs behind a lost one (the one-round-trip PUT
// must not publish an object whose WRITE was lost); an unfenced one does.
TEST(SimFabricTest, FencedRequestBehindADroppedOneCompletesAbortedUnexecuted) {
  SimSetup sim(TestSeed());
  SimFaults faults;
  faults.drop_probability = 1;
  sim.fabric->SetFaults(faults);
  uint64_t value = 0x1234;
  ASSERT_TRUE(
      sim.endpoint->Post({sim.Request(Opcode::kWrite, 1, &value, 8, 0)}).ok());
  faults.drop_probability = 0;
  sim.fabric->SetFaults(faults);
  uint64_t old[2] = {0, 0};
  WorkRequest unfenced = sim.Request(Opcode::kCompareSwap, 2, &old[0], 8, 8);
  unfenced.compare_add = 0;
  unfenced.swap = 7;
  WorkRequest fenced = sim.Request(Opcode::kCompareSwap, 3, &old[1], 8, 16);
  fenced.compare_add = 0;
  fenced.swap = 9;
  fenced.fence = true;
  ASSERT_TRUE(sim.endpoint->Post({unfenced, fenced}).ok());
  while (sim.done.size() < 3) ASSERT_GT(sim.PollOnce(), 0u);
  EXPECT_EQ(sim.done[0].status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(sim.done[1].status.ok()) << sim.done[1].status;
  EXPECT_EQ(sim.done[2].status.code(), absl::StatusCode::kAborted)
      << sim.done[2].status;
  EXPECT_EQ(sim.memory[0], 0u);
  EXPECT_EQ(sim.memory[1], 7u) << "an unfenced CAS runs behind the loss";
  EXPECT_EQ(sim.memory[2], 0u) << "the fenced CAS ran behind a lost request";
}

TEST(SimFabricTest, DelayHoldsTheHeadForMaxDelayPollsAndKeepsFifoOrder) {
  SimSetup sim(TestSeed());
  SimFaults faults;
  faults.delay_probability = 1;
  faults.max_delay_polls = 3;
  sim.fabric->SetFaults(faults);
  uint64_t a = 1, b = 2;
  ASSERT_TRUE(sim.endpoint->Post({sim.Request(Opcode::kWrite, 1, &a, 8, 0),
                                  sim.Request(Opcode::kWrite, 2, &b, 8, 8)})
                  .ok());
  std::vector<size_t> per_round;
  for (int round = 0; round < 7; ++round) per_round.push_back(sim.PollOnce());
  EXPECT_EQ(per_round, (std::vector<size_t>{0, 0, 0, 1, 0, 0, 1}));
  ASSERT_EQ(sim.done.size(), 2u);
  EXPECT_EQ(sim.done[0].wr_id, 1u);
  EXPECT_EQ(sim.done[1].wr_id, 2u);
  EXPECT_EQ(sim.memory[0], 1u);
  EXPECT_EQ(sim.memory[1], 2u);
}

TEST(SimFabricTest, BeforeExecuteHookRunsBetweenTwoRequests) {
  SimSetup sim(TestSeed());
  sim.memory[0] = 10;  // "index"
  sim.memory[1] = 20;  // "object"
  std::vector<uint64_t> seen;
  sim.fabric->SetBeforeExecute(
      [&](absl::string_view node, const WorkRequest& wr) {
        EXPECT_EQ(node, "node");
        seen.push_back(wr.wr_id);
        if (wr.wr_id == 2) sim.memory[1] = 21;  // replaced in between
      });
  uint64_t index = 0, object = 0;
  Completion c[2];
  ASSERT_TRUE(PostAndWait(*sim.endpoint,
                          {sim.Request(Opcode::kRead, 1, &index, 8, 0),
                           sim.Request(Opcode::kRead, 2, &object, 8, 8)},
                          absl::MakeSpan(c), absl::Seconds(10)).ok());
  EXPECT_EQ(index, 10u);
  EXPECT_EQ(object, 21u);
  EXPECT_EQ(seen, (std::vector<uint64_t>{1, 2}));
  sim.fabric->SetBeforeExecute(nullptr);
  ASSERT_TRUE(PostAndWait(*sim.endpoint,
                          {sim.Request(Opcode::kRead, 3, &index, 8, 0)},
                          absl::MakeSpan(c, 1), absl::Seconds(10)).ok());
  EXPECT_EQ(seen.size(), 2u);
}

TEST(SimFabricTest, KillNodeFailsEndpointsRefusesConnectsAndHidesMemory) {
  SimSetup sim(TestSeed());
  uint64_t value = 7;
  ASSERT_TRUE(sim.endpoint->Post({sim.Request(Opcode::kWrite, 1, &value, 8, 0)})
                  .ok());
  sim.fabric->KillNode("node");
  EXPECT_EQ(sim.PollOnce(), 1u);
  EXPECT_EQ(sim.done[0].status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(sim.memory[0], 0u);  // the pending WRITE never landed
  EXPECT_FALSE(sim.endpoint->healthy());
  EXPECT_EQ(sim.client->Connect(sim.address, nullptr).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST(SimFabricTest, BreakEndpointsFailsOpenEndpointsButReconnectWorks) {
  SimSetup sim(TestSeed());
  sim.fabric->BreakEndpoints("node");
  uint64_t value = 3;
  Completion c;
  EXPECT_EQ(PostAndWait(*sim.endpoint,
                        {sim.Request(Opcode::kWrite, 1, &value, 8, 0)},
                        absl::MakeSpan(&c, 1), absl::Seconds(10)).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_FALSE(sim.endpoint->healthy());
  auto fresh = sim.client->Connect(sim.address, nullptr);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_TRUE(PostAndWait(**fresh,
                          {sim.Request(Opcode::kWrite, 2, &value, 8, 0)},
                          absl::MakeSpan(&c, 1), absl::Seconds(10)).ok());
  EXPECT_EQ(sim.memory[0], 3u);
}

TEST(SimFabricTest, RestartedNodeTakesOverADeadNodesName) {
  SimSetup sim(TestSeed());
  sim.fabric->KillNode("node");
  auto second = sim.fabric->CreateTransport("node");
  EXPECT_EQ(second->Listen("").status().code(), absl::StatusCode::kOk);
  auto other = sim.fabric->CreateTransport("client");
  EXPECT_EQ(other->Listen("").status().code(),
            absl::StatusCode::kOk);  // "client" never listened
  auto clash = sim.fabric->CreateTransport("client");
  EXPECT_EQ(clash->Listen("").status().code(),
            absl::StatusCode::kAlreadyExists);
}

}  // namespace
}  // namespace meshpool::rdma
