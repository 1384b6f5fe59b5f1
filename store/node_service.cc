#include "store/node_service.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "auth/auth.h"
#include "common/common.h"
#include "format/layout.h"
#include "placement/region_layout.h"
#include "proto/proto.h"
#include "store/store.h"

namespace meshpool::store {
namespace {

using auth::Role;

// Who may call what (with TLS; without it everyone may everything).
constexpr std::initializer_list<Role> kAnyone = auth::kAnyRole;
constexpr std::initializer_list<Role> kUsers = auth::kDataUsers;
constexpr std::initializer_list<Role> kCoordinatorOnly = {Role::kCoordinator};

// Whom a session or slab lease counts against (PinTables::Open's and
// SlabManager::Grant's tenant): the caller's tenant; a caller without one
// by its certificate; without TLS "" for all.
std::string CallerTenant(const grpc::ServerContext& context) {
  const auth::Identity peer = auth::PeerIdentity(context);
  if (!peer.tenant.empty()) return peer.tenant;
  return peer.role == Role::kNone ? "" : peer.ToString();
}

// What a data-plane caller's connection may touch of memory reserved for
// tenants (region slabs): everything for callers without TLS, coordinators
// (region repair) and admins without a tenant; otherwise its own tenant's
// ("" for clients without one), as the coordinator's region scope shows
// each caller only its tenant's regions.
rdma::DataAccess CallerDataAccess(const grpc::ServerContext& context) {
  const auth::Identity peer = auth::PeerIdentity(context);
  if (peer.role == Role::kNone || peer.role == Role::kCoordinator ||
      (peer.role == Role::kAdmin && peer.tenant.empty())) {
    return rdma::DataAccess::Unrestricted();
  }
  return rdma::DataAccess::ForTenant(peer.tenant);
}

}  // namespace

class NodeServiceImpl final : public proto::Node::Service {
 public:
  explicit NodeServiceImpl(NodeServiceDeps deps) : deps_(std::move(deps)) {}

  grpc::Status GrantSlab(grpc::ServerContext* context,
                         const proto::GrantSlabRequest* request,
                         proto::GrantSlabReply* reply) override {
    if (grpc::Status s = auth::Allow(*context, "take slabs", kUsers); !s.ok()) {
      return s;
    }
    absl::Status same = SameIncarnation(request->incarnation());
    if (!same.ok()) return ToGrpc(same);
    const std::string tenant = CallerTenant(*context);
    absl::StatusOr<SlabGrant> grant =
        deps_.evictor != nullptr
            ? deps_.evictor->Grant(request->client_id(), tenant)
            : deps_.slabs->Grant(request->client_id(), tenant);
    if (!grant.ok()) return ToGrpc(grant.status());
    if (grant->retry_after > absl::ZeroDuration()) {
      reply->set_retry_after_ms(static_cast<uint32_t>(
          std::clamp<int64_t>(absl::ToInt64Milliseconds(grant->retry_after), 1,
                              format::kMaxLeaseMs)));
      return grpc::Status::OK;
    }
    ClearTenantBytes(grant->slab, grant->offset, grant->length);
    reply->set_slab(grant->slab);
    reply->set_offset(grant->offset);
    reply->set_length(grant->length);
    reply->set_lease_ms(
        static_cast<uint32_t>(absl::ToInt64Milliseconds(grant->lease)));
    reply->set_token(grant->token);
    return grpc::Status::OK;
  }

  grpc::Status ReleaseSlab(grpc::ServerContext* context,
                           const proto::ReleaseSlabRequest* request,
                           proto::ReleaseSlabReply*) override {
    if (grpc::Status s = auth::Allow(*context, "release slabs", kUsers);
        !s.ok()) {
      return s;
    }
    return ToGrpc(deps_.slabs->Release(request->slab(), request->token()));
  }

  grpc::Status Handshake(grpc::ServerContext* context,
                         const proto::HandshakeRequest* request,
                         proto::HandshakeReply* reply) override {
    if (grpc::Status s =
            auth::Allow(*context, "connect to the data plane", kUsers);
        !s.ok()) {
      return s;
    }
    if (!request->transport().empty() &&
        request->transport() != deps_.transport->name()) {
      return ToGrpc(absl::InvalidArgumentError(absl::StrCat(
          "this node serves transport '", deps_.transport->name(), "', not '",
          request->transport(), "'; pick one of its addresses")));
    }
    absl::StatusOr<std::string> answer = deps_.transport->AcceptHandshake(
        request->request(), CallerDataAccess(*context));
    if (!answer.ok()) return ToGrpc(answer.status());
    reply->set_reply(*std::move(answer));
    return grpc::Status::OK;
  }

  grpc::Status DescribePool(grpc::ServerContext* context,
                            const proto::DescribePoolRequest* request,
                            proto::DescribePoolReply* reply) override {
    if (grpc::Status s =
            auth::Allow(*context, "connect to the data plane", kUsers);
        !s.ok()) {
      return s;
    }
    absl::Status same = SameIncarnation(request->incarnation());
    if (!same.ok()) return ToGrpc(same);
    if (deps_.pool_region.length == 0) {
      return ToGrpc(absl::FailedPreconditionError(
          "this node has registered no pool yet; retry once it has started"));
    }
    proto::RemoteRegion* pool = reply->mutable_pool();
    pool->set_addr(deps_.pool_region.addr);
    pool->set_rkey(deps_.pool_region.rkey);
    pool->set_length(deps_.pool_region.length);
    return grpc::Status::OK;
  }

  grpc::Status GetStats(grpc::ServerContext* context,
                        const proto::GetStatsRequest*,
                        proto::NodeStats* reply) override {
    if (grpc::Status s = auth::Allow(*context, "read node stats", kAnyone);
        !s.ok()) {
      return s;
    }
    *reply = deps_.stats();
    return grpc::Status::OK;
  }

  grpc::Status OpenSession(grpc::ServerContext* context,
                           const proto::OpenSessionRequest* request,
                           proto::OpenSessionReply* reply) override {
    if (grpc::Status s = auth::Allow(*context, "open sessions", kUsers);
        !s.ok()) {
      return s;
    }
    if (deps_.sessions == nullptr) return NoSessions();
    absl::Status same = SameIncarnation(request->incarnation());
    if (!same.ok()) return ToGrpc(same);
    absl::StatusOr<SessionGrant> grant = deps_.sessions->Open(
        request->client_id(), CallerTenant(*context), request->pin_entries());
    if (!grant.ok()) return ToGrpc(grant.status());
    reply->set_session(grant->session);
    reply->set_token(grant->token);
    reply->set_pin_table_offset(grant->table_offset);
    reply->set_pin_entries(grant->entries);
    reply->set_lease_ms(LeaseMs());
    reply->set_node_clock_ms(grant->node_clock_ms);
    return grpc::Status::OK;
  }

  grpc::Status RenewSession(grpc::ServerContext* context,
                            const proto::RenewSessionRequest* request,
                            proto::RenewSessionReply* reply) override {
    if (grpc::Status s = auth::Allow(*context, "renew sessions", kUsers);
        !s.ok()) {
      return s;
    }
    if (deps_.sessions == nullptr) return NoSessions();
    absl::StatusOr<uint64_t> now = deps_.sessions->Renew(
        request->session(), request->token(), request->stats());
    if (!now.ok()) return ToGrpc(now.status());
    reply->set_node_clock_ms(*now);
    reply->set_lease_ms(LeaseMs());
    return grpc::Status::OK;
  }

  grpc::Status CloseSession(grpc::ServerContext* context,
                            const proto::CloseSessionRequest* request,
                            proto::CloseSessionReply*) override {
    if (grpc::Status s = auth::Allow(*context, "close sessions", kUsers);
        !s.ok()) {
      return s;
    }
    if (deps_.sessions == nullptr) return NoSessions();
    return ToGrpc(deps_.sessions->Close(request->session(), request->token(),
                                        request->stats()));
  }

  grpc::Status AllocateRegion(grpc::ServerContext* context,
                              const proto::AllocateRegionRequest* request,
                              proto::AllocateRegionReply* reply) override {
    if (grpc::Status s =
            auth::Allow(*context, "allocate region memory", kCoordinatorOnly);
        !s.ok()) {
      return s;
    }
    absl::StatusOr<uint64_t> slabs = RegionSlabs(*request);
    if (!slabs.ok()) return ToGrpc(slabs.status());
    // A request whose caller gave up (deadline) may already have been
    // followed by its FreeRegion, a no-op for an id not yet held: taking
    // slabs now would pin them for good. Refuse it, and give back what a
    // request that ran out of time while zero-filling took.
    if (context->IsCancelled()) {
      return grpc::Status(grpc::StatusCode::CANCELLED,
                          "the coordinator gave up on this allocation");
    }
    absl::StatusOr<std::vector<uint64_t>> taken =
        deps_.slabs->AllocateRegion(request->region_id(), *slabs);
    if (!taken.ok()) return ToGrpc(taken.status());
    if (context->IsCancelled()) {
      deps_.slabs->FreeRegion(request->region_id());
      return grpc::Status(grpc::StatusCode::CANCELLED,
                          "the coordinator gave up on this allocation");
    }
    const format::PoolLayout& layout = deps_.slabs->layout();
    ReserveForTenant(*taken, request->tenant());
    reply->set_slab_bytes(layout.slab_bytes);
    for (uint64_t slab : *taken)
      reply->add_slab_offsets(layout.slab_offset(slab));
    return grpc::Status::OK;
  }

  grpc::Status FreeRegion(grpc::ServerContext* context,
                          const proto::FreeRegionRequest* request,
                          proto::FreeRegionReply*) override {
    if (grpc::Status s =
            auth::Allow(*context, "free region memory", kCoordinatorOnly);
        !s.ok()) {
      return s;
    }
    absl::Status same = SameIncarnation(request->incarnation());
    if (!same.ok()) return ToGrpc(same);
    deps_.slabs->FreeRegion(request->region_id());
    return grpc::Status::OK;
  }

  grpc::Status DigestRanges(grpc::ServerContext* context,
                            const proto::DigestRangesRequest* request,
                            proto::DigestRangesReply* reply) override {
    if (grpc::Status s = auth::Allow(*context, "digest pool ranges", kUsers);
        !s.ok()) {
      return s;
    }
    absl::Status checked =
        CheckDigestRanges(*request, CallerDataAccess(*context));
    if (!checked.ok()) return ToGrpc(checked);
    for (const proto::DigestRange& range : request->ranges()) {
      reply->add_digests(format::DigestBytes(
          absl::MakeConstSpan(deps_.pool + range.offset(), range.length())));
    }
    return grpc::Status::OK;
  }

 private:
  // Region slabs stay reserved for their tenant after the region is freed,
  // for as long as they may hold its bytes: until another region takes them
  // (zero-filled, reserved again) or a KV lease does (ClearTenantBytes).
  void ReserveForTenant(const std::vector<uint64_t>& slabs,
                        const std::string& tenant) {
    const format::PoolLayout& layout = deps_.slabs->layout();
    absl::MutexLock lock(&reserved_mu_);
    for (uint64_t slab : slabs) {
      // Only a null or empty range fails: the layout's slabs are neither.
      (void)deps_.transport->ReserveForTenant(
          deps_.pool + layout.slab_offset(slab), layout.slab_bytes, tenant);
      reserved_slabs_[slab] = tenant;
    }
  }

  // A slab leased for KV writing is open to every data user: if a region
  // left a tenant's bytes in it, zero them before the lease is answered,
  // then end the reservation.
  void ClearTenantBytes(uint64_t slab, uint64_t offset, uint64_t length) {
    absl::MutexLock lock(&reserved_mu_);
    if (reserved_slabs_.erase(slab) == 0) return;
    std::memset(deps_.pool + offset, 0, length);
    deps_.transport->EndReservation(deps_.pool + offset);
  }

  // PermissionDenied when `offset` lies in a slab reserved for a tenant
  // other than the one `access` acts for.
  absl::Status MayRead(const rdma::DataAccess& access, uint64_t offset) {
    if (access.unrestricted) return absl::OkStatus();
    absl::MutexLock lock(&reserved_mu_);
    auto it = reserved_slabs_.find(deps_.slabs->layout().slab_of(offset));
    if (it == reserved_slabs_.end() || it->second == access.tenant) {
      return absl::OkStatus();
    }
    return absl::PermissionDeniedError(absl::StrCat(
        "pool offset ", offset,
        " holds another tenant's region; digest your own regions"));
  }

  // A digest racing FreeRegion reads the old bytes: freed slabs are reused
  // only a grace (>= 500 ms) later, longer than kMaxDigestBytes takes.
  // A caller digests only what it may read: its own tenant's regions.
  absl::Status CheckDigestRanges(const proto::DigestRangesRequest& request,
                                 const rdma::DataAccess& access) {
    MESHPOOL_RETURN_IF_ERROR(SameIncarnation(request.incarnation()));
    uint64_t total = 0;
    for (const proto::DigestRange& range : request.ranges()) {
      MESHPOOL_RETURN_IF_ERROR(
          deps_.slabs->CheckRegionRange(range.offset(), range.length()));
      MESHPOOL_RETURN_IF_ERROR(MayRead(access, range.offset()));
      total += range.length();  // each inside the pool: no overflow
      if (total > format::kMaxDigestBytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            "DigestRanges asks for more than ",
            FormatSize(format::kMaxDigestBytes), " (", request.ranges_size(),
            " ranges); split the ranges over several calls"));
      }
    }
    return absl::OkStatus();
  }

  grpc::Status NoSessions() const {
    return ToGrpc(absl::FailedPreconditionError(
        "this node keeps no client sessions (no pin tables): it cannot "
        "hold pins; restart it with a current meshpool"));
  }

  uint32_t LeaseMs() const {
    return static_cast<uint32_t>(
        absl::ToInt64Milliseconds(deps_.sessions->lease()));
  }

  absl::Status SameIncarnation(uint64_t incarnation) const {
    if (incarnation == deps_.incarnation) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat("node restarted; refresh the cluster map (request names "
                     "incarnation ",
                     incarnation, ", this node is ", deps_.incarnation, ")"));
  }

  // Slabs an AllocateRegion request needs, after checking it.
  absl::StatusOr<uint64_t> RegionSlabs(
      const proto::AllocateRegionRequest& request) const {
    MESHPOOL_RETURN_IF_ERROR(SameIncarnation(request.incarnation()));
    const uint64_t slab_bytes = deps_.slabs->layout().slab_bytes;
    const uint64_t stripe = request.stripe_bytes();
    if (stripe == 0 || stripe % placement::kStripeAlign != 0 ||
        stripe > slab_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "stripe_bytes ", stripe, " must be a positive multiple of ",
          placement::kStripeAlign, " and at most this node's slab size (",
          slab_bytes, ")"));
    }
    if (request.stripes() == 0) {
      return absl::InvalidArgumentError(
          "AllocateRegion asks for 0 stripes; ask for 1 or more");
    }
    if (request.region_id() == 0) {
      return absl::InvalidArgumentError(
          "AllocateRegion names region 0, which marks a slab no region "
          "holds; name the region by its coordinator-assigned id");
    }
    const uint64_t per_slab = slab_bytes / stripe;
    return request.stripes() / per_slab + (request.stripes() % per_slab != 0);
  }

  const NodeServiceDeps deps_;
  absl::Mutex reserved_mu_;
  // Slabs reserved for a region's tenant on the transport, and the tenant.
  absl::flat_hash_map<uint64_t, std::string> reserved_slabs_
      ABSL_GUARDED_BY(reserved_mu_);
};

absl::StatusOr<std::unique_ptr<NodeServer>> NodeServer::Start(
    absl::string_view listen, const auth::TlsConfig& tls,
    NodeServiceDeps deps) {
  if (deps.slabs == nullptr || deps.pool == nullptr ||
      deps.transport == nullptr || !deps.stats) {
    return absl::InvalidArgumentError(
        "NodeServer needs a slab manager, its pool, a transport and a stats "
        "source");
  }
  size_t colon = listen.rfind(':');
  if (colon == absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "control address '", listen, "' is not host:port; e.g. 127.0.0.1:0"));
  }
  auto service = std::make_unique<NodeServiceImpl>(std::move(deps));
  int port = 0;
  MESHPOOL_ASSIGN_OR_RETURN(
      std::shared_ptr<grpc::ServerCredentials> credentials,
      auth::ServerCredentials(tls));
  grpc::ServerBuilder builder;
  builder.AddListeningPort(std::string(listen), credentials, &port);
  builder.RegisterService(service.get());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot serve the node's control plane on '", listen,
        "' (port in use or not a local address); pick another control "
        "address"));
  }
  std::string address = absl::StrCat(listen.substr(0, colon), ":", port);
  return std::unique_ptr<NodeServer>(
      new NodeServer(std::move(service), std::move(server), address));
}

NodeServer::NodeServer(std::unique_ptr<NodeServiceImpl> service,
                       std::unique_ptr<grpc::Server> server,
                       std::string address)
    : service_(std::move(service)),
      server_(std::move(server)),
      address_(std::move(address)) {}

NodeServer::~NodeServer() { Shutdown(kDefaultShutdownDeadline); }

void NodeServer::Shutdown(absl::Duration deadline) {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  shut_down_ = true;
  server_->Shutdown(absl::ToChronoTime(absl::Now() + deadline));
  server_->Wait();
}

}  // namespace meshpool::store
