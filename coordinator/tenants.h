// meshpool/coordinator/tenants.h: tenants' region namespaces and quotas.
//
// A client or admin certificate may name a tenant (auth::Identity.tenant).
// The coordinator stores a tenant's region NAME as "~TENANT/NAME" ('~' is
// no region name character, so no caller's name collides with it) and
// shows it to the tenant's callers as NAME: tenants share no names and
// cannot see, open, delete or rename each other's regions. Callers without
// a tenant (and every caller of a cluster without TLS) use names as they
// are and see no tenant's regions; an admin without a tenant sees every
// region under its stored name and may address it by that name.
//
// RegionQuotas caps each tenant's regions and region bytes (a region's
// size times its replicas), per tenant or by a default.
//
// Thread-safety: free functions, and values safe for concurrent reads.
#ifndef MESHPOOL_COORDINATOR_TENANTS_H_
#define MESHPOOL_COORDINATOR_TENANTS_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "auth/auth.h"
#include "placement/region_layout.h"

namespace meshpool::coordinator {

using placement::kTenantScopeMark;
inline constexpr uint64_t kUnlimited = std::numeric_limits<uint64_t>::max();

// The stored name of `tenant`'s region `name`: `name` itself for tenant "".
std::string ScopedRegionName(absl::string_view tenant, absl::string_view name);
// The tenant a stored name belongs to ("" when it is unscoped).
absl::string_view TenantOfRegion(absl::string_view stored);
// The name the region's own tenant knows it by.
absl::string_view UnscopedRegionName(absl::string_view stored);
// OK for NAME or "~TENANT/NAME" with a valid tenant and region name;
// InvalidArgument (saying what is wrong) otherwise.
absl::Status ValidateStoredRegionName(absl::string_view stored);

// How one caller addresses regions: the stored name of the name it gives,
// and the name it is shown of a stored one. Made from the caller's
// certificate (a tenant, or an admin without one, who sees stored names).
class RegionScope {
 public:
  explicit RegionScope(const auth::Identity& caller);
  // The stored name of `name`. InvalidArgument for a bad name: a tenant's
  // callers and non-admins give plain names; an admin without a tenant may
  // also give "~TENANT/NAME".
  absl::StatusOr<std::string> Stored(absl::string_view name) const;
  // Whether the caller sees the stored name's region at all, and as what.
  bool Sees(absl::string_view stored) const;
  absl::string_view Shown(absl::string_view stored) const;
  // The stored prefix a List of `prefix` scans.
  std::string StoredPrefix(absl::string_view prefix) const;

 private:
  std::string tenant_;
  bool sees_all_;  // an admin without a tenant
};

struct RegionQuota {
  uint64_t regions = kUnlimited;
  uint64_t bytes = kUnlimited;  // sum of size * replicas
};

// Per-tenant region quotas, from the coordinator's --region-quota flag.
class RegionQuotas {
 public:
  // No limits.
  RegionQuotas() = default;
  // `spec`: comma-separated TENANT=REGIONS:BYTES, where TENANT is a tenant
  // name, "-" (callers without a tenant) or "*" (everyone without an entry
  // of their own), REGIONS a count, BYTES a size ("64GiB"), and either "-"
  // for no limit. Empty: no limits. InvalidArgument naming the bad entry,
  // or a tenant given twice.
  static absl::StatusOr<RegionQuotas> Parse(absl::string_view spec);
  // The quota `tenant` ("" for none) is under.
  const RegionQuota& For(absl::string_view tenant) const;

 private:
  RegionQuota others_;                                       // "*"
  std::map<std::string, RegionQuota, std::less<>> tenants_;  // "" for "-"
};

}  // namespace meshpool::coordinator

#endif  // MESHPOOL_COORDINATOR_TENANTS_H_
