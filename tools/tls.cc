#include "tools/tls.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/common.h"
#include "tools/flags.h"
#include "tools/run_command.h"

namespace meshpool::tools {
namespace {

constexpr size_t kMaxNameLength = 64;
constexpr int kCaDays = 3650;
constexpr int kCertDays = 825;
constexpr char kCurve[] = "ec_paramgen_curve:prime256v1";
// One openssl call, at most (key generation takes well under a second).
constexpr absl::Duration kOpensslTimeout = absl::Minutes(1);

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

absl::Status CheckName(absl::string_view name) {
  bool ok = !name.empty() && name.size() <= kMaxNameLength;
  for (char c : name) {
    ok = ok && (absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
                c == '.' || c == '_' || c == '-');
  }
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("certificate name '", name, "' must be 1..", kMaxNameLength,
                   " letters, digits, '.', '_' or '-'"));
}

absl::Status CheckIdentity(const CertIdentity& id) {
  MESHPOOL_RETURN_IF_ERROR(CheckName(id.name));
  if (id.tenant.empty()) return absl::OkStatus();
  if (id.role != auth::Role::kClient && id.role != auth::Role::kAdmin) {
    return absl::InvalidArgumentError(absl::StrCat(
        "certificate '", id.name, "' is for a ", auth::RoleName(id.role),
        ", which has no tenant; only clients and admins act for one"));
  }
  return auth::ValidateTenantName(id.tenant);
}

// Runs `openssl args...`; its output goes into the error when it fails.
absl::Status Openssl(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"openssl"};
  argv.insert(argv.end(), args.begin(), args.end());
  absl::StatusOr<CommandResult> run =
      RunCommand(argv, kOpensslTimeout, /*merge_stderr=*/true);
  if (absl::IsNotFound(run.status())) {
    return absl::FailedPreconditionError(
        "the openssl command is missing: apt-get install openssl");
  }
  if (!run.ok()) return run.status();
  if (run->exit_code == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("openssl ", absl::StrJoin(args, " "),
                                          " failed:\n", run->output));
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) return ErrnoToStatus(errno, absl::StrCat("write ", path));
  return absl::OkStatus();
}

// Signs a certificate for `id` with the CA in `dir`.
absl::Status Issue(const std::string& dir, const CertIdentity& id) {
  MESHPOOL_RETURN_IF_ERROR(CheckIdentity(id));
  if (id.role == auth::Role::kNone) {
    return absl::InvalidArgumentError(
        absl::StrCat("certificate '", id.name,
                     "' needs a role: coordinator, node, client or admin"));
  }
  const std::string stem = absl::StrCat(dir, "/", id.name);
  const bool server =
      id.role == auth::Role::kCoordinator || id.role == auth::Role::kNode;
  MESHPOOL_RETURN_IF_ERROR(WriteFile(
      stem + ".ext",
      absl::StrCat("basicConstraints=CA:FALSE\n"
                   "keyUsage=critical,digitalSignature,keyAgreement\n",
                   server ? "extendedKeyUsage=serverAuth,clientAuth\n"
                            "subjectAltName=DNS:"
                          : "extendedKeyUsage=clientAuth\n",
                   server ? absl::StrCat(auth::kServerName, "\n") : "")));
  absl::Status s =
      Openssl({"req", "-new", "-newkey", "ec", "-pkeyopt", kCurve, "-nodes",
               "-keyout", stem + ".key", "-out", stem + ".csr", "-subj",
               absl::StrCat("/CN=", auth::RoleName(id.role), ":", id.name,
                            id.tenant.empty() ? "" : "@", id.tenant)});
  if (s.ok()) {
    s = Openssl({"x509", "-req", "-in", stem + ".csr", "-CA", dir + "/ca.pem",
                 "-CAkey", dir + "/ca.key", "-CAcreateserial", "-out",
                 stem + ".pem", "-days", absl::StrCat(kCertDays), "-extfile",
                 stem + ".ext"});
  }
  ::unlink((stem + ".csr").c_str());
  ::unlink((stem + ".ext").c_str());
  if (s.ok() && ::chmod((stem + ".key").c_str(), 0600) != 0) {
    s = ErrnoToStatus(errno, absl::StrCat("chmod ", stem, ".key"));
  }
  return s;
}

}  // namespace

void DefineTlsFlags(Flags& flags, bool server) {
  flags.Define("tls-dir", "",
               "TLS on the control plane: DIR/ca.pem and this process's "
               "certificate DIR/NAME.pem and key DIR/NAME.key (`meshpool "
               "certs init DIR` makes them; default: $MESHPOOL_TLS_DIR)");
  flags.Define("tls-name", "",
               "NAME of this process's certificate in --tls-dir (default: "
               "$MESHPOOL_TLS_NAME, else the role's usual name)");
  if (server) {
    flags.DefineBool("insecure",
                     "serve without TLS on addresses other hosts can reach "
                     "(anyone who reaches them may register nodes, read the "
                     "map and delete regions); without it, such addresses "
                     "need --tls-dir");
  }
}

absl::StatusOr<auth::TlsConfig> TlsFromFlags(const Flags& flags,
                                             absl::string_view default_name) {
  std::string dir = flags.Get("tls-dir");
  std::string name = flags.Get("tls-name");
  if (dir.empty()) {
    const char* env = std::getenv("MESHPOOL_TLS_DIR");
    if (env != nullptr) dir = env;
  }
  if (dir.empty()) return auth::TlsConfig();
  if (name.empty()) {
    const char* env = std::getenv("MESHPOOL_TLS_NAME");
    name = env != nullptr && *env != '\0' ? env : std::string(default_name);
  }
  if (name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "with --tls-dir ", dir,
        ", give --tls-name (which certificate in it is this process's)"));
  }
  return auth::TlsConfig::InDir(dir, name);
}

std::vector<CertIdentity> DefaultIdentities(int nodes) {
  std::vector<CertIdentity> ids = {{auth::Role::kCoordinator, "coordinator"}};
  for (int i = 1; i <= nodes; ++i) {
    ids.push_back({auth::Role::kNode, absl::StrCat("node-", i)});
  }
  ids.push_back({auth::Role::kClient, "client"});
  ids.push_back({auth::Role::kAdmin, "admin"});
  return ids;
}

absl::Status CertsInit(const std::string& dir,
                       const std::vector<CertIdentity>& identities) {
  for (const CertIdentity& id : identities) {
    MESHPOOL_RETURN_IF_ERROR(CheckIdentity(id));
  }
  if (Exists(dir + "/ca.key")) {
    return absl::AlreadyExistsError(absl::StrCat(
        dir,
        " already holds a CA (ca.key); add certificates to it with "
        "`meshpool certs add ",
        dir,
        " ROLE NAME`, or pick a new "
        "directory"));
  }
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return ErrnoToStatus(errno, absl::StrCat("mkdir ", dir));
  }
  MESHPOOL_RETURN_IF_ERROR(
      Openssl({"req",     "-x509",
               "-new",    "-newkey",
               "ec",      "-pkeyopt",
               kCurve,    "-nodes",
               "-keyout", dir + "/ca.key",
               "-out",    dir + "/ca.pem",
               "-days",   absl::StrCat(kCaDays),
               "-subj",   "/CN=meshpool CA",
               "-addext", "basicConstraints=critical,CA:TRUE",
               "-addext", "keyUsage=critical,keyCertSign,cRLSign"}));
  if (::chmod((dir + "/ca.key").c_str(), 0600) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("chmod ", dir, "/ca.key"));
  }
  for (const CertIdentity& id : identities) {
    MESHPOOL_RETURN_IF_ERROR(Issue(dir, id));
  }
  return absl::OkStatus();
}

absl::Status CertsAdd(const std::string& dir, const CertIdentity& identity) {
  if (!Exists(dir + "/ca.key") || !Exists(dir + "/ca.pem")) {
    return absl::NotFoundError(absl::StrCat(
        dir,
        " holds no CA (ca.pem and ca.key): make one with `meshpool "
        "certs init ",
        dir, "`"));
  }
  MESHPOOL_RETURN_IF_ERROR(CheckName(identity.name));
  if (Exists(absl::StrCat(dir, "/", identity.name, ".pem"))) {
    return absl::AlreadyExistsError(absl::StrCat(
        dir, "/", identity.name, ".pem exists; pick another name"));
  }
  return Issue(dir, identity);
}

}  // namespace meshpool::tools
