// The tcp endpoint (client side) against a scripted responder: responses
// cut at random points, many responses per receive, and a response stream
// that goes wrong partway. What came before the fault completes with its
// bytes; the faulty response and everything after it fail, never reported
// as data.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rdma/rdma.h"
#include "rdma/socket.h"
#include "rdma/tcp.h"
#include "rdma/tcp_wire.h"

namespace meshpool::rdma {
namespace {

using internal::kResponseMagic;
using internal::RequestHeader;
using internal::ResponseHeader;
using internal::WireStatus;

// A listening socket on loopback that plays the responder by hand.
class ScriptedResponder {
 public:
  ScriptedResponder() {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (::bind(listener_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        ::listen(listener_, 1) != 0 ||
        ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len)) {
      return;
    }
    address_ = absl::StrCat("tcp://127.0.0.1:", ntohs(addr.sin_port));
  }
  ~ScriptedResponder() {
    if (conn_ >= 0) ::close(conn_);
    ::close(listener_);
  }

  const std::string& address() const { return address_; }
  // Accepts the endpoint's connection (it is queued once Connect returned).
  bool Accept() {
    conn_ = ::accept(listener_, nullptr, nullptr);
    return conn_ >= 0;
  }
  // Reads `n` requests (and WRITE payloads) as the endpoint sent them.
  std::vector<RequestHeader> ReadRequests(size_t n) {
    std::vector<RequestHeader> out(n);
    for (RequestHeader& h : out) {
      if (!internal::RecvAll(conn_, &h, sizeof(h)).ok()) return {};
      if (h.opcode == static_cast<uint8_t>(Opcode::kWrite)) {
        std::string payload(h.length, '\0');
        if (!internal::RecvAll(conn_, payload.data(), h.length).ok()) return {};
      }
    }
    return out;
  }
  bool Send(const std::string& bytes) {
    return ::send(conn_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  }
  void Close() {
    ::close(conn_);
    conn_ = -1;
  }

 private:
  int listener_ = -1;
  int conn_ = -1;
  std::string address_;
};

// What a correct responder answers to `h`: its header, and for a READ
// `payload` (which must be h.length bytes).
std::string Response(const RequestHeader& h, const std::string& payload,
                     uint64_t old_value = 0) {
  ResponseHeader r{};
  r.magic = kResponseMagic;
  r.status = static_cast<uint8_t>(WireStatus::kOk);
  r.wr_id = h.wr_id;
  r.old_value = old_value;
  const bool read = h.opcode == static_cast<uint8_t>(Opcode::kRead);
  r.length = read ? h.length : 0;
  std::string out(reinterpret_cast<const char*>(&r), sizeof(r));
  if (read) out += payload;
  return out;
}

std::string RandomBytes(std::mt19937_64& rng, size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

class TcpEndpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device rd;
    seed_ = (uint64_t{rd()} << 32) ^ rd();
    std::cout << "seed=" << seed_ << std::endl;
    rng_.seed(seed_);
    ASSERT_FALSE(responder_.address().empty());
    auto transport = CreateTcpTransport();
    ASSERT_TRUE(transport.ok()) << transport.status();
    transport_ = *std::move(transport);
    auto endpoint = transport_->Connect(responder_.address(), nullptr);
    ASSERT_TRUE(endpoint.ok()) << endpoint.status();
    endpoint_ = *std::move(endpoint);
    ASSERT_TRUE(responder_.Accept());
  }

  // Posts `n` READs of `length` bytes into buffers_ (wr_id = index).
  void PostReads(size_t n, uint32_t length) {
    buffers_.assign(n, std::string(length, '\0'));
    std::vector<WorkRequest> batch(n);
    for (size_t i = 0; i < n; ++i) {
      batch[i].wr_id = i;
      batch[i].opcode = Opcode::kRead;
      batch[i].local = buffers_[i].data();
      batch[i].length = length;
      batch[i].remote_addr = 4096 * i;
      batch[i].rkey = 1;
    }
    ASSERT_TRUE(endpoint_->Post(batch).ok());
  }

  // Polls until `n` completions arrived (or 10 s passed: a failure).
  std::vector<Completion> PollAll(size_t n) {
    std::vector<Completion> all;
    Completion out[16];
    for (int tries = 0; all.size() < n && tries < 1000; ++tries) {
      auto got = endpoint_->Poll(absl::MakeSpan(out), absl::Milliseconds(10));
      if (!got.ok()) break;
      all.insert(all.end(), out, out + *got);
    }
    return all;
  }

  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  ScriptedResponder responder_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Endpoint> endpoint_;
  std::vector<std::string> buffers_;
};

TEST_F(TcpEndpointTest,
       ResponsesCutAtRandomPointsCompleteInOrderWithTheirBytes) {
  // More requests than one receive takes, of every opcode, answered in
  // random fragments while the endpoint is polled with random room.
  constexpr size_t kRequests = 300;
  std::vector<WorkRequest> batch(kRequests);
  buffers_.resize(kRequests);
  std::vector<std::string> expected(kRequests);
  std::vector<uint64_t> old_values(kRequests);
  for (size_t i = 0; i < kRequests; ++i) {
    WorkRequest& wr = batch[i];
    wr.wr_id = 1000 + i;
    wr.opcode = static_cast<Opcode>(1 + rng_() % 4);
    wr.rkey = 1;
    wr.remote_addr = 8 * i;
    if (wr.opcode == Opcode::kRead || wr.opcode == Opcode::kWrite) {
      wr.length = 1 + static_cast<uint32_t>(rng_() % (rng_() % 2 ? 64 : 40000));
    } else {
      wr.length = kAtomicBytes;
    }
    buffers_[i] = RandomBytes(rng_, wr.length);
    wr.local = buffers_[i].data();
    if (wr.opcode == Opcode::kRead) expected[i] = RandomBytes(rng_, wr.length);
    old_values[i] = rng_();
  }
  // The requests carry megabytes of WRITE payload: read them as they come.
  std::vector<RequestHeader> requests;
  std::thread reader([&] { requests = responder_.ReadRequests(kRequests); });
  const absl::Status posted = endpoint_->Post(batch);
  reader.join();
  ASSERT_TRUE(posted.ok()) << posted;
  ASSERT_EQ(requests.size(), kRequests);
  std::string stream;
  for (size_t i = 0; i < kRequests; ++i) {
    ASSERT_EQ(requests[i].wr_id, 1000 + i);
    stream += Response(requests[i], expected[i], old_values[i]);
  }

  std::vector<Completion> all;
  Completion out[8];
  for (size_t at = 0; at < stream.size();) {
    const size_t n = std::min<size_t>(stream.size() - at,
                                      1 + rng_() % (rng_() % 4 ? 100 : 70000));
    ASSERT_TRUE(responder_.Send(stream.substr(at, n)));
    at += n;
    const size_t room = 1 + rng_() % 8;
    auto got = endpoint_->Poll(absl::MakeSpan(out, room), absl::ZeroDuration());
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_LE(*got, room);
    all.insert(all.end(), out, out + *got);
  }
  std::vector<Completion> rest = PollAll(kRequests - all.size());
  all.insert(all.end(), rest.begin(), rest.end());

  ASSERT_EQ(all.size(), kRequests);
  for (size_t i = 0; i < kRequests; ++i) {
    SCOPED_TRACE(absl::StrCat("request ", i, " ", OpcodeName(batch[i].opcode)));
    EXPECT_EQ(all[i].wr_id, 1000 + i);
    EXPECT_EQ(all[i].opcode, batch[i].opcode);
    ASSERT_TRUE(all[i].status.ok()) << all[i].status;
    if (batch[i].opcode == Opcode::kRead) {
      EXPECT_TRUE(buffers_[i] == expected[i]) << "READ payload differs";
    } else if (batch[i].opcode != Opcode::kWrite) {
      uint64_t old = 0;
      std::memcpy(&old, buffers_[i].data(), kAtomicBytes);
      EXPECT_EQ(old, old_values[i]);
    }
  }
  EXPECT_TRUE(endpoint_->healthy());
}

TEST_F(TcpEndpointTest,
       CorruptHeaderFailsItsRequestAndEveryOneAfterButNotThoseBefore) {
  constexpr size_t kReads = 6;
  constexpr uint32_t kLength = 4096;
  PostReads(kReads, kLength);
  std::vector<RequestHeader> requests = responder_.ReadRequests(kReads);
  ASSERT_EQ(requests.size(), kReads);
  std::vector<std::string> payloads;
  std::string stream;
  for (size_t i = 0; i < kReads; ++i) {
    payloads.push_back(RandomBytes(rng_, kLength));
    std::string response = Response(requests[i], payloads[i]);
    if (i == 2) response[0] ^= 0x55;  // the magic
    stream += response;
  }
  ASSERT_TRUE(responder_.Send(stream));  // in one piece: one receive
  std::vector<Completion> all = PollAll(kReads);
  ASSERT_EQ(all.size(), kReads);
  for (size_t i = 0; i < kReads; ++i) {
    SCOPED_TRACE(absl::StrCat("read ", i));
    EXPECT_EQ(all[i].wr_id, i);
    if (i < 2) {
      ASSERT_TRUE(all[i].status.ok()) << all[i].status;
      EXPECT_TRUE(buffers_[i] == payloads[i]);
    } else {
      EXPECT_EQ(all[i].status.code(), absl::StatusCode::kUnavailable)
          << all[i].status;
    }
  }
  EXPECT_FALSE(endpoint_->healthy());
  Completion more[1];
  EXPECT_EQ(endpoint_->Poll(absl::MakeSpan(more), absl::ZeroDuration())
                .status()
                .code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(TcpEndpointTest, ResponseLengthOtherThanTheReadsBreaksTheEndpoint) {
  PostReads(3, 4096);
  std::vector<RequestHeader> requests = responder_.ReadRequests(3);
  ASSERT_EQ(requests.size(), 3u);
  requests[1].length = 100;  // the responder claims a shorter READ
  std::string stream = Response(requests[0], RandomBytes(rng_, 4096)) +
                       Response(requests[1], RandomBytes(rng_, 100)) +
                       Response(requests[2], RandomBytes(rng_, 4096));
  ASSERT_TRUE(responder_.Send(stream));
  std::vector<Completion> all = PollAll(3);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_TRUE(all[0].status.ok()) << all[0].status;
  EXPECT_EQ(all[1].status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(all[2].status.code(), absl::StatusCode::kUnavailable);
}

TEST_F(TcpEndpointTest,
       AccessDeniedMidStreamIsPermissionDeniedThenUnavailable) {
  PostReads(3, 512);
  std::vector<RequestHeader> requests = responder_.ReadRequests(3);
  ASSERT_EQ(requests.size(), 3u);
  const std::string first = RandomBytes(rng_, 512);
  ResponseHeader denied{};
  denied.magic = kResponseMagic;
  denied.status = static_cast<uint8_t>(WireStatus::kAccessDenied);
  denied.wr_id = requests[1].wr_id;
  ASSERT_TRUE(responder_.Send(
      Response(requests[0], first) +
      std::string(reinterpret_cast<const char*>(&denied), sizeof(denied))));
  responder_.Close();
  std::vector<Completion> all = PollAll(3);
  ASSERT_EQ(all.size(), 3u);
  ASSERT_TRUE(all[0].status.ok()) << all[0].status;
  EXPECT_TRUE(buffers_[0] == first);
  EXPECT_EQ(all[1].status.code(), absl::StatusCode::kPermissionDenied)
      << all[1].status;
  EXPECT_EQ(all[2].status.code(), absl::StatusCode::kUnavailable);
}

TEST_F(TcpEndpointTest, PeerClosingMidPayloadFailsTheReadUnavailable) {
  PostReads(2, 8192);
  std::vector<RequestHeader> requests = responder_.ReadRequests(2);
  ASSERT_EQ(requests.size(), 2u);
  const std::string first = RandomBytes(rng_, 8192);
  const std::string second = Response(requests[1], RandomBytes(rng_, 8192));
  ASSERT_TRUE(responder_.Send(Response(requests[0], first) +
                              second.substr(0, second.size() / 2)));
  responder_.Close();
  std::vector<Completion> all = PollAll(2);
  ASSERT_EQ(all.size(), 2u);
  ASSERT_TRUE(all[0].status.ok()) << all[0].status;
  EXPECT_TRUE(buffers_[0] == first);
  EXPECT_EQ(all[1].status.code(), absl::StatusCode::kUnavailable)
      << all[1].status;
}

}  // namespace
}  // namespace meshpool::rdma
