// Fuzzes the tcp responder (rdma/tcp_responder.h, tcp_serve_loop.cc) with
// the bytes a hostile client sends: a real node transport on loopback, one
// registered region between guard bytes, and each input sent on a fresh
// connection, which is then half-closed and read until the node closes it.
// So the fuzzer reaches the checks behind the magic and the rkey, a frame
// is rebased as it is sent: the input is walked as the responder will read
// it (a 48-byte RequestHeader, then a WRITE's payload), and unless a
// header's pad[0] is odd its magic, rkey and address are made to name the
// region (the address taken modulo a little more than the region, so some
// ranges overrun it). Checks: the guard bytes never change (nothing outside
// the registration is written), every response is a well-formed
// ResponseHeader (and a READ's payload) for a request sent, and the node
// closes every connection within its stall timeout.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "rdma/rdma.h"
#include "rdma/tcp.h"
#include "rdma/tcp_wire.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/raw_socket.h"

namespace {

using meshpool::rdma::internal::kRequestHeaderBytes;
using meshpool::rdma::internal::kRequestMagic;
using meshpool::rdma::internal::kResponseHeaderBytes;
using meshpool::rdma::internal::kResponseMagic;
using meshpool::rdma::internal::RequestHeader;
using meshpool::rdma::internal::ResponseHeader;

constexpr size_t kRegionBytes = 64 << 10;
constexpr size_t kGuardBytes = 4096;
constexpr uint8_t kGuard = 0xA5;
constexpr uint32_t kMaxRequest = 32 << 10;

struct Node {
  std::unique_ptr<meshpool::rdma::Transport> transport;
  std::vector<uint8_t> memory;  // guard | region | guard
  std::unique_ptr<meshpool::rdma::MemoryRegion> region;
  uint16_t port = 0;
};

Node& TheNode() {
  static Node* node = [] {
    auto* n = new Node;
    meshpool::rdma::TcpOptions options;
    options.max_request_bytes = kMaxRequest;
    options.stall_timeout = absl::Seconds(2);
    auto transport = meshpool::rdma::CreateTcpTransport(options);
    MESHPOOL_FUZZ_CHECK(transport.ok(), transport.status().ToString());
    n->transport = *std::move(transport);
    n->memory.assign(kGuardBytes + kRegionBytes + kGuardBytes, kGuard);
    auto region = n->transport->RegisterMemory(n->memory.data() + kGuardBytes,
                                               kRegionBytes);
    MESHPOOL_FUZZ_CHECK(region.ok(), region.status().ToString());
    n->region = *std::move(region);
    auto address = n->transport->Listen("127.0.0.1:0");
    MESHPOOL_FUZZ_CHECK(address.ok(), address.status().ToString());
    uint32_t port = 0;
    MESHPOOL_FUZZ_CHECK(
        absl::SimpleAtoi(address->substr(address->rfind(':') + 1), &port),
        *address);
    n->port = static_cast<uint16_t>(port);
    return n;
  }();
  return *node;
}

// The input as sent, with headers rebased (see the top of this file).
// Returns how many requests it holds.
size_t Rebase(const uint8_t* data, size_t size, const Node& node,
              std::string* out) {
  const meshpool::rdma::RemoteRegion remote = node.region->remote();
  size_t requests = 0;
  size_t at = 0;
  while (at < size) {
    if (size - at < kRequestHeaderBytes) {
      out->append(reinterpret_cast<const char*>(data + at), size - at);
      break;
    }
    RequestHeader h;
    std::memcpy(&h, data + at, sizeof(h));
    at += sizeof(h);
    if (h.pad[0] % 2 == 0) {
      h.magic = kRequestMagic;
      h.rkey = remote.rkey;
      h.remote_addr = remote.addr + h.remote_addr % (kRegionBytes + 1024);
    }
    out->append(reinterpret_cast<const char*>(&h), sizeof(h));
    ++requests;
    if (h.opcode == static_cast<uint8_t>(meshpool::rdma::Opcode::kWrite)) {
      const size_t payload = std::min<size_t>(h.length, size - at);
      out->append(reinterpret_cast<const char*>(data + at), payload);
      at += payload;
    }
  }
  return requests;
}

// Every response in `received` is well formed; at most `requests` of them.
// Returns how many were kOk.
size_t CheckResponses(const std::string& received, size_t requests) {
  size_t at = 0;
  size_t responses = 0;
  size_t ok = 0;
  while (at < received.size()) {
    MESHPOOL_FUZZ_CHECK(received.size() - at >= kResponseHeaderBytes,
                        "a response header cut short");
    ResponseHeader r;
    std::memcpy(&r, received.data() + at, sizeof(r));
    at += sizeof(r);
    MESHPOOL_FUZZ_CHECK(r.magic == kResponseMagic, "response magic");
    MESHPOOL_FUZZ_CHECK(r.status <= 1, absl::StrCat("status ", r.status));
    MESHPOOL_FUZZ_CHECK(
        r.length <= kMaxRequest && r.length <= received.size() - at,
        absl::StrCat("response payload ", r.length));
    at += r.length;
    ++responses;
    if (r.status == 0) ++ok;
  }
  MESHPOOL_FUZZ_CHECK(responses <= requests,
                      absl::StrCat(responses, " responses to ", requests));
  return ok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Node& node = TheNode();
  std::string frames;
  const size_t requests = Rebase(data, size, node, &frames);
  // Thousands of connections a second leave some of the node's closed
  // ones in TIME_WAIT, and a new connection that lands on such a tuple is
  // now and then refused by the kernel: retry for a while, as a client
  // would; a node that stays unreachable fails the check.
  std::unique_ptr<meshpool::testing::RawSocket> connected;
  for (int attempt = 0; attempt < 100; ++attempt) {
    connected = std::make_unique<meshpool::testing::RawSocket>(node.port);
    if (connected->connected()) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  meshpool::testing::RawSocket& socket = *connected;
  MESHPOOL_FUZZ_CHECK(socket.connected(),
                      absl::StrCat("connect to the responder: ",
                                   std::strerror(socket.connect_errno())));
  // Reset, not TIME_WAIT, when this side closes: thousands of connections
  // a second must not use up the loopback's ports.
  linger off{1, 0};
  ::setsockopt(socket.fd(), SOL_SOCKET, SO_LINGER, &off, sizeof(off));
  // The node may close mid-send (a bad frame); what it sent stays readable.
  (void)socket.Send(frames.data(), frames.size());
  ::shutdown(socket.fd(), SHUT_WR);
  std::string received;
  MESHPOOL_FUZZ_CHECK(socket.ReadUntilClosed(&received),
                      "the node kept a half-closed connection open");
  if (CheckResponses(received, requests) > 0) {
    meshpool::testing::FuzzAccepted();
  }
  for (size_t i = 0; i < kGuardBytes; ++i) {
    MESHPOOL_FUZZ_CHECK(
        node.memory[i] == kGuard &&
            node.memory[kGuardBytes + kRegionBytes + i] == kGuard,
        absl::StrCat("guard byte ", i, " written"));
  }
  return 0;
}
