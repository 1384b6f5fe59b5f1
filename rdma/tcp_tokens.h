// meshpool/rdma internal: the tokens that admit tcp connections to a node
// that requires them (TcpOptions::require_token).
//
// A client obtains a token through the node's authenticated control plane
// (the transport handshake: Issue) and presents it as the first bytes of a
// new connection (TcpHello, tcp_wire.h); the responder admits the
// connection only if Redeem accepts it. A token is 16 random bytes, works
// once, and expires kTcpTokenTtl after it was issued; at most
// kMaxTcpTokens are outstanding, so clients that ask and never connect
// cannot grow the book.
//
// Thread-safe.
#ifndef MESHPOOL_RDMA_TCP_TOKENS_H_
#define MESHPOOL_RDMA_TCP_TOKENS_H_

#include <cstddef>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/random/random.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace meshpool::rdma::internal {

inline constexpr size_t kTcpTokenBytes = 16;
inline constexpr absl::Duration kTcpTokenTtl = absl::Seconds(30);
inline constexpr size_t kMaxTcpTokens = 4096;
static_assert(kTcpTokenBytes >= 16 && kTcpTokenBytes % 8 == 0,
              "tokens must not be guessable; made of 8-byte words");

class TcpTokenBook {
 public:
  // A fresh token, valid until now + kTcpTokenTtl. ResourceExhausted when
  // kMaxTcpTokens unexpired tokens are outstanding (retry shortly).
  absl::StatusOr<std::string> Issue(absl::Time now);

  // Whether `token` was issued, is unexpired at `now` and not yet redeemed;
  // it is spent either way.
  bool Redeem(absl::string_view token, absl::Time now);

  size_t outstanding() const;

 private:
  void DropExpiredLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, absl::Time> expiry_ ABSL_GUARDED_BY(mu_);
  absl::BitGen gen_ ABSL_GUARDED_BY(mu_);
};

}  // namespace meshpool::rdma::internal

#endif  // MESHPOOL_RDMA_TCP_TOKENS_H_
