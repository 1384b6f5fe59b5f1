// ListRdmaDevices: what `meshpool doctor` reports about this host's RDMA
// devices. Every device is opened briefly; max_inline_data is probed by
// creating a throwaway RC QP, asking for less inline data until the device
// accepts, and UC support by creating a throwaway UC QP.
#include <net/if.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/common.h"
#include "rdma/devices.h"
#include "rdma/rdma.h"
#include "rdma/verbs_resources.h"

namespace meshpool::rdma {
namespace {

using internal::CompletionQueue;
using internal::Context;
using internal::ProtectionDomain;
using internal::QueuePair;

constexpr uint32_t kInlineProbes[] = {1024, 512, 256, 128, 64, 32};

absl::string_view TransportName(ibv_transport_type type) {
  switch (type) {
    case IBV_TRANSPORT_IB:
      return "InfiniBand";
    case IBV_TRANSPORT_IWARP:
      return "iWARP";
    case IBV_TRANSPORT_USNIC:
    case IBV_TRANSPORT_USNIC_UDP:
      return "usNIC";
    case IBV_TRANSPORT_UNSPECIFIED:
      return "unspecified";
    case IBV_TRANSPORT_UNKNOWN:
      break;
  }
  return "unknown";
}

absl::string_view GidTypeName(uint32_t type) {
  return type == IBV_GID_TYPE_ROCE_V2 ? "RoCE v2" : "IB/RoCE v1";
}

// The largest inline data an RC QP on `context` accepts; 0 if none.
int ProbeMaxInline(ibv_context* context, int max_qp_wr) {
  absl::StatusOr<ProtectionDomain> pd = ProtectionDomain::Create(context);
  if (!pd.ok()) return 0;
  absl::StatusOr<CompletionQueue> cq =
      CompletionQueue::Create(context, 4, nullptr);
  if (!cq.ok()) return 0;
  const uint32_t depth = max_qp_wr > 0 ? std::min(max_qp_wr, 16) : 1;
  for (uint32_t want : kInlineProbes) {
    absl::StatusOr<QueuePair> qp =
        QueuePair::Create(pd->get(), cq->get(), {depth, want});
    if (qp.ok()) return static_cast<int>(qp->caps().max_inline_data);
  }
  return 0;
}

// Whether a UC QP can be created on `context`.
bool ProbeUc(ibv_context* context, int max_qp_wr) {
  absl::StatusOr<ProtectionDomain> pd = ProtectionDomain::Create(context);
  if (!pd.ok()) return false;
  absl::StatusOr<CompletionQueue> cq =
      CompletionQueue::Create(context, 4, nullptr);
  if (!cq.ok()) return false;
  const uint32_t depth = max_qp_wr > 0 ? std::min(max_qp_wr, 16) : 1;
  return QueuePair::CreateUc(pd->get(), cq->get(), depth, depth).ok();
}

std::vector<RdmaGidInfo> ListGids(ibv_context* context, uint8_t port,
                                  int table_len) {
  std::vector<RdmaGidInfo> gids;
  for (int i = 0; i < table_len; ++i) {
    absl::StatusOr<ibv_gid_entry> entry =
        internal::QueryGidEntry(context, port, i);
    if (!entry.ok()) continue;  // empty entries are the norm
    RdmaGidInfo& info = gids.emplace_back();
    info.index = i;
    info.gid = internal::FormatGid(entry->gid);
    info.type = std::string(GidTypeName(entry->gid_type));
    char name[IF_NAMESIZE] = {};
    if (entry->ndev_ifindex != 0 &&
        ::if_indextoname(entry->ndev_ifindex, name) != nullptr) {
      info.netdev = name;
    }
  }
  return gids;
}

absl::StatusOr<RdmaDeviceInfo> Describe(ibv_device* device) {
  RdmaDeviceInfo info;
  info.name = ibv_get_device_name(device);
  info.transport = std::string(TransportName(device->transport_type));
  MESHPOOL_ASSIGN_OR_RETURN(Context context, Context::Create(device));
  MESHPOOL_ASSIGN_OR_RETURN(ibv_device_attr attr,
                            internal::QueryDevice(context.get()));
  info.max_mr_size = attr.max_mr_size;
  info.max_qp_rd_atom = attr.max_qp_rd_atom;
  info.max_qp_wr = attr.max_qp_wr;
  info.atomics = attr.atomic_cap != IBV_ATOMIC_NONE;
  info.max_inline_data = ProbeMaxInline(context.get(), attr.max_qp_wr);
  info.uc_queue_pairs = ProbeUc(context.get(), attr.max_qp_wr);
  for (uint8_t port = 1; port <= attr.phys_port_cnt; ++port) {
    MESHPOOL_ASSIGN_OR_RETURN(ibv_port_attr pa,
                              internal::QueryPort(context.get(), port));
    RdmaPortInfo& p = info.ports.emplace_back();
    p.port = port;
    p.state = std::string(internal::PortStateName(pa.state));
    p.active = pa.state == IBV_PORT_ACTIVE;
    p.link_layer = std::string(internal::LinkLayerName(pa.link_layer));
    p.active_mtu = static_cast<int>(internal::MtuBytes(pa.active_mtu));
    p.gids = ListGids(context.get(), port, pa.gid_tbl_len);
  }
  return info;
}

}  // namespace

absl::StatusOr<std::vector<RdmaDeviceInfo>> ListRdmaDevices() {
  MESHPOOL_ASSIGN_OR_RETURN(internal::DeviceList list,
                            internal::DeviceList::Create());
  std::vector<RdmaDeviceInfo> out;
  for (ibv_device* device : list.devices()) {
    absl::StatusOr<RdmaDeviceInfo> info = Describe(device);
    if (!info.ok()) {
      return absl::UnavailableError(absl::StrCat(
          "cannot inspect RDMA device ", ibv_get_device_name(device), ": ",
          info.status().message()));
    }
    out.push_back(*std::move(info));
  }
  return out;
}

}  // namespace meshpool::rdma
