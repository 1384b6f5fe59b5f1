// meshpool/rdma internal: the verbs backend's connection handshake, carried
// opaquely by the node's gRPC Handshake RPC. No verbs types here, so it is
// testable anywhere.
//
// Wire format (version 1), all integers little-endian:
//   request: magic "MPVQ" u32 | version u16 | name_len u16 | name bytes |
//            QpInfo
//   reply:   magic "MPVR" u32 | version u16 | QpInfo | region_count u32 |
//            region_count x { handle u32 | addr u64 | length u64 |
//                             chunk_count u32 |
//                             chunk_count x { addr u64 | length u64 |
//                                             rkey u32 } }
//   QpInfo:  gid 16 bytes | lid u16 | qpn u32 | psn u32 | mtu_bytes u32 |
//            rd_atomic u8
// Decoding checks every length against the bytes left and every value
// against its range, and refuses trailing bytes: anything malformed is
// InvalidArgument. A region's chunks must be non-empty, ascending and
// contiguous, and cover exactly [addr, addr + length).
//
// Thread-safety: stateless functions.
#ifndef MESHPOOL_RDMA_VERBS_HANDSHAKE_H_
#define MESHPOOL_RDMA_VERBS_HANDSHAKE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace meshpool::rdma::internal {

inline constexpr uint32_t kHandshakeRequestMagic = 0x5156504d;  // "MPVQ"
inline constexpr uint32_t kHandshakeReplyMagic = 0x5256504d;    // "MPVR"
inline constexpr uint16_t kHandshakeVersion = 1;
inline constexpr size_t kMaxPeerNameBytes = 255;
// A reply names at most this many regions and chunks in all, which keeps it
// (about 20 bytes per chunk) far below gRPC's default 4 MiB message limit.
inline constexpr size_t kMaxHandshakeRegions = 1 << 14;
inline constexpr size_t kMaxHandshakeChunks = 1 << 16;
static_assert(kMaxHandshakeChunks * 32 < (4u << 20));
inline constexpr uint32_t kMaxQpNumber = (1u << 24) - 1;  // QPN, PSN: 24 bits

// One side's queue pair, as its peer needs it to connect.
struct QpInfo {
  std::array<uint8_t, 16> gid{};
  uint16_t lid = 0;
  uint32_t qpn = 0;        // 24 bits
  uint32_t psn = 0;        // 24 bits
  uint32_t mtu_bytes = 0;  // active MTU: 256, 512, 1024, 2048 or 4096
  // Request: the READs/atomics the client keeps in flight; reply: how many
  // the node's QP serves at once. Nonzero.
  uint8_t rd_atomic = 0;

  bool operator==(const QpInfo&) const = default;
};

struct HandshakeRequest {
  std::string client_name;  // 1..kMaxPeerNameBytes bytes
  QpInfo qp;

  bool operator==(const HandshakeRequest&) const = default;
};

// One registration of the node, as registered on the device that serves
// the requesting client.
struct HandshakeChunk {
  uint64_t addr = 0;
  uint64_t length = 0;
  uint32_t rkey = 0;  // the device's key

  bool operator==(const HandshakeChunk&) const = default;
};
struct HandshakeRegion {
  uint32_t handle = 0;  // the rkey peers put in work requests
  uint64_t addr = 0;
  uint64_t length = 0;
  std::vector<HandshakeChunk> chunks;

  bool operator==(const HandshakeRegion&) const = default;
};

struct HandshakeReply {
  QpInfo qp;
  std::vector<HandshakeRegion> regions;

  bool operator==(const HandshakeReply&) const = default;
};

// OK when `name` may be a peer's name in a handshake and an address
// ("verbs://NAME", "uc://NAME"): 1..kMaxPeerNameBytes printable characters
// other than space, '/' and ':'. InvalidArgument naming `what` otherwise.
absl::Status ValidatePeerName(absl::string_view name, absl::string_view what);

// Encoders never fail. REQUIRES: the value would decode (name length,
// region and chunk counts within the limits above).
std::string EncodeHandshakeRequest(const HandshakeRequest& request);
std::string EncodeHandshakeReply(const HandshakeReply& reply);

// InvalidArgument, naming what is wrong, for anything malformed: bad magic
// or version, truncation, trailing bytes, values out of range.
absl::StatusOr<HandshakeRequest> DecodeHandshakeRequest(
    absl::string_view bytes);
absl::StatusOr<HandshakeReply> DecodeHandshakeReply(absl::string_view bytes);

}  // namespace meshpool::rdma::internal

#endif  // MESHPOOL_RDMA_VERBS_HANDSHAKE_H_
