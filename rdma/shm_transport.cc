// The shm Transport (rdma.h): a node side (ShmNodeState + ShmListener) when
// created with exports, and a client side (ShmEndpoints sharing one
// ShmMappingCache) always.
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/common.h"
#include "rdma/rdma.h"
#include "rdma/shm.h"
#include "rdma/shm_endpoint.h"
#include "rdma/shm_mapping.h"
#include "rdma/shm_node.h"

namespace meshpool::rdma {
namespace {

// Who a node's socket hands the pool to (ShmOptions.allowed_uids).
std::vector<uint32_t> AllowedUids(const ShmOptions& options) {
  if (!options.allowed_uids.empty()) return options.allowed_uids;
  std::vector<uint32_t> uids = {static_cast<uint32_t>(::geteuid())};
  if (uids[0] != 0) uids.push_back(0);
  return uids;
}

// A client-side registration: any local memory will do for memcpy; with an
// atomics transport, the memory is registered there too and this region
// reports that registration's keys, so forwarded atomics can name it.
class ShmLocalRegion : public MemoryRegion {
 public:
  ShmLocalRegion(void* addr, size_t length,
                 std::unique_ptr<MemoryRegion> atomics_region)
      : MemoryRegion(addr, length, atomics_region ? atomics_region->lkey() : 0,
                     atomics_region ? atomics_region->remote().rkey : 0),
        atomics_region_(std::move(atomics_region)) {}

 private:
  std::unique_ptr<MemoryRegion> atomics_region_;
};

// Where Listen("") puts its socket: $XDG_RUNTIME_DIR, else /tmp.
std::string DefaultSocketPath() {
  static std::atomic<uint64_t> counter{0};
  const char* dir = std::getenv("XDG_RUNTIME_DIR");
  const std::string base = dir != nullptr && dir[0] == '/' ? dir : "/tmp";
  return absl::StrCat(base, "/meshpool-", ::getpid(), "-", counter.fetch_add(1),
                      ".sock");
}

class ShmTransport : public Transport {
 public:
  ShmTransport(ShmOptions options, std::shared_ptr<internal::ShmNodeState> node)
      : options_(std::move(options)), node_(std::move(node)) {}

  ~ShmTransport() override {
    if (node_ != nullptr) node_->MarkClosed();  // clients see it at once
    absl::MutexLock lock(&mu_);
    listener_.reset();  // hangs every client up
  }

  TransportKind kind() const override { return TransportKind::kShm; }

  absl::StatusOr<std::unique_ptr<MemoryRegion>> RegisterMemory(
      void* addr, size_t length) override {
    if (node_ != nullptr) return node_->Register(addr, length);
    if (addr == nullptr || length == 0) {
      return absl::InvalidArgumentError(
          "RegisterMemory needs a non-null address and a non-zero length");
    }
    std::unique_ptr<MemoryRegion> atomics_region;
    if (options_.atomics_transport != nullptr) {
      MESHPOOL_ASSIGN_OR_RETURN(
          atomics_region,
          options_.atomics_transport->RegisterMemory(addr, length));
    }
    return std::unique_ptr<MemoryRegion>(
        new ShmLocalRegion(addr, length, std::move(atomics_region)));
  }

  absl::StatusOr<std::string> Listen(absl::string_view bind) override {
    if (node_ == nullptr) {
      return absl::FailedPreconditionError(
          "this shm transport exports no memory; create it with "
          "ShmOptions.exports to serve a node's pool");
    }
    absl::MutexLock lock(&mu_);
    if (listener_ != nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("shm transport already listens on ", listener_->path(),
                       "; create another transport to serve a second address"));
    }
    const std::string path =
        bind.empty() ? DefaultSocketPath() : std::string(bind);
    if (path[0] != '/') {
      return absl::InvalidArgumentError(
          absl::StrCat("shm bind '", path,
                       "' must be an absolute socket path (or empty "
                       "for one under $XDG_RUNTIME_DIR or /tmp)"));
    }
    MESHPOOL_ASSIGN_OR_RETURN(
        listener_, internal::ShmListener::Create(path, options_.socket_mode,
                                                 AllowedUids(options_), node_));
    return FormatShmAddress(
        ShmAddress{path, HostIdentity(), options_.atomics_address});
  }

  absl::StatusOr<std::unique_ptr<Endpoint>> Connect(
      absl::string_view peer_address, const Handshake& handshake) override {
    MESHPOOL_ASSIGN_OR_RETURN(ShmAddress peer, ParseShmAddress(peer_address));
    if (!peer.host.empty() && peer.host != HostIdentity()) {
      return absl::FailedPreconditionError(
          absl::StrCat("shm address ", peer_address,
                       " belongs to another host or mount "
                       "namespace (this is ",
                       HostIdentity(),
                       "); connect to the node's "
                       "main address"));
    }
    if (!peer.atomics.empty() && options_.atomics_transport == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "node ", peer_address, " needs atomics sent to ", peer.atomics,
          " (its device's atomics are not atomic with the CPU's); create the "
          "shm transport with ShmOptions.atomics_transport, or connect to "
          "the node's main address"));
    }
    MESHPOOL_ASSIGN_OR_RETURN(
        std::unique_ptr<internal::ShmEndpoint> endpoint,
        internal::ShmEndpoint::Connect(peer.path, *cache_,
                                       options_.connect_timeout));
    if (!peer.atomics.empty()) {
      MESHPOOL_ASSIGN_OR_RETURN(
          std::unique_ptr<Endpoint> atomics,
          options_.atomics_transport->Connect(peer.atomics, handshake));
      endpoint->ForwardAtomicsTo(std::move(atomics), options_.atomics_timeout);
    }
    return std::unique_ptr<Endpoint>(std::move(endpoint));
  }

 private:
  const ShmOptions options_;
  const std::shared_ptr<internal::ShmNodeState> node_;  // null: client only
  const std::shared_ptr<internal::ShmMappingCache> cache_ =
      std::make_shared<internal::ShmMappingCache>();
  absl::Mutex mu_;
  // Last: destroyed first, so no client connection outlives the transport.
  std::unique_ptr<internal::ShmListener> listener_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> CreateShmTransport(
    ShmOptions options) {
  if (options.connect_timeout <= absl::ZeroDuration() ||
      options.atomics_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "ShmOptions.connect_timeout and atomics_timeout must be positive");
  }
  if (options.allowed_uids.size() > kMaxShmAllowedUids) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ShmOptions.allowed_uids names ", options.allowed_uids.size(),
        " users; name at most ", kMaxShmAllowedUids,
        " (or share a group and a socket_mode instead)"));
  }
  if (options.socket_mode > 0777) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ShmOptions.socket_mode ", options.socket_mode,
        " holds more than permission bits; use e.g. 0600 or 0660"));
  }
  if (!options.atomics_address.empty() &&
      (options.exports.empty() ||
       absl::StartsWith(options.atomics_address, "shm://"))) {
    return absl::InvalidArgumentError(
        "ShmOptions.atomics_address is the node's main (verbs) address and "
        "needs exports");
  }
  std::shared_ptr<internal::ShmNodeState> node;
  if (!options.exports.empty()) {
    absl::BitGen gen;
    MESHPOOL_ASSIGN_OR_RETURN(
        node, internal::ShmNodeState::Create(options.exports,
                                             !options.atomics_address.empty(),
                                             absl::Uniform<uint64_t>(gen)));
  }
  return std::unique_ptr<Transport>(
      new ShmTransport(std::move(options), std::move(node)));
}

}  // namespace meshpool::rdma
