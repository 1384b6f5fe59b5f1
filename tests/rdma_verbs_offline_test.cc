// What of the verbs backend needs no RDMA device: the handshake's wire
// format (rdma/verbs_handshake.h: round trips, and every truncated,
// trailing, out-of-range or garbage input refused with InvalidArgument),
// option validation, unknown devices, and ListRdmaDevices on any host.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "rdma/devices.h"
#include "rdma/rdma.h"
#include "rdma/verbs.h"
#include "rdma/verbs_handshake.h"

namespace meshpool::rdma::internal {
namespace {

// Byte offsets in the encodings (see the format in verbs_handshake.h).
constexpr size_t kNameLenAt = 6;
constexpr size_t kQpInfoBytes = 16 + 2 + 4 + 4 + 4 + 1;
constexpr size_t kReplyQpAt = 6;
constexpr size_t kRegionCountAt = kReplyQpAt + kQpInfoBytes;
constexpr size_t kFirstRegionAt = kRegionCountAt + 4;
constexpr size_t kFirstChunkCountAt = kFirstRegionAt + 4 + 8 + 8;
constexpr size_t kFirstChunkAt = kFirstChunkCountAt + 4;

void PutLe(std::string& bytes, size_t at, uint64_t value, int width) {
  for (int i = 0; i < width; ++i) {
    bytes[at + i] = static_cast<char>(value >> (8 * i));
  }
}

QpInfo SampleQp(uint32_t qpn) {
  QpInfo qp;
  for (size_t i = 0; i < qp.gid.size(); ++i)
    qp.gid[i] = static_cast<uint8_t>(i);
  qp.gid[10] = qp.gid[11] = 0xff;
  qp.lid = 7;
  qp.qpn = qpn;
  qp.psn = 0xabcdef;
  qp.mtu_bytes = 1024;
  qp.rd_atomic = 16;
  return qp;
}

HandshakeRequest SampleRequest() { return {"client-a.example", SampleQp(17)}; }

HandshakeReply SampleReply() {
  HandshakeReply reply;
  reply.qp = SampleQp(0xffffff);
  reply.regions.push_back({0x1234,
                           0x10000,
                           0x3000,
                           {{0x10000, 0x1000, 11}, {0x11000, 0x2000, 12}}});
  reply.regions.push_back({0x99, 0x7f0000000000, 1, {{0x7f0000000000, 1, 3}}});
  return reply;
}

void ExpectRequestRefused(const std::string& bytes, const char* why) {
  auto decoded = DecodeHandshakeRequest(bytes);
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument)
      << why << ": " << decoded.status();
}

void ExpectReplyRefused(const std::string& bytes, const char* why) {
  auto decoded = DecodeHandshakeReply(bytes);
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument)
      << why << ": " << decoded.status();
}

TEST(VerbsHandshakeTest, RequestRoundTrips) {
  const HandshakeRequest request = SampleRequest();
  auto decoded = DecodeHandshakeRequest(EncodeHandshakeRequest(request));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, request);
}

TEST(VerbsHandshakeTest, ReplyRoundTripsWithRegionsAndWithout) {
  const HandshakeReply reply = SampleReply();
  auto decoded = DecodeHandshakeReply(EncodeHandshakeReply(reply));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, reply);

  HandshakeReply empty;
  empty.qp = SampleQp(1);
  auto decoded_empty = DecodeHandshakeReply(EncodeHandshakeReply(empty));
  ASSERT_TRUE(decoded_empty.ok()) << decoded_empty.status();
  EXPECT_EQ(*decoded_empty, empty);
}

TEST(VerbsHandshakeTest, LongestNameRoundTripsAndLongerIsRefused) {
  HandshakeRequest request = SampleRequest();
  request.client_name.assign(kMaxPeerNameBytes, 'n');
  auto decoded = DecodeHandshakeRequest(EncodeHandshakeRequest(request));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->client_name, request.client_name);

  request.client_name.assign(kMaxPeerNameBytes + 1, 'n');
  ExpectRequestRefused(EncodeHandshakeRequest(request), "name too long");
  request.client_name.clear();
  ExpectRequestRefused(EncodeHandshakeRequest(request), "empty name");
}

TEST(VerbsHandshakeTest, EveryTruncationIsInvalidArgument) {
  const std::string request = EncodeHandshakeRequest(SampleRequest());
  for (size_t n = 0; n < request.size(); ++n) {
    SCOPED_TRACE(n);
    ExpectRequestRefused(request.substr(0, n), "truncated request");
  }
  const std::string reply = EncodeHandshakeReply(SampleReply());
  for (size_t n = 0; n < reply.size(); ++n) {
    SCOPED_TRACE(n);
    ExpectReplyRefused(reply.substr(0, n), "truncated reply");
  }
}

TEST(VerbsHandshakeTest, TrailingBytesAreInvalidArgument) {
  ExpectRequestRefused(EncodeHandshakeRequest(SampleRequest()) + "x",
                       "trailing request byte");
  ExpectReplyRefused(EncodeHandshakeReply(SampleReply()) + std::string(1, '\0'),
                     "trailing reply byte");
}

TEST(VerbsHandshakeTest, WrongMagicOrVersionIsInvalidArgument) {
  const std::string request = EncodeHandshakeRequest(SampleRequest());
  const std::string reply = EncodeHandshakeReply(SampleReply());
  ExpectReplyRefused(request, "a request given as reply");
  ExpectRequestRefused(reply, "a reply given as request");
  std::string bad = request;
  bad[0] ^= 1;
  ExpectRequestRefused(bad, "magic");
  bad = request;
  PutLe(bad, 4, kHandshakeVersion + 1, 2);
  ExpectRequestRefused(bad, "future version");
  bad = reply;
  PutLe(bad, 4, 0, 2);
  ExpectReplyRefused(bad, "version 0");
}

TEST(VerbsHandshakeTest, OutOfRangeQpValuesAreInvalidArgument) {
  struct Case {
    const char* what;
    void (*mutate)(QpInfo&);
  };
  const Case cases[] = {
      {"qpn 0", [](QpInfo& q) { q.qpn = 0; }},
      {"qpn beyond 24 bits", [](QpInfo& q) { q.qpn = 1u << 24; }},
      {"psn beyond 24 bits", [](QpInfo& q) { q.psn = 1u << 24; }},
      {"mtu 300", [](QpInfo& q) { q.mtu_bytes = 300; }},
      {"mtu 128", [](QpInfo& q) { q.mtu_bytes = 128; }},
      {"mtu 8192", [](QpInfo& q) { q.mtu_bytes = 8192; }},
      {"rd_atomic 0", [](QpInfo& q) { q.rd_atomic = 0; }},
  };
  for (const Case& c : cases) {
    HandshakeRequest request = SampleRequest();
    c.mutate(request.qp);
    ExpectRequestRefused(EncodeHandshakeRequest(request), c.what);
    HandshakeReply reply = SampleReply();
    c.mutate(reply.qp);
    ExpectReplyRefused(EncodeHandshakeReply(reply), c.what);
  }
}

TEST(VerbsHandshakeTest, NameLengthPastTheEndIsInvalidArgument) {
  std::string bytes = EncodeHandshakeRequest(SampleRequest());
  PutLe(bytes, kNameLenAt, 200, 2);  // longer than what follows
  ExpectRequestRefused(bytes, "name length past the end");
}

TEST(VerbsHandshakeTest, MalformedRegionTablesAreInvalidArgument) {
  const std::string reply = EncodeHandshakeReply(SampleReply());
  std::string bad = reply;
  PutLe(bad, kRegionCountAt, 0xffffffff, 4);
  ExpectReplyRefused(bad, "huge region count");
  bad = reply;
  PutLe(bad, kRegionCountAt, 3, 4);
  ExpectReplyRefused(bad, "region count past the end");
  bad = reply;
  PutLe(bad, kFirstChunkCountAt, 0xffffffff, 4);
  ExpectReplyRefused(bad, "huge chunk count");
  bad = reply;
  PutLe(bad, kFirstRegionAt, 0, 4);
  ExpectReplyRefused(bad, "handle 0");
  bad = reply;
  PutLe(bad, kFirstChunkAt, 0x10008, 8);
  ExpectReplyRefused(bad, "first chunk starts inside the region");

  HandshakeReply r = SampleReply();
  r.regions[0].chunks.clear();
  ExpectReplyRefused(EncodeHandshakeReply(r), "region without chunks");
  r = SampleReply();
  r.regions[0].chunks[1].addr += 1;
  ExpectReplyRefused(EncodeHandshakeReply(r), "gap between chunks");
  r = SampleReply();
  r.regions[0].chunks[1].length -= 1;
  ExpectReplyRefused(EncodeHandshakeReply(r), "chunks fall short");
  r = SampleReply();
  r.regions[0].chunks[1].length += 1;
  ExpectReplyRefused(EncodeHandshakeReply(r), "chunks run past the end");
  r = SampleReply();
  r.regions[0].chunks[0].length = 0;
  r.regions[0].chunks[1].addr = r.regions[0].addr;
  ExpectReplyRefused(EncodeHandshakeReply(r), "empty chunk");
  r = SampleReply();
  r.regions[1].handle = r.regions[0].handle;
  ExpectReplyRefused(EncodeHandshakeReply(r), "duplicate handle");
  r = SampleReply();
  r.regions[1].addr = ~uint64_t{0};
  r.regions[1].chunks[0].addr = ~uint64_t{0};
  r.regions[1].length = r.regions[1].chunks[0].length = 2;
  ExpectReplyRefused(EncodeHandshakeReply(r), "region wraps around");
  r = SampleReply();
  r.regions[1].length = r.regions[1].chunks[0].length = 0;
  ExpectReplyRefused(EncodeHandshakeReply(r), "empty region");
}

TEST(VerbsHandshakeTest, RandomGarbageNeverCrashesAndIsRefused) {
  std::mt19937_64 rng(12345);
  const std::string request = EncodeHandshakeRequest(SampleRequest());
  const std::string reply = EncodeHandshakeReply(SampleReply());
  for (int i = 0; i < 5000; ++i) {
    std::string junk(rng() % 128, '\0');
    for (char& c : junk) c = static_cast<char>(rng());
    EXPECT_FALSE(DecodeHandshakeRequest(junk).ok());
    EXPECT_FALSE(DecodeHandshakeReply(junk).ok());
    // Flipped bytes in valid encodings: refused or decoded, never a crash.
    std::string flipped = i % 2 ? request : reply;
    flipped[rng() % flipped.size()] ^= static_cast<char>(1 + rng() % 255);
    auto a = DecodeHandshakeRequest(flipped);
    auto b = DecodeHandshakeReply(flipped);
    if (!a.ok()) {
      EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
    }
    if (!b.ok()) {
      EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
    }
  }
}

TEST(VerbsOptionsTest, InvalidOptionsAreInvalidArgumentBeforeTouchingDevices) {
  std::vector<VerbsOptions> bad(7);
  bad[0].port = 0;
  bad[1].gid_index = -2;
  bad[2].max_peer_qps = 0;
  bad[3].busy_poll = absl::Microseconds(-1);
  bad[4].max_mr_bytes = 100;
  bad[5].self_name = "has space";
  bad[6].self_name = std::string(kMaxPeerNameBytes + 1, 'x');
  for (size_t i = 0; i < bad.size(); ++i) {
    EXPECT_EQ(CreateVerbsTransport(bad[i]).status().code(),
              absl::StatusCode::kInvalidArgument)
        << i;
  }
}

TEST(VerbsOptionsTest, UnknownDeviceIsNotFoundPointingAtDoctor) {
  VerbsOptions options;
  options.devices = {"no_such_device9"};
  auto transport = CreateVerbsTransport(options);
  EXPECT_EQ(transport.status().code(), absl::StatusCode::kNotFound)
      << transport.status();
  EXPECT_TRUE(
      absl::StrContains(transport.status().message(), "no_such_device9"));
  EXPECT_TRUE(
      absl::StrContains(transport.status().message(), "run `meshpool doctor`"));
}

TEST(VerbsOptionsTest, ListRdmaDevicesSucceedsWithOrWithoutDevices) {
  auto devices = ListRdmaDevices();
  ASSERT_TRUE(devices.ok()) << devices.status();
  for (const RdmaDeviceInfo& d : *devices) EXPECT_FALSE(d.name.empty());
}

}  // namespace
}  // namespace meshpool::rdma::internal
