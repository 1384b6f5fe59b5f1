// auth/: protected mode's address check, certificate file names, roles.
#include "auth/auth.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace meshpool::auth {
namespace {

TEST(CheckListenTest, LoopbackNeedsNoTls) {
  for (const char* listen : {"127.0.0.1:7070", "127.0.0.2:0", "[::1]:7070",
                             "localhost:1", "unix:/tmp/x"}) {
    EXPECT_TRUE(CheckListen("--listen", listen, {}, false).ok()) << listen;
  }
}

TEST(CheckListenTest, OtherAddressesNeedTlsOrInsecure) {
  for (const char* listen : {"0.0.0.0:7070", "10.0.0.5:1", "[::]:7070",
                             "[fe80::1]:1", ":7070", "example.com:80"}) {
    absl::Status s = CheckListen("--listen", listen, {}, false);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << listen;
    EXPECT_TRUE(absl::StrContains(s.message(), "--tls-dir")) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "--insecure")) << s;
    EXPECT_TRUE(CheckListen("--listen", listen, {}, true).ok()) << listen;
    EXPECT_TRUE(
        CheckListen("--listen", listen, TlsConfig::InDir("/c", "n"), false)
            .ok())
        << listen;
  }
}

TEST(TlsConfigTest, InDirNamesTheCaAndTheIdentitysFiles) {
  TlsConfig tls = TlsConfig::InDir("/etc/mp", "node-3");
  EXPECT_TRUE(tls.enabled());
  EXPECT_EQ(tls.ca_file, "/etc/mp/ca.pem");
  EXPECT_EQ(tls.cert_file, "/etc/mp/node-3.pem");
  EXPECT_EQ(tls.key_file, "/etc/mp/node-3.key");
  EXPECT_FALSE(TlsConfig::InDir("", "node-3").enabled());
}

TEST(TlsConfigTest, UnreadableFilesSayWhatToDo) {
  auto creds = ServerCredentials(TlsConfig::InDir("/nonexistent", "x"));
  EXPECT_EQ(creds.status().code(), absl::StatusCode::kNotFound)
      << creds.status();
  EXPECT_TRUE(absl::StrContains(creds.status().message(), "certs init"));
  auto channel = MakeChannelSecurity(TlsConfig::InDir("/nonexistent", "x"));
  EXPECT_EQ(channel.status().code(), absl::StatusCode::kNotFound);
}

TEST(RoleTest, NamesRoundTrip) {
  for (Role r :
       {Role::kCoordinator, Role::kNode, Role::kClient, Role::kAdmin}) {
    EXPECT_EQ(ParseRole(RoleName(r)), r);
  }
  EXPECT_EQ(ParseRole("root"), Role::kNone);
  EXPECT_EQ((Identity{Role::kNode, "node-1", ""}).ToString(), "node:node-1");
  EXPECT_EQ((Identity{Role::kClient, "alice", "team-a"}).ToString(),
            "client:alice@team-a");
}

TEST(TenantNameTest, LettersDigitsDotUnderscoreDashStartingAlphanumeric) {
  for (std::string ok : {std::string("team-a"), std::string("T.1"),
                         std::string("9_x"), std::string(64, 'a')}) {
    EXPECT_TRUE(ValidateTenantName(ok).ok()) << ok;
  }
  for (std::string bad :
       {std::string(""), std::string("-a"), std::string("a/b"),
        std::string("a@b"), std::string("a b"), std::string(65, 'a')}) {
    absl::Status s = ValidateTenantName(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_TRUE(absl::StrContains(s.message(), "tenant name")) << s;
  }
}

}  // namespace
}  // namespace meshpool::auth
