// The shm backend across real processes: this binary re-executes itself as
// ShmChild.Main (skipped when run directly) to be a second client writing
// and adding concurrently with this process, or a node that is SIGKILLed
// under a connected endpoint.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/memory_file.h"
#include "common/posix.h"
#include "gtest/gtest.h"
#include "rdma/rdma.h"
#include "rdma/shm.h"

extern char** environ;

namespace meshpool::rdma {
namespace {

constexpr size_t kPoolBytes = 1 << 20;
constexpr uint64_t kPatternOffset = 4096;
constexpr uint32_t kPatternBytes = 4096;
constexpr uint32_t kChildNodeRkey = 0x5151;
// The child adds kRounds batches of kMaxBatch FAAs on one word.
constexpr int kRounds = 2000;
constexpr absl::Duration kTimeout = absl::Seconds(30);
constexpr int kReadyWaitMs = 30000;   // failure bound, not a sync point
constexpr int kDeathBoundMs = 5000;   // failure bound, far above the 10 ms
constexpr int kChildLifetimeS = 120;  // a node child never outlives this

uint8_t PatternByte(size_t i) { return static_cast<uint8_t>(i * 13 + 1); }

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

WorkRequest Request(Opcode op, uint64_t id, void* local, uint32_t length,
                    uint64_t addr, uint32_t rkey) {
  WorkRequest wr;
  wr.wr_id = id;
  wr.opcode = op;
  wr.local = local;
  wr.length = length;
  wr.remote_addr = addr;
  wr.rkey = rkey;
  return wr;
}

absl::Status RunBatch(Endpoint& ep, const std::vector<WorkRequest>& batch) {
  std::vector<Completion> c(batch.size());
  return PostAndWait(ep, batch, absl::MakeSpan(c), kTimeout);
}

// Starts this binary as ShmChild.Main with `env` added; `report_fd`, when
// not -1, becomes the child's descriptor 3.
ShmOptions Exporting(uint8_t* pool, int fd, uint32_t rkey) {
  ShmOptions options;
  options.exports = {{pool, kPoolBytes, fd, 0, rkey}};
  return options;
}

pid_t SpawnChild(const std::vector<std::string>& env, int report_fd) {
  std::vector<std::string> strings(env);
  for (char** e = environ; *e != nullptr; ++e) strings.emplace_back(*e);
  std::vector<char*> envp;
  for (std::string& s : strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string exe;
  if (SelfExecutablePath(&exe) != 0) return -1;
  std::string filter = "--gtest_filter=ShmChild.Main";
  char* argv[] = {exe.data(), filter.data(), nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (report_fd >= 0) posix_spawn_file_actions_adddup2(&actions, report_fd, 3);
  pid_t pid = -1;
  const int rc =
      ::posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  EXPECT_EQ(rc, 0) << std::strerror(rc);
  std::cout << "spawned child " << pid << std::endl;
  return rc == 0 ? pid : -1;
}

// The child's exit code, or -1 when it did not exit normally.
int WaitChild(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

// ---- the child -----------------------------------------------------------

// Client: writes the pattern at the node's kPatternOffset and adds 1 to the
// node's word 0 kRounds * kMaxBatch times.
void ChildClient() {
  uint64_t base = 0;
  uint32_t rkey = 0;
  ASSERT_TRUE(absl::SimpleAtoi(Env("MESHPOOL_SHM_BASE"), &base));
  ASSERT_TRUE(absl::SimpleAtoi(Env("MESHPOOL_SHM_RKEY"), &rkey));
  auto client = CreateShmTransport({});
  ASSERT_TRUE(client.ok()) << client.status();
  auto ep = (*client)->Connect(Env("MESHPOOL_SHM_ADDRESS"), nullptr);
  ASSERT_TRUE(ep.ok()) << ep.status();
  std::vector<uint8_t> pattern(kPatternBytes);
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = PatternByte(i);
  ASSERT_TRUE(
      RunBatch(**ep, {Request(Opcode::kWrite, 1, pattern.data(), kPatternBytes,
                              base + kPatternOffset, rkey)})
          .ok());
  std::vector<uint64_t> old(kMaxBatch);
  std::vector<WorkRequest> faas;
  for (size_t i = 0; i < kMaxBatch; ++i) {
    faas.push_back(Request(Opcode::kFetchAdd, i, &old[i], 8, base, rkey));
    faas.back().compare_add = 1;
  }
  for (int i = 0; i < kRounds; ++i) ASSERT_TRUE(RunBatch(**ep, faas).ok());
}

// Node: a pool holding the pattern at kPatternOffset, served at
// MESHPOOL_SHM_PATH; reports "<addr> <rkey>" on descriptor 3 once
// listening, then waits to be killed.
void ChildNode() {
  DieWithParent();
  absl::StatusOr<MemoryFile> file =
      CreateMemoryFile("shm-child-pool", kPoolBytes, MemoryFilePages::kNormal);
  ASSERT_TRUE(file.ok()) << file.status();
  const int fd = file->fd;
  void* p =
      ::mmap(nullptr, kPoolBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(p, MAP_FAILED);
  auto* pool = static_cast<uint8_t*>(p);
  for (size_t i = 0; i < kPatternBytes; ++i) {
    pool[kPatternOffset + i] = PatternByte(i);
  }
  auto node = CreateShmTransport(Exporting(pool, fd, kChildNodeRkey));
  ASSERT_TRUE(node.ok()) << node.status();
  auto region = (*node)->RegisterMemory(pool, kPoolBytes);
  ASSERT_TRUE(region.ok()) << region.status();
  auto address = (*node)->Listen(Env("MESHPOOL_SHM_PATH"));
  ASSERT_TRUE(address.ok()) << address.status();
  const std::string report = absl::StrCat(reinterpret_cast<uint64_t>(pool), " ",
                                          (*region)->remote().rkey, "\n");
  ASSERT_EQ(::write(3, report.data(), report.size()),
            static_cast<ssize_t>(report.size()));
  ::close(3);
  std::this_thread::sleep_for(std::chrono::seconds(kChildLifetimeS));
}

// Stranger: becomes user MESHPOOL_SHM_UID and connects to the node at
// MESHPOOL_SHM_ADDRESS, which must refuse it for its user.
void ChildStranger() {
  uint32_t uid = 0;
  ASSERT_TRUE(absl::SimpleAtoi(Env("MESHPOOL_SHM_UID"), &uid));
  ASSERT_EQ(::setgid(uid), 0) << std::strerror(errno);
  ASSERT_EQ(::setuid(uid), 0) << std::strerror(errno);
  auto client = CreateShmTransport({});
  ASSERT_TRUE(client.ok()) << client.status();
  auto ep = (*client)->Connect(Env("MESHPOOL_SHM_ADDRESS"), nullptr);
  ASSERT_EQ(ep.status().code(), absl::StatusCode::kPermissionDenied)
      << ep.status();
  EXPECT_NE(ep.status().message().find(absl::StrCat("to user ", uid)),
            absl::string_view::npos)
      << ep.status();
}

TEST(ShmChild, Main) {
  const std::string role = Env("MESHPOOL_SHM_CHILD");
  if (role.empty()) GTEST_SKIP() << "runs only as a child of ShmProcess tests";
  if (role == "client") ChildClient();
  if (role == "node") ChildNode();
  if (role == "stranger") ChildStranger();
}

// ---- the parent ----------------------------------------------------------

// A memory file of kPoolBytes mapped shared (pool null on failure),
// unmapped and closed on destruction.
struct ParentPool {
  explicit ParentPool(const char* name) {
    absl::StatusOr<MemoryFile> file =
        CreateMemoryFile(name, kPoolBytes, MemoryFilePages::kNormal);
    if (!file.ok()) return;
    fd = file->fd;
    void* p =
        ::mmap(nullptr, kPoolBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED) pool = static_cast<uint8_t*>(p);
  }
  ~ParentPool() {
    if (pool != nullptr) ::munmap(pool, kPoolBytes);
    if (fd >= 0) ::close(fd);
  }
  ParentPool(const ParentPool&) = delete;
  ParentPool& operator=(const ParentPool&) = delete;

  int fd = -1;
  uint8_t* pool = nullptr;
};

TEST(ShmProcess, AnotherUsersProcessIsRefusedAndTheNodeServesOn) {
  if (::geteuid() != 0) {
    GTEST_SKIP() << "SKIPPED LOUDLY: running a child as another user needs "
                    "root; ShmPeers.AUserTheNodeDoesNotAdmitIsPermissionDenied "
                    "checks the refusal by allowed_uids instead";
  }
  ParentPool parent("shm-cred-pool");
  ASSERT_NE(parent.pool, nullptr);
  uint8_t* pool = parent.pool;
  const int memory_fd = parent.fd;
  for (size_t i = 0; i < kPatternBytes; ++i) {
    pool[kPatternOffset + i] = PatternByte(i);
  }
  {
    // The socket file admits everyone, so only the peer's user id (the
    // default: this process's user and root) stands in the stranger's way.
    ShmOptions options = Exporting(pool, memory_fd, 0);
    options.socket_mode = 0666;
    auto node = CreateShmTransport(std::move(options));
    ASSERT_TRUE(node.ok()) << node.status();
    auto region = (*node)->RegisterMemory(pool, kPoolBytes);
    ASSERT_TRUE(region.ok()) << region.status();
    auto address = (*node)->Listen(
        absl::StrCat("/tmp/meshpool-cred-", ::getpid(), ".sock"));
    ASSERT_TRUE(address.ok()) << address.status();
    const pid_t child =
        SpawnChild({"MESHPOOL_SHM_CHILD=stranger", "MESHPOOL_SHM_UID=65534",
                    absl::StrCat("MESHPOOL_SHM_ADDRESS=", *address)},
                   -1);
    ASSERT_GT(child, 0);
    EXPECT_EQ(WaitChild(child), 0) << "the stranger was not refused";
    // The node serves its own user on.
    auto client = CreateShmTransport({});
    ASSERT_TRUE(client.ok());
    auto ep = (*client)->Connect(*address, nullptr);
    ASSERT_TRUE(ep.ok()) << ep.status();
    std::vector<uint8_t> back(kPatternBytes);
    const RemoteRegion r = (*region)->remote();
    ASSERT_TRUE(
        RunBatch(**ep, {Request(Opcode::kRead, 1, back.data(), kPatternBytes,
                                r.addr + kPatternOffset, r.rkey)})
            .ok());
    EXPECT_EQ(std::memcmp(back.data(), pool + kPatternOffset, kPatternBytes),
              0);
  }
}

TEST(ShmProcess, ChildClientWritesAndAddsWhileThisProcessAdds) {
  ParentPool parent("shm-parent-pool");
  ASSERT_NE(parent.pool, nullptr);
  uint8_t* pool = parent.pool;
  const int memory_fd = parent.fd;
  {
    auto node = CreateShmTransport(Exporting(pool, memory_fd, 0));
    ASSERT_TRUE(node.ok()) << node.status();
    auto region = (*node)->RegisterMemory(pool, kPoolBytes);
    auto address = (*node)->Listen("");
    ASSERT_TRUE(region.ok() && address.ok());
    const RemoteRegion r = (*region)->remote();
    auto client = CreateShmTransport({});
    ASSERT_TRUE(client.ok());
    auto ep = (*client)->Connect(*address, nullptr);
    ASSERT_TRUE(ep.ok()) << ep.status();
    const pid_t child =
        SpawnChild({"MESHPOOL_SHM_CHILD=client",
                    absl::StrCat("MESHPOOL_SHM_ADDRESS=", *address),
                    absl::StrCat("MESHPOOL_SHM_BASE=", r.addr),
                    absl::StrCat("MESHPOOL_SHM_RKEY=", r.rkey)},
                   -1);
    ASSERT_GT(child, 0);
    // Add until the child is done, so the two processes' atomics overlap for
    // the child's whole run.
    std::vector<uint64_t> old(kMaxBatch);
    std::vector<WorkRequest> faas;
    for (size_t i = 0; i < kMaxBatch; ++i) {
      faas.push_back(Request(Opcode::kFetchAdd, i, &old[i], 8, r.addr, r.rkey));
      faas.back().compare_add = 1;
    }
    int failures = 0;
    uint64_t mine = 0;
    int status = 0;
    pid_t done = 0;
    while (done == 0) {
      if (RunBatch(**ep, faas).ok()) {
        mine += kMaxBatch;
      } else {
        ++failures;
      }
      done = ::waitpid(child, &status, WNOHANG);
    }
    ASSERT_EQ(done, child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    EXPECT_EQ(failures, 0);
    std::cout << "this process added " << mine << ", the child "
              << kRounds * kMaxBatch << std::endl;
    uint64_t counter = 0;
    ASSERT_TRUE(
        RunBatch(**ep, {Request(Opcode::kRead, 2, &counter, 8, r.addr, r.rkey)})
            .ok());
    EXPECT_EQ(counter, mine + kRounds * kMaxBatch);
    for (size_t i = 0; i < kPatternBytes; ++i) {
      ASSERT_EQ(pool[kPatternOffset + i], PatternByte(i)) << "byte " << i;
    }
  }
}

// Reads one line from `fd` within kReadyWaitMs.
std::string ReadLine(int fd) {
  std::string line;
  char c;
  while (line.empty() || line.back() != '\n') {
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, kReadyWaitMs) <= 0 || ::read(fd, &c, 1) != 1) break;
    line.push_back(c);
  }
  return line;
}

TEST(ShmProcess, KilledNodeMakesTheEndpointUnavailableWithinTheBound) {
  const std::string path =
      absl::StrCat("/tmp/meshpool-shm-child-", ::getpid(), ".sock");
  int pipe_fds[2];
  ASSERT_EQ(PipeCloexec(pipe_fds), 0);
  // Above 3, so dup2 onto 3 in the child really clears close-on-exec.
  const int report_fd = ::fcntl(pipe_fds[1], F_DUPFD_CLOEXEC, 10);
  ::close(pipe_fds[1]);
  const pid_t child = SpawnChild(
      {"MESHPOOL_SHM_CHILD=node", absl::StrCat("MESHPOOL_SHM_PATH=", path)},
      report_fd);
  ::close(report_fd);
  ASSERT_GT(child, 0);
  const std::string line = ReadLine(pipe_fds[0]);
  ::close(pipe_fds[0]);
  std::vector<std::string> parts =
      absl::StrSplit(line, absl::ByAnyChar(" \n"), absl::SkipEmpty());
  uint64_t base = 0;
  uint32_t rkey = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &base) ||
      !absl::SimpleAtoi(parts[1], &rkey)) {
    ::kill(child, SIGKILL);
    WaitChild(child);
    FAIL() << "the node child reported '" << line << "'";
  }
  EXPECT_EQ(rkey, kChildNodeRkey);
  auto client = CreateShmTransport({});
  ASSERT_TRUE(client.ok());
  auto ep = (*client)->Connect(absl::StrCat("shm://", path), nullptr);
  ASSERT_TRUE(ep.ok()) << ep.status();
  // What the node process wrote is what this one reads.
  std::vector<uint8_t> back(kPatternBytes);
  ASSERT_TRUE(
      RunBatch(**ep, {Request(Opcode::kRead, 1, back.data(), kPatternBytes,
                              base + kPatternOffset, rkey)})
          .ok());
  for (size_t i = 0; i < kPatternBytes; ++i) {
    ASSERT_EQ(back[i], PatternByte(i)) << "byte " << i;
  }
  ::kill(child, SIGKILL);
  EXPECT_EQ(WaitChild(child), -1);  // killed
  uint64_t value = 0;
  absl::Status status;
  const absl::Time deadline = absl::Now() + absl::Milliseconds(kDeathBoundMs);
  int posts = 0;
  while (status.ok() && absl::Now() < deadline) {
    ++posts;
    status = RunBatch(**ep, {Request(Opcode::kRead, 2, &value, 8, base, rkey)});
    if (status.ok()) absl::SleepFor(absl::Milliseconds(1));
  }
  std::cout << "Unavailable after " << posts << " posts" << std::endl;
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_FALSE((*ep)->healthy());
  // Its socket file is left behind; nobody answers there.
  EXPECT_EQ(
      (*client)->Connect(absl::StrCat("shm://", path), nullptr).status().code(),
      absl::StatusCode::kUnavailable);
  ::unlink(path.c_str());
}

}  // namespace
}  // namespace meshpool::rdma
