// tests/: a real etcd member (Debian's etcd-server, /usr/bin/etcd) for one
// test, on free loopback ports, its data in a directory the test owns.
//
//   auto etcd = testing::EtcdProcess::Start(dir.path());
//   if (!etcd.ok()) GTEST_SKIP() << etcd.status();  // etcd not installed
//   ... etcd->endpoint() ...
//
// Thread-compatible.
#ifndef MESHPOOL_TESTS_ETCD_PROCESS_H_
#define MESHPOOL_TESTS_ETCD_PROCESS_H_

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "coordinator/etcd_client.h"

namespace meshpool::testing {

inline constexpr char kEtcdBinary[] = "/usr/bin/etcd";

class EtcdProcess {
 public:
  // Starts one member with its data under `dir` and waits until it
  // answers. FailedPrecondition when etcd is not installed (tools/setup.sh
  // installs it); Unavailable when it does not come up within 20 s.
  static absl::StatusOr<std::unique_ptr<EtcdProcess>> Start(
      const std::string& dir) {
    if (access(kEtcdBinary, X_OK) != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          kEtcdBinary,
          " is missing: install etcd-server (tools/setup.sh does)"));
    }
    const int client_port = FreePort();
    const int peer_port = FreePort();
    const std::string client = absl::StrCat("http://127.0.0.1:", client_port);
    const std::string peer = absl::StrCat("http://127.0.0.1:", peer_port);
    std::vector<std::string> args = {kEtcdBinary,
                                     "--name",
                                     "m1",
                                     "--data-dir",
                                     absl::StrCat(dir, "/etcd"),
                                     "--listen-client-urls",
                                     client,
                                     "--advertise-client-urls",
                                     client,
                                     "--listen-peer-urls",
                                     peer,
                                     "--initial-advertise-peer-urls",
                                     peer,
                                     "--initial-cluster",
                                     absl::StrCat("m1=", peer),
                                     "--logger",
                                     "zap",
                                     "--log-level",
                                     "error"};
    std::unique_ptr<EtcdProcess> p(new EtcdProcess());
    p->endpoint_ = absl::StrCat("127.0.0.1:", client_port);
    p->pid_ = fork();
    if (p->pid_ == 0) {
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(kEtcdBinary, argv.data());
      _exit(127);
    }
    auto client_or = coordinator::EtcdClient::Create(p->endpoint_);
    if (!client_or.ok()) return client_or.status();
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (!(*client_or)->Range("/", "").ok()) {
      if (absl::Now() > deadline) {
        return absl::UnavailableError(
            absl::StrCat("etcd at ", p->endpoint_, " never answered"));
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
    return p;
  }

  ~EtcdProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  const std::string& endpoint() const { return endpoint_; }

 private:
  EtcdProcess() = default;

  // A port the kernel just gave out and that nothing listens on (another
  // process could take it before etcd does; on loopback in a test run that
  // is rare, and etcd would then fail to start: the test fails loudly).
  static int FreePort() {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    socklen_t len = sizeof(addr);
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    close(fd);
    return ntohs(addr.sin_port);
  }

  pid_t pid_ = -1;
  std::string endpoint_;
};

}  // namespace meshpool::testing

#endif  // MESHPOOL_TESTS_ETCD_PROCESS_H_
