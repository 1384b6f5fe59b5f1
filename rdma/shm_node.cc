// The shm node side: exported memory, regions, and the socket that hands
// clients the memory files.
#include "rdma/shm_node.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/common.h"
#include "common/memory_file.h"
#include "common/posix.h"
#include "rdma/shm.h"
#include "rdma/shm_socket.h"
#include "rdma/shm_wire.h"

namespace meshpool::rdma::internal {
namespace {

// How long accepting pauses when the process is out of descriptors.
constexpr int kAcceptBackoffMs = 100;

absl::StatusOr<sockaddr_un> UnixAddress(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unix socket path '", path, "' must be 1..",
                     sizeof(addr.sun_path) - 1, " bytes; pick a shorter one"));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  return addr;
}

// False only when nobody listens on the socket at `addr` (a dead node's):
// any other outcome (accepted, backlog full, another program's socket of
// another type) leaves the file alone.
bool MayBeInUse(const sockaddr_un& addr) {
  UniqueFd probe(
      SocketCloexec(AF_UNIX, kShmSocketType, 0, /*nonblocking=*/true));
  if (!probe.valid()) return true;
  return ::connect(probe.get(), reinterpret_cast<const sockaddr*>(&addr),
                   sizeof(addr)) == 0 ||
         errno != ECONNREFUSED;
}

}  // namespace

// ---- ShmNodeState ---------------------------------------------------------

class ShmNodeState::Region : public MemoryRegion {
 public:
  Region(std::shared_ptr<ShmNodeState> state, void* addr, size_t length,
         uint32_t rkey)
      : MemoryRegion(addr, length, /*lkey=*/0, rkey),
        state_(std::move(state)) {}
  ~Region() override { state_->Deregister(remote().rkey); }

 private:
  const std::shared_ptr<ShmNodeState> state_;
};

absl::StatusOr<std::shared_ptr<ShmNodeState>> ShmNodeState::Create(
    const std::vector<ShmExport>& exports, bool need_rkeys, uint64_t seed) {
  if (exports.size() > kMaxShmExports) {
    return absl::InvalidArgumentError(
        absl::StrCat("ShmOptions.exports holds at most ", kMaxShmExports,
                     " memory files, got ", exports.size()));
  }
  std::vector<Export> out;
  for (size_t i = 0; i < exports.size(); ++i) {
    const ShmExport& e = exports[i];
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat("ShmOptions.exports[", i, "]: ", why));
    };
    const uint64_t base = reinterpret_cast<uint64_t>(e.addr);
    if (e.addr == nullptr || e.length == 0 || base + e.length < base) {
      return bad("needs a non-null address and a non-zero length");
    }
    if (e.fd < 0) return bad("needs the memory file behind the memory");
    if (need_rkeys && e.rkey == 0) {
      return bad("needs the main transport's rkey when atomics_address is set");
    }
    absl::StatusOr<uint64_t> size = FdSize(e.fd);
    if (!size.ok()) return bad(size.status().message());
    absl::Status sealed = CheckMemoryFileFixed(e.fd, "its fd");
    if (!sealed.ok()) return bad(sealed.message());
    if (e.offset > *size || e.length > *size - e.offset) {
      return bad(absl::StrCat("[offset ", e.offset, ", +", e.length,
                              ") passes the end of the fd (", *size,
                              " bytes)"));
    }
    for (const Export& other : out) {
      if (base < other.base + other.length && other.base < base + e.length) {
        return bad("overlaps another export");
      }
      if (e.rkey != 0 && e.rkey == other.rkey) return bad("repeats an rkey");
    }
    UniqueFd fd(::fcntl(e.fd, F_DUPFD_CLOEXEC, 0));
    if (!fd.valid()) return ErrnoToStatus(errno, "dup of an export's fd");
    out.push_back(Export{base, e.length, e.offset, e.rkey, std::move(fd)});
  }
  MESHPOOL_ASSIGN_OR_RETURN(ShmControlPage control, ShmControlPage::Create());
  return std::shared_ptr<ShmNodeState>(
      new ShmNodeState(std::move(out), std::move(control), seed));
}

ShmNodeState::ShmNodeState(std::vector<Export> exports, ShmControlPage control,
                           uint64_t seed)
    : exports_(std::move(exports)),
      control_(std::move(control)),
      rng_(seed),
      slot_used_(kMaxShmRegions, false) {}

void ShmNodeState::StoreSlot(uint16_t slot, uint32_t rkey) {
  auto* control = reinterpret_cast<ShmControl*>(control_.mapping->data());
  std::atomic_ref<uint32_t>(control->slot_rkey[slot])
      .store(rkey, std::memory_order_release);
}

void ShmNodeState::MarkClosed() {
  auto* control = reinterpret_cast<ShmControl*>(control_.mapping->data());
  std::atomic_ref<uint32_t>(control->closed)
      .store(1, std::memory_order_release);
}

uint32_t ShmNodeState::RandomRkeyLocked() {
  while (true) {
    const auto rkey = static_cast<uint32_t>(rng_());
    if (rkey == 0 || regions_.contains(rkey)) continue;
    if (std::any_of(exports_.begin(), exports_.end(),
                    [&](const Export& e) { return e.rkey == rkey; })) {
      continue;
    }
    return rkey;
  }
}

absl::StatusOr<std::unique_ptr<MemoryRegion>> ShmNodeState::Register(
    void* addr, size_t length) {
  const uint64_t base = reinterpret_cast<uint64_t>(addr);
  if (addr == nullptr || length == 0 || base + length < base) {
    return absl::InvalidArgumentError(
        "RegisterMemory needs a non-null address and a non-zero length");
  }
  auto inside = [&](const Export& e) {
    return base >= e.base && length <= e.length &&
           base - e.base <= e.length - length;
  };
  const auto it = std::find_if(exports_.begin(), exports_.end(), inside);
  if (it == exports_.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "memory [", base, ", +", length,
        ") is not inside the shared memory "
        "this shm transport exports; create the node's pool with "
        "Pool::Create(..., shared=true) and name it in ShmOptions.exports"));
  }
  const Export& e = *it;
  absl::MutexLock lock(&mu_);
  if (regions_.size() >= kMaxShmRegions) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the shm transport already holds ", kMaxShmRegions,
                     " registrations; register fewer, larger regions"));
  }
  uint32_t rkey;
  if (e.rkey != 0 && base == e.base && length == e.length) {
    if (regions_.contains(e.rkey)) {
      return absl::AlreadyExistsError(
          absl::StrCat("the export's rkey ", e.rkey,
                       " is registered already; register "
                       "the export once"));
    }
    rkey = e.rkey;
  } else {
    rkey = RandomRkeyLocked();
  }
  const auto slot = static_cast<uint16_t>(
      std::find(slot_used_.begin(), slot_used_.end(), false) -
      slot_used_.begin());
  slot_used_[slot] = true;
  regions_.emplace(
      rkey, Registered{base, length, e.offset + (base - e.base),
                       static_cast<uint16_t>(it - exports_.begin()), slot});
  StoreSlot(slot, rkey);
  return std::unique_ptr<MemoryRegion>(
      new Region(shared_from_this(), addr, length, rkey));
}

void ShmNodeState::Deregister(uint32_t rkey) {
  absl::MutexLock lock(&mu_);
  auto it = regions_.find(rkey);
  if (it == regions_.end()) return;
  StoreSlot(it->second.slot, 0);
  slot_used_[it->second.slot] = false;
  regions_.erase(it);
}

void ShmNodeState::Hello(std::string* message, std::vector<int>* fds) const {
  absl::MutexLock lock(&mu_);
  ShmHelloHeader header{};
  header.magic = kShmHelloMagic;
  header.version = kShmWireVersion;
  header.export_count = static_cast<uint32_t>(exports_.size());
  header.region_count = static_cast<uint32_t>(regions_.size());
  message->assign(reinterpret_cast<const char*>(&header), sizeof(header));
  for (const auto& [rkey, r] : regions_) {
    ShmWireRegion wire{};
    wire.addr = r.addr;
    wire.length = r.length;
    wire.fd_offset = r.fd_offset;
    wire.rkey = rkey;
    wire.export_index = r.export_index;
    wire.slot = r.slot;
    message->append(reinterpret_cast<const char*>(&wire), sizeof(wire));
  }
  fds->clear();
  fds->push_back(control_.read_only_fd.get());
  for (const Export& e : exports_) fds->push_back(e.fd.get());
}

// ---- ShmListener ----------------------------------------------------------

absl::StatusOr<std::unique_ptr<ShmListener>> ShmListener::Create(
    const std::string& path, uint32_t mode, std::vector<uint32_t> allowed_uids,
    std::shared_ptr<const ShmNodeState> state) {
  MESHPOOL_ASSIGN_OR_RETURN(sockaddr_un addr, UnixAddress(path));
  UniqueFd fd(SocketCloexec(AF_UNIX, kShmSocketType, 0, /*nonblocking=*/true));
  if (!fd.valid()) return ErrnoToStatus(errno, "socket(AF_UNIX)");
  auto bind_once = [&] {
    return ::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr),
                  sizeof(addr)) == 0;
  };
  if (!bind_once()) {
    if (errno != EADDRINUSE) {
      return ErrnoToStatus(errno, absl::StrCat("bind ", path));
    }
    // A socket file left by a node that died can be replaced; a live node's
    // or any other file cannot.
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode) ||
        MayBeInUse(addr)) {
      return absl::AlreadyExistsError(absl::StrCat(
          path,
          " exists and is a live node's socket or not a socket; pick "
          "another path or stop that node"));
    }
    if (::unlink(path.c_str()) != 0 || !bind_once()) {
      return ErrnoToStatus(
          errno, absl::StrCat("bind ", path, " (replacing a stale socket)"));
    }
  }
  struct stat st {};
  if (::chmod(path.c_str(), static_cast<mode_t>(mode)) != 0 ||
      ::stat(path.c_str(), &st) != 0 || ::listen(fd.get(), SOMAXCONN) != 0) {
    const absl::Status status =
        ErrnoToStatus(errno, absl::StrCat("setting up the shm socket ", path));
    ::unlink(path.c_str());
    return status;
  }
  absl::StatusOr<WakePipe> wake = WakePipe::Create();
  if (!wake.ok()) {
    ::unlink(path.c_str());
    return wake.status();
  }
  return std::unique_ptr<ShmListener>(
      new ShmListener(path, st.st_ino, std::move(fd), *std::move(wake),
                      std::move(allowed_uids), std::move(state)));
}

ShmListener::ShmListener(std::string path, ino_t inode, UniqueFd fd,
                         WakePipe wake, std::vector<uint32_t> allowed_uids,
                         std::shared_ptr<const ShmNodeState> state)
    : path_(std::move(path)),
      inode_(inode),
      allowed_uids_(std::move(allowed_uids)),
      state_(std::move(state)),
      listen_fd_(std::move(fd)),
      wake_(std::move(wake)) {
  thread_ = std::thread([this] { Loop(); });
}

ShmListener::~ShmListener() {
  stopping_.store(true);
  wake_.Wake();
  thread_.join();
  connections_.clear();  // every client sees the hang-up
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0 && st.st_ino == inode_) {
    ::unlink(path_.c_str());
  }
}

void ShmListener::Loop() {
  std::vector<pollfd> fds;
  std::vector<short> revents;
  while (!stopping_.load()) {
    fds.assign(
        {{listen_fd_.get(), POLLIN, 0}, {wake_.read_end.get(), POLLIN, 0}});
    for (const UniqueFd& c : connections_) {
      fds.push_back({c.get(), static_cast<short>(POLLIN | kPollReadHangUp), 0});
    }
    if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) return;
    if (stopping_.load()) return;
    revents.clear();
    for (size_t i = 2; i < fds.size(); ++i) revents.push_back(fds[i].revents);
    Reap(revents);
    if (fds[0].revents & POLLIN) AcceptAll();
  }
}

void ShmListener::Reap(const std::vector<short>& revents) {
  std::vector<UniqueFd> kept;
  kept.reserve(connections_.size());
  for (size_t i = 0; i < connections_.size(); ++i) {
    bool keep =
        (revents[i] & (POLLHUP | kPollReadHangUp | POLLERR | POLLNVAL)) == 0;
    if (keep && (revents[i] & POLLIN)) {
      // Clients send nothing; drain whatever a confused one sends.
      char sink[256];
      ssize_t got =
          ::recv(connections_[i].get(), sink, sizeof(sink), MSG_DONTWAIT);
      keep = got > 0 || (got < 0 && (errno == EAGAIN || errno == EINTR));
    }
    if (keep) kept.push_back(std::move(connections_[i]));
  }
  connections_.swap(kept);
}

bool ShmListener::Admits(int fd) const {
  // The kernel's record of who connected (not something the peer says).
  uint32_t uid = 0;
  if (PeerUid(fd, &uid) != 0) return false;
  if (std::find(allowed_uids_.begin(), allowed_uids_.end(), uid) !=
      allowed_uids_.end()) {
    return true;
  }
  const ShmRefusal refusal{kShmRefusedMagic, uid, 0};
  (void)SendShmMessage(
      fd, {reinterpret_cast<const uint8_t*>(&refusal), sizeof(refusal)}, {});
  return false;
}

void ShmListener::AcceptAll() {
  std::string message;
  std::vector<int> fds;
  while (true) {
    UniqueFd c(AcceptCloexec(listen_fd_.get(), nullptr, nullptr,
                             /*nonblocking=*/true));
    if (!c.valid()) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
          errno == ENOMEM) {
        // The client stays queued; pause instead of spinning on it.
        pollfd wake = {wake_.read_end.get(), POLLIN, 0};
        ::poll(&wake, 1, kAcceptBackoffMs);
      }
      return;  // EAGAIN: all accepted; others: try on the next wake-up
    }
    if (connections_.size() >= kMaxShmConnections) continue;  // closes c
    if (!Admits(c.get())) continue;                           // closes c
    state_->Hello(&message, &fds);
    if (SendShmMessage(
            c.get(),
            {reinterpret_cast<const uint8_t*>(message.data()), message.size()},
            fds)) {
      connections_.push_back(std::move(c));
    }
  }
}

}  // namespace meshpool::rdma::internal
