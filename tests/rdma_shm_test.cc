// The shm backend beyond the shared conformance contract: addresses and host
// identity, exports and registrations, listening, deregistration, the
// mapping cache, failures within a batch, atomics under contention and
// store->load ordering. Forwarded atomics and hostile hellos:
// rdma_shm_forward_test.cc; two real processes: rdma_shm_process_test.cc.
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/memory_file.h"
#include "gtest/gtest.h"
#include "rdma/rdma.h"
#include "rdma/shm.h"
#include "rdma/shm_mapping.h"
#include "rdma/shm_node.h"
#include "rdma/shm_socket.h"
#include "rdma/shm_wire.h"
#include "tests/shm_test_util.h"

namespace meshpool::rdma::shm_testing {
namespace {

// ---- addresses -----------------------------------------------------------

TEST(ShmAddress, FormatAndParseRoundTripWithEscapes) {
  const ShmAddress in{"/tmp/odd dir/a?b&c=d%e#.sock", "boot.123",
                      "verbs://node1"};
  const std::string text = FormatShmAddress(in);
  EXPECT_EQ(text.find(' '), std::string::npos) << text;
  EXPECT_EQ(text.rfind("shm:///tmp/odd%20dir/a%3Fb%26c%3Dd%25e%23.sock?", 0),
            0u)
      << text;
  absl::StatusOr<ShmAddress> out = ParseShmAddress(text);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->path, in.path);
  EXPECT_EQ(out->host, in.host);
  EXPECT_EQ(out->atomics, in.atomics);
  EXPECT_EQ(FormatShmAddress({"/run/n.sock", "", ""}), "shm:///run/n.sock");
  EXPECT_EQ(FormatShmAddress({"/run/n.sock", "", "tcp://[::1]:7"}),
            "shm:///run/n.sock?atomics=tcp://[::1]:7");
  out = ParseShmAddress("shm:///run/n.sock?atomics=verbs://x&host=h");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->atomics, "verbs://x");
  EXPECT_EQ(out->host, "h");
}

TEST(ShmAddress, HostIdentityNamesBootAndMountNamespace) {
  const std::string id = HostIdentity();
  ASSERT_FALSE(id.empty()) << "this host should tell its boot session";
  EXPECT_EQ(id, HostIdentity());
#ifdef __linux__
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  boot >> boot_id;
  EXPECT_EQ(id.rfind(boot_id + ".", 0), 0u) << id;
#else
  std::cout << "NOT CHECKED: that the identity starts with the boot id "
               "(Linux's /proc)\n";
#endif
  EXPECT_TRUE(IsLocalShmAddress(FormatShmAddress({"/x.sock", id, ""})));
  EXPECT_FALSE(IsLocalShmAddress(FormatShmAddress({"/x.sock", id + "0", ""})));
  EXPECT_FALSE(IsLocalShmAddress("shm:///x.sock"));  // no host: unknown
  EXPECT_FALSE(IsLocalShmAddress("tcp://127.0.0.1:7"));
}

TEST(ShmAddress, ListenAdvertisesHostAndAtomicsAndRemovesItsSocket) {
  auto node = Node::Start(Options({}, "verbs://node1"), 77);
  ASSERT_NE(node, nullptr);
  absl::StatusOr<ShmAddress> a = ParseShmAddress(node->address);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->host, HostIdentity());
  EXPECT_EQ(a->atomics, "verbs://node1");
  struct stat st {};
  ASSERT_EQ(::stat(a->path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  node->region.reset();
  node->transport.reset();
  EXPECT_NE(::stat(a->path.c_str(), &st), 0);
}

TEST(ShmAddress, ConnectRefusesAnotherHostsAddress) {
  auto node = Node::Start();
  ASSERT_NE(node, nullptr);
  absl::StatusOr<ShmAddress> a = ParseShmAddress(node->address);
  ASSERT_TRUE(a.ok());
  a->host = "someone-else.1";
  auto client = MustCreate({});
  EXPECT_EQ(client->Connect(FormatShmAddress(*a), nullptr).status().code(),
            absl::StatusCode::kFailedPrecondition);
  a->host = "";  // unknown host: the path decides
  EXPECT_TRUE(client->Connect(FormatShmAddress(*a), nullptr).ok());
}

// ---- exports, registrations, listening -----------------------------------

ShmOptions BadMode(ShmExport e) {
  ShmOptions options = Options({e});
  options.socket_mode = 01777;
  return options;
}

TEST(ShmExports, BadExportsAreInvalidArgument) {
  auto good = SharedMemory::Create("good", 1 << 20);
  auto unsealed = SharedMemory::Create("unsealed", 1 << 20, /*seal=*/false);
  ASSERT_TRUE(good && unsealed);
  std::vector<uint8_t> heap(4096);
  const std::vector<std::pair<std::string, ShmOptions>> cases = {
      {"unsealed", Options({unsealed->Export()})},
      {"no fd", Options({{good->data(), good->size(), -1, 0, 0}})},
      {"beyond the fd",
       Options({{good->data(), good->size(), good->fd(), 4096, 0}})},
      {"null", Options({{nullptr, 4096, good->fd(), 0, 0}})},
      {"overlap", Options({good->Export(), good->Export()})},
      {"not a memfd", Options({{heap.data(), heap.size(), 0, 0, 0}})},
      {"atomics without rkey", Options({good->Export()}, "verbs://n")},
      {"atomics without exports", Options({}, "verbs://n")},
      {"mode", BadMode(good->Export())},
  };
  for (const auto& [name, options] : cases) {
    EXPECT_EQ(CreateShmTransport(options).status().code(),
              absl::StatusCode::kInvalidArgument)
        << name;
  }
}

TEST(ShmPeers, AUserTheNodeDoesNotAdmitIsPermissionDenied) {
  const uint32_t me = static_cast<uint32_t>(::geteuid());
  ShmOptions options;
  options.allowed_uids = {me + 4242};  // someone else only
  auto node = Node::Start(std::move(options));
  ASSERT_NE(node, nullptr);
  auto client = MustCreate({});
  auto refused = client->Connect(node->address, nullptr);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied)
      << refused.status();
  EXPECT_NE(refused.status().message().find(absl::StrCat("to user ", me)),
            absl::string_view::npos)
      << refused.status();
  // Refusing is no failure of the node: a node admitting this user serves.
  ShmOptions admitting;
  admitting.allowed_uids = {me + 4242, me};
  auto other = Node::Start(std::move(admitting));
  ASSERT_NE(other, nullptr);
  EXPECT_NE(MustConnect(*client, other->address), nullptr);
}

TEST(ShmPeers, TooManyAllowedUsersIsInvalidArgument) {
  auto memory = SharedMemory::Create("uids", 1 << 20);
  ASSERT_NE(memory, nullptr);
  ShmOptions options = Options({memory->Export()});
  for (uint32_t i = 0; i <= kMaxShmAllowedUids; ++i) {
    options.allowed_uids.push_back(i);
  }
  EXPECT_EQ(CreateShmTransport(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ShmExports, NodeRefusesUnsharedMemoryClientTakesAny) {
  auto node = Node::Start();
  ASSERT_NE(node, nullptr);
  std::vector<uint8_t> heap(4096);
  auto refused = node->transport->RegisterMemory(heap.data(), heap.size());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("shared=true"), std::string::npos)
      << refused.status();
  // Ending one byte past the export is refused as well.
  EXPECT_EQ(
      node->transport->RegisterMemory(node->memory->data() + 1, kPoolBytes)
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
  auto client = MustCreate({});
  EXPECT_TRUE(client->RegisterMemory(heap.data(), heap.size()).ok());
  EXPECT_EQ(client->Listen("").status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(ShmExports, ExportRkeyNamesTheRegistrationOfExactlyTheExport) {
  auto node = Node::Start({}, /*rkey=*/0x1234);
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(node->remote().rkey, 0x1234u);
  EXPECT_EQ(node->transport->RegisterMemory(node->memory->data(), kPoolBytes)
                .status()
                .code(),
            absl::StatusCode::kAlreadyExists);
  auto part = node->transport->RegisterMemory(node->memory->data(), 4096);
  ASSERT_TRUE(part.ok()) << part.status();
  EXPECT_NE((*part)->remote().rkey, 0x1234u);
  EXPECT_NE((*part)->remote().rkey, 0u);
}

TEST(ShmListen, ReplacesAStaleSocketButNotALiveOneOrAFile) {
  const std::string path =
      absl::StrCat("/tmp/meshpool-shm-test-", ::getpid(), ".sock");
  ::unlink(path.c_str());
  {  // a socket file whose node died: bound, never listening, closed
    int fd = ::socket(AF_UNIX, internal::kShmSocketType, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strcpy(addr.sun_path, path.c_str());
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    ::close(fd);
  }
  auto memory = SharedMemory::Create("listen", 1 << 20);
  ASSERT_NE(memory, nullptr);
  auto first = MustCreate(Options({memory->Export()}));
  auto address = first->Listen(path);
  ASSERT_TRUE(address.ok()) << address.status();
  auto second = MustCreate(Options({memory->Export()}));
  EXPECT_EQ(second->Listen(path).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(MustCreate({})->Connect(*address, nullptr).ok());
  first.reset();
  std::ofstream(path) << "not a socket";
  EXPECT_EQ(second->Listen(path).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(second->Listen("relative.sock").status().code(),
            absl::StatusCode::kInvalidArgument);
  ::unlink(path.c_str());
}

// ---- what an endpoint sees -----------------------------------------------

TEST(ShmEndpointTest, DeregistrationTakesEffectOnAConnectedEndpoint) {
  auto node = Node::Start();
  ASSERT_NE(node, nullptr);
  auto extra = node->transport->RegisterMemory(node->memory->data(), 4096);
  ASSERT_TRUE(extra.ok());
  const RemoteRegion remote = (*extra)->remote();
  auto client = MustCreate({});
  auto ep = MustConnect(*client, node->address);
  ASSERT_NE(ep, nullptr);
  uint64_t value = 0;
  *node->memory->word(8) = 5;
  ASSERT_TRUE(
      RunBatch(*ep, {Request(Opcode::kRead, 1, &value, 8, remote, 8)}).ok());
  EXPECT_EQ(value, 5u);
  extra->reset();
  EXPECT_EQ(
      RunBatch(*ep, {Request(Opcode::kRead, 2, &value, 8, remote, 8)}).code(),
      absl::StatusCode::kPermissionDenied);
  EXPECT_FALSE(ep->healthy());
}

TEST(ShmEndpointTest, RegionsRegisteredAfterConnectNeedANewEndpoint) {
  auto node = Node::Start();
  ASSERT_NE(node, nullptr);
  auto client = MustCreate({});
  auto old_ep = MustConnect(*client, node->address);
  ASSERT_NE(old_ep, nullptr);
  auto late = node->transport->RegisterMemory(node->memory->data() + 4096, 64);
  ASSERT_TRUE(late.ok());
  uint64_t value = 0;
  const WorkRequest read =
      Request(Opcode::kRead, 1, &value, 8, (*late)->remote(), 0);
  EXPECT_EQ(RunBatch(*old_ep, {read}).code(),
            absl::StatusCode::kPermissionDenied);
  auto new_ep = MustConnect(*client, node->address);
  ASSERT_NE(new_ep, nullptr);
  EXPECT_TRUE(RunBatch(*new_ep, {read}).ok());
}

TEST(ShmEndpointTest, BatchAfterAFailureCompletesUnavailableInOrder) {
  auto node = Node::Start();
  ASSERT_NE(node, nullptr);
  auto client = MustCreate({});
  auto ep = MustConnect(*client, node->address);
  ASSERT_NE(ep, nullptr);
  uint64_t v[3] = {};
  const RemoteRegion r = node->remote();
  std::vector<WorkRequest> batch = {
      Request(Opcode::kWrite, 10, &v[0], 8, r, 0),
      Request(Opcode::kRead, 11, &v[1], 8, r, kPoolBytes - 4),  // outside
      Request(Opcode::kRead, 12, &v[2], 8, r, 0)};
  ASSERT_TRUE(ep->Post(batch).ok());
  Completion c[4];
  auto n = ep->Poll(absl::MakeSpan(c), absl::ZeroDuration());
  ASSERT_TRUE(n.ok());
  ASSERT_EQ(*n, 3u);
  EXPECT_EQ(c[0].wr_id, 10u);
  EXPECT_TRUE(c[0].status.ok());
  EXPECT_EQ(c[1].wr_id, 11u);
  EXPECT_EQ(c[1].status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(c[2].wr_id, 12u);
  EXPECT_EQ(c[2].status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ep->Poll(absl::MakeSpan(c), absl::ZeroDuration()).status().code(),
            absl::StatusCode::kUnavailable);
}

#ifdef __linux__
// How many mappings of memfd `name` this process has (/proc/self/maps).
int MappingsOf(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  int count = 0;
  while (std::getline(maps, line)) {
    if (line.find("/memfd:" + name + " ") != std::string::npos) ++count;
  }
  return count;
}

TEST(ShmEndpointTest, EndpointsOfOneTransportShareOneMappingPerMemfd) {
  auto memory = SharedMemory::Create("shm-test-shared-map", kPoolBytes);
  ASSERT_NE(memory, nullptr);
  auto node = MustCreate(Options({memory->Export()}));
  auto region = node->RegisterMemory(memory->data(), kPoolBytes);
  auto address = node->Listen("");
  ASSERT_TRUE(region.ok() && address.ok());
  const std::string name = "shm-test-shared-map";
  ASSERT_EQ(MappingsOf(name), 1);  // the node's own
  auto client = MustCreate({});
  auto a = MustConnect(*client, *address);
  auto b = MustConnect(*client, *address);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(MappingsOf(name), 2);
  auto other_client = MustCreate({});
  auto c = MustConnect(*other_client, *address);
  EXPECT_EQ(MappingsOf(name), 3);
  a.reset();
  EXPECT_EQ(MappingsOf(name), 3);  // b still holds it
  b.reset();
  c.reset();
  EXPECT_EQ(MappingsOf(name), 1);
}
#else
TEST(ShmEndpointTest, EndpointsOfOneTransportShareOneMappingPerMemfd) {
  GTEST_SKIP() << "counts mappings in Linux's /proc/self/maps";
}
#endif

TEST(ShmEndpointTest, AtomicsFromTwoEndpointsOnTwoThreadsAreAtomic) {
  // FAAs go in whole batches on one word, both threads start together, so
  // their atomics run back to back and overlap as much as the machine lets.
  constexpr int kRounds = 2000;
  constexpr int kCasRounds = 5000;
  auto node = Node::Start();
  ASSERT_NE(node, nullptr);
  auto client = MustCreate({});
  std::unique_ptr<Endpoint> eps[2] = {MustConnect(*client, node->address),
                                      MustConnect(*client, node->address)};
  ASSERT_TRUE(eps[0] && eps[1]);
  const RemoteRegion r = node->remote();
  std::atomic<int> failures{0};
  std::atomic<int> ready{0};
  auto work = [&](int lane) {
    std::vector<uint64_t> old(kMaxBatch);
    std::vector<WorkRequest> faas;
    for (size_t i = 0; i < kMaxBatch; ++i) {
      faas.push_back(Atomic(Opcode::kFetchAdd, i, &old[i], r, 0, 1));
    }
    ready.fetch_add(1);
    while (ready.load() < 2) std::this_thread::yield();
    for (int i = 0; i < kRounds; ++i) {
      if (!RunBatch(*eps[lane], faas).ok()) failures.fetch_add(1);
    }
    uint64_t guess = 0;
    for (int i = 0; i < kCasRounds; ++i) {  // CAS increments, retried
      while (true) {
        if (!RunBatch(*eps[lane], {Atomic(Opcode::kCompareSwap, 2, &old[0], r,
                                          64, guess, guess + 1)})
                 .ok()) {
          failures.fetch_add(1);
          break;
        }
        if (old[0] == guess) break;
        guess = old[0];
      }
      ++guess;
    }
  };
  std::thread t0(work, 0), t1(work, 1);
  t0.join();
  t1.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(*node->memory->word(0), 2u * kRounds * kMaxBatch);
  EXPECT_EQ(*node->memory->word(64), 2u * kCasRounds);
}

// Store->load ordering (the pin protocol's "WRITE my entry, READ your
// flag"): two endpoints each WRITE their word and then READ the other's, in
// lockstep rounds; sequential consistency forbids both missing the other's
// WRITE of the same round.
TEST(ShmEndpointTest, ReadAfterWriteIsOrderedAgainstAnotherWriter) {
  constexpr uint64_t kRounds = 100000;
  auto node = Node::Start();
  ASSERT_NE(node, nullptr);
  auto client = MustCreate({});
  std::unique_ptr<Endpoint> eps[2] = {MustConnect(*client, node->address),
                                      MustConnect(*client, node->address)};
  ASSERT_TRUE(eps[0] && eps[1]);
  const RemoteRegion r = node->remote();
  std::vector<uint64_t> seen[2] = {std::vector<uint64_t>(kRounds),
                                   std::vector<uint64_t>(kRounds)};
  std::atomic<uint64_t> arrived{0};
  std::atomic<int> failures{0};
  auto work = [&](int me) {
    uint64_t value = 0;
    Completion c[2];
    for (uint64_t round = 1; round < kRounds; ++round) {
      arrived.fetch_add(1);
      for (int spins = 0; arrived.load() < 2 * round; ++spins) {
        if (spins > 1000) std::this_thread::yield();  // the other is off-CPU
      }
      value = round;
      const std::vector<WorkRequest> batch = {
          Request(Opcode::kWrite, 1, &value, 8, r, 64 * me),
          Request(Opcode::kRead, 2, &seen[me][round], 8, r, 64 * (1 - me))};
      if (!eps[me]->Post(batch).ok() ||
          eps[me]->Poll(absl::MakeSpan(c), absl::ZeroDuration()).value_or(0) !=
              2) {
        failures.fetch_add(1);
      }
    }
  };
  std::thread t0(work, 0), t1(work, 1);
  t0.join();
  t1.join();
  EXPECT_EQ(failures.load(), 0);
  int both_missed = 0;
  for (uint64_t round = 1; round < kRounds; ++round) {
    if (seen[0][round] < round && seen[1][round] < round) ++both_missed;
  }
  EXPECT_EQ(both_missed, 0) << "of " << kRounds << " rounds";
}

// ---- the control page ----------------------------------------------------

// `fd` is a control page a client cannot map writable (EACCES) and can read.
void ExpectReadOnlyControlPage(int fd) {
  EXPECT_EQ(::mmap(nullptr, internal::kShmControlBytes, PROT_READ | PROT_WRITE,
                   MAP_SHARED, fd, 0),
            MAP_FAILED);
  EXPECT_EQ(errno, EACCES);
  void* p =
      ::mmap(nullptr, internal::kShmControlBytes, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(p, MAP_FAILED);
  uint64_t magic;
  std::memcpy(&magic, p, sizeof(magic));
  EXPECT_EQ(magic, internal::kShmControlMagic);
  ::munmap(p, internal::kShmControlBytes);
}

TEST(ShmControlPageTest, ClientsAreHandedAViewTheyCannotMapWritable) {
  absl::StatusOr<internal::ShmControlPage> page =
      internal::ShmControlPage::Create();
  ASSERT_TRUE(page.ok()) << page.status();
  const int fd = page->read_only_fd.get();
  ASSERT_GE(fd, 0);
  EXPECT_TRUE(CheckMemoryFileFixed(fd, "the control page").ok());
  ExpectReadOnlyControlPage(fd);
}

TEST(ShmControlPageTest, TheNodesHelloCarriesOnlyTheReadOnlyView) {
  std::unique_ptr<SharedMemory> pool =
      SharedMemory::Create("hello-pool", 1 << 20);
  ASSERT_NE(pool, nullptr);
  ShmExport e;
  e.addr = pool->data();
  e.length = pool->size();
  e.fd = pool->fd();
  auto state = internal::ShmNodeState::Create({e}, /*need_rkeys=*/false, 1);
  ASSERT_TRUE(state.ok()) << state.status();
  std::string message;
  std::vector<int> fds;
  (*state)->Hello(&message, &fds);
  ASSERT_EQ(fds.size(), 2u);  // the control page, then the one export
  // What a client receives first: the control page, readable only.
  ExpectReadOnlyControlPage(fds[0]);
  // The export stays writable: clients' WRITEs land there.
  void* data = ::mmap(nullptr, pool->size(), PROT_READ | PROT_WRITE, MAP_SHARED,
                      fds[1], 0);
  ASSERT_NE(data, MAP_FAILED) << std::strerror(errno);
  static_cast<char*>(data)[7] = 9;
  EXPECT_EQ(pool->data()[7], 9);
  ::munmap(data, pool->size());
}

}  // namespace
}  // namespace meshpool::rdma::shm_testing
