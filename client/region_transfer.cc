#include "client/region_transfer.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/common.h"

namespace meshpool::client_internal {
namespace {

// The READ that follows a lane's WRITEs reads at most this many of the
// last bytes written.
constexpr uint64_t kFlushBytes = 8;

// One post's requests and, for a staged READ, where each staged piece goes
// once the post completed.
struct Post {
  struct Copy {
    char* user;
    const char* staged;
    uint64_t length;
  };
  std::vector<rdma::WorkRequest> wrs;
  std::vector<Copy> copies;
};

// Moves one lane's segments: cuts them into posts and keeps a bounded
// number of posts in flight, waiting for the oldest before posting more.
class LanePump {
 public:
  LanePump(NodeConnection& node, Lane& lane, TransferKind kind,
           std::optional<uint32_t> lkey, absl::Span<const Segment> segments)
      : node_(node),
        lane_(lane),
        kind_(kind),
        lkey_(lkey),
        segments_(segments) {}

  absl::Status Run();
  // True when the lane failed (its endpoint must be discarded).
  bool broken() const { return broken_; }

 private:
  bool staged() const { return !lkey_.has_value(); }
  bool done() const { return next_ >= segments_.size(); }
  // The next post: at most `max_bytes` of segment data (staged at `stage`
  // when staging), at most kMaxBatch - 1 requests (room for the flush).
  Post Build(char* stage, uint64_t max_bytes, uint32_t staging_lkey);
  // A READ of the last bytes the post writes, on the same lane: once it
  // completes, every WRITE before it is in the node's memory.
  void AddFlush(Post& post, char* flush, uint32_t staging_lkey);
  absl::Status Wait(size_t count);
  absl::Status Fail(absl::string_view what, const absl::Status& s) {
    broken_ = true;
    return absl::UnavailableError(absl::StrCat(
        node_.Describe(), " failed mid-transfer (", what, "): ", s.message(),
        "; it may have died: retry once the cluster map updates"));
  }

  NodeConnection& node_;
  Lane& lane_;
  const TransferKind kind_;
  const std::optional<uint32_t> lkey_;
  const absl::Span<const Segment> segments_;
  std::vector<rdma::Completion> completions_;  // grown to the largest post
  size_t next_ = 0;                            // segment to move next...
  uint64_t next_offset_ = 0;                   // ...from this byte of it on
  bool broken_ = false;
  std::optional<rdma::WorkRequest> last_data_;  // the last data request built
};

absl::Status LanePump::Run() {
  uint64_t total = 0;
  for (const Segment& s : segments_) total += s.length;
  if (total == 0) return absl::OkStatus();
  // Staged: two halves, each no larger than the whole job (a small job
  // does not grow the lane's staging buffer to the full size). Both are
  // needed even when the job fits one: a post also ends at kMaxBatch
  // requests, so many short ranges take several posts.
  const uint64_t post_bytes =
      staged() ? std::min(kRegionStagingBytes / 2, total) : kDirectPostBytes;
  const size_t max_posts = staged() ? 2 : kDirectPostsInFlight;
  const uint64_t staging_bytes = (staged() ? 2 * post_bytes : 0) + kFlushBytes;
  MESHPOOL_ASSIGN_OR_RETURN(absl::Span<char> staging,
                            lane_.Staging(staging_bytes));
  char* flush = staging.data() + staging_bytes - kFlushBytes;
  const uint32_t staging_lkey = lane_.staging_lkey();
  std::deque<Post> in_flight;
  size_t outstanding = 0;  // requests posted and not yet completed
  int half = 0;            // staging half the next post fills
  std::optional<Post> ready;
  while (true) {
    // Staged posts alternate halves: at most two are in flight, so the half
    // being filled is never one whose requests are still running.
    if (!ready && !done() && in_flight.size() < max_posts) {
      ready = Build(staged() ? staging.data() + half * post_bytes : nullptr,
                    post_bytes, staging_lkey);
      if (done() && kind_ == TransferKind::kWrite) {
        AddFlush(*ready, flush, staging_lkey);
      }
      if (ready->wrs.empty()) ready.reset();  // only empty segments were left
    }
    if (ready && in_flight.size() < max_posts &&
        outstanding + ready->wrs.size() <= rdma::kMaxOutstanding) {
      absl::Status posted = lane_.endpoint().Post(ready->wrs);
      if (!posted.ok()) return Fail("post", posted);
      outstanding += ready->wrs.size();
      in_flight.push_back(*std::move(ready));
      ready.reset();
      half ^= 1;
      continue;
    }
    if (in_flight.empty()) break;
    MESHPOOL_RETURN_IF_ERROR(Wait(in_flight.front().wrs.size()));
    for (const Post::Copy& c : in_flight.front().copies) {
      std::memcpy(c.user, c.staged, c.length);
    }
    outstanding -= in_flight.front().wrs.size();
    in_flight.pop_front();
  }
  return absl::OkStatus();
}

Post LanePump::Build(char* stage, uint64_t max_bytes, uint32_t staging_lkey) {
  Post post;
  const rdma::Opcode op =
      kind_ == TransferKind::kRead ? rdma::Opcode::kRead : rdma::Opcode::kWrite;
  uint64_t used = 0;
  while (!done() && used < max_bytes && post.wrs.size() + 1 < rdma::kMaxBatch) {
    const Segment& s = segments_[next_];
    uint64_t n = std::min({s.length - next_offset_, max_bytes - used,
                           uint64_t{rdma::kMaxTransferBytes}});
    char* user = s.local + next_offset_;
    char* local = user;
    if (stage != nullptr) {
      local = stage + used;
      if (kind_ == TransferKind::kWrite) {
        std::memcpy(local, user, n);
      } else {
        post.copies.push_back({user, local, n});
      }
    }
    rdma::WorkRequest wr;
    wr.wr_id = post.wrs.size();
    wr.opcode = op;
    wr.local = local;
    wr.length = static_cast<uint32_t>(n);
    wr.lkey = stage != nullptr ? staging_lkey : *lkey_;
    wr.remote_addr = node_.pool_addr() + s.pool_offset + next_offset_;
    wr.rkey = node_.pool_rkey();
    if (n > 0) {
      post.wrs.push_back(wr);
      last_data_ = wr;
    }
    used += n;
    next_offset_ += n;
    if (next_offset_ >= s.length) {
      ++next_;
      next_offset_ = 0;
    }
  }
  return post;
}

void LanePump::AddFlush(Post& post, char* flush, uint32_t staging_lkey) {
  if (!last_data_) return;
  const rdma::WorkRequest& last = *last_data_;
  uint32_t n =
      static_cast<uint32_t>(std::min<uint64_t>(kFlushBytes, last.length));
  rdma::WorkRequest wr;
  wr.wr_id = post.wrs.size();
  wr.opcode = rdma::Opcode::kRead;
  wr.local = flush;
  wr.length = n;
  wr.lkey = staging_lkey;
  wr.remote_addr = last.remote_addr + last.length - n;
  wr.rkey = last.rkey;
  post.wrs.push_back(wr);
}

absl::Status LanePump::Wait(size_t count) {
  // Completions come in posting order on one endpoint: the next `count` are
  // the oldest post's.
  const absl::Time deadline = absl::Now() + node_.op_timeout();
  while (count > 0) {
    absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return Fail("wait", absl::DeadlineExceededError(absl::StrCat(
                              "no completion within ",
                              absl::FormatDuration(node_.op_timeout()))));
    }
    size_t want = std::min(count, rdma::kMaxBatch);
    if (completions_.size() < want) completions_.resize(want);
    absl::StatusOr<size_t> got =
        lane_.endpoint().Poll(absl::MakeSpan(completions_.data(), want), left);
    if (!got.ok()) return Fail("poll", got.status());
    for (size_t i = 0; i < *got; ++i) {
      if (!completions_[i].status.ok()) {
        return Fail(rdma::OpcodeName(completions_[i].opcode),
                    completions_[i].status);
      }
    }
    count -= *got;
  }
  return absl::OkStatus();
}

// One lane's share of one node's transfer.
struct LaneJob {
  NodeConnection* node = nullptr;
  std::optional<uint32_t> lkey;
  std::vector<Segment> segments;
};

absl::Status RunLaneJob(TransferKind kind, const LaneJob& job) {
  MESHPOOL_ASSIGN_OR_RETURN(NodeConnection::LaneLease lane,
                            job.node->AcquireLane());
  LanePump pump(*job.node, *lane, kind, job.lkey, job.segments);
  absl::Status s = pump.Run();
  // A failed endpoint is not reused (requests may still be in flight into
  // its staging buffer): dropping it closes the connection.
  if (pump.broken()) lane.Discard();
  return s;
}

}  // namespace

std::vector<std::vector<Segment>> SplitSegments(
    absl::Span<const Segment> segments, uint64_t bytes, size_t parts) {
  std::vector<std::vector<Segment>> out(std::max<size_t>(parts, 1));
  const uint64_t share = (bytes + out.size() - 1) / out.size();
  size_t part = 0;
  uint64_t filled = 0;  // bytes in out[part]
  for (Segment s : segments) {
    while (s.length > 0) {
      if (filled == share && part + 1 < out.size()) {
        ++part;
        filled = 0;
      }
      uint64_t n =
          part + 1 < out.size() ? std::min(s.length, share - filled) : s.length;
      out[part].push_back({s.local, s.pool_offset, n});
      s.local += n;
      s.pool_offset += n;
      s.length -= n;
      filled += n;
    }
  }
  while (out.size() > 1 && out.back().empty()) out.pop_back();
  return out;
}

absl::Status RunTransfers(TransferKind kind,
                          absl::Span<const NodeTransfer> transfers,
                          std::vector<NodeConnection*>* failed) {
  std::vector<LaneJob> jobs;
  for (const NodeTransfer& t : transfers) {
    uint64_t bytes = 0;
    for (const Segment& s : t.segments) bytes += s.length;
    if (bytes == 0) continue;
    size_t lanes = static_cast<size_t>(std::clamp<uint64_t>(
        bytes / kMinBytesPerLane, 1, kMaxRegionLanesPerNode));
    for (std::vector<Segment>& share :
         SplitSegments(t.segments, bytes, lanes)) {
      jobs.push_back({t.node.get(), t.lkey, std::move(share)});
    }
  }
  std::vector<absl::Status> results(jobs.size());
  std::vector<std::thread> threads;
  threads.reserve(jobs.size());
  // Every lane but the first runs on its own thread; the caller's thread
  // takes the first (a small transfer to one node starts no thread).
  for (size_t i = 1; i < jobs.size(); ++i) {
    threads.emplace_back([&, i] { results[i] = RunLaneJob(kind, jobs[i]); });
  }
  if (!jobs.empty()) results[0] = RunLaneJob(kind, jobs[0]);
  for (std::thread& t : threads) t.join();
  if (failed != nullptr) {
    for (size_t i = 0; i < jobs.size(); ++i) {
      if (absl::IsUnavailable(results[i]) &&
          std::find(failed->begin(), failed->end(), jobs[i].node) ==
              failed->end()) {
        failed->push_back(jobs[i].node);
      }
    }
  }
  for (absl::Status& s : results) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> RunAtomic(NodeConnection& node, rdma::Opcode op,
                                   uint64_t pool_offset, uint64_t compare_add,
                                   uint64_t swap) {
  MESHPOOL_ASSIGN_OR_RETURN(NodeConnection::LaneLease lane, node.AcquireLane());
  MESHPOOL_ASSIGN_OR_RETURN(absl::Span<char> staging,
                            lane->Staging(rdma::kAtomicBytes));
  rdma::WorkRequest wr;
  wr.opcode = op;
  wr.local = staging.data();
  wr.length = rdma::kAtomicBytes;
  wr.lkey = lane->staging_lkey();
  wr.remote_addr = node.pool_addr() + pool_offset;
  wr.rkey = node.pool_rkey();
  wr.compare_add = compare_add;
  wr.swap = swap;
  rdma::Completion done[1];
  absl::Status s =
      rdma::PostAndWait(lane->endpoint(), absl::MakeConstSpan(&wr, 1),
                        absl::MakeSpan(done), node.op_timeout());
  if (!s.ok()) {
    lane.Discard();
    return absl::UnavailableError(absl::StrCat(
        node.Describe(), " failed mid-operation (", rdma::OpcodeName(op), "): ",
        s.message(), "; it may have died: retry once the cluster map updates"));
  }
  uint64_t old = 0;
  std::memcpy(&old, staging.data(), sizeof(old));
  return old;
}

}  // namespace meshpool::client_internal
