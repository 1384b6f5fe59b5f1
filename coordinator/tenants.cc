#include "coordinator/tenants.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/common.h"
#include "placement/region_layout.h"

namespace meshpool::coordinator {

std::string ScopedRegionName(absl::string_view tenant, absl::string_view name) {
  if (tenant.empty()) return std::string(name);
  return absl::StrCat(absl::string_view(&kTenantScopeMark, 1), tenant, "/",
                      name);
}

absl::string_view TenantOfRegion(absl::string_view stored) {
  if (stored.empty() || stored[0] != kTenantScopeMark) return "";
  const size_t slash = stored.find('/');
  if (slash == absl::string_view::npos) return "";
  return stored.substr(1, slash - 1);
}

absl::string_view UnscopedRegionName(absl::string_view stored) {
  if (stored.empty() || stored[0] != kTenantScopeMark) return stored;
  const size_t slash = stored.find('/');
  if (slash == absl::string_view::npos) return stored;
  return stored.substr(slash + 1);
}

absl::Status ValidateStoredRegionName(absl::string_view stored) {
  if (stored.empty() || stored[0] != kTenantScopeMark) {
    return placement::ValidateRegionName(stored);
  }
  MESHPOOL_RETURN_IF_ERROR(placement::ValidateAddressedRegionName(stored));
  return auth::ValidateTenantName(TenantOfRegion(stored));
}

RegionScope::RegionScope(const auth::Identity& caller)
    : tenant_(caller.tenant),
      sees_all_(caller.tenant.empty() && caller.role == auth::Role::kAdmin) {}

absl::StatusOr<std::string> RegionScope::Stored(absl::string_view name) const {
  if (sees_all_) {
    MESHPOOL_RETURN_IF_ERROR(ValidateStoredRegionName(name));
    return std::string(name);
  }
  MESHPOOL_RETURN_IF_ERROR(placement::ValidateRegionName(name));
  return ScopedRegionName(tenant_, name);
}

bool RegionScope::Sees(absl::string_view stored) const {
  return sees_all_ || TenantOfRegion(stored) == tenant_;
}

absl::string_view RegionScope::Shown(absl::string_view stored) const {
  return sees_all_ ? stored : UnscopedRegionName(stored);
}

std::string RegionScope::StoredPrefix(absl::string_view prefix) const {
  return sees_all_ ? std::string(prefix) : ScopedRegionName(tenant_, prefix);
}

namespace {

absl::StatusOr<uint64_t> ParseLimit(absl::string_view text, bool size,
                                    absl::string_view entry) {
  if (text == "-") return kUnlimited;
  uint64_t v = 0;
  if (size) {
    absl::StatusOr<uint64_t> parsed = ParseSize(text);
    if (parsed.ok()) return *parsed;
  } else if (absl::SimpleAtoi(text, &v)) {
    return v;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--region-quota entry '", entry, "': '", text, "' is not ",
                   size ? "a size such as 64GiB" : "a region count",
                   " (or - for no limit)"));
}

}  // namespace

absl::StatusOr<RegionQuotas> RegionQuotas::Parse(absl::string_view spec) {
  RegionQuotas quotas;
  bool others_given = false;
  for (absl::string_view entry : absl::StrSplit(spec, ',', absl::SkipEmpty())) {
    std::vector<absl::string_view> tenant_limits =
        absl::StrSplit(entry, absl::MaxSplits('=', 1));
    std::vector<absl::string_view> limits;
    if (tenant_limits.size() == 2) {
      limits = absl::StrSplit(tenant_limits[1], ':');
    }
    if (limits.size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--region-quota entry '", entry,
          "' is not TENANT=REGIONS:BYTES (e.g. team-a=16:64GiB; - for no "
          "limit; TENANT * for everyone else, - for callers without one)"));
    }
    RegionQuota quota;
    MESHPOOL_ASSIGN_OR_RETURN(quota.regions,
                              ParseLimit(limits[0], false, entry));
    MESHPOOL_ASSIGN_OR_RETURN(quota.bytes, ParseLimit(limits[1], true, entry));
    const absl::string_view tenant = tenant_limits[0];
    if (tenant == "*") {
      if (others_given) {
        return absl::InvalidArgumentError(
            "--region-quota gives * twice; give it once");
      }
      others_given = true;
      quotas.others_ = quota;
      continue;
    }
    const std::string key = tenant == "-" ? "" : std::string(tenant);
    if (tenant != "-") {
      absl::Status valid = auth::ValidateTenantName(key);
      if (!valid.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--region-quota entry '", entry, "': ", valid.message()));
      }
    }
    if (!quotas.tenants_.emplace(key, quota).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--region-quota gives tenant '", tenant, "' twice; give it once"));
    }
  }
  return quotas;
}

const RegionQuota& RegionQuotas::For(absl::string_view tenant) const {
  auto it = tenants_.find(tenant);
  return it != tenants_.end() ? it->second : others_;
}

}  // namespace meshpool::coordinator
