// Helpers of the shm backend's tests (rdma_shm_test, rdma_shm_forward_test):
// a memory file standing in for a shared store::Pool, a node serving it,
// and work request shorthands.
#ifndef MESHPOOL_TESTS_SHM_TEST_UTIL_H_
#define MESHPOOL_TESTS_SHM_TEST_UTIL_H_

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/memory_file.h"
#include "gtest/gtest.h"
#include "rdma/rdma.h"
#include "rdma/shm.h"

namespace meshpool::rdma::shm_testing {

inline constexpr size_t kPoolBytes = 4 << 20;
inline constexpr absl::Duration kTimeout = absl::Seconds(30);

// A memory file mapped MAP_SHARED: what a shared store::Pool is. With
// `fixed` false, a plain unlinked file instead, whose size can change (what
// the node must refuse).
class SharedMemory {
 public:
  static std::unique_ptr<SharedMemory> Create(const std::string& name,
                                              size_t bytes, bool fixed = true) {
    auto m = std::unique_ptr<SharedMemory>(new SharedMemory);
    if (fixed) {
      absl::StatusOr<MemoryFile> file =
          CreateMemoryFile(name, bytes, MemoryFilePages::kNormal);
      if (!file.ok()) return nullptr;
      m->fd_ = file->fd;
    } else {
      std::string path = "/tmp/meshpool-" + name + "-XXXXXX";
      m->fd_ = ::mkstemp(path.data());
      if (m->fd_ < 0) return nullptr;
      ::unlink(path.c_str());
      if (::ftruncate(m->fd_, bytes) != 0) return nullptr;
    }
    void* p =
        ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd_, 0);
    if (p == MAP_FAILED) return nullptr;
    m->data_ = static_cast<uint8_t*>(p);
    m->size_ = bytes;
    return m;
  }
  ~SharedMemory() {
    if (data_ != nullptr) ::munmap(data_, size_);
    if (fd_ >= 0) ::close(fd_);
  }
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  int fd() const { return fd_; }
  uint64_t* word(size_t offset) const {
    return reinterpret_cast<uint64_t*>(data_ + offset);
  }
  ShmExport Export(uint32_t rkey = 0) const {
    return ShmExport{data_, size_, fd_, 0, rkey};
  }

 private:
  SharedMemory() = default;
  int fd_ = -1;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

inline ShmOptions Options(std::vector<ShmExport> exports,
                          std::string atomics_address = "",
                          Transport* atomics_transport = nullptr) {
  ShmOptions options;
  options.exports = std::move(exports);
  options.atomics_address = std::move(atomics_address);
  options.atomics_transport = atomics_transport;
  return options;
}

inline std::unique_ptr<Transport> MustCreate(ShmOptions options) {
  auto t = CreateShmTransport(std::move(options));
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : nullptr;
}

inline WorkRequest Request(Opcode op, uint64_t id, void* local, uint32_t length,
                           const RemoteRegion& region, uint64_t offset) {
  WorkRequest wr;
  wr.wr_id = id;
  wr.opcode = op;
  wr.local = local;
  wr.length = length;
  wr.remote_addr = region.addr + offset;
  wr.rkey = region.rkey;
  return wr;
}
inline WorkRequest Atomic(Opcode op, uint64_t id, uint64_t* old,
                          const RemoteRegion& region, uint64_t offset,
                          uint64_t compare_add, uint64_t swap = 0) {
  WorkRequest wr = Request(op, id, old, kAtomicBytes, region, offset);
  wr.compare_add = compare_add;
  wr.swap = swap;
  return wr;
}

inline absl::Status RunBatch(Endpoint& ep, std::vector<WorkRequest> batch,
                             std::vector<Completion>* out = nullptr) {
  std::vector<Completion> own(batch.size());
  std::vector<Completion>& c = out != nullptr ? *out : own;
  c.assign(batch.size(), Completion{});
  return PostAndWait(ep, batch, absl::MakeSpan(c), kTimeout);
}

// A node: shared memory, an shm transport exporting it, one region over all
// of it, listening on a fresh socket.
struct Node {
  static std::unique_ptr<Node> Start(ShmOptions options = {},
                                     uint32_t rkey = 0) {
    auto n = std::make_unique<Node>();
    n->memory = SharedMemory::Create("shm-test-pool", kPoolBytes);
    if (n->memory == nullptr) return nullptr;
    options.exports = {n->memory->Export(rkey)};
    n->transport = MustCreate(std::move(options));
    if (n->transport == nullptr) return nullptr;
    auto region =
        n->transport->RegisterMemory(n->memory->data(), n->memory->size());
    EXPECT_TRUE(region.ok()) << region.status();
    if (!region.ok()) return nullptr;
    n->region = *std::move(region);
    auto address = n->transport->Listen("");
    EXPECT_TRUE(address.ok()) << address.status();
    if (!address.ok()) return nullptr;
    n->address = *address;
    return n;
  }
  RemoteRegion remote() const { return region->remote(); }

  std::unique_ptr<SharedMemory> memory;  // outlives the transport
  std::unique_ptr<Transport> transport;
  std::unique_ptr<MemoryRegion> region;
  std::string address;
};

inline std::unique_ptr<Endpoint> MustConnect(Transport& client,
                                             const std::string& address) {
  auto ep = client.Connect(address, nullptr);
  EXPECT_TRUE(ep.ok()) << ep.status();
  return ep.ok() ? *std::move(ep) : nullptr;
}

// Sends `bytes` as they are (no frame) with `fds` attached, as a node of
// some other make might; what sendmsg returned.
inline ssize_t SendRawWithFds(int fd, const std::string& bytes,
                              const std::vector<int>& fds) {
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(cmsg), fds.data(), sizeof(int) * fds.size());
  }
  return ::sendmsg(fd, &msg, MSG_NOSIGNAL);
}

}  // namespace meshpool::rdma::shm_testing

#endif  // MESHPOOL_TESTS_SHM_TEST_UTIL_H_
