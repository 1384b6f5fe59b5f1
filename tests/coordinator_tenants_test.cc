// coordinator/tenants: how callers' region names map to stored names, and
// the --region-quota syntax.
#include "absl/strings/match.h"
#include "coordinator/tenants.h"
#include "gtest/gtest.h"

namespace meshpool::coordinator {
namespace {

auth::Identity Caller(auth::Role role, const std::string& tenant) {
  auth::Identity id;
  id.role = role;
  id.name = "someone";
  id.tenant = tenant;
  return id;
}

TEST(TenantScopeTest, ATenantsNamesAreStoredUnderItsMarkAndShownPlain) {
  const RegionScope alice(Caller(auth::Role::kClient, "team-a"));
  absl::StatusOr<std::string> stored = alice.Stored("weights/llama");
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(*stored, "~team-a/weights/llama");
  EXPECT_EQ(TenantOfRegion(*stored), "team-a");
  EXPECT_EQ(alice.Shown(*stored), "weights/llama");
  EXPECT_TRUE(alice.Sees(*stored));
  EXPECT_EQ(alice.StoredPrefix("weights/"), "~team-a/weights/");

  const RegionScope bob(Caller(auth::Role::kClient, "team-b"));
  EXPECT_FALSE(bob.Sees(*stored));
  EXPECT_EQ(*bob.Stored("weights/llama"), "~team-b/weights/llama");
}

TEST(TenantScopeTest, CallersWithoutATenantSeeNoTenantsRegions) {
  for (auth::Role role : {auth::Role::kNone, auth::Role::kClient}) {
    const RegionScope plain(Caller(role, ""));
    EXPECT_EQ(*plain.Stored("r"), "r");
    EXPECT_TRUE(plain.Sees("r"));
    EXPECT_FALSE(plain.Sees("~team-a/r"));
    // They cannot name a tenant's region: '~' is no name character.
    EXPECT_EQ(plain.Stored("~team-a/r").status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

TEST(TenantScopeTest, AnAdminWithoutATenantSeesAndAddressesStoredNames) {
  const RegionScope root(Caller(auth::Role::kAdmin, ""));
  EXPECT_EQ(*root.Stored("~team-a/r"), "~team-a/r");
  EXPECT_EQ(*root.Stored("r"), "r");
  EXPECT_TRUE(root.Sees("~team-a/r"));
  EXPECT_EQ(root.Shown("~team-a/r"), "~team-a/r");
  EXPECT_EQ(root.Stored("~/r").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(root.Stored("~team a/r").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(root.Stored("~team-a").status().code(),
            absl::StatusCode::kInvalidArgument);
  // A tenant's admin stays inside its tenant.
  const RegionScope tenant_admin(Caller(auth::Role::kAdmin, "team-a"));
  EXPECT_EQ(*tenant_admin.Stored("r"), "~team-a/r");
  EXPECT_FALSE(tenant_admin.Sees("~team-b/r"));
  EXPECT_FALSE(tenant_admin.Sees("r"));
}

TEST(RegionQuotasTest, ParsesPerTenantOthersAndNoTenantEntries) {
  absl::StatusOr<RegionQuotas> q =
      RegionQuotas::Parse("team-a=2:64MiB,*=5:-,-=-:1GiB");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->For("team-a").regions, 2u);
  EXPECT_EQ(q->For("team-a").bytes, uint64_t{64} << 20);
  EXPECT_EQ(q->For("team-z").regions, 5u);
  EXPECT_EQ(q->For("team-z").bytes, kUnlimited);
  EXPECT_EQ(q->For("").regions, kUnlimited);
  EXPECT_EQ(q->For("").bytes, uint64_t{1} << 30);
  absl::StatusOr<RegionQuotas> none = RegionQuotas::Parse("");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->For("x").regions, kUnlimited);
  EXPECT_EQ(none->For("x").bytes, kUnlimited);
}

TEST(RegionQuotasTest, BadEntriesAreInvalidArgumentNamingTheEntry) {
  for (const char* spec :
       {"team-a", "team-a=2", "team-a=x:1GiB", "team-a=2:lots", "=2:1GiB",
        "bad tenant=1:1GiB", "team-a=1:1GiB,team-a=2:2GiB", "*=1:-,*=2:-"}) {
    absl::StatusOr<RegionQuotas> q = RegionQuotas::Parse(spec);
    ASSERT_FALSE(q.ok()) << spec;
    EXPECT_EQ(q.status().code(), absl::StatusCode::kInvalidArgument) << spec;
    EXPECT_TRUE(absl::StrContains(q.status().message(), "--region-quota"))
        << q.status();
  }
}

}  // namespace
}  // namespace meshpool::coordinator
