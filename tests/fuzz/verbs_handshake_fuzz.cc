// Fuzzes the verbs handshake decoders (rdma/verbs_handshake.h): the node
// decodes a client's request and the client the node's reply, both from
// bytes a peer chose. The first input byte picks which. Checks: failures
// are InvalidArgument; the encoding is canonical (an accepted message
// encodes back to exactly its bytes); an accepted reply's regions are
// covered exactly by their chunks.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "rdma/verbs_handshake.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace meshpool::rdma::internal;
  if (size < 1) return 0;
  const absl::string_view bytes(reinterpret_cast<const char*>(data) + 1,
                                size - 1);
  if (data[0] % 2 == 0) {
    auto request = DecodeHandshakeRequest(bytes);
    if (!request.ok()) {
      MESHPOOL_FUZZ_CHECK(absl::IsInvalidArgument(request.status()),
                          request.status().ToString());
      return 0;
    }
    MESHPOOL_FUZZ_CHECK(EncodeHandshakeRequest(*request) == bytes,
                        "request round trip");
    meshpool::testing::FuzzAccepted();
    return 0;
  }
  auto reply = DecodeHandshakeReply(bytes);
  if (!reply.ok()) {
    MESHPOOL_FUZZ_CHECK(absl::IsInvalidArgument(reply.status()),
                        reply.status().ToString());
    return 0;
  }
  MESHPOOL_FUZZ_CHECK(EncodeHandshakeReply(*reply) == bytes,
                      "reply round trip");
  for (const HandshakeRegion& r : reply->regions) {
    uint64_t next = r.addr;
    for (const HandshakeChunk& c : r.chunks) {
      MESHPOOL_FUZZ_CHECK(c.addr == next && c.length > 0, "chunk gap");
      next = c.addr + c.length;
    }
    MESHPOOL_FUZZ_CHECK(next - r.addr == r.length, "chunks cover the region");
  }
  meshpool::testing::FuzzAccepted();
  return 0;
}
