// meshpool/rdma internal: move-only RAII owners of libibverbs objects, the
// one place a verbs error becomes an absl::Status, and the queries the verbs
// backend and `meshpool doctor` need (port, GID table, MTU).
//
// Every owner is made by `static absl::StatusOr<T> Create(...)` and destroys
// its object exactly once. Owners that depend on each other are declared in
// dependency order wherever they are members (context, then PD, channel, CQ,
// QP, MR), so C++'s reverse destruction tears them down QPs-first.
//
// Thread-safety: owners are not synchronized; libibverbs itself is
// thread-safe, so distinct owners may be used from distinct threads, and a
// const VerbsDevice is shared freely.
#ifndef MESHPOOL_RDMA_VERBS_RESOURCES_H_
#define MESHPOOL_RDMA_VERBS_RESOURCES_H_

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "rdma/verbs.h"

namespace meshpool::rdma::internal {

// The one conversion of a verbs failure into a Status (through
// ErrnoToStatus). libibverbs has two conventions; `ret` covers both:
//   ret == 0  success;
//   ret > 0   the errno value itself (ibv_modify_qp, ibv_post_send, ...);
//   ret < 0   -1: look at errno (calls returning NULL pass -1 too);
//             other negatives are -errno (ibv_query_gid_table).
absl::Status VerbsStatus(long ret, absl::string_view what);

// A unique owner of one T*, released with Release(T*). Move-only.
template <typename T, void (*Release)(T*)>
class VerbsOwner {
 public:
  VerbsOwner() = default;
  VerbsOwner(VerbsOwner&& other) noexcept
      : ptr_(std::exchange(other.ptr_, nullptr)) {}
  VerbsOwner& operator=(VerbsOwner&& other) noexcept {
    if (this != &other) Reset(std::exchange(other.ptr_, nullptr));
    return *this;
  }
  VerbsOwner(const VerbsOwner&) = delete;
  VerbsOwner& operator=(const VerbsOwner&) = delete;
  ~VerbsOwner() { Reset(nullptr); }

  T* get() const { return ptr_; }
  explicit operator bool() const { return ptr_ != nullptr; }
  // Destroys the owned object now (no-op when empty).
  void Reset() { Reset(nullptr); }

 protected:
  explicit VerbsOwner(T* ptr) : ptr_(ptr) {}

 private:
  void Reset(T* ptr) {
    if (ptr_ != nullptr) Release(ptr_);
    ptr_ = ptr;
  }
  T* ptr_ = nullptr;
};

namespace verbs_release {
void Context(ibv_context* p);
void Pd(ibv_pd* p);
void Channel(ibv_comp_channel* p);
void Cq(ibv_cq* p);
void Qp(ibv_qp* p);
void Mr(ibv_mr* p);
}  // namespace verbs_release

// ibv_get_device_list. An empty list (not an error) when the host has no
// RDMA device or no verbs kernel support; Unavailable when libibverbs fails.
class DeviceList {
 public:
  static absl::StatusOr<DeviceList> Create();
  DeviceList(DeviceList&& other) noexcept
      : list_(std::exchange(other.list_, nullptr)),
        count_(std::exchange(other.count_, 0)) {}
  DeviceList& operator=(DeviceList&&) = delete;
  DeviceList(const DeviceList&) = delete;
  ~DeviceList();

  absl::Span<ibv_device* const> devices() const {
    return absl::MakeConstSpan(list_, static_cast<size_t>(count_));
  }
  // nullptr when no device has that name.
  ibv_device* Find(absl::string_view name) const;
  // "rxe0, mlx5_0" (or "none") for error messages.
  std::string Names() const;

 private:
  DeviceList(ibv_device** list, int count) : list_(list), count_(count) {}
  ibv_device** list_;
  int count_;
};

// An opened device (ibv_open_device).
class Context : public VerbsOwner<ibv_context, verbs_release::Context> {
 public:
  Context() = default;
  static absl::StatusOr<Context> Create(ibv_device* device);

 private:
  using VerbsOwner::VerbsOwner;
};

class ProtectionDomain : public VerbsOwner<ibv_pd, verbs_release::Pd> {
 public:
  ProtectionDomain() = default;
  static absl::StatusOr<ProtectionDomain> Create(ibv_context* context);

 private:
  using VerbsOwner::VerbsOwner;
};

// A completion channel whose fd is non-blocking (poll(2) it, then
// ibv_get_cq_event never blocks).
class CompletionChannel
    : public VerbsOwner<ibv_comp_channel, verbs_release::Channel> {
 public:
  CompletionChannel() = default;
  static absl::StatusOr<CompletionChannel> Create(ibv_context* context);
  int fd() const { return get()->fd; }

 private:
  using VerbsOwner::VerbsOwner;
};

// REQUIRES (destruction): every event of its channel was acknowledged.
class CompletionQueue : public VerbsOwner<ibv_cq, verbs_release::Cq> {
 public:
  CompletionQueue() = default;
  // `channel` may be null (a CQ nobody waits on).
  static absl::StatusOr<CompletionQueue> Create(ibv_context* context, int depth,
                                                ibv_comp_channel* channel);

 private:
  using VerbsOwner::VerbsOwner;
};

// What a peer's QP looks like, as exchanged in the handshake.
struct RcPeer {
  ibv_gid gid{};
  uint16_t lid = 0;
  uint32_t qpn = 0;
  uint32_t psn = 0;
};

// Everything the INIT -> RTR -> RTS transitions of one RC QP need.
struct RcConnectParams {
  uint8_t port = 1;
  int gid_index = 0;
  bool use_grh = true;  // RoCE always; InfiniBand routes by LID
  int access = 0;       // IBV_ACCESS_REMOTE_* this QP serves
  ibv_mtu path_mtu = IBV_MTU_1024;
  uint32_t local_psn = 0;
  RcPeer remote;
  uint8_t max_rd_atomic = 1;       // READs/atomics this QP has in flight
  uint8_t max_dest_rd_atomic = 1;  // ... it serves for its peer
  // Retransmission timeout 4.096 us * 2^14 = 67 ms and 6 retries: a dead
  // peer fails requests in about half a second. (Not 7: Soft-RoCE treats a
  // retry count of 7 as "retry forever".)
  uint8_t timeout = 14;
  uint8_t retry_cnt = 6;
};

class QueuePair : public VerbsOwner<ibv_qp, verbs_release::Qp> {
 public:
  struct Caps {
    uint32_t max_send_wr = 1;
    uint32_t max_inline_data = 0;
  };
  QueuePair() = default;
  // An RC QP on `pd` whose send and receive completions go to `cq`, with
  // one-SGE work requests and only signaled send completions. The
  // granted capabilities (the device may round up) are in caps().
  static absl::StatusOr<QueuePair> Create(ibv_pd* pd, ibv_cq* cq,
                                          const Caps& caps);
  const Caps& caps() const { return granted_; }
  uint32_t qpn() const { return get()->qp_num; }

  // RESET -> INIT -> RTR -> RTS. Errors: ErrnoToStatus of the failing
  // ibv_modify_qp (InvalidArgument for attributes the device refuses).
  absl::Status ConnectRc(const RcConnectParams& params);

  // A UC QP (SEND/RECV without acknowledgements: Apple's RDMA over
  // Thunderbolt offers no other) with `send_wr` and `recv_wr` one-SGE
  // work requests, every send completion signaled, both directions on `cq`.
  static absl::StatusOr<QueuePair> CreateUc(ibv_pd* pd, ibv_cq* cq,
                                            uint32_t send_wr, uint32_t recv_wr);
  // RESET -> INIT (receives may be posted from then on).
  absl::Status InitUc(uint8_t port);
  // INIT -> RTR -> RTS towards `params.remote` (RcConnectParams' fields
  // that UC has: port, gid_index, use_grh, path_mtu, local_psn, remote).
  absl::Status ConnectUc(const RcConnectParams& params);
  // Moves the QP to the error state: outstanding requests are flushed.
  absl::Status ToError();

 private:
  QueuePair(ibv_qp* qp, Caps granted) : VerbsOwner(qp), granted_(granted) {}
  Caps granted_;
};

class MemoryRegistration : public VerbsOwner<ibv_mr, verbs_release::Mr> {
 public:
  MemoryRegistration() = default;
  // ibv_reg_mr. Errors: ResourceExhausted (ENOMEM: pinning limit, see
  // `ulimit -l`), InvalidArgument (access the device refuses), Internal.
  static absl::StatusOr<MemoryRegistration> Create(ibv_pd* pd, void* addr,
                                                   size_t length, int access);
  uint32_t lkey() const { return get()->lkey; }
  uint32_t rkey() const { return get()->rkey; }

 private:
  using VerbsOwner::VerbsOwner;
};

// ---- queries ---------------------------------------------------------------
absl::StatusOr<ibv_device_attr> QueryDevice(ibv_context* context);
absl::StatusOr<ibv_port_attr> QueryPort(ibv_context* context, uint8_t port);
// One GID table entry; NotFound when the entry is empty.
absl::StatusOr<ibv_gid_entry> QueryGidEntry(ibv_context* context, uint8_t port,
                                            int index);

// The GID index to use on `port`: `requested` when >= 0 (FailedPrecondition
// if that entry is empty), else the first RoCE v2 GID that is IPv4-mapped,
// else (only when `link_local_ok`: a Thunderbolt link may have nothing
// else) the first RoCE v2 GID at all, else 0 on an InfiniBand port;
// FailedPrecondition on an Ethernet port that has no such GID (give its
// netdev an IPv4 address).
absl::StatusOr<int> ChooseGidIndex(ibv_context* context, uint8_t port,
                                   const ibv_port_attr& port_attr,
                                   int requested, absl::string_view device,
                                   bool link_local_ok = false);

bool IsIpv4MappedGid(const ibv_gid& gid);
bool IsEmptyGid(const ibv_gid& gid);
std::string FormatGid(const ibv_gid& gid);  // "::ffff:10.0.0.1"
uint32_t MtuBytes(ibv_mtu mtu);             // 0 for an unknown value
// The largest MTU enum <= bytes (IBV_MTU_256 at least).
ibv_mtu MtuFromBytes(uint32_t bytes);
absl::string_view PortStateName(ibv_port_state state);  // "ACTIVE", ...
absl::string_view LinkLayerName(uint8_t link_layer);    // "Ethernet", ...

// One device opened for the verbs transport: its context and protection
// domain plus what was learned about it. Immutable once opened; shared (as
// shared_ptr<const VerbsDevice>) by the transport, its endpoints and its
// registrations so that any of them may outlive the others.
struct VerbsDevice {
  // Opens `device`, allocates a PD, checks `port` is ACTIVE
  // (FailedPrecondition otherwise) and picks the GID (ChooseGidIndex).
  static absl::StatusOr<std::shared_ptr<const VerbsDevice>> Open(
      ibv_device* device, uint8_t port, int gid_index,
      bool link_local_ok = false);

  std::string name;
  // Declared before pd: destroyed after it.
  Context context;
  ProtectionDomain pd;
  ibv_device_attr attr{};
  ibv_port_attr port_attr{};
  uint8_t port = 1;
  int gid_index = 0;
  ibv_gid gid{};
  // Access flags every registration gets (REMOTE_ATOMIC only when the
  // device supports atomics).
  int mr_access = 0;

  bool ethernet() const {
    return port_attr.link_layer == IBV_LINK_LAYER_ETHERNET;
  }
};

// The devices a transport opened (VerbsOptions.devices, or every active
// one) and which of them reaches which peer (VerbsOptions.peer_devices).
struct DeviceSet {
  // NotFound for a device that does not exist or, with none named, when no
  // device has an active port; FailedPrecondition as VerbsDevice::Open.
  static absl::StatusOr<DeviceSet> Open(const VerbsOptions& options,
                                        bool link_local_ok = false);
  // The index of the device that reaches `peer` (the first by default).
  size_t For(absl::string_view peer) const {
    auto it = peer_device.find(peer);
    return it == peer_device.end() ? 0 : it->second;
  }

  std::vector<std::shared_ptr<const VerbsDevice>> devices;  // never empty
  std::map<std::string, size_t, std::less<>> peer_device;
};

}  // namespace meshpool::rdma::internal

#endif  // MESHPOOL_RDMA_VERBS_RESOURCES_H_
