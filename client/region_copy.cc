// CopyNewStripeCopies (client/region_copy.h): pieces of new stripe copies,
// batched, digested on the nodes, moved where they differ, checked again.
#include "client/region_copy.h"

#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client_access.h"
#include "client/client_core.h"
#include "client/node_connection.h"
#include "client/region_transfer.h"
#include "common/common.h"
#include "format/protocol.h"
#include "placement/region_layout.h"

namespace meshpool::client_internal {
namespace {

static_assert(kRepairBatchBytes <= format::kMaxDigestBytes,
              "one DigestRanges call per node covers a batch");

// `length` bytes of one new stripe copy and where its source lies.
struct Piece {
  std::shared_ptr<NodeConnection> source;
  uint64_t source_offset = 0;
  std::shared_ptr<NodeConnection> target;
  uint64_t target_offset = 0;
  uint64_t length = 0;
};

uint64_t AllocationOf(const proto::RegionInfo& info,
                      const proto::RegionExtent& extent) {
  return extent.allocation_id() != 0 ? extent.allocation_id()
                                     : info.region_id();
}

bool SameExtent(const proto::RegionInfo& a, const proto::RegionExtent& x,
                const proto::RegionInfo& b, const proto::RegionExtent& y) {
  return x.node_id() == y.node_id() && x.incarnation() == y.incarnation() &&
         AllocationOf(a, x) == AllocationOf(b, y);
}

// Per extent of `info`, a connection to its node process while the map
// shows it alive; null otherwise.
absl::StatusOr<std::vector<std::shared_ptr<NodeConnection>>> LiveConnections(
    ClientCore& core, const proto::RegionInfo& info,
    const proto::ClusterMap& map) {
  std::vector<std::shared_ptr<NodeConnection>> live(info.extents_size());
  for (int e = 0; e < info.extents_size(); ++e) {
    for (const proto::NodeEntry& entry : map.nodes()) {
      if (entry.info().node_id() != info.extents(e).node_id()) continue;
      if (entry.state() == proto::NODE_ALIVE &&
          entry.info().incarnation() == info.extents(e).incarnation()) {
        MESHPOOL_ASSIGN_OR_RETURN(live[e], core.Connection(entry.info()));
      }
      break;
    }
  }
  return live;
}

absl::StatusOr<std::vector<Piece>> NewPieces(
    ClientCore& core, const proto::RegionInfo& current,
    const proto::RegionInfo& repaired) {
  MESHPOOL_ASSIGN_OR_RETURN(placement::RegionLayout from,
                            placement::RegionLayout::Create(current));
  MESHPOOL_ASSIGN_OR_RETURN(placement::RegionLayout to,
                            placement::RegionLayout::Create(repaired));
  if (from.stripes() != to.stripes() ||
      from.stripe_bytes() != to.stripe_bytes() ||
      from.replicas() != to.replicas()) {
    return absl::InvalidArgumentError(
        absl::StrCat("region '", current.name(),
                     "': a repair must keep stripes and replicas"));
  }
  // Both tables need a map that knows every node they name.
  MESHPOOL_RETURN_IF_ERROR(core.RefreshMap());
  std::shared_ptr<const proto::ClusterMap> map = core.CurrentMap();
  MESHPOOL_ASSIGN_OR_RETURN(auto sources, LiveConnections(core, current, *map));
  MESHPOOL_ASSIGN_OR_RETURN(auto targets,
                            LiveConnections(core, repaired, *map));
  std::vector<Piece> pieces;
  for (uint64_t s = 0; s < to.stripes(); ++s) {
    for (uint32_t r = 0; r < to.replicas(); ++r) {
      const placement::StripeCopy copy = to.Copy(s, r);
      const proto::RegionExtent& extent = repaired.extents(copy.extent);
      if (std::any_of(current.extents().begin(), current.extents().end(),
                      [&](const proto::RegionExtent& old) {
                        return SameExtent(current, old, repaired, extent);
                      })) {
        continue;  // not a new copy
      }
      if (!targets[copy.extent]) {
        return absl::UnavailableError(absl::StrCat(
            "region '", current.name(), "': node ", extent.node_id(),
            " died before its new copy of stripe ", s, " was filled"));
      }
      std::optional<placement::StripeCopy> source;
      for (uint32_t q = 0; q < from.replicas() && !source; ++q) {
        if (sources[from.Copy(s, q).extent]) source = from.Copy(s, q);
      }
      if (!source) {
        return absl::DataLossError(
            absl::StrCat("region '", current.name(), "': stripe ", s,
                         " has no live copy to copy from"));
      }
      for (uint64_t done = 0; done < to.StripeLength(s);
           done += kRepairPieceBytes) {
        pieces.push_back(
            {sources[source->extent], source->pool_offset + done,
             targets[copy.extent], copy.pool_offset + done,
             std::min(kRepairPieceBytes, to.StripeLength(s) - done)});
      }
    }
  }
  return pieces;
}

// The nodes' digests of each piece's source (or target), nodes in
// parallel, one call per node.
absl::StatusOr<std::vector<uint64_t>> Digests(absl::Span<const Piece> pieces,
                                              bool of_target) {
  std::vector<std::pair<NodeConnection*, std::vector<size_t>>> by_node;
  for (size_t i = 0; i < pieces.size(); ++i) {
    NodeConnection* node =
        (of_target ? pieces[i].target : pieces[i].source).get();
    auto it = std::find_if(by_node.begin(), by_node.end(),
                           [&](const auto& e) { return e.first == node; });
    if (it == by_node.end()) it = by_node.insert(by_node.end(), {node, {}});
    it->second.push_back(i);
  }
  std::vector<uint64_t> digests(pieces.size());
  std::vector<absl::Status> results(by_node.size());
  auto digest_node = [&](size_t n) {
    std::vector<NodeConnection::PoolRange> ranges;
    for (size_t i : by_node[n].second) {
      ranges.push_back(
          {of_target ? pieces[i].target_offset : pieces[i].source_offset,
           pieces[i].length});
    }
    absl::StatusOr<std::vector<uint64_t>> got =
        by_node[n].first->DigestRanges(ranges);
    if (!got.ok()) {
      results[n] = got.status();
      return;
    }
    for (size_t k = 0; k < ranges.size(); ++k)
      digests[by_node[n].second[k]] = (*got)[k];
  };
  std::vector<std::thread> threads;
  for (size_t n = 1; n < by_node.size(); ++n)
    threads.emplace_back(digest_node, n);
  if (!by_node.empty()) digest_node(0);
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : results) MESHPOOL_RETURN_IF_ERROR(s);
  return digests;
}

// Moves `pieces` between their nodes and `staging` (laid out in order):
// from the sources (kRead) or to the targets (kWrite).
absl::Status Transfer(ClientCore& core, TransferKind kind,
                      absl::Span<const Piece> pieces,
                      std::vector<char>& staging) {
  uint64_t bytes = 0;
  for (const Piece& p : pieces) bytes += p.length;
  staging.resize(std::max<size_t>(staging.size(), bytes));
  std::vector<NodeTransfer> transfers;
  uint64_t at = 0;
  for (const Piece& p : pieces) {
    const bool read = kind == TransferKind::kRead;
    const std::shared_ptr<NodeConnection>& node = read ? p.source : p.target;
    auto it =
        std::find_if(transfers.begin(), transfers.end(),
                     [&](const NodeTransfer& t) { return t.node == node; });
    if (it == transfers.end())
      it = transfers.insert(transfers.end(), {node, {}, {}, {}});
    it->segments.push_back({staging.data() + at,
                            read ? p.source_offset : p.target_offset,
                            p.length});
    at += p.length;
  }
  for (NodeTransfer& t : transfers) {
    t.lkey = core.RegisteredLkey(staging.data(), bytes, *t.node);
  }
  return RunTransfers(kind, transfers);
}

// Digests source and target of every piece, moves those that differ, and
// again, until they agree or kRepairCopyAttempts moves were not enough.
// `moved`: the batch was just moved once (it counts as a move).
absl::Status CheckBatch(ClientCore& core, const std::string& region,
                        std::vector<Piece> batch, bool moved,
                        std::vector<char>& staging) {
  for (int moves = moved ? 1 : 0;; ++moves) {
    MESHPOOL_ASSIGN_OR_RETURN(std::vector<uint64_t> from,
                              Digests(batch, /*of_target=*/false));
    MESHPOOL_ASSIGN_OR_RETURN(std::vector<uint64_t> to,
                              Digests(batch, /*of_target=*/true));
    std::vector<Piece> differ;
    for (size_t i = 0; i < batch.size(); ++i) {
      if (from[i] != to[i]) differ.push_back(std::move(batch[i]));
    }
    if (differ.empty()) return absl::OkStatus();
    if (moves == kRepairCopyAttempts) {
      return absl::AbortedError(absl::StrCat(
          "region '", region, "': ", differ.size(),
          " piece(s) of new copies still differ from their source after ",
          moves, " copies (written meanwhile); the repair tries again"));
    }
    MESHPOOL_RETURN_IF_ERROR(
        Transfer(core, TransferKind::kRead, differ, staging));
    MESHPOOL_RETURN_IF_ERROR(
        Transfer(core, TransferKind::kWrite, differ, staging));
    batch = std::move(differ);
  }
}

// Consecutive pieces of at most kRepairBatchBytes each.
std::vector<std::vector<Piece>> Batches(const std::vector<Piece>& pieces) {
  std::vector<std::vector<Piece>> batches;
  uint64_t bytes = kRepairBatchBytes;
  for (const Piece& p : pieces) {
    if (bytes + p.length > kRepairBatchBytes) {
      batches.emplace_back();
      bytes = 0;
    }
    batches.back().push_back(p);
    bytes += p.length;
  }
  return batches;
}

uint64_t BytesOf(const std::vector<Piece>& batch) {
  uint64_t bytes = 0;
  for (const Piece& p : batch) bytes += p.length;
  return bytes;
}

}  // namespace

absl::Status CopyNewStripeCopies(
    Client& client, const proto::RegionInfo& current,
    const proto::RegionInfo& repaired, bool check_first,
    const std::function<bool(uint64_t)>& progress) {
  ClientCore& core = *ClientAccess::Impl(client).core();
  MESHPOOL_ASSIGN_OR_RETURN(std::vector<Piece> pieces,
                            NewPieces(core, current, repaired));
  const std::vector<std::vector<Piece>> batches = Batches(pieces);
  auto stopped = [&] {
    return absl::CancelledError(absl::StrCat(
        "region '", current.name(), "': the repair's copy was stopped"));
  };
  std::vector<char> staging;
  if (check_first) {
    for (const std::vector<Piece>& batch : batches) {
      MESHPOOL_RETURN_IF_ERROR(
          CheckBatch(core, current.name(), batch, /*moved=*/false, staging));
      if (!progress(BytesOf(batch))) return stopped();
    }
    return absl::OkStatus();
  }
  // Fill: batch i + 1 is read from its sources while batch i is written
  // and checked, in two buffers.
  std::vector<char> buffers[2];
  std::thread writer;
  absl::Status written;  // batch i - 1's outcome, once `writer` is joined
  auto join = [&]() -> absl::Status {
    if (writer.joinable()) writer.join();
    return written;
  };
  for (size_t i = 0; i < batches.size(); ++i) {
    std::vector<char>& buffer = buffers[i % 2];
    absl::Status read = Transfer(core, TransferKind::kRead, batches[i], buffer);
    MESHPOOL_RETURN_IF_ERROR(join());
    MESHPOOL_RETURN_IF_ERROR(read);
    if (i > 0 && !progress(BytesOf(batches[i - 1]))) return stopped();
    writer = std::thread([&, i, buffer_ptr = &buffer] {
      written = Transfer(core, TransferKind::kWrite, batches[i], *buffer_ptr);
      if (written.ok()) {
        written = CheckBatch(core, current.name(), batches[i], /*moved=*/true,
                             staging);
      }
    });
  }
  MESHPOOL_RETURN_IF_ERROR(join());
  if (!batches.empty() && !progress(BytesOf(batches.back()))) return stopped();
  return absl::OkStatus();
}

}  // namespace meshpool::client_internal
