// Internal to client/: how the functions of <meshpool/kv_cache.h>,
// <meshpool/region.h> and the test peer reach a Client's implementation
// (Client befriends this class, so the public header names nothing else).
#ifndef MESHPOOL_CLIENT_CLIENT_ACCESS_H_
#define MESHPOOL_CLIENT_CLIENT_ACCESS_H_

#include <memory>

#include "client/client_impl.h"
#include "client/meshpool/client.h"

namespace meshpool {

class ClientAccess {
 public:
  // The client's implementation; valid while `client` lives.
  static Client::Impl& Impl(Client& client) { return *client.impl_; }
  static const Client::Impl& Impl(const Client& client) {
    return *client.impl_;
  }
  // A Client running on `core` (Client::Connect's last step).
  static std::unique_ptr<Client> Wrap(
      std::shared_ptr<client_internal::ClientCore> core) {
    return std::unique_ptr<Client>(
        new Client(std::make_unique<Client::Impl>(std::move(core))));
  }
};

}  // namespace meshpool

#endif  // MESHPOOL_CLIENT_CLIENT_ACCESS_H_
