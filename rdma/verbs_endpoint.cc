// How a verbs endpoint completes requests: every request gets a place in
// pending_ (posting order) recording the sequence number of its last verbs
// WR. Only some WRs are signaled (the last of each Post, and one in every
// kSignalInterval). An RC QP executes and completes in order, so a CQE for
// WR sequence s means every WR up to s is done: the requests whose last WR
// is <= s complete OK (reported when the caller asked for a signal). An error
// CQE fails the request holding that WR, and every later one is flushed
// (Unavailable) without waiting for the device's flush CQEs, which are then
// ignored. Requests refused before posting (a remote range the node's table
// does not hold) sit in pending_ as synthetic entries behind the real ones,
// so they complete in order too.
#include "rdma/verbs_endpoint.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "common/common.h"
#include "rdma/region_registry.h"

namespace meshpool::rdma::internal {
namespace {

// Odd, so handles cycle through all 2^32 values before repeating.
constexpr uint32_t kHandleStride = 0x9e3779b1u;
static_assert(kHandleStride % 2 == 1);
constexpr int kCqPollBatch = 32;
constexpr size_t kMaxCachedRegions = 4096;
// The longest single sleep on the completion channel (Poll loops).
constexpr absl::Duration kMaxSleep = absl::Seconds(60);

uint8_t ClampRdAtomic(int value) {
  return static_cast<uint8_t>(std::clamp(value, 1, 255));
}

template <typename Chunk>
size_t ChunkAt(const std::vector<Chunk>& chunks, uint64_t addr) {
  if (chunks.size() == 1) return 0;
  auto it =
      std::upper_bound(chunks.begin(), chunks.end(), addr,
                       [](uint64_t a, const Chunk& c) { return a < c.addr; });
  return static_cast<size_t>(it - chunks.begin()) - 1;
}

// Overflow-safe: [addr, addr + length) inside [base, base + size).
bool Inside(uint64_t addr, uint64_t length, uint64_t base, uint64_t size) {
  return addr >= base && length <= size && addr - base <= size - length;
}

}  // namespace

// ---- RegionTable -----------------------------------------------------------
RegionTable::RegionTable(uint32_t seed) : next_(seed) {}

absl::StatusOr<uint32_t> RegionTable::Add(
    std::shared_ptr<const RegionKeys> keys) {
  absl::MutexLock lock(&mu_);
  if (regions_.size() >= kMaxRegistrations) {
    return absl::ResourceExhaustedError(
        absl::StrCat("verbs transport already holds ", kMaxRegistrations,
                     " registrations; register fewer, larger regions"));
  }
  do {
    next_ += kHandleStride;
  } while (next_ == 0);
  regions_.emplace(next_, std::move(keys));
  return next_;
}

void RegionTable::Remove(uint32_t handle) {
  absl::MutexLock lock(&mu_);
  regions_.erase(handle);
}

std::shared_ptr<const RegionKeys> RegionTable::Find(uint32_t handle) const {
  absl::MutexLock lock(&mu_);
  auto it = regions_.find(handle);
  return it == regions_.end() ? nullptr : it->second;
}

std::vector<HandshakeRegion> RegionTable::Snapshot(size_t device) const {
  absl::MutexLock lock(&mu_);
  std::vector<HandshakeRegion> out;
  out.reserve(regions_.size());
  for (const auto& [handle, keys] : regions_) {
    HandshakeRegion& r = out.emplace_back();
    r.handle = handle;
    r.addr = keys->addr;
    r.length = keys->length;
    for (const ChunkKeys& c : keys->devices[device]) {
      r.chunks.push_back({c.addr, c.length, c.rkey});
    }
  }
  return out;
}

// ---- connecting ------------------------------------------------------------
absl::StatusOr<std::unique_ptr<Endpoint>> VerbsEndpoint::Connect(
    EndpointSetup setup, const Handshake& handshake) {
  const VerbsDevice& dev = *setup.device;
  ibv_context* context = dev.context.get();
  const uint32_t sq_depth = std::min<uint32_t>(
      kSendQueueDepth, static_cast<uint32_t>(dev.attr.max_qp_wr));
  if (sq_depth < kMaxOutstanding) {
    return absl::FailedPreconditionError(absl::StrCat(
        dev.name, " allows ", dev.attr.max_qp_wr, " work requests per QP; ",
        "meshpool needs at least ", kMaxOutstanding));
  }
  const int cq_depth =
      std::min<int>(static_cast<int>(sq_depth) + 1, dev.attr.max_cqe);
  if (cq_depth <= static_cast<int>(kMaxOutstanding)) {
    return absl::FailedPreconditionError(absl::StrCat(
        dev.name, " allows ", dev.attr.max_cqe, " entries per CQ; ",
        "meshpool needs more than ", kMaxOutstanding));
  }
  MESHPOOL_ASSIGN_OR_RETURN(CompletionChannel channel,
                            CompletionChannel::Create(context));
  MESHPOOL_ASSIGN_OR_RETURN(
      CompletionQueue cq,
      CompletionQueue::Create(context, cq_depth, channel.get()));
  absl::StatusOr<QueuePair> qp = QueuePair::Create(
      dev.pd.get(), cq.get(), {sq_depth, kRequestedInlineBytes});
  if (!qp.ok()) {  // a device without inline data
    qp = QueuePair::Create(dev.pd.get(), cq.get(), {sq_depth, 0});
  }
  if (!qp.ok()) return qp.status();

  absl::BitGen gen;
  HandshakeRequest request;
  request.client_name = setup.self_name;
  std::copy(std::begin(dev.gid.raw), std::end(dev.gid.raw),
            request.qp.gid.begin());
  request.qp.lid = dev.port_attr.lid;
  request.qp.qpn = qp->qpn();
  request.qp.psn = absl::Uniform<uint32_t>(gen, 0, kMaxQpNumber + 1);
  request.qp.mtu_bytes = MtuBytes(dev.port_attr.active_mtu);
  request.qp.rd_atomic = ClampRdAtomic(dev.attr.max_qp_init_rd_atom);
  absl::StatusOr<std::string> answer =
      handshake(EncodeHandshakeRequest(request));
  if (!answer.ok()) {
    return absl::Status(answer.status().code(),
                        absl::StrCat("verbs handshake with ", setup.peer,
                                     " failed: ", answer.status().message()));
  }
  absl::StatusOr<HandshakeReply> reply = DecodeHandshakeReply(*answer);
  if (!reply.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(setup.peer, " answered the verbs handshake with a ",
                     reply.status().message()));
  }

  RcConnectParams params;
  params.port = dev.port;
  params.gid_index = dev.gid_index;
  params.use_grh = dev.ethernet() || reply->qp.lid == 0;
  params.access = 0;  // this QP only initiates
  params.path_mtu =
      MtuFromBytes(std::min(request.qp.mtu_bytes, reply->qp.mtu_bytes));
  params.local_psn = request.qp.psn;
  std::copy(reply->qp.gid.begin(), reply->qp.gid.end(),
            std::begin(params.remote.gid.raw));
  params.remote.lid = reply->qp.lid;
  params.remote.qpn = reply->qp.qpn;
  params.remote.psn = reply->qp.psn;
  params.max_rd_atomic = std::min(request.qp.rd_atomic, reply->qp.rd_atomic);
  params.max_dest_rd_atomic = 1;
  MESHPOOL_RETURN_IF_ERROR(qp->ConnectRc(params));
  return std::unique_ptr<Endpoint>(
      new VerbsEndpoint(std::move(setup), std::move(channel), std::move(cq),
                        *std::move(qp), *std::move(reply)));
}

VerbsEndpoint::VerbsEndpoint(EndpointSetup setup, CompletionChannel channel,
                             CompletionQueue cq, QueuePair qp,
                             HandshakeReply reply)
    : setup_(std::move(setup)),
      max_inline_(qp.caps().max_inline_data),
      max_piece_bytes_(setup_.device->port_attr.max_msg_sz != 0
                           ? setup_.device->port_attr.max_msg_sz
                           : kMaxTransferBytes),
      // In flight at most what the CQ can hold: after an error every
      // outstanding request comes back as a flush completion.
      sq_depth_(std::min<uint32_t>(qp.caps().max_send_wr,
                                   static_cast<uint32_t>(cq.get()->cqe - 1))),
      pending_(kMaxOutstanding),
      ready_(kMaxOutstanding),
      wrs_(qp.caps().max_send_wr),
      sges_(qp.caps().max_send_wr),
      piece_end_(kMaxBatch),
      channel_(std::move(channel)),
      cq_(std::move(cq)),
      qp_(std::move(qp)) {
  for (HandshakeRegion& region : reply.regions) {
    const uint32_t handle = region.handle;
    remote_.emplace(handle, std::move(region));
  }
}

VerbsEndpoint::~VerbsEndpoint() = default;

// ---- posting ---------------------------------------------------------------
absl::StatusOr<const std::vector<ChunkKeys>*> VerbsEndpoint::LocalChunks(
    const WorkRequest& wr) {
  auto it = local_.find(wr.lkey);
  if (it == local_.end()) {
    std::shared_ptr<const RegionKeys> keys =
        wr.lkey == 0 ? nullptr : setup_.regions->Find(wr.lkey);
    if (keys == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          OpcodeName(wr.opcode), " wr_id ", wr.wr_id, " names lkey ", wr.lkey,
          ", which no live registration of this verbs transport has; "
          "register the local buffer with the transport that connected and "
          "pass its MemoryRegion's lkey()"));
    }
    if (local_.size() >= kMaxCachedRegions) local_.clear();
    it = local_.emplace(wr.lkey, std::move(keys)).first;
  }
  const RegionKeys& keys = *it->second;
  const uint64_t addr = reinterpret_cast<uint64_t>(wr.local);
  if (!Inside(addr, wr.length, keys.addr, keys.length)) {
    return absl::InvalidArgumentError(absl::StrCat(
        OpcodeName(wr.opcode), " wr_id ", wr.wr_id, ": local buffer [", addr,
        ", +", wr.length, ") lies outside the registration of lkey ", wr.lkey,
        " [", keys.addr, ", +", keys.length, ")"));
  }
  return &keys.devices[setup_.device_index];
}

const HandshakeRegion* VerbsEndpoint::FindRemote(const WorkRequest& wr,
                                                 absl::Status* why) const {
  auto it = remote_.find(wr.rkey);
  if (it == remote_.end()) {
    *why = absl::PermissionDeniedError(absl::StrCat(
        OpcodeName(wr.opcode), " wr_id ", wr.wr_id, ": rkey ", wr.rkey,
        " names no region ", setup_.peer,
        " served when this endpoint connected (bad rkey, deregistered, or "
        "registered later); refresh the region descriptor and reconnect"));
    return nullptr;
  }
  const HandshakeRegion& r = it->second;
  if (!Inside(wr.remote_addr, wr.length, r.addr, r.length)) {
    *why = absl::PermissionDeniedError(absl::StrCat(
        OpcodeName(wr.opcode), " wr_id ", wr.wr_id, ": remote range [",
        wr.remote_addr, ", +", wr.length, ") is outside the region of rkey ",
        wr.rkey, " at ", setup_.peer, "; check the address"));
    return nullptr;
  }
  return &r;
}

absl::Status VerbsEndpoint::AddPieces(const WorkRequest& wr,
                                      const std::vector<ChunkKeys>& local,
                                      const HandshakeRegion& remote,
                                      size_t* pieces) {
  uint64_t la = reinterpret_cast<uint64_t>(wr.local);
  uint64_t ra = wr.remote_addr;
  uint64_t left = wr.length;
  size_t li = ChunkAt(local, la);
  size_t ri = ChunkAt(remote.chunks, ra);
  while (left > 0) {
    const ChunkKeys& lc = local[li];
    const HandshakeChunk& rc = remote.chunks[ri];
    const uint64_t n = std::min({left, lc.addr + lc.length - la,
                                 rc.addr + rc.length - ra, max_piece_bytes_});
    if (IsAtomic(wr.opcode) && n != left) {
      return absl::InvalidArgumentError(absl::StrCat(
          OpcodeName(wr.opcode), " wr_id ", wr.wr_id,
          ": its 8-byte local buffer straddles two memory registrations; "
          "align it to 8 bytes"));
    }
    if (*pieces == wrs_.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the batch needs more than ", wrs_.size(),
                       " verbs work requests once split at memory-registration "
                       "boundaries; post fewer or smaller requests per batch"));
    }
    ibv_sge& sge = sges_[*pieces];
    sge.addr = la;
    sge.length = static_cast<uint32_t>(n);
    sge.lkey = lc.lkey;
    ibv_send_wr& w = wrs_[*pieces];
    w = {};
    w.sg_list = &sge;
    w.num_sge = 1;
    switch (wr.opcode) {
      case Opcode::kRead:
      case Opcode::kWrite:
        w.opcode =
            wr.opcode == Opcode::kRead ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
        if (wr.opcode == Opcode::kWrite && n <= max_inline_) {
          w.send_flags = IBV_SEND_INLINE;
        }
        w.wr.rdma.remote_addr = ra;
        w.wr.rdma.rkey = rc.rkey;
        break;
      case Opcode::kCompareSwap:
      case Opcode::kFetchAdd:
        w.opcode = wr.opcode == Opcode::kCompareSwap
                       ? IBV_WR_ATOMIC_CMP_AND_SWP
                       : IBV_WR_ATOMIC_FETCH_AND_ADD;
        w.wr.atomic.remote_addr = ra;
        w.wr.atomic.compare_add = wr.compare_add;
        w.wr.atomic.swap = wr.swap;
        w.wr.atomic.rkey = rc.rkey;
        break;
    }
    // The first piece waits for every earlier READ and atomic; the pieces
    // after it follow it in order. Soft-RoCE gets no fence flag: with it,
    // a fenced request sometimes never went out (a PUT stalled until its op
    // timeout about once in 10,000 in the VM; a lost wake-up in rxe's
    // requester, we think; an unfenced region READ stalled so once in CI
    // too, so the fence is at most one way in), and its responder executes
    // a QP's requests in order in one kernel context, placing a WRITE's
    // bytes before it runs what follows; after a refused request it runs
    // nothing more. (A Soft-RoCE client of a hardware node therefore leans
    // on in-order execution there; a reader that still found the object
    // early would fail its digests and read again.)
    if (wr.fence && left == wr.length && !SoftRoce()) {
      w.send_flags |= IBV_SEND_FENCE;
    }
    ++*pieces;
    la += n;
    ra += n;
    left -= n;
    if (la == lc.addr + lc.length) ++li;
    if (ra == rc.addr + rc.length) ++ri;
  }
  return absl::OkStatus();
}

absl::Status VerbsEndpoint::PostPieces(size_t pieces) {
  for (size_t k = 0; k < pieces; ++k) {
    ibv_send_wr& w = wrs_[k];
    const uint64_t seq = next_piece_ + k;
    w.wr_id = seq;
    w.next = k + 1 < pieces ? &wrs_[k + 1] : nullptr;
    if (k + 1 == pieces || seq % kSignalInterval == 0) {
      w.send_flags |= IBV_SEND_SIGNALED;
    }
  }
  ibv_send_wr* bad = nullptr;
  return VerbsStatus(ibv_post_send(qp_.get(), wrs_.data(), &bad),
                     "ibv_post_send");
}

absl::Status VerbsEndpoint::Post(absl::Span<const WorkRequest> batch) {
  MESHPOOL_RETURN_IF_ERROR(ValidateLocalBatch(batch, outstanding()));
  if (!broken_.ok()) return broken_;
  // Translate everything first: a local error posts nothing; a remote
  // refusal posts the requests before it.
  size_t pieces = 0;
  size_t refused = batch.size();
  absl::Status refusal;
  for (size_t i = 0; i < batch.size(); ++i) {
    MESHPOOL_ASSIGN_OR_RETURN(const std::vector<ChunkKeys>* local,
                              LocalChunks(batch[i]));
    if (refused == batch.size()) {
      const HandshakeRegion* remote = FindRemote(batch[i], &refusal);
      if (remote == nullptr) {
        refused = i;
      } else {
        MESHPOOL_RETURN_IF_ERROR(AddPieces(batch[i], *local, *remote, &pieces));
      }
    }
    piece_end_[i] = pieces;
  }
  const uint64_t in_flight = next_piece_ - 1 - completed_piece_;
  if (in_flight + pieces > sq_depth_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the send queue holds ", in_flight,
                     " work requests and this batch ", "needs ", pieces,
                     " more (", sq_depth_, " fit); poll completions first"));
  }
  const uint64_t first = next_piece_;
  if (pieces > 0) {
    absl::Status posted = PostPieces(pieces);
    next_piece_ += pieces;
    if (!posted.ok()) {
      Break(posted);
      return broken_;
    }
  }
  for (size_t i = 0; i < refused; ++i) {
    pending_.push_back(Pending{first + piece_end_[i] - 1, batch[i].wr_id,
                               batch[i].opcode, batch[i].signaled, false,
                               absl::OkStatus()});
  }
  if (refused == batch.size()) return absl::OkStatus();
  pending_.push_back(Pending{0, batch[refused].wr_id, batch[refused].opcode,
                             true, true, refusal});
  broken_ = absl::UnavailableError(
      absl::StrCat("verbs endpoint to ", setup_.peer, " is broken (",
                   refusal.message(), "); drop it and Connect again"));
  for (size_t i = refused + 1; i < batch.size(); ++i) {
    pending_.push_back(
        Pending{0, batch[i].wr_id, batch[i].opcode, true, true, broken_});
  }
  return absl::OkStatus();
}

// ---- completing ------------------------------------------------------------
void VerbsEndpoint::FlushPending() {
  while (!pending_.empty()) {
    Pending& p = pending_.front();
    ready_.push_back(
        Completion{p.wr_id, p.opcode, p.synthetic ? p.status : broken_});
    pending_.pop_front();
  }
}

void VerbsEndpoint::Break(absl::Status why) {
  if (broken_.ok()) {
    broken_ = absl::UnavailableError(
        absl::StrCat("verbs endpoint to ", setup_.peer, " is broken (",
                     why.message(), "); drop it and Connect again"));
  }
  (void)qp_.ToError();  // stop the device; failure changes nothing here
  FlushPending();
}

void VerbsEndpoint::OnCqe(uint64_t piece, int status, uint32_t vendor_err) {
  completed_piece_ = std::max(completed_piece_, piece);
  const bool ok = status == IBV_WC_SUCCESS;
  while (!pending_.empty()) {
    Pending& head = pending_.front();
    if (head.synthetic || head.last_piece > piece) break;
    if (!ok && head.last_piece == piece) break;  // the failed one, below
    if (head.signaled) {
      ready_.push_back(Completion{head.wr_id, head.opcode, absl::OkStatus()});
    }
    pending_.pop_front();
  }
  if (ok) return;
  absl::Status failure = absl::UnavailableError(absl::StrCat(
      "a request to ", setup_.peer,
      " failed: ", ibv_wc_status_str(static_cast<ibv_wc_status>(status))));
  if (!pending_.empty() && !pending_.front().synthetic) {
    // The request holding the failed WR (possibly one of its pieces).
    Pending& head = pending_.front();
    const std::string what = absl::StrCat(
        OpcodeName(head.opcode), " wr_id ", head.wr_id, " to ", setup_.peer,
        " failed: ", ibv_wc_status_str(static_cast<ibv_wc_status>(status)),
        " (vendor error ", vendor_err, ")");
    switch (status) {
      case IBV_WC_REM_ACCESS_ERR:
      case IBV_WC_LOC_PROT_ERR:
      case IBV_WC_REM_INV_REQ_ERR:
        failure = absl::PermissionDeniedError(absl::StrCat(
            what,
            "; the peer refused the memory access (bad rkey or out of "
            "bounds): refresh the region descriptor"));
        break;
      default:
        failure = absl::UnavailableError(
            absl::StrCat(what,
                         "; the peer is gone or the link broke: reconnect and "
                         "retry"));
    }
    ready_.push_back(Completion{head.wr_id, head.opcode, failure});
    pending_.pop_front();
  }
  Break(failure);
}

absl::StatusOr<size_t> VerbsEndpoint::Deliver(absl::Span<Completion> out) {
  ibv_wc wc[kCqPollBatch];
  while (ready_.size() < out.size()) {
    const int n = ibv_poll_cq(cq_.get(), kCqPollBatch, wc);
    if (n < 0) {
      Break(VerbsStatus(n, "ibv_poll_cq"));
      break;
    }
    for (int i = 0; i < n; ++i) {
      OnCqe(wc[i].wr_id, wc[i].status, wc[i].vendor_err);
    }
    if (n < kCqPollBatch) break;
  }
  while (!pending_.empty() && pending_.front().synthetic) {
    Pending& p = pending_.front();
    ready_.push_back(Completion{p.wr_id, p.opcode, p.status});
    pending_.pop_front();
  }
  size_t k = 0;
  while (k < out.size() && !ready_.empty()) {
    out[k++] = std::move(ready_.front());
    ready_.pop_front();
  }
  return k;
}

absl::Status VerbsEndpoint::Wait(absl::Duration timeout) {
  pollfd p{channel_.fd(), POLLIN, 0};
  const timespec ts = absl::ToTimespec(std::min(timeout, kMaxSleep));
  if (::ppoll(&p, 1, &ts, nullptr) < 0 && errno != EINTR) {
    return ::meshpool::ErrnoToStatus(errno, "ppoll(completion channel)");
  }
  ibv_cq* cq = nullptr;
  void* context = nullptr;
  while (ibv_get_cq_event(channel_.get(), &cq, &context) == 0) {
    ibv_ack_cq_events(cq, 1);
    armed_ = false;
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> VerbsEndpoint::Poll(absl::Span<Completion> out,
                                           absl::Duration timeout) {
  if (out.empty()) return 0;
  MESHPOOL_ASSIGN_OR_RETURN(size_t n, Deliver(out));
  if (n > 0) return n;
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + timeout;
  const absl::Time spin_end = start + std::min(setup_.busy_poll, timeout);
  while (true) {
    if (pending_.empty()) {
      if (!broken_.ok()) return broken_;
      return 0;  // nothing outstanding: nothing can complete
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) return 0;
    if (now >= spin_end) {
      if (!armed_) {
        absl::Status armed =
            VerbsStatus(ibv_req_notify_cq(cq_.get(), 0), "ibv_req_notify_cq");
        if (!armed.ok()) {
          Break(armed);
        } else {
          armed_ = true;
        }
      } else {
        MESHPOOL_RETURN_IF_ERROR(Wait(deadline - now));
      }
    }
    // Re-checked after arming too: a CQE that arrived before the arm
    // raises no event.
    MESHPOOL_ASSIGN_OR_RETURN(n, Deliver(out));
    if (n > 0) return n;
  }
}

}  // namespace meshpool::rdma::internal
