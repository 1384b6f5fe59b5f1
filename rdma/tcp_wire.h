// meshpool/rdma internal: the tcp backend's wire format.
//
// A client sends RequestHeader frames; a WRITE's `length` payload bytes
// follow its header. The responder answers every request, in order, with a
// ResponseHeader; a READ's `length` payload bytes follow it. All integers are
// little-endian; the structs are sent as-is, so the build requires a
// little-endian host (static_assert below) and fixed layouts.
//
// A node that requires tokens (TcpOptions::require_token) first expects a
// TcpHello carrying a token from its handshake (rdma/tokens.h) and
// closes a connection that opens with anything else, before reading any
// request. The handshake itself runs over the node's control plane: the
// client sends kTcpTokenRequest; the node answers a token, or nothing when
// it requires none.
//
// The responder closes the connection on any malformed or forbidden request.
// For a well-formed request that names memory it may not touch (unknown
// rkey, out of bounds) it first sends a response with kAccessDenied, so the
// client can tell PermissionDenied from a dead peer.
#ifndef MESHPOOL_RDMA_TCP_WIRE_H_
#define MESHPOOL_RDMA_TCP_WIRE_H_

#include <bit>
#include <cstdint>
#include <type_traits>

namespace meshpool::rdma::internal {

static_assert(std::endian::native == std::endian::little,
              "tcp wire structs are sent as-is and are little-endian");

inline constexpr uint32_t kRequestMagic = 0x5152504d;   // "MPRQ"
inline constexpr uint32_t kHelloMagic = 0x4c48504d;     // "MPHL"
inline constexpr char kTcpTokenRequest[] = "meshpool tcp token v1";

struct TcpHello {
  uint32_t magic;
  uint32_t reserved;  // 0
  uint8_t token[16];  // kTokenBytes
};
inline constexpr size_t kHelloBytes = 24;
static_assert(sizeof(TcpHello) == kHelloBytes);
static_assert(std::is_trivially_copyable_v<TcpHello>);
inline constexpr uint32_t kResponseMagic = 0x5352504d;  // "MPRS"

struct RequestHeader {
  uint32_t magic;
  uint8_t opcode;  // rdma::Opcode
  uint8_t pad[3];
  uint32_t rkey;
  uint32_t length;
  uint64_t wr_id;
  uint64_t remote_addr;
  uint64_t compare_add;
  uint64_t swap;
};
inline constexpr size_t kRequestHeaderBytes = 48;
static_assert(sizeof(RequestHeader) == kRequestHeaderBytes);
static_assert(std::is_trivially_copyable_v<RequestHeader>);
static_assert(std::is_standard_layout_v<RequestHeader>);

enum class WireStatus : uint8_t {
  kOk = 0,
  kAccessDenied = 1,  // unknown rkey or out of bounds; connection closes next
};

struct ResponseHeader {
  uint32_t magic;
  uint8_t status;  // WireStatus
  uint8_t pad[3];
  uint32_t length;  // payload bytes that follow (READ only)
  uint32_t pad2;
  uint64_t wr_id;
  uint64_t old_value;  // CAS/FAA: the word before the operation
};
inline constexpr size_t kResponseHeaderBytes = 32;
static_assert(sizeof(ResponseHeader) == kResponseHeaderBytes);
static_assert(std::is_trivially_copyable_v<ResponseHeader>);
static_assert(std::is_standard_layout_v<ResponseHeader>);

}  // namespace meshpool::rdma::internal

#endif  // MESHPOOL_RDMA_TCP_WIRE_H_
