// One round trip per iteration (post one request, wait for its completion)
// on each backend: tcp over loopback and the in-process sim fabric.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "rdma/rdma.h"
#include "rdma/sim.h"
#include "rdma/tcp.h"

namespace meshpool::rdma {
namespace {

constexpr size_t kNodeBytes = 1 << 20;

// A node serving kNodeBytes and one client endpoint to it.
struct Rig {
  std::vector<uint64_t> memory = std::vector<uint64_t>(kNodeBytes / 8, 0);
  std::shared_ptr<SimFabric> fabric;  // sim only
  std::unique_ptr<Transport> node;
  std::unique_ptr<Transport> client;
  std::unique_ptr<MemoryRegion> region;
  std::unique_ptr<Endpoint> endpoint;
};

absl::Status Build(const std::string& backend, Rig& rig) {
  std::string bind;
  if (backend == "tcp") {
    auto node = CreateTcpTransport();
    auto client = CreateTcpTransport();
    if (!node.ok()) return node.status();
    if (!client.ok()) return client.status();
    rig.node = *std::move(node);
    rig.client = *std::move(client);
    bind = "127.0.0.1:0";
  } else {
    rig.fabric = SimFabric::Create(1);
    rig.node = rig.fabric->CreateTransport("node");
    rig.client = rig.fabric->CreateTransport("client");
  }
  auto region = rig.node->RegisterMemory(rig.memory.data(), kNodeBytes);
  if (!region.ok()) return region.status();
  rig.region = *std::move(region);
  auto address = rig.node->Listen(bind);
  if (!address.ok()) return address.status();
  auto endpoint = rig.client->Connect(*address, nullptr);
  if (!endpoint.ok()) return endpoint.status();
  rig.endpoint = *std::move(endpoint);
  return absl::OkStatus();
}

void BM_RoundTrip(benchmark::State& state, std::string backend, Opcode op,
                  uint32_t bytes) {
  Rig rig;
  absl::Status built = Build(backend, rig);
  if (!built.ok()) {
    state.SkipWithError(std::string(built.message()).c_str());
    return;
  }
  std::vector<uint8_t> local(bytes);
  WorkRequest wr;
  wr.opcode = op;
  wr.local = local.data();
  wr.length = bytes;
  wr.remote_addr = rig.region->remote().addr;
  wr.rkey = rig.region->remote().rkey;
  wr.compare_add = 0;  // CAS: expect the word's value, swap in the next
  wr.swap = 1;
  Completion c;
  for (auto _ : state) {
    absl::Status s = PostAndWait(*rig.endpoint, {wr}, absl::MakeSpan(&c, 1),
                                 absl::Seconds(10));
    if (!s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      break;
    }
    wr.compare_add = wr.swap++;  // so every CAS succeeds
  }
  state.SetBytesProcessed(state.iterations() * bytes);
}

#define MESHPOOL_TRANSPORT_BENCH(backend)                                   \
  BENCHMARK_CAPTURE(BM_RoundTrip, backend##_read_8B, #backend, Opcode::kRead, \
                    8);                                                      \
  BENCHMARK_CAPTURE(BM_RoundTrip, backend##_read_4KiB, #backend,             \
                    Opcode::kRead, 4096);                                    \
  BENCHMARK_CAPTURE(BM_RoundTrip, backend##_read_64KiB, #backend,            \
                    Opcode::kRead, 65536);                                   \
  BENCHMARK_CAPTURE(BM_RoundTrip, backend##_write_4KiB, #backend,            \
                    Opcode::kWrite, 4096);                                   \
  BENCHMARK_CAPTURE(BM_RoundTrip, backend##_cas, #backend,                   \
                    Opcode::kCompareSwap, 8)

MESHPOOL_TRANSPORT_BENCH(tcp);
MESHPOOL_TRANSPORT_BENCH(sim);

}  // namespace
}  // namespace meshpool::rdma
