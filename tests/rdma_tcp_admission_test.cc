// The tcp responder's admission against peers that hoard connections: idle
// sockets cost no thread and cannot lock clients out (a newcomer evicts the
// longest-idle connection, its own host's first), and a request cut short
// is closed after the stall timeout while idle connections stay. And a node
// that requires tokens (TcpOptions::require_token) admits only connections
// that open with a token its handshake issued, each token once, and serves
// each only memory not reserved for another tenant than the one its token
// admitted it for.
//
// Other loopback addresses (127.0.0.2, ...) stand in for other hosts.

#include <algorithm>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/process_info.h"
#include "gtest/gtest.h"
#include "rdma/rdma.h"
#include "rdma/tcp.h"
#include "rdma/tcp_wire.h"
#include "rdma/tokens.h"
#include "tests/raw_socket.h"

namespace meshpool::rdma {
namespace {

using testing::RawSocket;

constexpr size_t kRegionBytes = 1 << 20;
constexpr size_t kHoarded = 600;  // more than the old responder's 512 cap

// The threads of this process.
size_t ThreadCount() {
  absl::StatusOr<size_t> n = SelfThreadCount();
  EXPECT_TRUE(n.ok()) << n.status();
  return n.value_or(0);
}

// A node transport serving one region of known bytes, and a client.
class TcpAdmissionTest : public ::testing::Test {
 protected:
  void Start(const TcpOptions& options) {
    memory_.assign(kRegionBytes, 0);
    for (size_t i = 0; i < kRegionBytes; ++i) memory_[i] = uint8_t(i * 7 + 1);
    auto node = CreateTcpTransport(options);
    ASSERT_TRUE(node.ok()) << node.status();
    node_ = *std::move(node);
    auto region = node_->RegisterMemory(memory_.data(), kRegionBytes);
    ASSERT_TRUE(region.ok()) << region.status();
    region_ = *std::move(region);
    auto address = node_->Listen("127.0.0.1:0");
    ASSERT_TRUE(address.ok()) << address.status();
    address_ = *address;
    uint32_t port = 0;
    ASSERT_TRUE(
        absl::SimpleAtoi(address_.substr(address_.rfind(':') + 1), &port));
    port_ = static_cast<uint16_t>(port);
    auto client = CreateTcpTransport();
    ASSERT_TRUE(client.ok());
    client_ = *std::move(client);
  }

  absl::StatusOr<std::unique_ptr<Endpoint>> Connect() {
    return client_->Connect(address_, nullptr);
  }
  // Connects as a node's client does: the handshake (here straight to the
  // node's transport, in a cluster over its authenticated gRPC service)
  // fetches a token when the node requires one.
  // `access`: whom the node's control plane admitted the caller as.
  absl::StatusOr<std::unique_ptr<Endpoint>> ConnectWithHandshake(
      DataAccess access = DataAccess::Unrestricted()) {
    Transport* node = node_.get();
    return client_->Connect(address_,
                            [node, access](const std::string& request) {
                              return node->AcceptHandshake(request, access);
                            });
  }

  // A well-formed request on the region: `payload` bytes of 0xEE follow a
  // WRITE's header.
  std::string Frame(Opcode op, uint32_t length, uint64_t offset) const {
    internal::RequestHeader h{};
    h.magic = internal::kRequestMagic;
    h.opcode = static_cast<uint8_t>(op);
    h.rkey = region_->remote().rkey;
    h.length = length;
    h.wr_id = 7;
    h.remote_addr = region_->remote().addr + offset;
    std::string frame(reinterpret_cast<const char*>(&h), sizeof(h));
    if (op == Opcode::kWrite) frame.append(length, '\xEE');
    return frame;
  }
  static std::string Hello(absl::string_view token) {
    internal::TcpHello hello{};
    hello.magic = internal::kHelloMagic;
    std::memcpy(hello.token, token.data(),
                std::min(token.size(), sizeof(hello.token)));
    return std::string(reinterpret_cast<const char*>(&hello), sizeof(hello));
  }
  bool MemoryUntouched() const {
    for (size_t i = 0; i < kRegionBytes; ++i) {
      if (memory_[i] != uint8_t(i * 7 + 1)) return false;
    }
    return true;
  }

  // Reads 4 KiB at `offset` through `ep` and checks the bytes.
  absl::Status ReadWorks(Endpoint& ep, size_t offset = 8192) {
    std::vector<uint8_t> back(4096);
    WorkRequest wr;
    wr.opcode = Opcode::kRead;
    wr.local = back.data();
    wr.length = 4096;
    wr.remote_addr = region_->remote().addr + offset;
    wr.rkey = region_->remote().rkey;
    Completion c;
    absl::Status s =
        PostAndWait(ep, {wr}, absl::MakeSpan(&c, 1), absl::Seconds(30));
    if (!s.ok()) return s;
    if (std::memcmp(back.data(), memory_.data() + offset, 4096) != 0) {
      return absl::DataLossError("read returned other bytes");
    }
    return absl::OkStatus();
  }

  // Opens kHoarded idle sockets, from `source(i)`.
  template <typename Source>
  std::vector<std::unique_ptr<RawSocket>> Hoard(Source source) {
    std::vector<std::unique_ptr<RawSocket>> sockets;
    for (size_t i = 0; i < kHoarded; ++i) {
      sockets.push_back(std::make_unique<RawSocket>(port_, source(i).c_str()));
      EXPECT_TRUE(sockets.back()->connected()) << i;
    }
    return sockets;
  }

  // Waits (bounded) until at least `want` of `sockets` were closed by the
  // responder; returns how many were.
  static size_t WaitClosed(std::vector<std::unique_ptr<RawSocket>>& sockets,
                           size_t want) {
    const absl::Time deadline =
        absl::Now() + absl::Milliseconds(RawSocket::kCloseWaitMs);
    size_t closed = 0;
    do {
      closed = 0;
      for (auto& s : sockets) closed += s->ClosedByPeer();
      if (closed >= want) break;
      absl::SleepFor(absl::Milliseconds(20));
    } while (absl::Now() < deadline);
    return closed;
  }

  std::vector<uint8_t> memory_;
  std::unique_ptr<Transport> node_;
  std::unique_ptr<MemoryRegion> region_;
  std::string address_;
  uint16_t port_ = 0;
  std::unique_ptr<Transport> client_;
};

TEST_F(TcpAdmissionTest, IdleConnectionsCostNoThreadOfTheirOwn) {
  Start(TcpOptions{});
  auto first = Connect();
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(ReadWorks(**first).ok());
  const size_t before = ThreadCount();
  std::vector<std::unique_ptr<Endpoint>> lanes;
  for (int i = 0; i < 200; ++i) {
    auto ep = Connect();
    ASSERT_TRUE(ep.ok()) << ep.status();
    lanes.push_back(*std::move(ep));
  }
  for (auto& lane : lanes) ASSERT_TRUE(ReadWorks(*lane).ok());
  const size_t after = ThreadCount();
  std::cout << "threads: " << before << " with one connection, " << after
            << " with 201" << std::endl;
  EXPECT_LE(after, before + 2) << "connections cost threads";
}

TEST_F(TcpAdmissionTest, IdleSocketsFromOneHostEvictTheirOwnAndLockNobodyOut) {
  TcpOptions options;
  options.max_connections = 64;
  options.max_connections_per_peer = 16;
  Start(options);
  auto before = Connect();  // from 127.0.0.1, before the hoard
  ASSERT_TRUE(before.ok()) << before.status();
  ASSERT_TRUE(ReadWorks(**before).ok());

  auto hoard = Hoard([](size_t) { return std::string("127.0.0.2"); });
  // Each newcomer beyond 16 evicted the host's own longest-idle socket.
  const size_t closed = WaitClosed(hoard, kHoarded - 16);
  std::cout << closed << " of " << kHoarded << " hoarded sockets closed"
            << std::endl;
  EXPECT_GE(closed, kHoarded - 16);
  EXPECT_LT(closed, kHoarded) << "the newest ones should have stayed";

  // Nobody else was touched, and newcomers from elsewhere get in.
  EXPECT_TRUE(ReadWorks(**before).ok());
  auto after = Connect();
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_TRUE(ReadWorks(**after).ok());
}

TEST_F(TcpAdmissionTest, IdleSocketsFromManyHostsEvictTheLongestIdle) {
  TcpOptions options;
  options.max_connections = 64;
  options.max_connections_per_peer = 64;
  Start(options);
  auto oldest = Connect();
  ASSERT_TRUE(oldest.ok()) << oldest.status();
  ASSERT_TRUE(ReadWorks(**oldest).ok());

  auto hoard = Hoard([](size_t i) {
    return absl::StrCat("127.0.", 1 + i / 200, ".", 2 + i % 200);
  });
  const size_t closed = WaitClosed(hoard, kHoarded - 64);
  std::cout << closed << " of " << kHoarded << " hoarded sockets closed"
            << std::endl;
  EXPECT_GE(closed, kHoarded - 64);

  // The idle endpoint opened first was the longest idle: it was evicted,
  // and says so as a dead connection does (retry on a new one).
  EXPECT_EQ(ReadWorks(**oldest).code(), absl::StatusCode::kUnavailable);
  auto after = Connect();
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_TRUE(ReadWorks(**after).ok());
}

TEST_F(TcpAdmissionTest, RequestCutShortIsClosedAfterTheStallTimeout) {
  TcpOptions options;
  options.stall_timeout = absl::Seconds(1);
  Start(options);
  auto idle = Connect();
  ASSERT_TRUE(idle.ok()) << idle.status();
  ASSERT_TRUE(ReadWorks(**idle).ok());
  RawSocket silent(port_);  // connects and never sends
  RawSocket slow(port_);    // sends half a header and no more
  ASSERT_TRUE(silent.connected() && slow.connected());
  internal::RequestHeader h{};
  h.magic = internal::kRequestMagic;
  const absl::Time sent = absl::Now();
  ASSERT_TRUE(slow.Send(&h, sizeof(h) / 2));
  std::string ignored;
  ASSERT_TRUE(slow.ReadUntilClosed(&ignored)) << "a stalled request stays";
  const absl::Duration waited = absl::Now() - sent;
  std::cout << "closed after " << waited << std::endl;
  EXPECT_GE(waited, absl::Milliseconds(900)) << "closed before the timeout";
  // Connections with nothing under way are not stalled, however long idle.
  EXPECT_FALSE(silent.ClosedByPeer());
  EXPECT_TRUE(ReadWorks(**idle).ok());
}

TEST(TcpOptionsTest, ConnectionCapsThatDoNotFitAreRefused) {
  TcpOptions options;
  options.max_connections = 8;
  options.max_connections_per_peer = 9;
  auto t = CreateTcpTransport(options);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  options.max_connections_per_peer = 0;
  t = CreateTcpTransport(options);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  options.max_connections_per_peer = 8;
  options.stall_timeout = absl::ZeroDuration();
  t = CreateTcpTransport(options);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(TcpAdmissionTest,
       WithTokensAConnectionWithoutOneIsClosedBeforeAnyRequest) {
  TcpOptions options;
  options.require_token = true;
  Start(options);
  for (const std::string& frames :
       {Frame(Opcode::kWrite, 64, 0), Frame(Opcode::kRead, 64, 0),
        Hello(std::string(internal::kTokenBytes, 'x')) +
            Frame(Opcode::kWrite, 64, 0)}) {
    RawSocket raw(port_);
    ASSERT_TRUE(raw.connected());
    raw.Send(frames.data(), frames.size());  // may be closed mid-send
    std::string received;
    ASSERT_TRUE(raw.ReadUntilClosed(&received));
    EXPECT_TRUE(received.empty()) << "answered without a token";
  }
  EXPECT_TRUE(MemoryUntouched());
  auto without = Connect();  // a client that asked for no token
  ASSERT_TRUE(without.ok()) << without.status();
  EXPECT_EQ(ReadWorks(**without).code(), absl::StatusCode::kUnavailable);
  auto with = ConnectWithHandshake();
  ASSERT_TRUE(with.ok()) << with.status();
  EXPECT_TRUE(ReadWorks(**with).ok());
}

TEST_F(TcpAdmissionTest, WithTokensEachTokenAdmitsOneConnection) {
  TcpOptions options;
  options.require_token = true;
  Start(options);
  absl::StatusOr<std::string> token = node_->AcceptHandshake(
      internal::kTcpTokenRequest, DataAccess::Unrestricted());
  ASSERT_TRUE(token.ok()) << token.status();
  ASSERT_EQ(token->size(), internal::kTokenBytes);
  const std::string frames = Hello(*token) + Frame(Opcode::kWrite, 64, 0) +
                             Frame(Opcode::kRead, 64, 0);
  {
    RawSocket first(port_);
    ASSERT_TRUE(first.Send(frames.data(), frames.size()));
    ::shutdown(first.fd(), SHUT_WR);
    std::string received;
    ASSERT_TRUE(first.ReadUntilClosed(&received));
    // Two responses: the WRITE's, then the READ's with the bytes written.
    ASSERT_EQ(received.size(), 2 * sizeof(internal::ResponseHeader) + 64);
    EXPECT_EQ(received.substr(received.size() - 64), std::string(64, '\xEE'));
  }
  // Back to the known bytes, which the replay below must not change.
  for (size_t i = 0; i < 64; ++i) memory_[i] = uint8_t(i * 7 + 1);
  RawSocket replay(port_);
  ASSERT_TRUE(replay.connected());
  replay.Send(frames.data(), frames.size());  // may be closed mid-send
  std::string received;
  ASSERT_TRUE(replay.ReadUntilClosed(&received));
  EXPECT_TRUE(received.empty()) << "a spent token admitted a connection";
  EXPECT_TRUE(MemoryUntouched());
}

TEST_F(TcpAdmissionTest,
       WithTokensASilentConnectionIsClosedAfterTheStallTimeout) {
  TcpOptions options;
  options.require_token = true;
  options.stall_timeout = absl::Seconds(1);
  Start(options);
  auto admitted = ConnectWithHandshake();
  ASSERT_TRUE(admitted.ok()) << admitted.status();
  ASSERT_TRUE(ReadWorks(**admitted).ok());
  RawSocket silent(port_);  // never presents a token
  ASSERT_TRUE(silent.connected());
  std::string ignored;
  EXPECT_TRUE(silent.ReadUntilClosed(&ignored));
  // An admitted connection, however idle, stays.
  EXPECT_TRUE(ReadWorks(**admitted).ok());
}

TEST_F(TcpAdmissionTest, WithoutTokensTheHandshakeSaysNoneIsNeeded) {
  Start(TcpOptions());
  absl::StatusOr<std::string> token = node_->AcceptHandshake(
      internal::kTcpTokenRequest, DataAccess::Unrestricted());
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_TRUE(token->empty());
  EXPECT_EQ(node_->AcceptHandshake("something else", DataAccess::Unrestricted())
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  auto ep = ConnectWithHandshake();
  ASSERT_TRUE(ep.ok()) << ep.status();
  EXPECT_TRUE(ReadWorks(**ep).ok());
}

// Memory reserved for a tenant (a region's slabs) is out of reach of
// connections admitted for another tenant, by READ, WRITE or a range that
// only overlaps it; unreserved memory, the tenant's own callers and
// unrestricted ones are served; a reservation ends or moves on.
TEST_F(TcpAdmissionTest, AConnectionTouchesOnlyItsOwnTenantsReservedMemory) {
  TcpOptions options;
  options.require_token = true;
  Start(options);
  ASSERT_TRUE(node_->enforces_reservations());
  constexpr size_t kAt = 64 << 10;
  ASSERT_TRUE(
      node_->ReserveForTenant(memory_.data() + kAt, 64 << 10, "team-a").ok());
  // A fresh connection per denial: the responder closes after one.
  auto read_as = [&](DataAccess access, size_t offset) {
    auto ep = ConnectWithHandshake(std::move(access));
    return ep.ok() ? ReadWorks(**ep, offset) : ep.status();
  };
  const DataAccess a = DataAccess::ForTenant("team-a");
  const DataAccess b = DataAccess::ForTenant("team-b");
  const DataAccess none = DataAccess::ForTenant("");
  EXPECT_TRUE(read_as(a, kAt).ok());
  EXPECT_TRUE(read_as(DataAccess::Unrestricted(), kAt + 4096).ok());
  EXPECT_EQ(read_as(b, kAt).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(read_as(none, kAt + 8192).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(read_as(b, kAt - 2048).code(), absl::StatusCode::kPermissionDenied)
      << "a range that only overlaps the reservation";
  EXPECT_EQ(read_as(b, kAt + (64 << 10) - 2048).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(read_as(b, kAt - 4096).ok()) << "just before it";
  EXPECT_TRUE(read_as(b, kAt + (64 << 10)).ok()) << "just after it";
  {
    auto ep = ConnectWithHandshake(b);
    ASSERT_TRUE(ep.ok()) << ep.status();
    std::vector<uint8_t> junk(4096, 0xEE);
    WorkRequest wr;
    wr.opcode = Opcode::kWrite;
    wr.local = junk.data();
    wr.length = 4096;
    wr.remote_addr = region_->remote().addr + kAt;
    wr.rkey = region_->remote().rkey;
    Completion c;
    EXPECT_EQ(PostAndWait(**ep, {wr}, absl::MakeSpan(&c, 1), absl::Seconds(30))
                  .code(),
              absl::StatusCode::kPermissionDenied);
    EXPECT_TRUE(MemoryUntouched());
  }
  // Its second half goes to team-b (a new region over freed slabs).
  ASSERT_TRUE(node_
                  ->ReserveForTenant(memory_.data() + kAt + (32 << 10),
                                     32 << 10, "team-b")
                  .ok());
  EXPECT_TRUE(read_as(b, kAt + (32 << 10)).ok());
  EXPECT_EQ(read_as(a, kAt + (32 << 10)).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(read_as(b, kAt).code(), absl::StatusCode::kPermissionDenied)
      << "team-a keeps what team-b's reservation does not cover";
  EXPECT_TRUE(read_as(a, kAt).ok());
  node_->EndReservation(memory_.data() + kAt + (32 << 10));
  EXPECT_TRUE(read_as(a, kAt + (32 << 10)).ok());
}

TEST(TokenBookTest, ATokenWorksOnceExpiresAndCarriesItsAccess) {
  internal::TokenBook book;
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  absl::StatusOr<std::string> a =
      book.Issue(t0, DataAccess::ForTenant("team-a"));
  absl::StatusOr<std::string> b = book.Issue(t0, DataAccess::Unrestricted());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
  std::optional<DataAccess> access = book.Redeem(*a, t0 + absl::Seconds(1));
  ASSERT_TRUE(access.has_value());
  EXPECT_FALSE(access->unrestricted);
  EXPECT_EQ(access->tenant, "team-a");
  EXPECT_FALSE(book.Redeem(*a, t0 + absl::Seconds(1)).has_value()) << "spent";
  EXPECT_FALSE(book.Redeem(*b, t0 + internal::kTokenTtl).has_value())
      << "expired";
  EXPECT_FALSE(
      book.Redeem(std::string(internal::kTokenBytes, '\0'), t0).has_value());
  EXPECT_EQ(book.outstanding(), 0u);
}

TEST(TokenBookTest, OutstandingTokensAreCappedUntilTheyExpire) {
  internal::TokenBook book;
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  for (size_t i = 0; i < internal::kMaxTokens; ++i) {
    ASSERT_TRUE(book.Issue(t0, DataAccess::Unrestricted()).ok()) << i;
  }
  EXPECT_EQ(book.Issue(t0 + absl::Seconds(1), DataAccess::Unrestricted())
                .status()
                .code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(
      book.Issue(t0 + internal::kTokenTtl, DataAccess::Unrestricted()).ok());
  EXPECT_EQ(book.outstanding(), 1u);
}

}  // namespace
}  // namespace meshpool::rdma
