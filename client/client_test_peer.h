// Internal to client/ and its tests: the narrow door tests use to make a
// Client act out situations a test cannot otherwise reach in one process.
#ifndef MESHPOOL_CLIENT_CLIENT_TEST_PEER_H_
#define MESHPOOL_CLIENT_CLIENT_TEST_PEER_H_

#include "client/meshpool/client.h"

namespace meshpool {

class ClientTestPeer {
 public:
  // The client behaves as if its process died: it stops renewing its node
  // sessions and will not close them, so its pins lapse one session lease
  // later. Data calls keep working.
  static void StopRenewingSessions(Client& client);
};

}  // namespace meshpool

#endif  // MESHPOOL_CLIENT_CLIENT_TEST_PEER_H_
