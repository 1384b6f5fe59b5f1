#include "rdma/verbs_resources.h"

#include <arpa/inet.h>
#include <fcntl.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/common.h"
#include "rdma/verbs.h"

namespace meshpool::rdma::internal {

absl::Status VerbsStatus(long ret, absl::string_view what) {
  if (ret == 0) return absl::OkStatus();
  int err = 0;
  if (ret > 0) {
    err = static_cast<int>(ret);
  } else if (ret == -1) {
    err = errno;
  } else {
    err = static_cast<int>(-ret);
  }
  if (err == 0) err = EIO;  // a failure that forgot to say why
  return ::meshpool::ErrnoToStatus(err, what);
}

namespace verbs_release {
// Destruction failures cannot be reported; the objects are gone either way
// or leak in a way nothing here can repair.
void Context(ibv_context* p) { ibv_close_device(p); }
void Pd(ibv_pd* p) { ibv_dealloc_pd(p); }
void Channel(ibv_comp_channel* p) { ibv_destroy_comp_channel(p); }
void Cq(ibv_cq* p) { ibv_destroy_cq(p); }
void Qp(ibv_qp* p) { ibv_destroy_qp(p); }
void Mr(ibv_mr* p) { ibv_dereg_mr(p); }
}  // namespace verbs_release

// ---- DeviceList ------------------------------------------------------------
absl::StatusOr<DeviceList> DeviceList::Create() {
  errno = 0;
  int count = 0;
  ibv_device** list = ibv_get_device_list(&count);
  if (list == nullptr) {
    // No verbs support in the kernel is "no devices", not a failure.
    if (errno == ENOSYS || errno == ENOENT || errno == 0) {
      return DeviceList(nullptr, 0);
    }
    absl::Status status = VerbsStatus(-1, "ibv_get_device_list");
    return absl::UnavailableError(status.message());
  }
  return DeviceList(list, count);
}

DeviceList::~DeviceList() {
  if (list_ != nullptr) ibv_free_device_list(list_);
}

ibv_device* DeviceList::Find(absl::string_view name) const {
  for (ibv_device* device : devices()) {
    if (name == ibv_get_device_name(device)) return device;
  }
  return nullptr;
}

std::string DeviceList::Names() const {
  if (count_ == 0) return "none";
  return absl::StrJoin(devices(), ", ", [](std::string* out, ibv_device* d) {
    out->append(ibv_get_device_name(d));
  });
}

// ---- owners ----------------------------------------------------------------
absl::StatusOr<Context> Context::Create(ibv_device* device) {
  ibv_context* context = ibv_open_device(device);
  if (context == nullptr) {
    return VerbsStatus(
        -1, absl::StrCat("ibv_open_device(", ibv_get_device_name(device), ")"));
  }
  return Context(context);
}

absl::StatusOr<ProtectionDomain> ProtectionDomain::Create(
    ibv_context* context) {
  ibv_pd* pd = ibv_alloc_pd(context);
  if (pd == nullptr) return VerbsStatus(-1, "ibv_alloc_pd");
  return ProtectionDomain(pd);
}

absl::StatusOr<CompletionChannel> CompletionChannel::Create(
    ibv_context* context) {
  ibv_comp_channel* channel = ibv_create_comp_channel(context);
  if (channel == nullptr) return VerbsStatus(-1, "ibv_create_comp_channel");
  CompletionChannel owner(channel);
  const int flags = ::fcntl(channel->fd, F_GETFL);
  if (flags < 0 || ::fcntl(channel->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    return VerbsStatus(-1, "fcntl(completion channel, O_NONBLOCK)");
  }
  return owner;
}

absl::StatusOr<CompletionQueue> CompletionQueue::Create(
    ibv_context* context, int depth, ibv_comp_channel* channel) {
  ibv_cq* cq = ibv_create_cq(context, depth, nullptr, channel, 0);
  if (cq == nullptr) {
    return VerbsStatus(-1, absl::StrCat("ibv_create_cq(depth ", depth, ")"));
  }
  return CompletionQueue(cq);
}

absl::StatusOr<QueuePair> QueuePair::Create(ibv_pd* pd, ibv_cq* cq,
                                            const Caps& caps) {
  ibv_qp_init_attr init{};
  init.send_cq = cq;
  init.recv_cq = cq;
  init.qp_type = IBV_QPT_RC;
  init.sq_sig_all = 0;
  init.cap.max_send_wr = caps.max_send_wr;
  init.cap.max_recv_wr = 1;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  init.cap.max_inline_data = caps.max_inline_data;
  ibv_qp* qp = ibv_create_qp(pd, &init);
  if (qp == nullptr) {
    return VerbsStatus(
        -1, absl::StrCat("ibv_create_qp(RC, ", caps.max_send_wr, " send WRs, ",
                         caps.max_inline_data, " inline)"));
  }
  // ibv_create_qp writes the granted capabilities back into init.cap.
  return QueuePair(qp, Caps{init.cap.max_send_wr, init.cap.max_inline_data});
}

absl::Status QueuePair::ConnectRc(const RcConnectParams& p) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = p.port;
  attr.qp_access_flags = p.access;
  int ret = ibv_modify_qp(
      get(), &attr,
      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  MESHPOOL_RETURN_IF_ERROR(VerbsStatus(ret, "ibv_modify_qp(INIT)"));

  attr = {};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = p.path_mtu;
  attr.dest_qp_num = p.remote.qpn;
  attr.rq_psn = p.remote.psn;
  attr.max_dest_rd_atomic = p.max_dest_rd_atomic;
  attr.min_rnr_timer = 12;
  attr.ah_attr.port_num = p.port;
  attr.ah_attr.dlid = p.remote.lid;
  if (p.use_grh) {
    attr.ah_attr.is_global = 1;
    attr.ah_attr.grh.dgid = p.remote.gid;
    attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(p.gid_index);
    attr.ah_attr.grh.hop_limit = 64;
  }
  ret = ibv_modify_qp(get(), &attr,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                          IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  MESHPOOL_RETURN_IF_ERROR(VerbsStatus(ret, "ibv_modify_qp(RTR)"));

  attr = {};
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = p.timeout;
  attr.retry_cnt = p.retry_cnt;
  attr.rnr_retry = 0;  // one-sided requests never meet receiver-not-ready
  attr.sq_psn = p.local_psn;
  attr.max_rd_atomic = p.max_rd_atomic;
  ret = ibv_modify_qp(get(), &attr,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                          IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                          IBV_QP_MAX_QP_RD_ATOMIC);
  return VerbsStatus(ret, "ibv_modify_qp(RTS)");
}

absl::StatusOr<QueuePair> QueuePair::CreateUc(ibv_pd* pd, ibv_cq* cq,
                                              uint32_t send_wr,
                                              uint32_t recv_wr) {
  ibv_qp_init_attr init{};
  init.send_cq = cq;
  init.recv_cq = cq;
  init.qp_type = IBV_QPT_UC;
  init.sq_sig_all = 1;
  init.cap.max_send_wr = send_wr;
  init.cap.max_recv_wr = recv_wr;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  ibv_qp* qp = ibv_create_qp(pd, &init);
  if (qp == nullptr) {
    return VerbsStatus(-1, absl::StrCat("ibv_create_qp(UC, ", send_wr,
                                        " send WRs, ", recv_wr, " receives)"));
  }
  return QueuePair(qp, Caps{init.cap.max_send_wr, 0});
}

absl::Status QueuePair::InitUc(uint8_t port) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = port;
  attr.qp_access_flags = 0;  // SEND/RECV only: no remote access at all
  return VerbsStatus(ibv_modify_qp(get(), &attr,
                                   IBV_QP_STATE | IBV_QP_PKEY_INDEX |
                                       IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
                     "ibv_modify_qp(UC INIT)");
}

absl::Status QueuePair::ConnectUc(const RcConnectParams& p) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = p.path_mtu;
  attr.dest_qp_num = p.remote.qpn;
  attr.rq_psn = p.remote.psn;
  attr.ah_attr.port_num = p.port;
  attr.ah_attr.dlid = p.remote.lid;
  if (p.use_grh) {
    attr.ah_attr.is_global = 1;
    attr.ah_attr.grh.dgid = p.remote.gid;
    attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(p.gid_index);
    attr.ah_attr.grh.hop_limit = 64;
  }
  int ret = ibv_modify_qp(get(), &attr,
                          IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                              IBV_QP_DEST_QPN | IBV_QP_RQ_PSN);
  MESHPOOL_RETURN_IF_ERROR(VerbsStatus(ret, "ibv_modify_qp(UC RTR)"));
  attr = {};
  attr.qp_state = IBV_QPS_RTS;
  attr.sq_psn = p.local_psn;
  ret = ibv_modify_qp(get(), &attr, IBV_QP_STATE | IBV_QP_SQ_PSN);
  return VerbsStatus(ret, "ibv_modify_qp(UC RTS)");
}

absl::Status QueuePair::ToError() {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  return VerbsStatus(ibv_modify_qp(get(), &attr, IBV_QP_STATE),
                     "ibv_modify_qp(ERR)");
}

absl::StatusOr<MemoryRegistration> MemoryRegistration::Create(ibv_pd* pd,
                                                              void* addr,
                                                              size_t length,
                                                              int access) {
  ibv_mr* mr = ibv_reg_mr(pd, addr, length, access);
  if (mr == nullptr) {
    return VerbsStatus(-1,
                       absl::StrCat("ibv_reg_mr(", length,
                                    " bytes; if ENOMEM, raise `ulimit -l`)"));
  }
  return MemoryRegistration(mr);
}

// ---- queries ---------------------------------------------------------------
absl::StatusOr<ibv_device_attr> QueryDevice(ibv_context* context) {
  ibv_device_attr attr{};
  MESHPOOL_RETURN_IF_ERROR(
      VerbsStatus(ibv_query_device(context, &attr), "ibv_query_device"));
  return attr;
}

absl::StatusOr<ibv_port_attr> QueryPort(ibv_context* context, uint8_t port) {
  ibv_port_attr attr{};
  MESHPOOL_RETURN_IF_ERROR(
      VerbsStatus(ibv_query_port(context, port, &attr),
                  absl::StrCat("ibv_query_port(port ", port, ")")));
  return attr;
}

absl::StatusOr<ibv_gid_entry> QueryGidEntry(ibv_context* context, uint8_t port,
                                            int index) {
  ibv_gid_entry entry{};
  const int ret =
      ibv_query_gid_ex(context, port, static_cast<uint32_t>(index), &entry, 0);
  if (ret == ENODATA || (ret == 0 && IsEmptyGid(entry.gid))) {
    return absl::NotFoundError(
        absl::StrCat("GID index ", index, " of port ", port, " is empty"));
  }
  MESHPOOL_RETURN_IF_ERROR(VerbsStatus(
      ret,
      absl::StrCat("ibv_query_gid_ex(port ", port, ", index ", index, ")")));
  return entry;
}

absl::StatusOr<int> ChooseGidIndex(ibv_context* context, uint8_t port,
                                   const ibv_port_attr& port_attr,
                                   int requested, absl::string_view device,
                                   bool link_local_ok) {
  if (requested >= 0) {
    absl::StatusOr<ibv_gid_entry> entry =
        QueryGidEntry(context, port, requested);
    if (!entry.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          device, " port ", port, ": GID index ", requested, " is unusable (",
          entry.status().message(),
          "); pick another VerbsOptions.gid_index (see `meshpool doctor`)"));
    }
    return requested;
  }
  for (int i = 0; i < port_attr.gid_tbl_len; ++i) {
    absl::StatusOr<ibv_gid_entry> entry = QueryGidEntry(context, port, i);
    if (entry.ok() && entry->gid_type == IBV_GID_TYPE_ROCE_V2 &&
        IsIpv4MappedGid(entry->gid)) {
      return i;
    }
  }
  for (int i = 0; link_local_ok && i < port_attr.gid_tbl_len; ++i) {
    absl::StatusOr<ibv_gid_entry> entry = QueryGidEntry(context, port, i);
    if (entry.ok() && entry->gid_type == IBV_GID_TYPE_ROCE_V2 &&
        !IsEmptyGid(entry->gid)) {
      return i;
    }
  }
  if (port_attr.link_layer != IBV_LINK_LAYER_ETHERNET) return 0;
  return absl::FailedPreconditionError(absl::StrCat(
      device, " port ", port,
      " has no RoCE v2 GID with an IPv4 address; give its network device an "
      "IPv4 address or set VerbsOptions.gid_index (see `meshpool doctor`)"));
}

bool IsIpv4MappedGid(const ibv_gid& gid) {
  static constexpr uint8_t kPrefix[12] = {0, 0, 0, 0, 0,    0,
                                          0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(gid.raw, kPrefix, sizeof(kPrefix)) == 0;
}

bool IsEmptyGid(const ibv_gid& gid) {
  static constexpr uint8_t kZero[16] = {};
  return std::memcmp(gid.raw, kZero, sizeof(kZero)) == 0;
}

std::string FormatGid(const ibv_gid& gid) {
  char text[INET6_ADDRSTRLEN] = {};
  if (::inet_ntop(AF_INET6, gid.raw, text, sizeof(text)) == nullptr) return "?";
  return text;
}

uint32_t MtuBytes(ibv_mtu mtu) {
  switch (mtu) {
    case IBV_MTU_256:
      return 256;
    case IBV_MTU_512:
      return 512;
    case IBV_MTU_1024:
      return 1024;
    case IBV_MTU_2048:
      return 2048;
    case IBV_MTU_4096:
      return 4096;
  }
  return 0;
}

ibv_mtu MtuFromBytes(uint32_t bytes) {
  if (bytes >= 4096) return IBV_MTU_4096;
  if (bytes >= 2048) return IBV_MTU_2048;
  if (bytes >= 1024) return IBV_MTU_1024;
  if (bytes >= 512) return IBV_MTU_512;
  return IBV_MTU_256;
}

absl::string_view PortStateName(ibv_port_state state) {
  switch (state) {
    case IBV_PORT_NOP:
      return "NOP";
    case IBV_PORT_DOWN:
      return "DOWN";
    case IBV_PORT_INIT:
      return "INIT";
    case IBV_PORT_ARMED:
      return "ARMED";
    case IBV_PORT_ACTIVE:
      return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER:
      return "ACTIVE_DEFER";
  }
  return "UNKNOWN";
}

absl::string_view LinkLayerName(uint8_t link_layer) {
  switch (link_layer) {
    case IBV_LINK_LAYER_ETHERNET:
      return "Ethernet";
    case IBV_LINK_LAYER_INFINIBAND:
    case IBV_LINK_LAYER_UNSPECIFIED:
      return "InfiniBand";
  }
  return "unknown";
}

// ---- VerbsDevice -----------------------------------------------------------
absl::StatusOr<std::shared_ptr<const VerbsDevice>> VerbsDevice::Open(
    ibv_device* device, uint8_t port, int gid_index, bool link_local_ok) {
  auto d = std::make_shared<VerbsDevice>();
  d->name = ibv_get_device_name(device);
  d->port = port;
  MESHPOOL_ASSIGN_OR_RETURN(d->context, Context::Create(device));
  MESHPOOL_ASSIGN_OR_RETURN(d->pd, ProtectionDomain::Create(d->context.get()));
  MESHPOOL_ASSIGN_OR_RETURN(d->attr, QueryDevice(d->context.get()));
  if (port == 0 || port > d->attr.phys_port_cnt) {
    return absl::NotFoundError(absl::StrCat(
        d->name, " has ports 1..", static_cast<int>(d->attr.phys_port_cnt),
        ", not ", static_cast<int>(port), "; fix VerbsOptions.port"));
  }
  MESHPOOL_ASSIGN_OR_RETURN(d->port_attr, QueryPort(d->context.get(), port));
  if (d->port_attr.state != IBV_PORT_ACTIVE) {
    return absl::FailedPreconditionError(absl::StrCat(
        d->name, " port ", static_cast<int>(port), " is ",
        PortStateName(d->port_attr.state),
        ", not ACTIVE; bring its link up (see `meshpool doctor`)"));
  }
  MESHPOOL_ASSIGN_OR_RETURN(d->gid_index,
                            ChooseGidIndex(d->context.get(), port, d->port_attr,
                                           gid_index, d->name, link_local_ok));
  MESHPOOL_ASSIGN_OR_RETURN(
      ibv_gid_entry entry, QueryGidEntry(d->context.get(), port, d->gid_index));
  d->gid = entry.gid;
  d->mr_access =
      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
  if (d->attr.atomic_cap != IBV_ATOMIC_NONE) {
    d->mr_access |= IBV_ACCESS_REMOTE_ATOMIC;
  }
  return std::shared_ptr<const VerbsDevice>(std::move(d));
}

absl::StatusOr<DeviceSet> DeviceSet::Open(const VerbsOptions& options,
                                          bool link_local_ok) {
  MESHPOOL_ASSIGN_OR_RETURN(DeviceList list, DeviceList::Create());
  DeviceSet set;
  auto open = [&](absl::string_view name) -> absl::StatusOr<size_t> {
    for (size_t i = 0; i < set.devices.size(); ++i) {
      if (set.devices[i]->name == name) return i;
    }
    ibv_device* device = list.Find(name);
    if (device == nullptr) {
      return absl::NotFoundError(absl::StrCat(
          "RDMA device '", name, "' does not exist (this host has: ",
          list.Names(), "); run `meshpool doctor`"));
    }
    MESHPOOL_ASSIGN_OR_RETURN(
        set.devices.emplace_back(),
        VerbsDevice::Open(device, options.port, options.gid_index,
                          link_local_ok));
    return set.devices.size() - 1;
  };
  if (options.devices.empty()) {
    std::string why;
    for (ibv_device* device : list.devices()) {
      absl::StatusOr<std::shared_ptr<const VerbsDevice>> opened =
          VerbsDevice::Open(device, options.port, options.gid_index,
                            link_local_ok);
      if (opened.ok()) {
        set.devices.push_back(*std::move(opened));
      } else {
        absl::StrAppend(&why, "; ", opened.status().message());
      }
    }
    if (set.devices.empty()) {
      return absl::NotFoundError(absl::StrCat(
          "no RDMA device with an active port ", options.port,
          " (devices: ", list.Names(), why, "); run `meshpool doctor`"));
    }
  } else {
    for (const std::string& name : options.devices) {
      MESHPOOL_RETURN_IF_ERROR(open(name).status());
    }
  }
  for (const auto& [peer, device] : options.peer_devices) {
    MESHPOOL_ASSIGN_OR_RETURN(set.peer_device[peer], open(device));
  }
  return set;
}

}  // namespace meshpool::rdma::internal
