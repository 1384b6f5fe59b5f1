// On each backend (tcp over loopback, the in-process sim fabric): one round
// trip per iteration (post one request, wait for its completion), and a
// pipelined batch of READs as a KV batch GET posts them. Beside them, the
// floor for tcp: a bare ping-pong between two threads over a loopback TCP
// connection, blocking send and recv with nothing else, carrying the same
// header and payload bytes.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
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

// kBatch READs of `bytes` posted together, then polled until all are back.
void BM_PipelinedReads(benchmark::State& state, std::string backend,
                       uint32_t bytes) {
  constexpr size_t kBatch = 32;
  Rig rig;
  absl::Status built = Build(backend, rig);
  if (!built.ok()) {
    state.SkipWithError(std::string(built.message()).c_str());
    return;
  }
  std::vector<uint8_t> local(kBatch * bytes);
  std::vector<WorkRequest> batch(kBatch);
  for (size_t i = 0; i < kBatch; ++i) {
    batch[i].wr_id = i;
    batch[i].opcode = Opcode::kRead;
    batch[i].local = local.data() + i * bytes;
    batch[i].length = bytes;
    batch[i].remote_addr =
        rig.region->remote().addr + (i * bytes) % (kNodeBytes - bytes + 1);
    batch[i].rkey = rig.region->remote().rkey;
  }
  std::vector<Completion> done(kBatch);
  for (auto _ : state) {
    absl::Status s = PostAndWait(*rig.endpoint, batch, absl::MakeSpan(done),
                                 absl::Seconds(10));
    if (!s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      break;
    }
  }
  state.SetBytesProcessed(state.iterations() * kBatch * bytes);
  state.SetItemsProcessed(state.iterations() * kBatch);
}

// The floor under tcp's round trip: a thread answers each 48-byte request
// (the size of a request header) with a 32-byte header and `bytes` of
// payload, over one loopback connection with TCP_NODELAY, both sides
// blocking.
bool RecvExactly(int fd, void* buffer, size_t n) {
  for (size_t got = 0; got < n;) {
    ssize_t r = ::recv(fd, static_cast<char*>(buffer) + got, n - got, 0);
    if (r <= 0) return false;
    got += static_cast<size_t>(r);
  }
  return true;
}

void BM_RawTcpPingPong(benchmark::State& state, uint32_t bytes) {
  constexpr size_t kRequestBytes = 48;
  constexpr size_t kResponseHeaderBytes = 32;
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      ::listen(listener, 1) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(listener);
    state.SkipWithError("cannot listen on loopback");
    return;
  }
  std::thread server([listener, bytes] {
    int fd = ::accept(listener, nullptr, nullptr);
    if (fd < 0) return;
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    std::vector<char> response(kResponseHeaderBytes + bytes, 'r');
    char request[kRequestBytes];
    while (RecvExactly(fd, request, sizeof(request))) {
      if (::send(fd, response.data(), response.size(), MSG_NOSIGNAL) !=
          static_cast<ssize_t>(response.size())) {
        break;
      }
    }
    ::close(fd);
  });
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    state.SkipWithError("cannot connect on loopback");
  } else {
    char request[kRequestBytes] = {};
    std::vector<char> response(kResponseHeaderBytes + bytes);
    for (auto _ : state) {
      if (::send(fd, request, sizeof(request), MSG_NOSIGNAL) !=
              static_cast<ssize_t>(sizeof(request)) ||
          !RecvExactly(fd, response.data(), response.size())) {
        state.SkipWithError("loopback ping-pong failed");
        break;
      }
    }
    state.SetBytesProcessed(state.iterations() * bytes);
  }
  ::shutdown(fd, SHUT_RDWR);
  ::close(fd);
  ::shutdown(listener, SHUT_RDWR);  // in case the server never accepted
  server.join();
  ::close(listener);
}

BENCHMARK_CAPTURE(BM_RawTcpPingPong, read_8B, 8);
BENCHMARK_CAPTURE(BM_RawTcpPingPong, read_4KiB, 4096);
BENCHMARK_CAPTURE(BM_RawTcpPingPong, read_64KiB, 65536);

#define MESHPOOL_TRANSPORT_BENCH(backend)                                     \
  BENCHMARK_CAPTURE(BM_RoundTrip, backend##_read_8B, #backend, Opcode::kRead, \
                    8);                                                       \
  BENCHMARK_CAPTURE(BM_RoundTrip, backend##_read_4KiB, #backend,              \
                    Opcode::kRead, 4096);                                     \
  BENCHMARK_CAPTURE(BM_RoundTrip, backend##_read_64KiB, #backend,             \
                    Opcode::kRead, 65536);                                    \
  BENCHMARK_CAPTURE(BM_RoundTrip, backend##_write_4KiB, #backend,             \
                    Opcode::kWrite, 4096);                                    \
  BENCHMARK_CAPTURE(BM_RoundTrip, backend##_cas, #backend,                    \
                    Opcode::kCompareSwap, 8);                                 \
  BENCHMARK_CAPTURE(BM_PipelinedReads, backend##_32_reads_512B, #backend,     \
                    512);                                                     \
  BENCHMARK_CAPTURE(BM_PipelinedReads, backend##_32_reads_16KiB, #backend,    \
                    16384)

MESHPOOL_TRANSPORT_BENCH(tcp);
MESHPOOL_TRANSPORT_BENCH(sim);

}  // namespace
}  // namespace meshpool::rdma
