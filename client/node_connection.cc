#include "client/node_connection.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/meshpool/client.h"
#include "common/common.h"
#include "format/protocol.h"
#include "placement/placement.h"

namespace meshpool::client_internal {
namespace {

// A client publishes into a slab only during the first part of its lease:
// the node seals it at lease end plus its own margin, and the rest covers a
// CAS still in flight.
constexpr int kPublishPercentOfLease = 75;
// A slab with less than this share of its publish window left is not used
// for new objects (the write might outlast the window).
constexpr int kMinRemainingPercent = 25;
static_assert(kMinRemainingPercent < kPublishPercentOfLease);
// A CAS posted just before the publish deadline must land before the node
// seals the slab (DESIGN: docs/ARCHITECTURE.md "Slabs, leases").
static_assert(format::kLeaseMargin > kDefaultOpTimeout);
// Idle lanes kept per node; more are closed when returned.
constexpr size_t kMaxIdleLanes = 8;
// Staging buffers grow in steps of this many bytes at least.
constexpr size_t kMinStagingBytes = 64 << 10;

}  // namespace

absl::StatusOr<std::unique_ptr<Lane>> Lane::Create(
    rdma::Transport& transport, absl::string_view address,
    const rdma::Handshake& handshake) {
  MESHPOOL_ASSIGN_OR_RETURN(auto endpoint,
                            transport.Connect(address, handshake));
  return std::unique_ptr<Lane>(new Lane(transport, std::move(endpoint)));
}

absl::StatusOr<absl::Span<char>> Lane::Staging(size_t bytes) {
  if (bytes > buffer_bytes_) {
    size_t size =
        std::max(bytes, std::max(kMinStagingBytes, 2 * buffer_bytes_));
    // Unregister and free the old buffer first; until the new one is both
    // allocated and registered the lane has none.
    region_.reset();
    buffer_.reset();
    buffer_bytes_ = 0;
    std::unique_ptr<char[]> buffer(new (std::nothrow) char[size]);
    if (!buffer) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot allocate a ", FormatSize(size),
                       " staging buffer; use smaller values"));
    }
    MESHPOOL_ASSIGN_OR_RETURN(region_,
                              transport_.RegisterMemory(buffer.get(), size));
    buffer_ = std::move(buffer);
    buffer_bytes_ = size;
  }
  return absl::Span<char>(buffer_.get(), bytes);
}

NodeConnection::LaneLease::~LaneLease() {
  if (lane_ && lane_->endpoint().healthy())
    owner_->ReturnLane(std::move(lane_));
}

NodeConnection::NodeConnection(const proto::NodeInfo& info,
                               rdma::Transport& transport,
                               absl::string_view address,
                               const ConnectionOptions& options)
    : info_(info),
      address_(address),
      transport_(transport),
      options_(options),
      read_lease_(absl::Milliseconds(info.max_read_lease_ms())) {}

NodeConnection::~NodeConnection() {
  absl::MutexLock lock(&slab_mu_);
  if (!has_slab_) return;
  // Seal our slab now rather than at lease end; best effort.
  // The current grant's SlabUse exists while has_slab_.
  const HeldSlab& held = slab_uses_[grant_].held;
  proto::ReleaseSlabRequest request;
  request.set_client_id(options_.client_id);
  request.set_slab(held.slab);
  request.set_token(held.token);
  proto::ReleaseSlabReply reply;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Milliseconds(500)));
  (void)stub_->ReleaseSlab(&ctx, request, &reply);
}

absl::StatusOr<std::shared_ptr<NodeConnection>> NodeConnection::Create(
    const proto::NodeInfo& info, rdma::Transport& transport,
    absl::string_view address, const ConnectionOptions& options) {
  if (address.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "node ", info.node_id(), " registered no transport address"));
  }
  std::shared_ptr<NodeConnection> conn(
      new NodeConnection(info, transport, address, options));
  // Checked before anything is sized by it: a hostile or broken node must
  // not make its clients allocate without bound or address outside its pool
  // (the coordinator checks it too; this client may be talking to an older
  // or a compromised one).
  conn->layout_ = placement::NodeLayout(info);
  if (absl::Status valid = placement::ValidateNodeLayout(info); !valid.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("node ", info.node_id(), " (", info.control_address(),
                     ") registered a bad pool layout: ", valid.message()));
  }
  conn->touched_ms_.reset(new std::atomic<int64_t>[conn->layout_.slab_count]());
  conn->stub_ =
      proto::Node::NewStub(options.security.Dial(info.control_address()));
  return conn;
}

bool NodeConnection::ShouldTouch(uint64_t slab) {
  if (slab >= layout_.slab_count) return false;
  int64_t now = absl::ToUnixMillis(absl::Now());
  std::atomic<int64_t>& last = touched_ms_[slab];
  int64_t seen = last.load(std::memory_order_relaxed);
  if (now - seen < absl::ToInt64Milliseconds(kTouchInterval)) return false;
  return last.compare_exchange_strong(seen, now, std::memory_order_relaxed);
}

std::string NodeConnection::Describe() const {
  return absl::StrCat("node ", info_.node_id(), " (", address_, ")");
}

absl::Status NodeConnection::LearnPool() {
  absl::MutexLock lock(&pool_mu_);
  if (pool_known_.load(std::memory_order_acquire)) return absl::OkStatus();
  proto::DescribePoolRequest request;
  request.set_incarnation(info_.incarnation());
  proto::DescribePoolReply reply;
  grpc::ClientContext ctx;
  absl::Status asked =
      FromGrpc(stub_->DescribePool(NewContext(ctx), request, &reply),
               absl::StrCat("asking ", Describe(), " where its pool is"));
  if (!asked.ok()) {
    if (absl::IsPermissionDenied(asked) || absl::IsUnauthenticated(asked)) {
      return asked;  // retrying will not help: fix the credentials
    }
    return absl::UnavailableError(absl::StrCat(
        asked.message(),
        "; the node may have died or restarted: retry once the cluster map "
        "updates"));
  }
  // The layout was checked against the registered length: a pool of
  // another size would let it address past the registration.
  if (reply.pool().length() != info_.pool().length()) {
    return absl::FailedPreconditionError(
        absl::StrCat(Describe(), " describes a pool of ", reply.pool().length(),
                     " bytes but registered one of ", info_.pool().length(),
                     "; it is not the node the cluster map names"));
  }
  pool_addr_ = reply.pool().addr();
  pool_rkey_ = reply.pool().rkey();
  pool_known_.store(true, std::memory_order_release);
  return absl::OkStatus();
}

absl::Time NodeConnection::GuardSeen(uint64_t value) const {
  absl::MutexLock lock(&guards_mu_);
  auto it = guard_seen_.find(value);
  return it == guard_seen_.end() ? absl::InfinitePast() : it->second;
}

void NodeConnection::RecordGuard(uint64_t value, absl::Time posted) {
  absl::MutexLock lock(&guards_mu_);
  // Forgetting costs only a round trip on the next write: start afresh.
  if (guard_seen_.size() >= kMaxGuardsRemembered) guard_seen_.clear();
  absl::Time& seen = guard_seen_[value];
  seen = std::max(seen, posted);
}

absl::StatusOr<NodeConnection::LaneLease> NodeConnection::AcquireLane() {
  if (!pool_known_.load(std::memory_order_acquire)) {
    MESHPOOL_RETURN_IF_ERROR(LearnPool());
  }
  {
    absl::MutexLock lock(&lanes_mu_);
    if (!idle_lanes_.empty()) {
      std::unique_ptr<Lane> lane = std::move(idle_lanes_.back());
      idle_lanes_.pop_back();
      return LaneLease(this, std::move(lane));
    }
  }
  auto lane = Lane::Create(
      transport_, address_,
      [this](const std::string& request) { return Handshake(request); });
  if (!lane.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "cannot connect to ", Describe(), ": ", lane.status().message(),
        "; the node may have died: retry once the cluster map updates"));
  }
  return LaneLease(this, *std::move(lane));
}

void NodeConnection::ReturnLane(std::unique_ptr<Lane> lane) {
  absl::MutexLock lock(&lanes_mu_);
  // Beyond a few idle lanes, close the connection: a burst of concurrency
  // must not pin connections (and responder threads) on the node forever.
  if (idle_lanes_.size() < kMaxIdleLanes)
    idle_lanes_.push_back(std::move(lane));
}

grpc::ClientContext* NodeConnection::NewContext(
    grpc::ClientContext& ctx) const {
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.connect_timeout));
  return &ctx;
}

NodeConnection::Allocation& NodeConnection::Allocation::operator=(
    Allocation&& other) noexcept {
  if (this != &other) {
    if (owner_ != nullptr) owner_->AllocationDone(grant_);
    owner_ = std::exchange(other.owner_, nullptr);
    grant_ = other.grant_;
    offset_ = other.offset_;
    deadline_ = other.deadline_;
  }
  return *this;
}

NodeConnection::Allocation::~Allocation() {
  if (owner_ != nullptr) owner_->AllocationDone(grant_);
}

void NodeConnection::AllocationDone(uint64_t grant) {
  std::vector<HeldSlab> release;
  {
    absl::MutexLock lock(&slab_mu_);
    auto it = slab_uses_.find(grant);
    if (it == slab_uses_.end()) return;
    if (--it->second.outstanding == 0 && it->second.retired) {
      release.push_back(it->second.held);
      slab_uses_.erase(it);
    }
  }
  ReleaseSlabs(release);
}

void NodeConnection::ReleaseSlabs(const std::vector<HeldSlab>& slabs) {
  for (const HeldSlab& held : slabs) {
    proto::ReleaseSlabRequest release;
    release.set_client_id(options_.client_id);
    release.set_slab(held.slab);
    release.set_token(held.token);
    proto::ReleaseSlabReply released;
    grpc::ClientContext ctx;
    // Best effort: the lease ends on its own anyway.
    (void)stub_->ReleaseSlab(NewContext(ctx), release, &released);
  }
}

absl::Status NodeConnection::GrantSlabLocked(absl::Duration* retry_after) {
  *retry_after = absl::ZeroDuration();
  if (has_slab_) {
    // Sealing the slab early lets the node reclaim it sooner, but only once
    // every object carved from it is published: a slab sealed with an
    // object still to be published could be freed before that CAS lands.
    // Released before asking for the next one, so a full node sees the
    // slab sealed (evictable) when it decides how to answer.
    SlabUse& use = slab_uses_[grant_];
    use.retired = true;
    if (use.outstanding == 0) {
      ReleaseSlabs({use.held});
      slab_uses_.erase(grant_);
    }
    has_slab_ = false;
  }
  proto::GrantSlabRequest request;
  request.set_client_id(options_.client_id);
  request.set_incarnation(info_.incarnation());
  proto::GrantSlabReply reply;
  grpc::ClientContext ctx;
  absl::Time sent = absl::Now();
  MESHPOOL_RETURN_IF_ERROR(
      FromGrpc(stub_->GrantSlab(NewContext(ctx), request, &reply),
               absl::StrCat("slab grant from ", Describe())));
  if (reply.retry_after_ms() > 0) {
    *retry_after = absl::Milliseconds(reply.retry_after_ms());
    return absl::OkStatus();
  }
  if (reply.offset() < layout_.slab_area_offset ||
      reply.offset() + reply.length() > layout_.pool_bytes) {
    return absl::InternalError(
        absl::StrCat(Describe(), " granted a slab outside its pool"));
  }
  has_slab_ = true;
  slab_ = reply.slab();
  grant_ = ++grants_;
  slab_uses_[grant_].held = HeldSlab{slab_, reply.token()};
  slab_cursor_ = reply.offset();
  slab_end_ = reply.offset() + reply.length();
  // Measured from when we asked: the node's lease started after that.
  slab_window_ =
      absl::Milliseconds(reply.lease_ms()) * kPublishPercentOfLease / 100;
  slab_deadline_ = sent + slab_window_;
  return absl::OkStatus();
}

absl::StatusOr<NodeConnection::Allocation> NodeConnection::Allocate(
    uint64_t bytes) {
  if (bytes > layout_.slab_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "object of ", bytes, " bytes exceeds the largest object ", Describe(),
        " holds (its slab size, ", layout_.slab_bytes,
        " bytes); split the value or start nodes with larger slabs "
        "(NodeOptions.slab_bytes)"));
  }
  const absl::Time give_up = absl::Now() + options_.op_timeout;
  while (true) {
    absl::StatusOr<Allocation> result;
    absl::Duration retry_after;
    {
      absl::MutexLock lock(&slab_mu_);
      absl::Time now = absl::Now();
      bool fits = has_slab_ && slab_cursor_ + bytes <= slab_end_;
      bool window_left = has_slab_ && (slab_deadline_ - now) * 100 >
                                          slab_window_ * kMinRemainingPercent;
      absl::Status granted = absl::OkStatus();
      if (!fits || !window_left) {
        granted = GrantSlabLocked(&retry_after);
      }
      if (!granted.ok()) {
        result = granted;
      } else if (retry_after == absl::ZeroDuration()) {
        ++slab_uses_[grant_].outstanding;
        result = Allocation(this, grant_, slab_cursor_, slab_deadline_);
        slab_cursor_ += bytes;
      }
    }
    if (retry_after == absl::ZeroDuration()) return result;
    // The node is full and evicting: wait for a slab, within op_timeout.
    absl::Time now = absl::Now();
    if (now + retry_after > give_up) {
      return absl::UnavailableError(absl::StrCat(
          Describe(), " is full and evicting; it expects a free slab in ",
          absl::FormatDuration(retry_after),
          ", past this operation's deadline: retry"));
    }
    absl::SleepFor(retry_after);
  }
}

absl::StatusOr<proto::NodeStats> NodeConnection::GetStats() {
  proto::GetStatsRequest request;
  proto::NodeStats stats;
  grpc::ClientContext ctx;
  MESHPOOL_RETURN_IF_ERROR(
      FromGrpc(stub_->GetStats(NewContext(ctx), request, &stats),
               absl::StrCat("stats from ", Describe())));
  return stats;
}

absl::StatusOr<std::vector<uint64_t>> NodeConnection::DigestRanges(
    absl::Span<const PoolRange> ranges) {
  proto::DigestRangesRequest request;
  request.set_incarnation(incarnation());
  for (const PoolRange& r : ranges) {
    proto::DigestRange* range = request.add_ranges();
    range->set_offset(r.offset);
    range->set_length(r.length);
  }
  proto::DigestRangesReply reply;
  grpc::ClientContext ctx;
  MESHPOOL_RETURN_IF_ERROR(
      FromGrpc(stub_->DigestRanges(NewContext(ctx), request, &reply),
               absl::StrCat("digests from ", Describe())));
  if (reply.digests_size() != request.ranges_size()) {
    return absl::UnavailableError(
        absl::StrCat(Describe(), " answered ", reply.digests_size(),
                     " digests for ", request.ranges_size(), " ranges; retry"));
  }
  return std::vector<uint64_t>(reply.digests().begin(), reply.digests().end());
}

absl::StatusOr<proto::OpenSessionReply> NodeConnection::OpenSession() {
  proto::OpenSessionRequest request;
  request.set_client_id(options_.client_id);
  request.set_incarnation(incarnation());
  request.set_pin_entries(options_.pins);
  proto::OpenSessionReply reply;
  grpc::ClientContext ctx;
  MESHPOOL_RETURN_IF_ERROR(
      FromGrpc(stub_->OpenSession(NewContext(ctx), request, &reply),
               absl::StrCat("session with ", Describe())));
  return reply;
}

absl::StatusOr<proto::RenewSessionReply> NodeConnection::RenewSession(
    uint32_t session, uint64_t token, const proto::KvClientStats& stats) {
  proto::RenewSessionRequest request;
  request.set_session(session);
  request.set_token(token);
  *request.mutable_stats() = stats;
  proto::RenewSessionReply reply;
  grpc::ClientContext ctx;
  MESHPOOL_RETURN_IF_ERROR(
      FromGrpc(stub_->RenewSession(NewContext(ctx), request, &reply),
               absl::StrCat("session renewal with ", Describe())));
  return reply;
}

absl::Status NodeConnection::CloseSession(uint32_t session, uint64_t token,
                                          const proto::KvClientStats& stats) {
  proto::CloseSessionRequest request;
  request.set_session(session);
  request.set_token(token);
  *request.mutable_stats() = stats;
  proto::CloseSessionReply reply;
  grpc::ClientContext ctx;
  return FromGrpc(stub_->CloseSession(NewContext(ctx), request, &reply),
                  absl::StrCat("closing the session with ", Describe()));
}

absl::StatusOr<std::string> NodeConnection::Handshake(
    const std::string& request) {
  proto::HandshakeRequest message;
  // Over shm only the forwarded atomics' endpoint (the node's own
  // transport) shakes hands: name none, the node answers for its own.
  if (transport_.kind() != rdma::TransportKind::kShm) {
    message.set_transport(std::string(transport_.name()));
  }
  message.set_request(request);
  proto::HandshakeReply reply;
  grpc::ClientContext ctx;
  MESHPOOL_RETURN_IF_ERROR(
      FromGrpc(stub_->Handshake(NewContext(ctx), message, &reply),
               absl::StrCat("transport handshake with ", Describe())));
  return reply.reply();
}

}  // namespace meshpool::client_internal
