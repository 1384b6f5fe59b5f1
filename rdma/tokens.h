// meshpool/rdma internal: the tokens that admit data-plane connections to a
// node that requires them (TcpOptions::require_token: tcp connections;
// UcOptions::require_token: uc sessions on the node's UDP socket).
//
// A client obtains a token through the node's authenticated control plane
// (the transport handshake: Issue) and presents it first on a new
// connection or session (TcpHello, tcp_wire.h; the uc hello, uc_wire.h);
// the responder admits it only if Redeem accepts the token. A token is 16
// random bytes, works once, and expires kTokenTtl after it was issued; at
// most kMaxTokens are outstanding, so clients that ask and never connect
// cannot grow the book.
//
// Thread-safe.
#ifndef MESHPOOL_RDMA_TOKENS_H_
#define MESHPOOL_RDMA_TOKENS_H_

#include <cstddef>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/random/random.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "rdma/rdma.h"

namespace meshpool::rdma::internal {

inline constexpr size_t kTokenBytes = 16;
inline constexpr absl::Duration kTokenTtl = absl::Seconds(30);
inline constexpr size_t kMaxTokens = 4096;
static_assert(kTokenBytes >= 16 && kTokenBytes % 8 == 0,
              "tokens must not be guessable; made of 8-byte words");

class TokenBook {
 public:
  // A fresh token, valid until now + kTokenTtl, admitting its connection
  // as `access`. ResourceExhausted when kMaxTokens unexpired tokens are
  // outstanding (retry shortly).
  absl::StatusOr<std::string> Issue(absl::Time now, DataAccess access);

  // The access `token` was issued with when it was issued, is unexpired at
  // `now` and not yet redeemed; nullopt otherwise. It is spent either way.
  std::optional<DataAccess> Redeem(absl::string_view token, absl::Time now);

  size_t outstanding() const;

 private:
  void DropExpiredLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  struct Issued {
    absl::Time expiry;
    DataAccess access;
  };
  absl::flat_hash_map<std::string, Issued> issued_ ABSL_GUARDED_BY(mu_);
  absl::BitGen gen_ ABSL_GUARDED_BY(mu_);
};

}  // namespace meshpool::rdma::internal

#endif  // MESHPOOL_RDMA_TOKENS_H_
