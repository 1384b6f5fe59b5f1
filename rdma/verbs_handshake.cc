#include "rdma/verbs_handshake.h"

#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/common.h"

namespace meshpool::rdma::internal {
namespace {

constexpr size_t kChunkBytes = 8 + 8 + 4;
constexpr size_t kRegionHeaderBytes = 4 + 8 + 8 + 4;

class Writer {
 public:
  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void U16(uint16_t v) { Le(v, 2); }
  void U32(uint32_t v) { Le(v, 4); }
  void U64(uint64_t v) { Le(v, 8); }
  void Bytes(const void* p, size_t n) {
    out_.append(static_cast<const char*>(p), n);
  }
  std::string Take() { return std::move(out_); }

 private:
  void Le(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) U8(static_cast<uint8_t>(v >> (8 * i)));
  }
  std::string out_;
};

// Reads little-endian values; every read checks the bytes left and fails
// the whole decode (sticky) once short.
class Reader {
 public:
  explicit Reader(absl::string_view in) : in_(in) {}
  bool U8(uint8_t* v) {
    uint64_t x;
    if (!Le(1, &x)) return false;
    *v = static_cast<uint8_t>(x);
    return true;
  }
  bool U16(uint16_t* v) {
    uint64_t x;
    if (!Le(2, &x)) return false;
    *v = static_cast<uint16_t>(x);
    return true;
  }
  bool U32(uint32_t* v) {
    uint64_t x;
    if (!Le(4, &x)) return false;
    *v = static_cast<uint32_t>(x);
    return true;
  }
  bool U64(uint64_t* v) { return Le(8, v); }
  bool Bytes(void* p, size_t n) {
    if (in_.size() < n) return false;
    std::memcpy(p, in_.data(), n);
    in_.remove_prefix(n);
    return true;
  }
  size_t left() const { return in_.size(); }

 private:
  bool Le(size_t n, uint64_t* v) {
    if (in_.size() < n) return false;
    uint64_t x = 0;
    for (size_t i = 0; i < n; ++i) {
      x |= uint64_t{static_cast<uint8_t>(in_[i])} << (8 * i);
    }
    in_.remove_prefix(n);
    *v = x;
    return true;
  }
  absl::string_view in_;
};

absl::Status Malformed(absl::string_view what, absl::string_view detail) {
  return absl::InvalidArgumentError(
      absl::StrCat("malformed verbs handshake ", what, ": ", detail,
                   "; both sides must run compatible meshpool versions"));
}

void WriteQpInfo(Writer& w, const QpInfo& qp) {
  w.Bytes(qp.gid.data(), qp.gid.size());
  w.U16(qp.lid);
  w.U32(qp.qpn);
  w.U32(qp.psn);
  w.U32(qp.mtu_bytes);
  w.U8(qp.rd_atomic);
}

absl::Status ReadHeader(Reader& r, uint32_t magic, absl::string_view what) {
  uint32_t got_magic = 0;
  uint16_t version = 0;
  if (!r.U32(&got_magic) || got_magic != magic) {
    return Malformed(what, "bad magic");
  }
  if (!r.U16(&version)) return Malformed(what, "truncated header");
  if (version != kHandshakeVersion) {
    return Malformed(what, absl::StrCat("version ", version, ", expected ",
                                        kHandshakeVersion));
  }
  return absl::OkStatus();
}

absl::Status ReadQpInfo(Reader& r, QpInfo* qp, absl::string_view what) {
  if (!r.Bytes(qp->gid.data(), qp->gid.size()) || !r.U16(&qp->lid) ||
      !r.U32(&qp->qpn) || !r.U32(&qp->psn) || !r.U32(&qp->mtu_bytes) ||
      !r.U8(&qp->rd_atomic)) {
    return Malformed(what, "truncated queue pair info");
  }
  if (qp->qpn == 0 || qp->qpn > kMaxQpNumber) {
    return Malformed(what, absl::StrCat("QP number ", qp->qpn,
                                        " is not a 24-bit nonzero value"));
  }
  if (qp->psn > kMaxQpNumber) {
    return Malformed(what, absl::StrCat("PSN ", qp->psn, " exceeds 24 bits"));
  }
  const uint32_t m = qp->mtu_bytes;
  if (m < 256 || m > 4096 || (m & (m - 1)) != 0) {
    return Malformed(what, absl::StrCat("MTU ", m, " is not 256..4096"));
  }
  if (qp->rd_atomic == 0) return Malformed(what, "rd_atomic is 0");
  return absl::OkStatus();
}

absl::Status ReadRegion(Reader& r, size_t* chunks_left, HandshakeRegion* out) {
  uint32_t count = 0;
  if (!r.U32(&out->handle) || !r.U64(&out->addr) || !r.U64(&out->length) ||
      !r.U32(&count)) {
    return Malformed("reply", "truncated region");
  }
  if (out->handle == 0 || out->length == 0 ||
      out->addr + out->length < out->addr) {
    return Malformed("reply", absl::StrCat("region ", out->handle,
                                           " has a bad handle or range"));
  }
  if (count == 0 || count > *chunks_left || count > r.left() / kChunkBytes) {
    return Malformed("reply", absl::StrCat("region ", out->handle, " has ",
                                           count, " chunks"));
  }
  *chunks_left -= count;
  out->chunks.resize(count);
  uint64_t next = out->addr;
  for (HandshakeChunk& c : out->chunks) {
    if (!r.U64(&c.addr) || !r.U64(&c.length) || !r.U32(&c.rkey)) {
      return Malformed("reply", "truncated chunk");
    }
    // Contiguous and inside the region; together with the total below this
    // also rules out wrap-around.
    if (c.addr != next || c.length == 0 ||
        c.length > out->addr + out->length - next) {
      return Malformed("reply", absl::StrCat("region ", out->handle,
                                             " has a chunk out of place"));
    }
    next += c.length;
  }
  if (next != out->addr + out->length) {
    return Malformed("reply", absl::StrCat("region ", out->handle,
                                           " chunks do not cover it"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidatePeerName(absl::string_view name, absl::string_view what) {
  if (name.empty() || name.size() > kMaxPeerNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " must be 1..", kMaxPeerNameBytes, " bytes, got '", name, "'"));
  }
  for (char c : name) {
    if (c <= ' ' || c > '~' || c == '/' || c == ':') {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " '", name,
                       "' may hold printable characters other than "
                       "space, '/' and ':' only"));
    }
  }
  return absl::OkStatus();
}

std::string EncodeHandshakeRequest(const HandshakeRequest& request) {
  Writer w;
  w.U32(kHandshakeRequestMagic);
  w.U16(kHandshakeVersion);
  w.U16(static_cast<uint16_t>(request.client_name.size()));
  w.Bytes(request.client_name.data(), request.client_name.size());
  WriteQpInfo(w, request.qp);
  return w.Take();
}

std::string EncodeHandshakeReply(const HandshakeReply& reply) {
  Writer w;
  w.U32(kHandshakeReplyMagic);
  w.U16(kHandshakeVersion);
  WriteQpInfo(w, reply.qp);
  w.U32(static_cast<uint32_t>(reply.regions.size()));
  for (const HandshakeRegion& region : reply.regions) {
    w.U32(region.handle);
    w.U64(region.addr);
    w.U64(region.length);
    w.U32(static_cast<uint32_t>(region.chunks.size()));
    for (const HandshakeChunk& c : region.chunks) {
      w.U64(c.addr);
      w.U64(c.length);
      w.U32(c.rkey);
    }
  }
  return w.Take();
}

absl::StatusOr<HandshakeRequest> DecodeHandshakeRequest(
    absl::string_view bytes) {
  Reader r(bytes);
  MESHPOOL_RETURN_IF_ERROR(ReadHeader(r, kHandshakeRequestMagic, "request"));
  uint16_t name_len = 0;
  if (!r.U16(&name_len)) return Malformed("request", "truncated header");
  if (name_len == 0 || name_len > kMaxPeerNameBytes) {
    return Malformed("request",
                     absl::StrCat("client name of ", name_len, " bytes"));
  }
  HandshakeRequest out;
  out.client_name.resize(name_len);
  if (!r.Bytes(out.client_name.data(), name_len)) {
    return Malformed("request", "truncated client name");
  }
  MESHPOOL_RETURN_IF_ERROR(ReadQpInfo(r, &out.qp, "request"));
  if (r.left() != 0) {
    return Malformed("request", absl::StrCat(r.left(), " trailing bytes"));
  }
  return out;
}

absl::StatusOr<HandshakeReply> DecodeHandshakeReply(absl::string_view bytes) {
  Reader r(bytes);
  MESHPOOL_RETURN_IF_ERROR(ReadHeader(r, kHandshakeReplyMagic, "reply"));
  HandshakeReply out;
  MESHPOOL_RETURN_IF_ERROR(ReadQpInfo(r, &out.qp, "reply"));
  uint32_t count = 0;
  if (!r.U32(&count)) return Malformed("reply", "truncated region count");
  if (count > kMaxHandshakeRegions ||
      count > r.left() / (kRegionHeaderBytes + kChunkBytes)) {
    return Malformed("reply", absl::StrCat(count, " regions"));
  }
  out.regions.resize(count);
  size_t chunks_left = kMaxHandshakeChunks;
  absl::flat_hash_set<uint32_t> handles;
  for (HandshakeRegion& region : out.regions) {
    MESHPOOL_RETURN_IF_ERROR(ReadRegion(r, &chunks_left, &region));
    if (!handles.insert(region.handle).second) {
      return Malformed(
          "reply", absl::StrCat("region ", region.handle, " appears twice"));
    }
  }
  if (r.left() != 0) {
    return Malformed("reply", absl::StrCat(r.left(), " trailing bytes"));
  }
  return out;
}

}  // namespace meshpool::rdma::internal
