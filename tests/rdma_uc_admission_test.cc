// Admission on the uc backend's UDP socket (UcOptions::require_token): a
// node that requires tokens executes nothing for a session until its hello
// presents a token the node's handshake issued, refuses a hello without
// one (the client's Connect fails PermissionDenied), and each token admits
// one session and carries whom it admits (a tenant's session cannot touch
// memory reserved for another tenant). Raw sessions here are a UcChannel on a
// UDP socket of the test's own, speaking the wire as an outsider would.
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rdma/rdma.h"
#include "rdma/socket.h"
#include "rdma/tcp_wire.h"
#include "rdma/tokens.h"
#include "rdma/uc.h"
#include "rdma/uc_channel.h"
#include "rdma/uc_link.h"
#include "rdma/uc_wire.h"

namespace meshpool::rdma {
namespace {

constexpr size_t kNodeBytes = 1 << 20;
constexpr uint32_t kPayload = 64;

absl::Span<const uint8_t> Bytes(const void* p, size_t n) {
  return {static_cast<const uint8_t*>(p), n};
}

// One session on a socket of its own: sends messages, collects the node's.
class RawSession {
 public:
  static std::unique_ptr<RawSession> Open(const std::string& address,
                                          uint64_t session) {
    auto peer = internal::ParseHostPort(address, "uc://");
    EXPECT_TRUE(peer.ok()) << peer.status();
    if (!peer.ok()) return nullptr;
    auto link = internal::UdpLink::Connect(*peer, 4096, UcLinkFaults());
    EXPECT_TRUE(link.ok()) << link.status();
    if (!link.ok()) return nullptr;
    auto s = std::make_unique<RawSession>();
    s->link_ = *std::move(link);
    internal::UcLink* raw = s->link_.get();
    auto channel = internal::UcChannel::Create(
        internal::ChannelOptions(UcOptions(), session),
        [raw](absl::Span<const uint8_t> h, absl::Span<const uint8_t> p) {
          return raw->Send(h, p);
        });
    EXPECT_TRUE(channel.ok()) << channel.status();
    if (!channel.ok()) return nullptr;
    s->channel_.emplace(*std::move(channel));
    return s;
  }

  void Send(const std::string& message) {
    const absl::Span<const uint8_t> part =
        Bytes(message.data(), message.size());
    ASSERT_TRUE(channel_->Send({&part, 1}).ok());
  }

  // Runs the channel for `how_long`; returns the messages the node sent.
  std::vector<std::string> Exchange(absl::Duration how_long) {
    std::vector<std::string> got;
    const absl::Time end = absl::Now() + how_long;
    while (absl::Now() < end) {
      const absl::Time now = absl::Now();
      (void)link_->Receive(
          [&](absl::Span<const uint8_t> f) { channel_->OnFrame(f, now); }, 256);
      (void)channel_->Pump(now);
      while (auto m = channel_->Receive()) {
        got.emplace_back(m->begin(), m->end());
      }
      absl::SleepFor(absl::Milliseconds(2));
    }
    return got;
  }

 private:
  std::unique_ptr<internal::UcLink> link_;
  std::optional<internal::UcChannel> channel_;
};

std::string Hello(absl::string_view token) {
  const uint32_t magic = internal::kUcHello;
  return absl::StrCat(
      absl::string_view(reinterpret_cast<const char*>(&magic), 4), token);
}

std::string Magic(uint32_t magic) {
  return std::string(reinterpret_cast<const char*>(&magic), sizeof(magic));
}

class UcAdmissionTest : public ::testing::Test {
 protected:
  void Start(bool require_token) {
    UcOptions options;
    options.require_token = require_token;
    auto node = CreateUcTransport(options);
    auto client = CreateUcTransport(UcOptions());
    ASSERT_TRUE(node.ok()) << node.status();
    ASSERT_TRUE(client.ok()) << client.status();
    node_ = *std::move(node);
    client_ = *std::move(client);
    memory_.resize(kNodeBytes);
    for (size_t i = 0; i < memory_.size(); ++i) memory_[i] = uint8_t(i * 7 + 1);
    auto region = node_->RegisterMemory(memory_.data(), memory_.size());
    ASSERT_TRUE(region.ok()) << region.status();
    region_ = *std::move(region);
    auto address = node_->Listen("127.0.0.1:0");
    ASSERT_TRUE(address.ok()) << address.status();
    address_ = *address;
  }

  // A request naming the first kPayload bytes of the node's memory.
  std::string Request(Opcode op) {
    internal::RequestHeader h{};
    h.magic = internal::kRequestMagic;
    h.opcode = static_cast<uint8_t>(op);
    h.rkey = region_->remote().rkey;
    h.length = kPayload;
    h.remote_addr = region_->remote().addr;
    h.wr_id = 7;
    std::string m(reinterpret_cast<const char*>(&h), sizeof(h));
    if (op == Opcode::kWrite) m.append(kPayload, '\xEE');
    return m;
  }

  bool MemoryUntouched() const {
    for (size_t i = 0; i < kPayload; ++i) {
      if (memory_[i] != uint8_t(i * 7 + 1)) return false;
    }
    return true;
  }

  // `access`: whom the node's control plane admitted the caller as.
  Handshake NodeHandshake(DataAccess access = DataAccess::Unrestricted()) {
    return [this, access](absl::string_view request) {
      return node_->AcceptHandshake(request, access);
    };
  }

  absl::Status ReadWorks(Endpoint& ep, size_t offset = 0) {
    std::vector<uint8_t> buf(kPayload);
    WorkRequest wr;
    wr.wr_id = 1;
    wr.opcode = Opcode::kRead;
    wr.local = buf.data();
    wr.length = kPayload;
    wr.remote_addr = region_->remote().addr + offset;
    wr.rkey = region_->remote().rkey;
    Completion c;
    absl::Status s = PostAndWait(ep, {&wr, 1}, {&c, 1}, absl::Seconds(10));
    if (s.ok() &&
        std::memcmp(buf.data(), memory_.data() + offset, kPayload) != 0) {
      return absl::DataLossError("read other bytes");
    }
    return s;
  }

  std::unique_ptr<Transport> node_;
  std::unique_ptr<Transport> client_;
  std::vector<uint8_t> memory_;
  std::unique_ptr<MemoryRegion> region_;
  std::string address_;
};

TEST_F(UcAdmissionTest, WithTokensALaneWithoutOneIsRefusedPermissionDenied) {
  Start(/*require_token=*/true);
  auto without = client_->Connect(address_, nullptr);
  ASSERT_FALSE(without.ok());
  EXPECT_EQ(without.status().code(), absl::StatusCode::kPermissionDenied)
      << without.status();
  EXPECT_NE(without.status().message().find("requires a session token"),
            std::string::npos)
      << without.status();
  auto with = client_->Connect(address_, NodeHandshake());
  ASSERT_TRUE(with.ok()) << with.status();
  EXPECT_TRUE(ReadWorks(**with).ok());
  // A second lane joins the same link with a token of its own.
  auto second = client_->Connect(address_, NodeHandshake());
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(ReadWorks(**second).ok());
}

TEST_F(UcAdmissionTest, WithTokensNothingRunsBeforeAnAdmittedHello) {
  Start(/*require_token=*/true);
  // A request with no hello: the session ends unanswered.
  auto no_hello = RawSession::Open(address_, 1001);
  ASSERT_NE(no_hello, nullptr);
  no_hello->Send(Request(Opcode::kWrite));
  no_hello->Send(Request(Opcode::kRead));
  EXPECT_TRUE(no_hello->Exchange(absl::Milliseconds(300)).empty());
  // A made-up token: refused, and the requests behind it never run.
  auto made_up = RawSession::Open(address_, 1002);
  ASSERT_NE(made_up, nullptr);
  made_up->Send(Hello(std::string(internal::kTokenBytes, 'x')));
  made_up->Send(Request(Opcode::kWrite));
  made_up->Send(Request(Opcode::kRead));
  std::vector<std::string> got = made_up->Exchange(absl::Milliseconds(300));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], Magic(internal::kUcHelloRefused));
  // A hello with no token at all: refused the same way.
  auto bare = RawSession::Open(address_, 1003);
  ASSERT_NE(bare, nullptr);
  bare->Send(Hello(""));
  bare->Send(Request(Opcode::kWrite));
  got = bare->Exchange(absl::Milliseconds(300));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], Magic(internal::kUcHelloRefused));
  EXPECT_TRUE(MemoryUntouched());
  // The node serves certificate holders (here: its handshake) on.
  auto with = client_->Connect(address_, NodeHandshake());
  ASSERT_TRUE(with.ok()) << with.status();
  EXPECT_TRUE(ReadWorks(**with).ok());
}

TEST_F(UcAdmissionTest, WithTokensEachTokenAdmitsOneSession) {
  Start(/*require_token=*/true);
  absl::StatusOr<std::string> token = node_->AcceptHandshake(
      internal::kUcTokenRequest, DataAccess::Unrestricted());
  ASSERT_TRUE(token.ok()) << token.status();
  ASSERT_EQ(token->size(), internal::kTokenBytes);
  auto first = RawSession::Open(address_, 2001);
  ASSERT_NE(first, nullptr);
  first->Send(Hello(*token));
  first->Send(Request(Opcode::kWrite));
  std::vector<std::string> got = first->Exchange(absl::Milliseconds(300));
  ASSERT_EQ(got.size(), 2u);  // the hello's answer, the WRITE's response
  EXPECT_EQ(got[0], Magic(internal::kUcHello));
  EXPECT_EQ(memory_[0], 0xEE);
  // Back to the known bytes, which the replay below must not change.
  for (size_t i = 0; i < kPayload; ++i) memory_[i] = uint8_t(i * 7 + 1);
  auto replay = RawSession::Open(address_, 2002);
  ASSERT_NE(replay, nullptr);
  replay->Send(Hello(*token));
  replay->Send(Request(Opcode::kWrite));
  got = replay->Exchange(absl::Milliseconds(300));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], Magic(internal::kUcHelloRefused))
      << "a spent token admitted a session";
  EXPECT_TRUE(MemoryUntouched());
}

// As on tcp: memory reserved for a tenant is refused to sessions admitted
// for another one, whose token says whom it admits.
TEST_F(UcAdmissionTest, ASessionTouchesOnlyItsOwnTenantsReservedMemory) {
  Start(/*require_token=*/true);
  ASSERT_TRUE(node_->enforces_reservations());
  constexpr size_t kAt = 64 << 10;
  ASSERT_TRUE(
      node_->ReserveForTenant(memory_.data() + kAt, 64 << 10, "team-a").ok());
  auto read_as = [&](DataAccess access, size_t offset) {
    auto ep = client_->Connect(address_, NodeHandshake(std::move(access)));
    return ep.ok() ? ReadWorks(**ep, offset) : ep.status();
  };
  EXPECT_TRUE(read_as(DataAccess::ForTenant("team-a"), kAt).ok());
  EXPECT_TRUE(read_as(DataAccess::Unrestricted(), kAt).ok());
  EXPECT_EQ(read_as(DataAccess::ForTenant("team-b"), kAt).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(read_as(DataAccess::ForTenant(""), kAt + 4096).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(read_as(DataAccess::ForTenant("team-b"), 0).ok());
}

TEST_F(UcAdmissionTest, WithoutTokensTheHandshakeSaysNoneIsNeeded) {
  Start(/*require_token=*/false);
  absl::StatusOr<std::string> token = node_->AcceptHandshake(
      internal::kUcTokenRequest, DataAccess::Unrestricted());
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_TRUE(token->empty());
  auto with = client_->Connect(address_, NodeHandshake());
  ASSERT_TRUE(with.ok()) << with.status();
  EXPECT_TRUE(ReadWorks(**with).ok());
  auto without = client_->Connect(address_, nullptr);
  ASSERT_TRUE(without.ok()) << without.status();
  EXPECT_TRUE(ReadWorks(**without).ok());
  // Even so, a session's first message must be a hello.
  auto no_hello = RawSession::Open(address_, 3001);
  ASSERT_NE(no_hello, nullptr);
  no_hello->Send(Request(Opcode::kWrite));
  EXPECT_TRUE(no_hello->Exchange(absl::Milliseconds(300)).empty());
  EXPECT_TRUE(MemoryUntouched());
}

}  // namespace
}  // namespace meshpool::rdma
