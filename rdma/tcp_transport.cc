// The tcp Transport: registrations in a RegionRegistry, a TcpResponder once
// Listen() is called, TcpEndpoints for Connect(), and with require_token the
// book of connection tokens its handshake issues and its responder redeems.
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/common.h"
#include "rdma/rdma.h"
#include "rdma/region_registry.h"
#include "rdma/tcp.h"
#include "rdma/tcp_endpoint.h"
#include "rdma/tcp_responder.h"
#include "rdma/tcp_wire.h"
#include "rdma/tokens.h"

namespace meshpool::rdma {
namespace {

class TcpTransport : public internal::RegistryTransport {
 public:
  explicit TcpTransport(const TcpOptions& options, uint64_t rkey_seed)
      : RegistryTransport(rkey_seed),
        options_(options),
        tokens_(options.require_token ? std::make_shared<internal::TokenBook>()
                                      : nullptr) {}

  TransportKind kind() const override { return TransportKind::kTcp; }

  absl::StatusOr<std::string> Listen(absl::string_view bind) override {
    absl::MutexLock lock(&mu_);
    if (responder_ != nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "tcp transport already listens on ", responder_->address(),
          "; create another transport to serve a second address"));
    }
    internal::TcpResponderOptions responder;
    responder.max_request_bytes = options_.max_request_bytes;
    responder.loops = options_.responder_threads;
    responder.max_connections = options_.max_connections;
    responder.max_connections_per_peer = options_.max_connections_per_peer;
    responder.stall_timeout = options_.stall_timeout;
    if (tokens_ != nullptr) {
      responder.admit = [tokens = tokens_](absl::string_view token) {
        return tokens->Redeem(token, absl::Now());
      };
    }
    MESHPOOL_ASSIGN_OR_RETURN(
        responder_, internal::TcpResponder::Create(bind, responder, registry_));
    return responder_->address();
  }

  // The token a client presents; empty: this node admits without one.
  absl::StatusOr<std::string> AcceptHandshake(
      absl::string_view request, const DataAccess& access) override {
    if (request != internal::kTcpTokenRequest) {
      return absl::InvalidArgumentError(
          "not a tcp token request; is the client another meshpool "
          "version?");
    }
    if (tokens_ == nullptr) return std::string();
    return tokens_->Issue(absl::Now(), access);
  }

  absl::StatusOr<std::unique_ptr<Endpoint>> Connect(
      absl::string_view peer_address, const Handshake& handshake) override {
    std::string token;
    if (handshake) {
      absl::StatusOr<std::string> reply = handshake(internal::kTcpTokenRequest);
      if (reply.ok()) {
        token = *std::move(reply);
      } else if (!absl::IsUnimplemented(reply.status())) {
        return absl::Status(
            reply.status().code(),
            absl::StrCat("no tcp connection token from ", peer_address, ": ",
                         reply.status().message()));
      }
      if (!token.empty() && token.size() != internal::kTokenBytes) {
        return absl::InternalError(
            absl::StrCat(peer_address, " answered a tcp token of ",
                         token.size(), " bytes, not ", internal::kTokenBytes,
                         "; is it another meshpool version?"));
      }
    }
    return internal::TcpEndpoint::Connect(
        peer_address, options_.connect_timeout, options_.send_timeout, token);
  }

 private:
  const TcpOptions options_;
  // Null unless require_token; shared with the responder's admission.
  const std::shared_ptr<internal::TokenBook> tokens_;
  absl::Mutex mu_;
  // Last: destroyed first, so no connection outlives the transport.
  std::unique_ptr<internal::TcpResponder> responder_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> CreateTcpTransport(
    const TcpOptions& options) {
  if (options.max_request_bytes == 0) {
    return absl::InvalidArgumentError(
        "TcpOptions.max_request_bytes must be positive");
  }
  if (options.max_connections_per_peer == 0 ||
      options.max_connections_per_peer > options.max_connections) {
    return absl::InvalidArgumentError(
        absl::StrCat("TcpOptions.max_connections_per_peer (",
                     options.max_connections_per_peer,
                     ") must be between 1 and max_connections (",
                     options.max_connections, ")"));
  }
  if (options.stall_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "TcpOptions.stall_timeout must be positive");
  }
  if (options.connect_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "TcpOptions.connect_timeout must be positive");
  }
  absl::BitGen gen;
  return std::unique_ptr<Transport>(
      new TcpTransport(options, absl::Uniform<uint64_t>(gen)));
}

}  // namespace meshpool::rdma
