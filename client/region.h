// Regions on the client side (internal to client/): the control-plane calls
// behind Client::CreateRegion/OpenRegion/DeleteRegion/RenameRegion/
// ListRegions, and the Region handle they return.
//
// A Region decodes its RegionInfo once (placement::RegionLayout) and keeps a
// shared handle to the ClientCore, whose cluster map tells which copies of
// each stripe are live: a copy is live while the map shows its extent's node
// NODE_ALIVE with the incarnation that allocated it (a restarted node's
// memory is gone). A node the map does not know makes the Region fetch the
// map once.
//
// Thread-safe (see the Region contract in <meshpool/client.h>).
#ifndef MESHPOOL_CLIENT_REGION_H_
#define MESHPOOL_CLIENT_REGION_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "client/client_core.h"
#include "client/meshpool/client.h"
#include "client/meshpool/region.h"
#include "proto/meshpool.pb.h"

namespace meshpool::client_internal {

// The Client methods of the same names (errors as documented there). Names
// are checked here first, so bad input fails with InvalidArgument before
// any call.
absl::StatusOr<std::unique_ptr<Region>> CreateRegion(
    std::shared_ptr<ClientCore> core, absl::string_view name, uint64_t size,
    const RegionOptions& options);
absl::StatusOr<std::unique_ptr<Region>> OpenRegion(
    std::shared_ptr<ClientCore> core, absl::string_view name);
absl::Status DeleteRegion(ClientCore& core, absl::string_view name);
absl::Status RenameRegion(ClientCore& core, absl::string_view from,
                          absl::string_view to, bool replace);
absl::StatusOr<std::vector<RegionDescription>> ListRegions(
    ClientCore& core, absl::string_view prefix);

// A Region over `info` as the coordinator returned it. DataLoss naming the
// region when its table does not decode (a corrupt or incompatible
// coordinator record: the bytes cannot be located).
absl::StatusOr<std::unique_ptr<Region>> MakeRegion(
    std::shared_ptr<ClientCore> core, const proto::RegionInfo& info);

// What ListRegions reports for one region.
RegionDescription Describe(const proto::RegionInfo& info);

// A piece of bytes whose XXH3-64 (format::DigestBytes) the caller knows.
struct KnownDigest {
  uint64_t offset = 0;  // from the start of the verified bytes
  uint64_t length = 0;
  uint64_t digest = 0;
};

// Region::Verify, taking the digests of the `known` pieces of `data` as
// given: a piece that lies whole in one stripe is compared with the nodes'
// digest of it as it is, so this client does not hash it again (the
// weights loader hashes every 1 MiB chunk for its manifest anyway). A
// piece across a stripe boundary, and bytes outside every piece, are
// hashed here as Verify does. Errors as Region::Verify; InvalidArgument
// when `known` is not sorted, disjoint and inside `data`.
// REQUIRES: `region` came from CreateRegion, OpenRegion or MakeRegion.
absl::Status VerifyWithDigests(Region& region, uint64_t offset,
                               absl::Span<const char> data,
                               absl::Span<const KnownDigest> known);

}  // namespace meshpool::client_internal

#endif  // MESHPOOL_CLIENT_REGION_H_
