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
constexpr uint64_t kGuardBytes = 8;

// Appends a READ of each guard word into dest[i * kGuardBytes].
void AddGuardReads(NodeConnection& node, absl::Span<const RegionGuard> guards,
                   char* dest, uint32_t lkey, rdma::WorkRequests& wrs) {
  for (size_t i = 0; i < guards.size(); ++i) {
    rdma::WorkRequest wr;
    wr.wr_id = wrs.size();
    wr.opcode = rdma::Opcode::kRead;
    wr.local = dest + i * kGuardBytes;
    wr.length = kGuardBytes;
    wr.lkey = lkey;
    wr.remote_addr = node.pool_addr() + guards[i].pool_offset;
    wr.rkey = node.pool_rkey();
    wrs.push_back(wr);
  }
}

// When every guard was last seen holding its id (the oldest of them).
absl::Time GuardsSeen(const NodeConnection& node,
                      absl::Span<const RegionGuard> guards) {
  absl::Time seen = absl::InfiniteFuture();
  for (const RegionGuard& g : guards) {
    seen = std::min(seen, node.GuardSeen(g.value));
  }
  return seen;
}

// Checks the guard words read into `read` by requests posted at `posted`.
// OK (and remembered on `node`) when each holds its id. Otherwise NotFound,
// or DataLoss for a write whose last proof (`alive`) is a read lease old or
// more: its bytes may have reached memory the node reused since.
absl::Status CheckGuards(NodeConnection& node,
                         absl::Span<const RegionGuard> guards, const char* read,
                         absl::Time posted, bool wrote, absl::Time alive) {
  for (size_t i = 0; i < guards.size(); ++i) {
    uint64_t word = 0;
    std::memcpy(&word, read + i * kGuardBytes, sizeof(word));
    if (word == guards[i].value) continue;
    if (wrote && absl::Now() - alive >= node.read_lease()) {
      return absl::DataLossError(absl::StrCat(
          "region memory (allocation ", guards[i].value, ") on ",
          node.Describe(),
          " was freed while this write was under way, too long after it was "
          "last seen alive to be sure the write missed memory reused since"));
    }
    return absl::NotFoundError(absl::StrCat(
        "region memory (allocation ", guards[i].value, ") on ", node.Describe(),
        " was freed: the region was deleted or replaced since this handle "
        "was opened; open it again by name"));
  }
  for (const RegionGuard& g : guards) node.RecordGuard(g.value, posted);
  return absl::OkStatus();
}

// One post's requests and, for a staged READ, where each staged piece goes
// once the post completed.
struct Post {
  struct Copy {
    char* user;
    const char* staged;
    uint64_t length;
  };
  rdma::WorkRequests wrs;
  std::vector<Copy> copies;
  const char* guards = nullptr;  // where its guard READs land (none: null)
  absl::Time posted;
};

// Moves one lane's segments: cuts them into posts and keeps a bounded
// number of posts in flight, waiting for the oldest before posting more.
class LanePump {
 public:
  LanePump(NodeConnection& node, Lane& lane, TransferKind kind,
           std::optional<uint32_t> lkey, absl::Span<const Segment> segments,
           absl::Span<const RegionGuard> guards)
      : node_(node),
        lane_(lane),
        kind_(kind),
        lkey_(lkey),
        segments_(segments),
        guards_(guards) {}

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
  // A write posts only while a guard proof is under half a read lease old.
  bool Fresh() const { return absl::Now() - alive_ < node_.read_lease() / 2; }
  // Reads the guards in a round trip of their own into `dest`.
  absl::Status ProveAlive(char* dest, uint32_t staging_lkey);
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
  const absl::Span<const RegionGuard> guards_;
  absl::Time alive_;  // the guards held their ids when this was posted
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
  const bool writing = kind_ == TransferKind::kWrite;
  // Staged: two halves, each no larger than the whole job (a small job
  // does not grow the lane's staging buffer to the full size). Both are
  // needed even when the job fits one: a post also ends at kMaxBatch
  // requests, so many short ranges take several posts.
  const uint64_t post_bytes =
      staged() ? std::min(kRegionStagingBytes / 2, total) : kDirectPostBytes;
  const size_t max_posts = staged() ? 2 : kDirectPostsInFlight;
  // Guard words: one slot per post that may be in flight, and one for a
  // round trip of their own.
  const uint64_t guard_slot = guards_.size() * kGuardBytes;
  const uint64_t staging_bytes = (staged() ? 2 * post_bytes : 0) +
                                 (max_posts + 1) * guard_slot + kFlushBytes;
  MESHPOOL_ASSIGN_OR_RETURN(absl::Span<char> staging,
                            lane_.Staging(staging_bytes));
  char* guard_area = staging.data() + (staged() ? 2 * post_bytes : 0);
  char* flush = staging.data() + staging_bytes - kFlushBytes;
  const uint32_t staging_lkey = lane_.staging_lkey();
  alive_ = GuardsSeen(node_, guards_);
  std::deque<Post> in_flight;
  size_t outstanding = 0;  // requests posted and not yet completed
  size_t posts = 0;        // posted so far
  int half = 0;            // staging half the next post fills
  std::optional<Post> ready;
  while (true) {
    // Staged posts alternate halves: at most two are in flight, so the half
    // being filled is never one whose requests are still running.
    if (!ready && !done() && in_flight.size() < max_posts) {
      ready = Build(staged() ? staging.data() + half * post_bytes : nullptr,
                    post_bytes, staging_lkey);
      if (done() && writing) AddFlush(*ready, flush, staging_lkey);
      // Reads: after the last post's requests; writes: after each post's.
      // Its slot is free: fewer than max_posts posts are in flight.
      if (!guards_.empty() && (writing || done())) {
        ready->guards = guard_area + (posts % max_posts) * guard_slot;
        AddGuardReads(node_, guards_, const_cast<char*>(ready->guards),
                      staging_lkey, ready->wrs);
      }
      if (ready->wrs.empty()) ready.reset();  // only empty segments were left
    }
    const bool can_post =
        ready && in_flight.size() < max_posts &&
        outstanding + ready->wrs.size() <= rdma::kMaxOutstanding;
    // A write waits for a fresh proof: from posts in flight, else its own.
    const bool stale = can_post && writing && !guards_.empty() && !Fresh();
    if (stale && in_flight.empty()) {
      MESHPOOL_RETURN_IF_ERROR(
          ProveAlive(guard_area + max_posts * guard_slot, staging_lkey));
    }
    if (can_post && (!stale || in_flight.empty())) {
      ready->posted = absl::Now();
      absl::Status posted = lane_.endpoint().Post(ready->wrs);
      if (!posted.ok()) return Fail("post", posted);
      outstanding += ready->wrs.size();
      in_flight.push_back(*std::move(ready));
      ready.reset();
      ++posts;
      half ^= 1;
      continue;
    }
    if (in_flight.empty()) break;
    const Post& oldest = in_flight.front();
    MESHPOOL_RETURN_IF_ERROR(Wait(oldest.wrs.size()));
    for (const Post::Copy& c : oldest.copies) {
      std::memcpy(c.user, c.staged, c.length);
    }
    if (oldest.guards != nullptr) {
      MESHPOOL_RETURN_IF_ERROR(CheckGuards(node_, guards_, oldest.guards,
                                           oldest.posted, writing, alive_));
      alive_ = std::max(alive_, oldest.posted);
    }
    outstanding -= oldest.wrs.size();
    in_flight.pop_front();
  }
  return absl::OkStatus();
}

absl::Status LanePump::ProveAlive(char* dest, uint32_t staging_lkey) {
  rdma::WorkRequests wrs;
  AddGuardReads(node_, guards_, dest, staging_lkey, wrs);
  std::vector<rdma::Completion> done(wrs.size());
  const absl::Time posted = absl::Now();
  absl::Status s = rdma::PostAndWait(lane_.endpoint(), wrs,
                                     absl::MakeSpan(done), node_.op_timeout());
  if (!s.ok()) return Fail("guard", s);
  // Nothing was written yet: a freed region is plainly NotFound.
  MESHPOOL_RETURN_IF_ERROR(
      CheckGuards(node_, guards_, dest, posted, /*wrote=*/false, posted));
  alive_ = posted;
  return absl::OkStatus();
}

Post LanePump::Build(char* stage, uint64_t max_bytes, uint32_t staging_lkey) {
  Post post;
  const rdma::Opcode op =
      kind_ == TransferKind::kRead ? rdma::Opcode::kRead : rdma::Opcode::kWrite;
  uint64_t used = 0;
  // Room is left for the flush and the guard READs.
  const size_t room = rdma::kMaxBatch - 1 - guards_.size();
  while (!done() && used < max_bytes && post.wrs.size() + 1 < room) {
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
  absl::Span<const RegionGuard> guards;  // the NodeTransfer's
};

absl::Status RunLaneJob(TransferKind kind, const LaneJob& job) {
  MESHPOOL_ASSIGN_OR_RETURN(NodeConnection::LaneLease lane,
                            job.node->AcquireLane());
  LanePump pump(*job.node, *lane, kind, job.lkey, job.segments, job.guards);
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
    if (t.guards.size() > kMaxRegionGuards) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a transfer to ", t.node->Describe(), " names ", t.guards.size(),
          " region guards; at most ", kMaxRegionGuards, " fit a post"));
    }
    uint64_t bytes = 0;
    for (const Segment& s : t.segments) bytes += s.length;
    if (bytes == 0) continue;
    size_t lanes = static_cast<size_t>(std::clamp<uint64_t>(
        bytes / kMinBytesPerLane, 1, kMaxRegionLanesPerNode));
    for (std::vector<Segment>& share :
         SplitSegments(t.segments, bytes, lanes)) {
      jobs.push_back({t.node.get(), t.lkey, std::move(share), t.guards});
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
                                   uint64_t swap,
                                   absl::Span<const RegionGuard> guards) {
  if (guards.size() > kMaxRegionGuards) {
    return absl::InvalidArgumentError(
        absl::StrCat("an atomic names ", guards.size(),
                     " region guards; at most ", kMaxRegionGuards));
  }
  MESHPOOL_ASSIGN_OR_RETURN(NodeConnection::LaneLease lane, node.AcquireLane());
  MESHPOOL_ASSIGN_OR_RETURN(
      absl::Span<char> staging,
      lane->Staging(rdma::kAtomicBytes + guards.size() * kGuardBytes));
  char* guard_words = staging.data() + rdma::kAtomicBytes;
  auto run = [&](const rdma::WorkRequests& wrs) -> absl::Status {
    std::vector<rdma::Completion> done(wrs.size());
    absl::Status s = rdma::PostAndWait(lane->endpoint(), wrs,
                                       absl::MakeSpan(done), node.op_timeout());
    if (s.ok()) return s;
    lane.Discard();
    return absl::UnavailableError(absl::StrCat(
        node.Describe(), " failed mid-operation (", rdma::OpcodeName(op), "): ",
        s.message(), "; it may have died: retry once the cluster map updates"));
  };
  // As a write: proven alive under half a read lease ago before it goes.
  absl::Time alive = GuardsSeen(node, guards);
  if (!guards.empty() && absl::Now() - alive >= node.read_lease() / 2) {
    rdma::WorkRequests check;
    AddGuardReads(node, guards, guard_words, lane->staging_lkey(), check);
    alive = absl::Now();
    MESHPOOL_RETURN_IF_ERROR(run(check));
    MESHPOOL_RETURN_IF_ERROR(
        CheckGuards(node, guards, guard_words, alive, /*wrote=*/false, alive));
  }
  rdma::WorkRequests wrs(1);
  rdma::WorkRequest& wr = wrs[0];
  wr.opcode = op;
  wr.local = staging.data();
  wr.length = rdma::kAtomicBytes;
  wr.lkey = lane->staging_lkey();
  wr.remote_addr = node.pool_addr() + pool_offset;
  wr.rkey = node.pool_rkey();
  wr.compare_add = compare_add;
  wr.swap = swap;
  AddGuardReads(node, guards, guard_words, lane->staging_lkey(), wrs);
  const absl::Time posted = absl::Now();
  MESHPOOL_RETURN_IF_ERROR(run(wrs));
  MESHPOOL_RETURN_IF_ERROR(
      CheckGuards(node, guards, guard_words, posted, /*wrote=*/true, alive));
  uint64_t old = 0;
  std::memcpy(&old, staging.data(), sizeof(old));
  return old;
}

}  // namespace meshpool::client_internal
