// How the shm client works: Connect receives the node's hello (one
// message: region table + memory files, shm_wire.h, shm_socket.h),
// validates it all before mapping anything, and maps the files through the
// transport's cache. Post then runs each request in the caller's thread; a run
// of consecutive forwarded atomics is posted to the atomics endpoint as one
// batch and waited for before the next request executes, which keeps both
// effects and completions in posting order.
#include "rdma/shm_endpoint.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/common.h"
#include "common/posix.h"
#include "rdma/region_registry.h"
#include "rdma/shm.h"
#include "rdma/shm_socket.h"
#include "rdma/shm_wire.h"

namespace meshpool::rdma::internal {
namespace {

absl::Status SetTimeout(int fd, int option, absl::Duration timeout) {
  const timeval tv = absl::ToTimeval(timeout);
  if (::setsockopt(fd, SOL_SOCKET, option, &tv, sizeof(tv)) != 0) {
    return ErrnoToStatus(errno, "setsockopt(timeout)");
  }
  return absl::OkStatus();
}

absl::StatusOr<UniqueFd> ConnectUnix(const std::string& path,
                                     absl::Duration timeout) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unix socket path '", path, "' is too long"));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  UniqueFd fd(SocketCloexec(AF_UNIX, kShmSocketType, 0));
  if (!fd.valid()) return ErrnoToStatus(errno, "socket(AF_UNIX)");
  // A blocking unix connect waits for backlog room up to SO_SNDTIMEO.
  MESHPOOL_RETURN_IF_ERROR(SetTimeout(fd.get(), SO_SNDTIMEO, timeout));
  MESHPOOL_RETURN_IF_ERROR(SetTimeout(fd.get(), SO_RCVTIMEO, timeout));
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr),
                sizeof(addr)) != 0) {
    const int err = errno;
    const std::string what(ErrnoToStatus(err, "connect").message());
    if (err == EACCES || err == EPERM) {
      return absl::PermissionDeniedError(absl::StrCat(
          "may not connect to the shm socket ", path, " (", what,
          "): the node's ShmOptions.socket_mode must admit this user; or use "
          "the node's main address"));
    }
    return absl::UnavailableError(
        absl::StrCat("no shm node answers at ", path, " (", what,
                     "); check the node is up, or use its main address"));
  }
  return fd;
}

absl::StatusOr<ShmMessage> ReceiveHello(int fd, const std::string& path) {
  absl::StatusOr<ShmMessage> hello =
      ReceiveShmMessage(fd, kShmHelloMaxBytes, kShmHelloMaxFds);
  if (absl::IsUnavailable(hello.status())) {
    return absl::UnavailableError(absl::StrCat(
        "the shm node at ", path, " sent no region table (",
        hello.status().message(), "); retry, or use its main address"));
  }
  if (!hello.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the region table from ", path, " is larger than this build accepts (",
        hello.status().message(), "); is the node another meshpool version?"));
  }
  ShmRefusal refusal{};
  if (hello->bytes.size() == sizeof(refusal) && hello->fds.empty()) {
    std::memcpy(&refusal, hello->bytes.data(), sizeof(refusal));
    if (refusal.magic == kShmRefusedMagic) {
      return absl::PermissionDeniedError(absl::StrCat(
          "the shm node at ", path, " does not hand its pool to user ",
          refusal.uid,
          " (it admits its own user and root unless started with "
          "--shm-allow-uid); run as an admitted user, or use the node's "
          "main address"));
    }
  }
  return hello;
}

absl::Status BadHello(const std::string& path, absl::string_view why) {
  return absl::FailedPreconditionError(
      absl::StrCat("malformed region table from the shm socket ", path, " (",
                   why, "); is it a meshpool node of the same version?"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShmEndpoint>> ShmEndpoint::Connect(
    const std::string& path, ShmMappingCache& cache, absl::Duration timeout) {
  MESHPOOL_ASSIGN_OR_RETURN(UniqueFd socket, ConnectUnix(path, timeout));
  MESHPOOL_ASSIGN_OR_RETURN(ShmMessage hello, ReceiveHello(socket.get(), path));
  absl::StatusOr<ShmHelloHeader> h =
      DecodeShmHello(hello.bytes, hello.fds.size());
  if (!h.ok()) return BadHello(path, h.status().message());
  MESHPOOL_ASSIGN_OR_RETURN(std::shared_ptr<const ShmMapping> control,
                            cache.Map(hello.fds[0].get(), /*writable=*/false));
  if (control->size() < sizeof(ShmControl) ||
      std::atomic_ref<uint64_t>(
          reinterpret_cast<ShmControl*>(control->data())->magic)
              .load(std::memory_order_acquire) != kShmControlMagic) {
    return BadHello(path, "control page");
  }
  std::vector<std::shared_ptr<const ShmMapping>> exports;
  std::vector<uint64_t> export_bytes;
  for (size_t i = 1; i < hello.fds.size(); ++i) {
    MESHPOOL_ASSIGN_OR_RETURN(exports.emplace_back(),
                              cache.Map(hello.fds[i].get(), /*writable=*/true));
    export_bytes.push_back(exports.back()->size());
  }
  absl::StatusOr<std::vector<ShmWireRegion>> wire =
      DecodeShmHelloRegions(hello.bytes, *h, export_bytes);
  if (!wire.ok()) return BadHello(path, wire.status().message());
  absl::flat_hash_map<uint32_t, Region> regions;
  for (const ShmWireRegion& r : *wire) {
    regions.emplace(
        r.rkey, Region{r.addr, r.length,
                       exports[r.export_index]->data() + r.fd_offset, r.slot});
  }
  return std::unique_ptr<ShmEndpoint>(
      new ShmEndpoint(std::move(socket), std::move(control), std::move(exports),
                      std::move(regions)));
}

void ShmEndpoint::ForwardAtomicsTo(std::unique_ptr<Endpoint> atomics,
                                   absl::Duration timeout) {
  atomics_ = std::move(atomics);
  atomics_timeout_ = timeout;
}

void ShmEndpoint::Break(absl::string_view why) {
  if (!broken_.ok()) return;
  broken_ = absl::UnavailableError(absl::StrCat(
      "shm endpoint broken (", why, "); drop it and Connect again"));
  socket_ = UniqueFd();
}

void ShmEndpoint::CheckPeer() {
  auto* control = reinterpret_cast<ShmControl*>(control_->data());
  if (std::atomic_ref<uint32_t>(control->closed)
          .load(std::memory_order_acquire) != 0) {
    Break("the node closed its shm transport");
    return;
  }
  if (atomics_ != nullptr && !atomics_->healthy()) {
    Break("the endpoint atomics are forwarded to broke");
    return;
  }
  const Clock::time_point now = Clock::now();
  if (now < next_check_) return;
  next_check_ = now + std::chrono::milliseconds(kShmLivenessCheckMs);
  if (ShmPeerHungUp(socket_.get())) {
    Break("the node's process is gone: its socket hung up");
  }
}

absl::StatusOr<uint8_t*> ShmEndpoint::Resolve(const WorkRequest& wr) const {
  auto it = regions_.find(wr.rkey);
  if (it == regions_.end()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "rkey ", wr.rkey,
        " was not registered at the node when this shm "
        "endpoint connected; refresh the region descriptor and reconnect"));
  }
  const Region& r = it->second;
  auto* control = reinterpret_cast<ShmControl*>(control_->data());
  if (std::atomic_ref<uint32_t>(control->slot_rkey[r.slot])
          .load(std::memory_order_acquire) != wr.rkey) {
    return absl::PermissionDeniedError(
        absl::StrCat("the node deregistered the region of rkey ", wr.rkey,
                     "; refresh the region descriptor"));
  }
  // Overflow-safe form of addr <= remote && remote + length <= addr + length.
  if (wr.remote_addr < r.addr || wr.length > r.length ||
      wr.remote_addr - r.addr > r.length - wr.length) {
    return absl::PermissionDeniedError(absl::StrCat(
        "remote range [", wr.remote_addr, ", +", wr.length,
        ") is outside the region of rkey ", wr.rkey, "; check the address"));
  }
  return r.local + (wr.remote_addr - r.addr);
}

void ShmEndpoint::Execute(const WorkRequest& wr, uint8_t* target) {
  switch (wr.opcode) {
    case Opcode::kRead:
      // A READ after a WRITE must not load before the WRITE's stores are
      // visible to everyone: the CPU may otherwise satisfy the loads ahead
      // of its store buffer (store->load reordering), and protocols built
      // on "WRITE my entry, then READ your flag" (the pin protocol against
      // the evictor) would see stale flags. A responder executes in order.
      if (unfenced_write_) {
        std::atomic_thread_fence(std::memory_order_seq_cst);
        unfenced_write_ = false;
      }
      std::memcpy(wr.local, target, wr.length);
      break;
    case Opcode::kWrite:
      std::memcpy(target, wr.local, wr.length);
      unfenced_write_ = true;
      break;
    case Opcode::kCompareSwap:
    case Opcode::kFetchAdd: {
      // seq_cst read-modify-write: orders earlier stores and later loads.
      const uint64_t old =
          ExecuteAtomic(wr.opcode, target, wr.compare_add, wr.swap);
      std::memcpy(wr.local, &old, sizeof(old));
      unfenced_write_ = false;
      break;
    }
  }
}

void ShmEndpoint::Complete(const WorkRequest& wr, absl::Status status) {
  done_.push_back(Completion{wr.wr_id, wr.opcode, std::move(status)});
}

void ShmEndpoint::FlushAtomics() {
  if (atomics_run_.empty()) return;
  const size_t count = atomics_run_.size();
  atomics_done_.assign(count, Completion{});
  absl::Status status = atomics_->Post(atomics_run_);
  size_t got = 0;
  const absl::Time deadline = absl::Now() + atomics_timeout_;
  while (status.ok() && got < count) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      status = absl::DeadlineExceededError(
          absl::StrCat("forwarded atomics did not complete within ",
                       absl::FormatDuration(atomics_timeout_)));
      break;
    }
    absl::StatusOr<size_t> n =
        atomics_->Poll(absl::MakeSpan(atomics_done_).subspan(got), left);
    if (!n.ok()) {
      status = n.status();
      break;
    }
    got += *n;
  }
  for (size_t i = 0; i < count; ++i) {
    absl::Status result = i < got ? atomics_done_[i].status : status;
    if (!result.ok()) Break(result.message());
    Complete(atomics_run_[i], std::move(result));
  }
  atomics_run_.clear();
}

absl::Status ShmEndpoint::Post(absl::Span<const WorkRequest> batch) {
  MESHPOOL_RETURN_IF_ERROR(ValidateLocalBatch(batch, done_.size()));
  if (broken_.ok()) CheckPeer();
  if (!broken_.ok()) return broken_;
  for (const WorkRequest& wr : batch) {
    absl::StatusOr<uint8_t*> target =
        broken_.ok() ? Resolve(wr) : absl::StatusOr<uint8_t*>(broken_);
    const bool forward = atomics_ != nullptr && IsAtomic(wr.opcode);
    // Earlier forwarded atomics complete (and take effect) first.
    if (!forward || !target.ok()) FlushAtomics();
    if (!broken_.ok()) {
      Complete(wr, broken_);
      continue;
    }
    if (!target.ok()) {
      Break(target.status().message());
      Complete(wr, target.status());
      continue;
    }
    if (forward) {
      atomics_run_.push_back(wr);
      atomics_run_.back().signaled = true;  // verbs completes only these
      continue;
    }
    Execute(wr, *target);
    Complete(wr, absl::OkStatus());
  }
  FlushAtomics();
  return absl::OkStatus();
}

absl::StatusOr<size_t> ShmEndpoint::Poll(absl::Span<Completion> out,
                                         absl::Duration timeout) {
  if (done_.empty()) {
    if (!broken_.ok()) return broken_;
    return 0;
  }
  size_t n = 0;
  while (n < out.size() && !done_.empty()) {
    out[n++] = std::move(done_.front());
    done_.pop_front();
  }
  return n;
}

}  // namespace meshpool::rdma::internal
