// Internal to client/ and its tests: the narrow door tests use to make a
// Client act out situations a test cannot otherwise reach in one process.
// Nothing here is part of the public API.
#ifndef MESHPOOL_CLIENT_CLIENT_TEST_PEER_H_
#define MESHPOOL_CLIENT_CLIENT_TEST_PEER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "client/meshpool/client.h"
#include "rdma/rdma.h"

namespace meshpool {

class ClientTestPeer {
 public:
  // Client::Connect, except that every node is reached through `transport`
  // (a simulated fabric, say) whatever its address names, and a node's
  // shared-memory address is never preferred. Errors: as Connect.
  // REQUIRES: transport != nullptr.
  static absl::StatusOr<std::unique_ptr<Client>> ConnectThrough(
      ClientOptions options, std::shared_ptr<rdma::Transport> transport);

  // The client behaves as if its process died: it stops renewing its node
  // sessions and will not close them, so its pins lapse one session lease
  // later. Data calls keep working.
  static void StopRenewingSessions(Client& client);

  // The client stops adopting the maps its watch delivers, as if the watch
  // stream lagged: it learns of joins and deaths only when a call of its
  // own fetches the map again.
  static void IgnoreMapWatch(Client& client);
};

}  // namespace meshpool

#endif  // MESHPOOL_CLIENT_CLIENT_TEST_PEER_H_
