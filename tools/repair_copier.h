// The coordinator's re-replication data path (coordinator/region_repair.h):
// a StripeCopier that moves bytes through a meshpool::Client connected to
// the coordinator it serves. Lives in tools/ because it joins the client
// and the coordinator, which never link each other.
#ifndef MESHPOOL_TOOLS_REPAIR_COPIER_H_
#define MESHPOOL_TOOLS_REPAIR_COPIER_H_

#include <memory>

#include "coordinator/region_repair.h"
#include "meshpool/client.h"

namespace meshpool::tools {

// A factory that connects a Client with `options` (its coordinator set to
// the address the coordinator passes) the first time it is called, and
// returns a copier running client_internal::CopyNewStripeCopies on it.
coordinator::StripeCopierFactory ClientStripeCopier(ClientOptions options);

// The same over a client made by `connect` (tests pass one on a simulated
// fabric); `connect` receives the coordinator's address.
coordinator::StripeCopierFactory ClientStripeCopier(
    std::function<absl::StatusOr<std::unique_ptr<Client>>(const std::string&)>
        connect);

}  // namespace meshpool::tools

#endif  // MESHPOOL_TOOLS_REPAIR_COPIER_H_
