// The shm backend's forwarded atomics (a tcp node over the same shared pool
// standing in for a verbs node's device) and clients facing a hostile or
// broken node's hello.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/posix.h"
#include "gtest/gtest.h"
#include "rdma/rdma.h"
#include "rdma/shm_socket.h"
#include "rdma/shm_wire.h"
#include "rdma/tcp.h"
#include "tests/shm_test_util.h"

namespace meshpool::rdma::shm_testing {
namespace {

// ---- forwarded atomics ---------------------------------------------------

// Counts what is posted through its endpoints, by opcode.
class CountingTransport : public Transport {
 public:
  explicit CountingTransport(std::unique_ptr<Transport> inner)
      : inner_(std::move(inner)) {}
  TransportKind kind() const override { return inner_->kind(); }
  absl::StatusOr<std::unique_ptr<MemoryRegion>> RegisterMemory(
      void* addr, size_t length) override {
    ++registrations;
    return inner_->RegisterMemory(addr, length);
  }
  absl::StatusOr<std::string> Listen(absl::string_view bind) override {
    return inner_->Listen(bind);
  }
  absl::StatusOr<std::unique_ptr<Endpoint>> Connect(
      absl::string_view peer, const Handshake& handshake) override {
    ++connects;
    connected_to = std::string(peer);
    auto ep = inner_->Connect(peer, handshake);
    if (!ep.ok()) return ep.status();
    return std::unique_ptr<Endpoint>(new Counted(*std::move(ep), this));
  }
  int count(Opcode op) const { return posted.at(static_cast<int>(op)); }

  std::atomic<int> registrations{0};
  std::atomic<int> connects{0};
  std::string connected_to;
  std::vector<std::atomic<int>> posted = std::vector<std::atomic<int>>(5);

 private:
  class Counted : public Endpoint {
   public:
    Counted(std::unique_ptr<Endpoint> inner, CountingTransport* t)
        : inner_(std::move(inner)), t_(t) {}
    absl::Status Post(absl::Span<const WorkRequest> batch) override {
      for (const WorkRequest& wr : batch) {
        ++t_->posted[static_cast<int>(wr.opcode)];
        EXPECT_TRUE(wr.signaled) << "forwarded requests must be signaled";
      }
      return inner_->Post(batch);
    }
    absl::StatusOr<size_t> Poll(absl::Span<Completion> out,
                                absl::Duration timeout) override {
      return inner_->Poll(out, timeout);
    }
    bool healthy() const override { return inner_->healthy(); }

   private:
    std::unique_ptr<Endpoint> inner_;
    CountingTransport* t_;
  };
  std::unique_ptr<Transport> inner_;
};

// A node whose main transport is tcp over the same shared pool, standing in
// for a verbs node: the shm node advertises "&atomics=<tcp address>".
struct ForwardingSetup {
  void Start() {
    memory = SharedMemory::Create("shm-test-forward", kPoolBytes);
    ASSERT_NE(memory, nullptr);
    auto tcp = CreateTcpTransport();
    ASSERT_TRUE(tcp.ok());
    tcp_node = *std::move(tcp);
    auto main_region = tcp_node->RegisterMemory(memory->data(), kPoolBytes);
    auto main_address = tcp_node->Listen("127.0.0.1:0");
    ASSERT_TRUE(main_region.ok() && main_address.ok());
    tcp_region = *std::move(main_region);
    tcp_address = *main_address;
    shm_node = MustCreate(
        Options({memory->Export(tcp_region->remote().rkey)}, tcp_address));
    ASSERT_NE(shm_node, nullptr);
    auto region = shm_node->RegisterMemory(memory->data(), kPoolBytes);
    ASSERT_TRUE(region.ok()) << region.status();
    shm_region = *std::move(region);
    ASSERT_EQ(shm_region->remote().rkey, tcp_region->remote().rkey);
    auto address = shm_node->Listen("");
    ASSERT_TRUE(address.ok());
    shm_address = *address;
    auto tcp_client = CreateTcpTransport();
    ASSERT_TRUE(tcp_client.ok());
    counting = std::make_unique<CountingTransport>(*std::move(tcp_client));
    client = MustCreate(Options({}, "", counting.get()));
    ASSERT_NE(client, nullptr);
  }

  std::unique_ptr<SharedMemory> memory;
  std::unique_ptr<Transport> tcp_node;
  std::unique_ptr<MemoryRegion> tcp_region;
  std::string tcp_address;
  std::unique_ptr<Transport> shm_node;
  std::unique_ptr<MemoryRegion> shm_region;
  std::string shm_address;
  std::unique_ptr<CountingTransport> counting;  // outlives client
  std::unique_ptr<Transport> client;
};

TEST(ShmForwardedAtomics, GoThroughTheAtomicsTransportInPostingOrder) {
  ForwardingSetup s;
  ASSERT_NO_FATAL_FAILURE(s.Start());
  std::vector<uint64_t> local(16, ~0ull);
  auto local_region =
      s.client->RegisterMemory(local.data(), local.size() * sizeof(uint64_t));
  ASSERT_TRUE(local_region.ok());
  EXPECT_EQ(s.counting->registrations.load(), 1);  // registered there too
  auto ep = MustConnect(*s.client, s.shm_address);
  ASSERT_NE(ep, nullptr);
  EXPECT_EQ(s.counting->connected_to, s.tcp_address);
  const RemoteRegion r = s.shm_region->remote();
  *s.memory->word(128) = 3;
  uint64_t payload = 0xfeedface;
  std::vector<WorkRequest> batch = {
      Request(Opcode::kWrite, 0, &payload, 8, r, 0),
      Atomic(Opcode::kFetchAdd, 1, &local[1], r, 64, 5),
      Atomic(Opcode::kFetchAdd, 2, &local[2], r, 64, 1),
      Request(Opcode::kRead, 3, &local[3], 8, r, 64),  // sees both adds
      Atomic(Opcode::kCompareSwap, 4, &local[4], r, 128, 3, 9),
      Request(Opcode::kRead, 5, &local[5], 8, r, 128),  // sees the swap
      Request(Opcode::kRead, 6, &local[6], 8, r, 0)};
  for (WorkRequest& wr : batch) {
    wr.lkey = (*local_region)->lkey();
    wr.signaled = wr.wr_id % 2 == 0;  // completions come regardless
  }
  std::vector<Completion> c;
  ASSERT_TRUE(RunBatch(*ep, batch, &c).ok());
  for (size_t i = 0; i < batch.size(); ++i) {
    EXPECT_EQ(c[i].wr_id, i);
    EXPECT_EQ(c[i].opcode, batch[i].opcode);
  }
  EXPECT_EQ(local[1], 0u);
  EXPECT_EQ(local[2], 5u);
  EXPECT_EQ(local[3], 6u);
  EXPECT_EQ(local[4], 3u);
  EXPECT_EQ(local[5], 9u);
  EXPECT_EQ(local[6], 0xfeedfaceu);
  EXPECT_EQ(s.counting->count(Opcode::kFetchAdd), 2);
  EXPECT_EQ(s.counting->count(Opcode::kCompareSwap), 1);
  EXPECT_EQ(s.counting->count(Opcode::kRead), 0);
  EXPECT_EQ(s.counting->count(Opcode::kWrite), 0);
}

TEST(ShmForwardedAtomics, AddressNamingAtomicsNeedsAnAtomicsTransport) {
  ForwardingSetup s;
  ASSERT_NO_FATAL_FAILURE(s.Start());
  auto plain = MustCreate({});
  EXPECT_EQ(plain->Connect(s.shm_address, nullptr).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(ShmForwardedAtomics, DeadAtomicsPeerBreaksTheEndpoint) {
  ForwardingSetup s;
  ASSERT_NO_FATAL_FAILURE(s.Start());
  auto ep = MustConnect(*s.client, s.shm_address);
  ASSERT_NE(ep, nullptr);
  const RemoteRegion r = s.shm_region->remote();
  uint64_t old = 0;
  ASSERT_TRUE(
      RunBatch(*ep, {Atomic(Opcode::kFetchAdd, 1, &old, r, 0, 1)}).ok());
  s.tcp_region.reset();
  s.tcp_node.reset();
  std::vector<Completion> c;
  EXPECT_EQ(RunBatch(*ep,
                     {Atomic(Opcode::kFetchAdd, 2, &old, r, 0, 1),
                      Request(Opcode::kRead, 3, &old, 8, r, 0)},
                     &c)
                .code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(c[1].status.code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(ep->healthy());
}

// ---- hostile hellos ------------------------------------------------------

// A fake node: a listening socket whose first client gets a hand-made hello.
class FakeNode {
 public:
  FakeNode()
      : path_(absl::StrCat("/tmp/meshpool-shm-fake-", ::getpid(), "-",
                           counter_++, ".sock")) {
    ::unlink(path_.c_str());
    fd_ = SocketCloexec(AF_UNIX, internal::kShmSocketType, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strcpy(addr.sun_path, path_.c_str());
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(::listen(fd_, 4), 0);
  }
  ~FakeNode() {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  std::string address() const { return "shm://" + path_; }

  // Connects a client while sending it `message` with `fds`, framed with
  // its length or with `frame_length` where given, then hanging up;
  // returns what its Connect returned.
  absl::Status ConnectWithHello(const std::string& message,
                                const std::vector<int>& fds,
                                std::optional<uint32_t> frame_length = {}) {
    auto client = MustCreate({});
    auto result = std::async(std::launch::async, [&] {
      return client->Connect(address(), nullptr).status();
    });
    const int c = ::accept(fd_, nullptr, nullptr);
    EXPECT_GE(c, 0);
    const internal::ShmFrame frame{
        frame_length.value_or(static_cast<uint32_t>(message.size()))};
    const std::string framed =
        std::string(reinterpret_cast<const char*>(&frame), sizeof(frame)) +
        message;
    EXPECT_EQ(SendRawWithFds(c, framed, fds),
              static_cast<ssize_t>(framed.size()));
    ::shutdown(c, SHUT_WR);
    absl::Status status = result.get();
    ::close(c);
    return status;
  }

 private:
  static inline int counter_ = 0;
  std::string path_;
  int fd_ = -1;
};

std::string Hello(uint32_t exports, std::vector<internal::ShmWireRegion> rs) {
  internal::ShmHelloHeader h{};
  h.magic = internal::kShmHelloMagic;
  h.version = internal::kShmWireVersion;
  h.export_count = exports;
  h.region_count = static_cast<uint32_t>(rs.size());
  std::string out(reinterpret_cast<const char*>(&h), sizeof(h));
  for (const auto& r : rs) {
    out.append(reinterpret_cast<const char*>(&r), sizeof(r));
  }
  return out;
}

TEST(ShmHostileNode, MalformedHellosAreRefusedWithoutCrashing) {
  auto control =
      SharedMemory::Create("fake-control", internal::kShmControlBytes);
  auto pool = SharedMemory::Create("fake-pool", 1 << 20);
  auto unsealed = SharedMemory::Create("fake-unsealed", 1 << 20, false);
  ASSERT_TRUE(control && pool && unsealed);
  *reinterpret_cast<uint64_t*>(control->data()) = internal::kShmControlMagic;
  const internal::ShmWireRegion ok{0x10000, 4096, 0, 7, 0, 0};
  internal::ShmWireRegion past_end = ok;
  past_end.fd_offset = (1 << 20) - 100;
  internal::ShmWireRegion bad_export = ok;
  bad_export.export_index = 1;
  std::string wrong_magic = Hello(1, {ok});
  wrong_magic[0] ^= 1;
  struct Case {
    std::string name;
    std::string hello;
    std::vector<int> fds;
  };
  const std::vector<Case> cases = {
      {"region past its file",
       Hello(1, {past_end}),
       {control->fd(), pool->fd()}},
      {"export index", Hello(1, {bad_export}), {control->fd(), pool->fd()}},
      {"resizable file", Hello(1, {ok}), {control->fd(), unsealed->fd()}},
      {"missing fd", Hello(1, {ok}), {control->fd()}},
      {"wrong magic", wrong_magic, {control->fd(), pool->fd()}},
      {"short", "hello", {}},
      {"trailing bytes", Hello(1, {ok}) + "x", {control->fd(), pool->fd()}},
  };
  for (const Case& c : cases) {
    FakeNode fake;
    EXPECT_EQ(fake.ConnectWithHello(c.hello, c.fds).code(),
              absl::StatusCode::kFailedPrecondition)
        << c.name;
  }
  {
    FakeNode fake;  // a frame longer than any hello is refused unread
    EXPECT_EQ(fake.ConnectWithHello(Hello(1, {ok}), {control->fd()},
                                    internal::kShmHelloMaxBytes + 1)
                  .code(),
              absl::StatusCode::kFailedPrecondition);
  }
  {
    FakeNode fake;  // one cut short by the node's hang-up: retry
    const std::string hello = Hello(1, {ok});
    EXPECT_EQ(fake.ConnectWithHello(hello, {control->fd(), pool->fd()},
                                    static_cast<uint32_t>(hello.size() + 8))
                  .code(),
              absl::StatusCode::kUnavailable);
  }
  FakeNode fake;  // the well-formed one is accepted
  EXPECT_TRUE(
      fake.ConnectWithHello(Hello(1, {ok}), {control->fd(), pool->fd()}).ok());
}

}  // namespace
}  // namespace meshpool::rdma::shm_testing
