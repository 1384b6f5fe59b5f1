// The verbs Transport: opened devices (each with its PD), a RegionTable of
// registrations (every registration is an MR per chunk per device), the
// node's QPs (one per accepted handshake, on one CQ per device) and
// VerbsEndpoints for Connect().
//
// Registration: a region is split at absolute multiples of the chunk size
// (a multiple of 4 KiB, so no aligned 8-byte word straddles two chunks).
// The chunk size is the device's max_mr_size, capped by
// VerbsOptions.max_mr_bytes and, for regions of kParallelMinBytes or more,
// by kParallelChunkBytes so their chunks register in parallel threads
// (ibv_reg_mr pins and maps every page: ~100 ms per GiB with 4 KiB pages).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/common.h"
#include "rdma/rdma.h"
#include "rdma/verbs.h"
#include "rdma/verbs_endpoint.h"
#include "rdma/verbs_handshake.h"
#include "rdma/verbs_resources.h"

namespace meshpool::rdma {
namespace {

using internal::ChunkKeys;
using internal::CompletionQueue;
using internal::HandshakeRegion;
using internal::MemoryRegistration;
using internal::QueuePair;
using internal::RegionKeys;
using internal::RegionTable;
using internal::VerbsDevice;

constexpr absl::string_view kScheme = "verbs://";
constexpr uint64_t kPageBytes = 4096;
constexpr uint64_t kParallelMinBytes = uint64_t{1} << 30;
constexpr uint64_t kParallelChunkBytes = uint64_t{256} << 20;
static_assert(kParallelChunkBytes % kPageBytes == 0);
static_assert(kParallelMinBytes / kParallelChunkBytes >= 4);
constexpr size_t kMaxRegisterThreads = 8;
constexpr int kNodeCqDepth = 16;  // node QPs post nothing; verbs wants a CQ

using DevicePtr = std::shared_ptr<const VerbsDevice>;

uint8_t ClampRdAtomic(int value) {
  return static_cast<uint8_t>(std::clamp(value, 1, 255));
}

// [addr, addr + length) pieces cut at absolute multiples of `chunk`.
std::vector<std::pair<uint64_t, uint64_t>> SplitChunks(uint64_t base,
                                                       uint64_t length,
                                                       uint64_t chunk) {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  const uint64_t end = base + length;
  for (uint64_t a = base; a < end;) {
    const uint64_t b = std::min(end, (a / chunk + 1) * chunk);
    out.emplace_back(a, b - a);
    a = b;
  }
  return out;
}

// Registers each range on `pd`, in parallel threads when there are several.
absl::StatusOr<std::vector<MemoryRegistration>> RegisterChunks(
    ibv_pd* pd, int access,
    const std::vector<std::pair<uint64_t, uint64_t>>& ranges) {
  std::vector<absl::StatusOr<MemoryRegistration>> results;
  results.reserve(ranges.size());
  for (size_t i = 0; i < ranges.size(); ++i) {
    results.emplace_back(absl::UnknownError("not registered"));
  }
  const size_t cores = std::max(1u, std::thread::hardware_concurrency());
  const size_t threads = std::min({ranges.size(), kMaxRegisterThreads, cores});
  auto work = [&](size_t first) {
    for (size_t i = first; i < ranges.size(); i += threads) {
      results[i] = MemoryRegistration::Create(
          pd, reinterpret_cast<void*>(ranges[i].first), ranges[i].second,
          access);
    }
  };
  std::vector<std::thread> helpers;
  for (size_t t = 1; t < threads; ++t) helpers.emplace_back(work, t);
  work(0);
  for (std::thread& t : helpers) t.join();
  std::vector<MemoryRegistration> out;
  out.reserve(ranges.size());
  for (auto& r : results) {
    if (!r.ok()) return r.status();
    out.push_back(*std::move(r));
  }
  return out;
}

// The MemoryRegion of the verbs backend: lkey and rkey are its handle in
// the transport's RegionTable. Keeps the devices alive so it may outlive
// its transport.
class VerbsRegion : public MemoryRegion {
 public:
  VerbsRegion(void* addr, size_t length, uint32_t handle,
              std::shared_ptr<RegionTable> table,
              std::vector<DevicePtr> devices,
              std::vector<std::vector<MemoryRegistration>> mrs)
      : MemoryRegion(addr, length, handle, handle),
        table_(std::move(table)),
        devices_(std::move(devices)),
        mrs_(std::move(mrs)) {}
  ~VerbsRegion() override { table_->Remove(lkey()); }

 private:
  std::shared_ptr<RegionTable> table_;
  std::vector<DevicePtr> devices_;  // declared before mrs_: outlives them
  std::vector<std::vector<MemoryRegistration>> mrs_;
};

class VerbsTransport : public Transport {
 public:
  VerbsTransport(VerbsOptions options, std::vector<DevicePtr> devices,
                 std::map<std::string, size_t, std::less<>> peer_device,
                 uint32_t seed)
      : options_(std::move(options)),
        devices_(std::move(devices)),
        peer_device_(std::move(peer_device)),
        regions_(std::make_shared<RegionTable>(seed)) {}

  TransportKind kind() const override { return TransportKind::kVerbs; }

  absl::StatusOr<std::unique_ptr<MemoryRegion>> RegisterMemory(
      void* addr, size_t length) override;

  // `bind` is ignored: verbs needs no socket; peers reach this node through
  // its gRPC Handshake RPC. Returns "verbs://" + self_name.
  absl::StatusOr<std::string> Listen(absl::string_view bind) override;

  absl::StatusOr<std::string> AcceptHandshake(
      absl::string_view request, const DataAccess& access) override;

  absl::StatusOr<std::unique_ptr<Endpoint>> Connect(
      absl::string_view peer_address, const Handshake& handshake) override;

 private:
  size_t DeviceFor(absl::string_view peer) const {
    auto it = peer_device_.find(peer);
    return it == peer_device_.end() ? 0 : it->second;
  }
  uint64_t ChunkBytes(const VerbsDevice& device, uint64_t length) const {
    uint64_t cap = device.attr.max_mr_size;
    if (options_.max_mr_bytes != 0) cap = std::min(cap, options_.max_mr_bytes);
    if (length >= kParallelMinBytes) cap = std::min(cap, kParallelChunkBytes);
    return std::max(kPageBytes, cap / kPageBytes * kPageBytes);
  }

  const VerbsOptions options_;
  const std::vector<DevicePtr> devices_;
  const std::map<std::string, size_t, std::less<>> peer_device_;
  const std::shared_ptr<RegionTable> regions_;
  absl::Mutex mu_;
  bool listening_ ABSL_GUARDED_BY(mu_) = false;
  // One CQ per device for all node QPs; declared first: outlives the QPs.
  std::vector<CompletionQueue> node_cqs_ ABSL_GUARDED_BY(mu_);
  std::deque<QueuePair> node_qps_ ABSL_GUARDED_BY(mu_);  // oldest first
};

absl::StatusOr<std::unique_ptr<MemoryRegion>> VerbsTransport::RegisterMemory(
    void* addr, size_t length) {
  const uint64_t base = reinterpret_cast<uint64_t>(addr);
  if (addr == nullptr || length == 0) {
    return absl::InvalidArgumentError(
        "RegisterMemory needs a non-null address and a non-zero length");
  }
  if (base + length < base) {
    return absl::InvalidArgumentError(
        "RegisterMemory range wraps around the address space; pass a valid "
        "buffer");
  }
  auto keys = std::make_shared<RegionKeys>();
  keys->addr = base;
  keys->length = length;
  keys->devices.resize(devices_.size());
  std::vector<std::vector<MemoryRegistration>> mrs(devices_.size());
  for (size_t d = 0; d < devices_.size(); ++d) {
    const VerbsDevice& device = *devices_[d];
    const uint64_t chunk = ChunkBytes(device, length);
    if (length / chunk + 2 > internal::kMaxHandshakeChunks) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "registering ", length, " bytes on ", device.name, " takes ",
          length / chunk, " MRs of ", chunk, " bytes, more than ",
          internal::kMaxHandshakeChunks, "; raise VerbsOptions.max_mr_bytes"));
    }
    const auto ranges = SplitChunks(base, length, chunk);
    MESHPOOL_ASSIGN_OR_RETURN(
        mrs[d], RegisterChunks(device.pd.get(), device.mr_access, ranges));
    for (const MemoryRegistration& mr : mrs[d]) {
      keys->devices[d].push_back(
          ChunkKeys{reinterpret_cast<uint64_t>(mr.get()->addr),
                    mr.get()->length, mr.lkey(), mr.rkey()});
    }
  }
  MESHPOOL_ASSIGN_OR_RETURN(uint32_t handle, regions_->Add(keys));
  return std::unique_ptr<MemoryRegion>(new VerbsRegion(
      addr, length, handle, regions_, devices_, std::move(mrs)));
}

absl::StatusOr<std::string> VerbsTransport::Listen(absl::string_view bind) {
  absl::MutexLock lock(&mu_);
  const std::string address = absl::StrCat(kScheme, options_.self_name);
  if (listening_) {
    return absl::FailedPreconditionError(
        absl::StrCat("verbs transport already listens as ", address,
                     "; create another transport to serve a second address"));
  }
  std::vector<CompletionQueue> cqs;
  for (const DevicePtr& device : devices_) {
    MESHPOOL_ASSIGN_OR_RETURN(
        cqs.emplace_back(),
        CompletionQueue::Create(device->context.get(), kNodeCqDepth, nullptr));
  }
  node_cqs_ = std::move(cqs);
  listening_ = true;
  return address;
}

// Verbs cannot narrow `access`: a QP reaches whatever the rkey covers.
absl::StatusOr<std::string> VerbsTransport::AcceptHandshake(
    absl::string_view bytes, const DataAccess& /*access*/) {
  MESHPOOL_ASSIGN_OR_RETURN(internal::HandshakeRequest request,
                            internal::DecodeHandshakeRequest(bytes));
  const size_t d = DeviceFor(request.client_name);
  const VerbsDevice& dev = *devices_[d];
  internal::HandshakeReply reply;
  reply.regions = regions_->Snapshot(d);
  size_t chunks = 0;
  for (const HandshakeRegion& r : reply.regions) chunks += r.chunks.size();
  if (reply.regions.size() > internal::kMaxHandshakeRegions ||
      chunks > internal::kMaxHandshakeChunks) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "this node serves ", reply.regions.size(), " regions in ", chunks,
        " MRs, more than a handshake carries (", internal::kMaxHandshakeRegions,
        " regions, ", internal::kMaxHandshakeChunks,
        " MRs); register fewer, larger regions"));
  }

  absl::MutexLock lock(&mu_);
  if (!listening_) {
    return absl::FailedPreconditionError(
        "verbs transport does not listen yet; call Listen() before serving "
        "handshakes");
  }
  MESHPOOL_ASSIGN_OR_RETURN(
      QueuePair qp,
      QueuePair::Create(dev.pd.get(), node_cqs_[d].get(), {1, 0}));
  absl::BitGen gen;
  internal::RcConnectParams params;
  params.port = dev.port;
  params.gid_index = dev.gid_index;
  params.use_grh = dev.ethernet() || request.qp.lid == 0;
  params.access = dev.mr_access & ~IBV_ACCESS_LOCAL_WRITE;
  const uint32_t mtu = internal::MtuBytes(dev.port_attr.active_mtu);
  params.path_mtu = internal::MtuFromBytes(std::min(mtu, request.qp.mtu_bytes));
  params.local_psn =
      absl::Uniform<uint32_t>(gen, 0, internal::kMaxQpNumber + 1);
  std::copy(request.qp.gid.begin(), request.qp.gid.end(),
            std::begin(params.remote.gid.raw));
  params.remote.lid = request.qp.lid;
  params.remote.qpn = request.qp.qpn;
  params.remote.psn = request.qp.psn;
  params.max_rd_atomic = 1;
  params.max_dest_rd_atomic = ClampRdAtomic(dev.attr.max_qp_rd_atom);
  MESHPOOL_RETURN_IF_ERROR(qp.ConnectRc(params));

  std::copy(std::begin(dev.gid.raw), std::end(dev.gid.raw),
            reply.qp.gid.begin());
  reply.qp.lid = dev.port_attr.lid;
  reply.qp.qpn = qp.qpn();
  reply.qp.psn = params.local_psn;
  reply.qp.mtu_bytes = mtu;
  reply.qp.rd_atomic = params.max_dest_rd_atomic;
  node_qps_.push_back(std::move(qp));
  while (node_qps_.size() > options_.max_peer_qps) node_qps_.pop_front();
  return internal::EncodeHandshakeReply(reply);
}

absl::StatusOr<std::unique_ptr<Endpoint>> VerbsTransport::Connect(
    absl::string_view peer_address, const Handshake& handshake) {
  if (!absl::StartsWith(peer_address, kScheme)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "verbs address '", peer_address, "' must look like verbs://NAME"));
  }
  const absl::string_view peer = peer_address.substr(kScheme.size());
  MESHPOOL_RETURN_IF_ERROR(internal::ValidatePeerName(peer, "verbs peer name"));
  if (!handshake) {
    return absl::InvalidArgumentError(
        "verbs Connect needs a Handshake callback that carries the request "
        "to the node (its Handshake RPC)");
  }
  const size_t d = DeviceFor(peer);
  internal::EndpointSetup setup;
  setup.device = devices_[d];
  setup.device_index = d;
  setup.regions = regions_;
  setup.self_name = options_.self_name;
  setup.peer = std::string(peer);
  setup.busy_poll = options_.busy_poll;
  return internal::VerbsEndpoint::Connect(std::move(setup), handshake);
}

absl::Status ValidateOptions(const VerbsOptions& options) {
  if (options.port == 0) {
    return absl::InvalidArgumentError("VerbsOptions.port starts at 1");
  }
  if (options.gid_index < -1) {
    return absl::InvalidArgumentError(
        "VerbsOptions.gid_index must be -1 (automatic) or a GID table index");
  }
  if (options.max_peer_qps == 0) {
    return absl::InvalidArgumentError(
        "VerbsOptions.max_peer_qps must be positive");
  }
  if (options.busy_poll < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "VerbsOptions.busy_poll must not be negative");
  }
  if (options.max_mr_bytes != 0 && options.max_mr_bytes < kPageBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "VerbsOptions.max_mr_bytes must be 0 or at least ", kPageBytes));
  }
  return internal::ValidatePeerName(options.self_name,
                                    "VerbsOptions.self_name");
}

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> CreateVerbsTransport(
    VerbsOptions options) {
  if (options.self_name.empty()) {
    char host[256] = {};
    if (::gethostname(host, sizeof(host) - 1) != 0) {
      return ::meshpool::ErrnoToStatus(errno, "gethostname");
    }
    options.self_name = host;
  }
  MESHPOOL_RETURN_IF_ERROR(ValidateOptions(options));
  MESHPOOL_ASSIGN_OR_RETURN(internal::DeviceSet set,
                            internal::DeviceSet::Open(options));
  absl::BitGen gen;
  const uint32_t seed = absl::Uniform<uint32_t>(gen);
  return std::unique_ptr<Transport>(
      new VerbsTransport(std::move(options), std::move(set.devices),
                         std::move(set.peer_device), seed));
}

}  // namespace meshpool::rdma
