#include "client/region.h"

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "client/meshpool/region.h"
#include "client/region_transfer.h"
#include "common/common.h"
#include "format/layout.h"
#include "format/protocol.h"
#include "placement/region_layout.h"

namespace meshpool::client_internal {

// The public limits are the coordinator's.
static_assert(kDefaultStripeBytes == placement::kDefaultStripeBytes);
static_assert(kMaxRegionNameBytes == placement::kMaxRegionNameBytes);

namespace {

// Bytes one DigestRanges call asks a node to hash at most (Verify cuts
// larger stripe pieces).
constexpr uint64_t kVerifyBytesPerCall = uint64_t{64} << 20;
static_assert(kVerifyBytesPerCall <= format::kMaxDigestBytes);
// Ranges per DigestRanges call at most (many small known pieces: about
// 12 bytes each in the request, well inside gRPC's 4 MiB).
constexpr size_t kVerifyRangesPerCall = 65536;

// Which node process holds an extent's slabs, and the id it holds them
// under (what the first slab's SlabMeta.region word says while they are).
struct ExtentOwner {
  std::string node_id;
  uint64_t incarnation = 0;
  uint64_t allocation_id = 0;
  std::optional<uint64_t> first_slab_offset;  // none: the extent is empty
};

// One version of a region's placement table (a repair makes a new one).
struct Shape {
  Shape(const proto::RegionInfo& info, placement::RegionLayout layout)
      : layout(std::move(layout)), layout_version(info.layout_version()) {
    for (const proto::RegionExtent& e : info.extents()) {
      ExtentOwner& owner = extents.emplace_back();
      owner.node_id = e.node_id();
      owner.incarnation = e.incarnation();
      owner.allocation_id =
          e.allocation_id() != 0 ? e.allocation_id() : info.region_id();
      if (e.slab_offsets_size() > 0) {
        owner.first_slab_offset = e.slab_offsets(0);
      }
    }
  }
  placement::RegionLayout layout;
  std::vector<ExtentOwner> extents;
  uint64_t layout_version;
};

// Per extent of `shape`, the connection to its node process while the
// cluster map shows that process alive (null otherwise), as of one map.
struct Liveness {
  std::shared_ptr<const proto::ClusterMap> map;
  std::shared_ptr<const Shape> shape;
  std::vector<std::shared_ptr<NodeConnection>> live;
};

class RegionImpl : public Region {
 public:
  RegionImpl(std::shared_ptr<ClientCore> core, const proto::RegionInfo& info,
             placement::RegionLayout layout)
      : core_(std::move(core)),
        name_(info.name()),
        region_id_(info.region_id()),
        size_(layout.size()),
        stripe_bytes_(layout.stripe_bytes()),
        replicas_(layout.replicas()),
        shape_(std::make_shared<const Shape>(info, std::move(layout))) {}

  const std::string& name() const override { return name_; }
  uint64_t size() const override { return size_; }
  uint64_t stripe_bytes() const override { return stripe_bytes_; }
  uint32_t replicas() const override { return replicas_; }

  absl::Status Read(uint64_t offset, absl::Span<char> out) override {
    MESHPOOL_RETURN_IF_ERROR(CheckRange(offset, out.size()));
    return Transfer(TransferKind::kRead, offset, out.data(), out.size());
  }

  absl::Status Write(uint64_t offset, absl::Span<const char> data) override {
    MESHPOOL_RETURN_IF_ERROR(CheckRange(offset, data.size()));
    // WRITEs only read from local memory.
    return Transfer(TransferKind::kWrite, offset,
                    const_cast<char*>(data.data()), data.size());
  }

  absl::Status Verify(uint64_t offset, absl::Span<const char> data) override {
    return VerifyKnown(offset, data, {});
  }
  // See VerifyWithDigests (region.h).
  absl::Status VerifyKnown(uint64_t offset, absl::Span<const char> data,
                           absl::Span<const KnownDigest> known);

  absl::StatusOr<uint64_t> CompareAndSwap(uint64_t offset, uint64_t expected,
                                          uint64_t desired) override {
    return Atomic(rdma::Opcode::kCompareSwap, offset, expected, desired);
  }

  absl::StatusOr<uint64_t> FetchAdd(uint64_t offset, uint64_t delta) override {
    return Atomic(rdma::Opcode::kFetchAdd, offset, delta, 0);
  }

 private:
  absl::Status CheckRange(uint64_t offset, uint64_t length) const {
    if (offset <= size() && length <= size() - offset) return absl::OkStatus();
    return absl::OutOfRangeError(
        absl::StrCat("bytes [", offset, ", ", offset + length,
                     ") are past the end of region '", name_, "', which is ",
                     size(), " bytes; keep offset + length <= ", size()));
  }

  absl::StatusOr<std::shared_ptr<const Liveness>> Resolve();
  // Fills `out` for `out->shape` from `map`; sets *unknown when some
  // extent's node is not in the map at all.
  absl::Status Fill(const std::shared_ptr<const proto::ClusterMap>& map,
                    Liveness* out, bool* unknown);
  // A newer placement table from the coordinator (after a repair) when
  // there is one for this region; null otherwise (also when the
  // coordinator does not answer: the old table still serves).
  std::shared_ptr<const Shape> NewerShape(const Shape& shape);
  absl::Status Transfer(TransferKind kind, uint64_t offset, char* local,
                        uint64_t length);
  // VerifyKnown's work against one liveness (arguments checked already).
  absl::Status VerifyWith(const Liveness& liveness, uint64_t offset,
                          absl::Span<const char> data,
                          absl::Span<const KnownDigest> known);
  // `failed` (optional) receives the nodes that failed Unavailable.
  absl::Status TransferWith(const Liveness& liveness, TransferKind kind,
                            uint64_t offset, char* local, uint64_t length,
                            std::vector<NodeConnection*>* failed = nullptr);
  absl::StatusOr<uint64_t> Atomic(rdma::Opcode op, uint64_t offset,
                                  uint64_t compare_add, uint64_t swap);
  absl::Status NoLiveCopy(const Shape& shape, uint64_t stripe) const;
  // `s`, naming this region when its memory was freed (NotFound, DataLoss).
  absl::Status Named(absl::Status s) const {
    if (!absl::IsNotFound(s) && !absl::IsDataLoss(s)) return s;
    return absl::Status(s.code(), absl::StrCat("region '", name_, "' (id ",
                                               region_id_, "): ", s.message()));
  }
  // Calls visit(extent, byte offset from `offset`, pool offset, length,
  // stripe) for the live copies of each stripe piece of [offset, offset +
  // length): the first only (`all_copies` false) or every one. DataLoss
  // (NoLiveCopy) when a stripe has none.
  template <typename Visit>
  absl::Status ForEachLiveCopy(const Liveness& liveness, uint64_t offset,
                               uint64_t length, bool all_copies,
                               Visit visit) const;

  const std::shared_ptr<ClientCore> core_;
  const std::string name_;
  const uint64_t region_id_;
  // The same in every version of the placement table.
  const uint64_t size_;
  const uint64_t stripe_bytes_;
  const uint32_t replicas_;
  absl::Mutex mu_;
  std::shared_ptr<const Shape> shape_ ABSL_GUARDED_BY(mu_);  // the newest known
  std::shared_ptr<const Liveness> liveness_ ABSL_GUARDED_BY(mu_);
};

// The guard of `extent`'s memory on `node`: its first slab's region word.
// DataLoss when the region table names no slab of the node there.
absl::StatusOr<RegionGuard> GuardOf(const ExtentOwner& extent,
                                    const NodeConnection& node) {
  const format::PoolLayout& l = node.layout();
  const uint64_t at = extent.first_slab_offset.value_or(0);
  if (!extent.first_slab_offset || at < l.slab_area_offset ||
      (at - l.slab_area_offset) % l.slab_bytes != 0 ||
      (at - l.slab_area_offset) / l.slab_bytes >= l.slab_count) {
    return absl::DataLossError(absl::StrCat(
        "the region table places allocation ", extent.allocation_id, " at ",
        node.Describe(), " pool offset ", at,
        ", where no slab starts; the table is corrupt"));
  }
  const uint64_t slab = (at - l.slab_area_offset) / l.slab_bytes;
  return RegionGuard{l.slab_meta(slab) + offsetof(format::SlabMeta, region),
                     extent.allocation_id};
}

absl::Status RegionImpl::Fill(
    const std::shared_ptr<const proto::ClusterMap>& map, Liveness* out,
    bool* unknown) {
  absl::flat_hash_map<absl::string_view, const proto::NodeEntry*> by_id;
  for (const proto::NodeEntry& e : map->nodes()) {
    by_id[e.info().node_id()] = &e;
  }
  const std::vector<ExtentOwner>& extents = out->shape->extents;
  out->map = map;
  out->live.assign(extents.size(), nullptr);
  for (size_t i = 0; i < extents.size(); ++i) {
    auto it = by_id.find(extents[i].node_id);
    if (it == by_id.end()) {
      *unknown = true;
      continue;
    }
    const proto::NodeEntry& e = *it->second;
    if (e.state() != proto::NODE_ALIVE ||
        e.info().incarnation() != extents[i].incarnation) {
      continue;  // dead, or restarted: that process's memory is gone
    }
    MESHPOOL_ASSIGN_OR_RETURN(out->live[i], core_->Connection(e.info()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const Liveness>> RegionImpl::Resolve() {
  std::shared_ptr<const proto::ClusterMap> map = core_->CurrentMap();
  auto liveness = std::make_shared<Liveness>();
  {
    absl::MutexLock lock(&mu_);
    if (liveness_ && liveness_->map == map) return liveness_;
    liveness->shape = shape_;
  }
  bool unknown = false;
  MESHPOOL_RETURN_IF_ERROR(Fill(map, liveness.get(), &unknown));
  // A node this client has not heard of yet (the region is newer than our
  // map): ask the coordinator once. Still unknown afterwards: not live.
  if (unknown && core_->RefreshMap().ok()) {
    map = core_->CurrentMap();
    MESHPOOL_RETURN_IF_ERROR(Fill(map, liveness.get(), &unknown));
  }
  // Copies lost with a node: once per map, look for the table a repair
  // made (the coordinator bumps the map when it records one).
  const bool degraded =
      std::any_of(liveness->live.begin(), liveness->live.end(),
                  [](const auto& c) { return c == nullptr; });
  if (degraded) {
    if (std::shared_ptr<const Shape> newer = NewerShape(*liveness->shape)) {
      liveness->shape = std::move(newer);
      MESHPOOL_RETURN_IF_ERROR(Fill(map, liveness.get(), &unknown));
    }
  }
  absl::MutexLock lock(&mu_);
  if (liveness->shape->layout_version > shape_->layout_version)
    shape_ = liveness->shape;
  liveness_ = liveness;
  return std::shared_ptr<const Liveness>(std::move(liveness));
}

std::shared_ptr<const Shape> RegionImpl::NewerShape(const Shape& shape) {
  absl::StatusOr<proto::RegionInfo> info =
      core_->coordinator().GetRegion(name_);
  // Renamed or replaced since: the table under this name is another's.
  if (!info.ok() || info->region_id() != region_id_ ||
      info->layout_version() <= shape.layout_version) {
    return nullptr;
  }
  absl::StatusOr<placement::RegionLayout> layout =
      placement::RegionLayout::Create(*info);
  if (!layout.ok() || layout->size() != size_ ||
      layout->stripe_bytes() != stripe_bytes_ ||
      layout->replicas() != replicas_) {
    return nullptr;
  }
  return std::make_shared<const Shape>(*info, *std::move(layout));
}

absl::Status RegionImpl::Transfer(TransferKind kind, uint64_t offset,
                                  char* local, uint64_t length) {
  if (length == 0) return absl::OkStatus();
  MESHPOOL_ASSIGN_OR_RETURN(std::shared_ptr<const Liveness> liveness,
                            Resolve());
  std::vector<NodeConnection*> failed;
  absl::Status s =
      TransferWith(*liveness, kind, offset, local, length, &failed);
  if (s.code() != absl::StatusCode::kUnavailable) return s;
  // A read: other copies serve the stripes of a node that just failed,
  // before the coordinator declares it dead. (Not a write: a node that is
  // only slow would keep a stale copy.)
  if (kind == TransferKind::kRead && !failed.empty()) {
    Liveness others = *liveness;
    for (std::shared_ptr<NodeConnection>& c : others.live) {
      if (c &&
          std::find(failed.begin(), failed.end(), c.get()) != failed.end()) {
        c = nullptr;
      }
    }
    if (TransferWith(others, kind, offset, local, length).ok()) {
      return absl::OkStatus();
    }
  }
  // A node failed mid-way. If the coordinator already knows it is gone, the
  // other copies serve (or take) its stripes: go again once. Both a READ
  // and a WRITE of the same bytes may safely run twice.
  if (!core_->RefreshMap().ok()) return s;
  absl::StatusOr<std::shared_ptr<const Liveness>> again = Resolve();
  if (!again.ok() || (*again)->live == liveness->live) return s;
  return TransferWith(**again, kind, offset, local, length);
}

template <typename Visit>
absl::Status RegionImpl::ForEachLiveCopy(const Liveness& liveness,
                                         uint64_t offset, uint64_t length,
                                         bool all_copies, Visit visit) const {
  const placement::RegionLayout& layout = liveness.shape->layout;
  const uint64_t stripe_bytes = layout.stripe_bytes();
  const uint64_t end = offset + length;
  for (uint64_t pos = offset, stripe = offset / stripe_bytes; pos < end;
       ++stripe) {
    uint64_t in_stripe = pos - stripe * stripe_bytes;
    uint64_t n = std::min(end - pos, layout.StripeLength(stripe) - in_stripe);
    bool any = false;
    for (uint32_t r = 0; r < layout.replicas() && (all_copies || !any); ++r) {
      placement::StripeCopy copy = layout.Copy(stripe, r);
      if (!liveness.live[copy.extent]) continue;
      visit(copy.extent, pos - offset, copy.pool_offset + in_stripe, n, stripe);
      any = true;
    }
    if (!any) return NoLiveCopy(*liveness.shape, stripe);
    pos += n;
  }
  return absl::OkStatus();
}

absl::Status RegionImpl::TransferWith(const Liveness& liveness,
                                      TransferKind kind, uint64_t offset,
                                      char* local, uint64_t length,
                                      std::vector<NodeConnection*>* failed) {
  std::vector<NodeTransfer> transfers;
  // Index into `transfers` per extent (-1: none yet).
  std::vector<int> transfer_of(liveness.live.size(), -1);
  auto transfer_for = [&](int extent) -> NodeTransfer& {
    if (transfer_of[extent] < 0) {
      const std::shared_ptr<NodeConnection>& node = liveness.live[extent];
      auto same =
          std::find_if(transfers.begin(), transfers.end(),
                       [&](const NodeTransfer& t) { return t.node == node; });
      transfer_of[extent] = static_cast<int>(same - transfers.begin());
      if (same == transfers.end()) transfers.push_back({node, {}, {}, {}});
    }
    return transfers[transfer_of[extent]];
  };
  // One copy serves a read; a write goes to every live copy.
  MESHPOOL_RETURN_IF_ERROR(ForEachLiveCopy(
      liveness, offset, length, kind == TransferKind::kWrite,
      [&](int extent, uint64_t at, uint64_t pool_offset, uint64_t n, uint64_t) {
        transfer_for(extent).segments.push_back({local + at, pool_offset, n});
      }));
  for (NodeTransfer& t : transfers) {
    t.lkey = core_->RegisteredLkey(local, length, *t.node);
  }
  // Every extent the transfer touches is guarded on its node.
  for (size_t extent = 0; extent < transfer_of.size(); ++extent) {
    if (transfer_of[extent] < 0) continue;
    NodeTransfer& t = transfers[transfer_of[extent]];
    MESHPOOL_ASSIGN_OR_RETURN(
        RegionGuard guard, GuardOf(liveness.shape->extents[extent], *t.node));
    if (std::none_of(t.guards.begin(), t.guards.end(),
                     [&](const RegionGuard& g) {
                       return g.pool_offset == guard.pool_offset;
                     })) {
      t.guards.push_back(guard);
    }
  }
  return Named(RunTransfers(kind, transfers, failed));
}

// One stripe's bytes on one copy, for Verify.
struct VerifyPiece {
  const char* local;
  uint64_t pool_offset;
  uint64_t length;
  uint64_t stripe;
  std::optional<uint64_t> digest;  // known already; else hashed here
};

absl::Status RegionImpl::VerifyKnown(uint64_t offset,
                                     absl::Span<const char> data,
                                     absl::Span<const KnownDigest> known) {
  MESHPOOL_RETURN_IF_ERROR(CheckRange(offset, data.size()));
  for (size_t i = 0; i < known.size(); ++i) {
    const uint64_t from =
        i == 0 ? 0 : known[i - 1].offset + known[i - 1].length;
    if (known[i].offset < from || known[i].offset > data.size() ||
        known[i].length > data.size() - known[i].offset) {
      return absl::InvalidArgumentError(
          absl::StrCat("known digest ", i, " (bytes ", known[i].offset, " + ",
                       known[i].length, ") is out of order or outside the ",
                       data.size(), " bytes verified"));
    }
  }
  if (data.empty()) return absl::OkStatus();
  MESHPOOL_ASSIGN_OR_RETURN(std::shared_ptr<const Liveness> liveness,
                            Resolve());
  absl::Status s = VerifyWith(*liveness, offset, data, known);
  if (s.code() != absl::StatusCode::kUnavailable) return s;
  // A node did not answer. If the coordinator already declared it dead
  // (this client's map watch has not told it yet), its copies are not live
  // copies: verify the live ones, and those a repair made, once more.
  // Still listed alive: it may hold a live copy that cannot be checked, so
  // the caller hears Unavailable.
  if (!core_->RefreshMap().ok()) return s;
  absl::StatusOr<std::shared_ptr<const Liveness>> again = Resolve();
  if (!again.ok() || ((*again)->shape == liveness->shape &&
                      (*again)->live == liveness->live)) {
    return s;
  }
  return VerifyWith(**again, offset, data, known);
}

absl::Status RegionImpl::VerifyWith(const Liveness& liveness, uint64_t offset,
                                    absl::Span<const char> data,
                                    absl::Span<const KnownDigest> known) {
  // Every live copy of every stripe the range touches, by node.
  std::vector<
      std::pair<std::shared_ptr<NodeConnection>, std::vector<VerifyPiece>>>
      by_node;
  // The pieces of [from, from + length) of `data` on every live copy;
  // `digest` is the whole span's, when known.
  auto add_span = [&](uint64_t from, uint64_t length,
                      std::optional<uint64_t> digest) {
    return ForEachLiveCopy(
        liveness, offset + from, length, /*all_copies=*/true,
        [&](int extent, uint64_t at, uint64_t pool_offset, uint64_t n,
            uint64_t stripe) {
          const std::shared_ptr<NodeConnection>& node = liveness.live[extent];
          auto it =
              std::find_if(by_node.begin(), by_node.end(),
                           [&](const auto& e) { return e.first == node; });
          if (it == by_node.end()) {
            by_node.push_back({node, {}});
            it = by_node.end() - 1;
          }
          if (digest.has_value() && n == length && n <= kVerifyBytesPerCall) {
            it->second.push_back(
                {data.data() + from, pool_offset, n, stripe, digest});
            return;
          }
          // Pieces of at most kVerifyBytesPerCall: a stripe may be larger
          // than a node digests per call (slabs have no upper size limit).
          for (uint64_t done = 0; done < n; done += kVerifyBytesPerCall) {
            it->second.push_back({data.data() + from + at + done,
                                  pool_offset + done,
                                  std::min(kVerifyBytesPerCall, n - done),
                                  stripe, std::nullopt});
          }
        });
  };
  uint64_t pos = 0;
  for (const KnownDigest& k : known) {
    if (k.offset > pos) {
      MESHPOOL_RETURN_IF_ERROR(add_span(pos, k.offset - pos, std::nullopt));
    }
    if (k.length > 0) {
      MESHPOOL_RETURN_IF_ERROR(add_span(k.offset, k.length, k.digest));
    }
    pos = k.offset + k.length;
  }
  if (pos < data.size()) {
    MESHPOOL_RETURN_IF_ERROR(add_span(pos, data.size() - pos, std::nullopt));
  }
  // Nodes hash in parallel; each call stays under the node's limit.
  std::vector<absl::Status> results(by_node.size());
  auto check_node = [&](size_t i) {
    NodeConnection& node = *by_node[i].first;
    const std::vector<VerifyPiece>& pieces = by_node[i].second;
    for (size_t first = 0; first < pieces.size();) {
      std::vector<NodeConnection::PoolRange> ranges;
      uint64_t bytes = 0;
      size_t last = first;
      while (last < pieces.size() && ranges.size() < kVerifyRangesPerCall &&
             (ranges.empty() ||
              bytes + pieces[last].length <= kVerifyBytesPerCall)) {
        ranges.push_back({pieces[last].pool_offset, pieces[last].length});
        bytes += pieces[last].length;
        ++last;
      }
      absl::StatusOr<std::vector<uint64_t>> digests = node.DigestRanges(ranges);
      if (!digests.ok()) {
        results[i] = digests.status();
        return;
      }
      for (size_t p = first; p < last; ++p) {
        const VerifyPiece& piece = pieces[p];
        const uint64_t expected = piece.digest.has_value()
                                      ? *piece.digest
                                      : format::DigestBytes(absl::MakeConstSpan(
                                            piece.local, piece.length));
        if (expected != (*digests)[p - first]) {
          results[i] = absl::DataLossError(absl::StrCat(
              "region '", name_, "': stripe ", piece.stripe, " on ",
              node.Describe(), " does not hold the bytes written at offset ",
              piece.local - data.data() + offset, " (", piece.length,
              " bytes); write them again, or check the node (meshpool stat)"));
          return;
        }
      }
      first = last;
    }
  };
  std::vector<std::thread> threads;
  for (size_t i = 1; i < by_node.size(); ++i)
    threads.emplace_back(check_node, i);
  check_node(0);
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : results) MESHPOOL_RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> RegionImpl::Atomic(rdma::Opcode op, uint64_t offset,
                                            uint64_t compare_add,
                                            uint64_t swap) {
  if (offset % rdma::kAtomicBytes != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "atomic at offset ", offset, " of region '", name_,
        "' is not 8-byte aligned; atomics work on aligned 8-byte words"));
  }
  MESHPOOL_RETURN_IF_ERROR(CheckRange(offset, rdma::kAtomicBytes));
  if (replicas() > 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "region '", name_, "' has ", replicas(),
        " replicas and an atomic would change one copy only; use atomics on "
        "a region created with replicas = 1"));
  }
  MESHPOOL_ASSIGN_OR_RETURN(std::shared_ptr<const Liveness> liveness,
                            Resolve());
  uint64_t stripe = offset / stripe_bytes_;
  placement::StripeCopy copy = liveness->shape->layout.Copy(stripe, 0);
  const std::shared_ptr<NodeConnection>& node = liveness->live[copy.extent];
  if (!node) return NoLiveCopy(*liveness->shape, stripe);
  MESHPOOL_ASSIGN_OR_RETURN(
      RegionGuard guard, GuardOf(liveness->shape->extents[copy.extent], *node));
  // Stripes are multiples of 8 bytes long, so the word never straddles two.
  absl::StatusOr<uint64_t> old =
      RunAtomic(*node, op, copy.pool_offset + offset - stripe * stripe_bytes_,
                compare_add, swap, absl::MakeConstSpan(&guard, 1));
  if (!old.ok()) return Named(old.status());
  return old;
}

absl::Status RegionImpl::NoLiveCopy(const Shape& shape, uint64_t stripe) const {
  std::vector<std::string> holders;
  for (uint32_t r = 0; r < replicas_; ++r) {
    const ExtentOwner& owner =
        shape.extents[shape.layout.Copy(stripe, r).extent];
    holders.push_back(
        absl::StrCat(owner.node_id, " (incarnation ", owner.incarnation, ")"));
  }
  return absl::DataLossError(absl::StrCat(
      "stripe ", stripe, " of region '", name_,
      "' has no live copy: ", absl::StrJoin(holders, ", "),
      holders.size() == 1 ? " died or restarted" : " all died or restarted",
      ", so its bytes are gone; delete the region and create it again"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Region>> MakeRegion(
    std::shared_ptr<ClientCore> core, const proto::RegionInfo& info) {
  absl::StatusOr<placement::RegionLayout> layout =
      placement::RegionLayout::Create(info);
  if (!layout.ok()) {
    return absl::DataLossError(absl::StrCat(
        "region '", info.name(), "' has a malformed placement table (",
        layout.status().message(),
        "); its bytes cannot be located: delete the region and create it "
        "again"));
  }
  return std::unique_ptr<Region>(
      new RegionImpl(std::move(core), info, *std::move(layout)));
}

absl::StatusOr<std::unique_ptr<Region>> CreateRegion(
    std::shared_ptr<ClientCore> core, absl::string_view name, uint64_t size,
    const RegionOptions& options) {
  MESHPOOL_RETURN_IF_ERROR(placement::ValidateAddressedRegionName(name));
  if (size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("region '", name, "' needs a size above 0 bytes"));
  }
  if (options.replicas < 1 || options.replicas > placement::kMaxReplicas) {
    return absl::InvalidArgumentError(
        absl::StrCat("region '", name, "' asks for ", options.replicas,
                     " replicas; use 1 to ", placement::kMaxReplicas));
  }
  if (options.stripe_bytes % placement::kStripeAlign != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stripe size ", options.stripe_bytes, " of region '", name,
        "' is not a multiple of ", placement::kStripeAlign, " bytes; use e.g. ",
        FormatSize(kDefaultStripeBytes), " (or 0 for the default)"));
  }
  proto::CreateRegionRequest request;
  request.set_name(std::string(name));
  request.set_size(size);
  request.set_stripe_bytes(options.stripe_bytes);
  request.set_replicas(options.replicas);
  MESHPOOL_ASSIGN_OR_RETURN(proto::RegionInfo info,
                            core->coordinator().CreateRegion(request));
  return MakeRegion(std::move(core), info);
}

absl::StatusOr<std::unique_ptr<Region>> OpenRegion(
    std::shared_ptr<ClientCore> core, absl::string_view name) {
  MESHPOOL_RETURN_IF_ERROR(placement::ValidateAddressedRegionName(name));
  MESHPOOL_ASSIGN_OR_RETURN(proto::RegionInfo info,
                            core->coordinator().GetRegion(name));
  return MakeRegion(std::move(core), info);
}

absl::Status DeleteRegion(ClientCore& core, absl::string_view name) {
  MESHPOOL_RETURN_IF_ERROR(placement::ValidateAddressedRegionName(name));
  return core.coordinator().DeleteRegion(name);
}

absl::Status RenameRegion(ClientCore& core, absl::string_view from,
                          absl::string_view to, bool replace) {
  MESHPOOL_RETURN_IF_ERROR(placement::ValidateAddressedRegionName(from));
  MESHPOOL_RETURN_IF_ERROR(placement::ValidateAddressedRegionName(to));
  return core.coordinator().RenameRegion(from, to, replace);
}

absl::StatusOr<std::vector<RegionDescription>> ListRegions(
    ClientCore& core, absl::string_view prefix) {
  if (prefix.size() > kMaxRegionNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("region name prefix is ", prefix.size(),
                     " bytes; names are at most ", kMaxRegionNameBytes));
  }
  MESHPOOL_ASSIGN_OR_RETURN(std::vector<proto::RegionInfo> regions,
                            core.coordinator().ListRegions(prefix));
  std::vector<RegionDescription> out;
  out.reserve(regions.size());
  for (const proto::RegionInfo& info : regions) {
    out.push_back(Describe(info));
  }
  return out;
}

RegionDescription Describe(const proto::RegionInfo& info) {
  RegionDescription d;
  d.name = info.name();
  d.size = info.size();
  d.stripe_bytes = info.stripe_bytes();
  d.replicas = std::max<uint32_t>(info.replicas(), 1);
  for (const proto::RegionExtent& e : info.extents()) {
    if (std::find(d.nodes.begin(), d.nodes.end(), e.node_id()) ==
        d.nodes.end()) {
      d.nodes.push_back(e.node_id());
    }
  }
  d.created = absl::FromUnixMillis(info.created_unix_ms());
  const proto::RegionHealth& h = info.health();
  switch (h.state()) {
    case proto::REGION_HEALTHY:
      d.health.state = RegionHealthState::kHealthy;
      break;
    case proto::REGION_DEGRADED:
      d.health.state = RegionHealthState::kDegraded;
      break;
    case proto::REGION_LOST:
      d.health.state = RegionHealthState::kLost;
      break;
    default:
      d.health.state = RegionHealthState::kUnknown;
  }
  d.health.stripes_degraded = h.stripes_degraded();
  d.health.stripes_lost = h.stripes_lost();
  d.health.repair_bytes_total = h.repair_bytes_total();
  d.health.repair_bytes_done = h.repair_bytes_done();
  d.health.repair_error = h.repair_error();
  return d;
}

absl::Status VerifyWithDigests(Region& region, uint64_t offset,
                               absl::Span<const char> data,
                               absl::Span<const KnownDigest> known) {
  auto* impl = dynamic_cast<RegionImpl*>(&region);
  if (impl == nullptr) {
    return absl::InternalError(
        "VerifyWithDigests needs a region this library made");
  }
  return impl->VerifyKnown(offset, data, known);
}

}  // namespace meshpool::client_internal
