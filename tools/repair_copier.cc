#include "tools/repair_copier.h"

#include <string>
#include <utility>

#include "client/region_copy.h"
#include "common/common.h"

namespace meshpool::tools {

coordinator::StripeCopierFactory ClientStripeCopier(
    std::function<absl::StatusOr<std::unique_ptr<Client>>(const std::string&)>
        connect) {
  return [connect = std::move(connect)](const std::string& address)
             -> absl::StatusOr<coordinator::StripeCopier> {
    MESHPOOL_ASSIGN_OR_RETURN(std::unique_ptr<Client> made, connect(address));
    std::shared_ptr<Client> client = std::move(made);
    return coordinator::StripeCopier(
        [client](const proto::RegionInfo& current,
                 const proto::RegionInfo& repaired, coordinator::CopyPass pass,
                 const coordinator::RepairProgress& progress) {
          return client_internal::CopyNewStripeCopies(
              *client, current, repaired,
              /*check_first=*/pass == coordinator::CopyPass::kRecheck,
              progress);
        });
  };
}

coordinator::StripeCopierFactory ClientStripeCopier(ClientOptions options) {
  return ClientStripeCopier(
      [options = std::move(options)](const std::string& address) {
        ClientOptions o = options;
        o.coordinator = address;
        return Client::Connect(o);
      });
}

}  // namespace meshpool::tools
