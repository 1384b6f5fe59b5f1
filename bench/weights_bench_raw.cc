#include "bench/weights_bench_raw.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "auth/auth.h"
#include "common/common.h"
#include "placement/region_layout.h"
#include "rdma/tcp.h"
#include "rdma/verbs.h"

namespace meshpool::bench {
namespace {

constexpr size_t kMaxLanesPerNode = 64;

// The NodeInfo of every extent's node process, which must be alive.
absl::StatusOr<std::vector<proto::NodeInfo>> ExtentNodes(
    const proto::RegionInfo& region, const proto::ClusterMap& map) {
  absl::flat_hash_map<std::string, const proto::NodeEntry*> by_id;
  for (const proto::NodeEntry& e : map.nodes()) by_id[e.info().node_id()] = &e;
  std::vector<proto::NodeInfo> out;
  for (const proto::RegionExtent& x : region.extents()) {
    auto it = by_id.find(x.node_id());
    if (it == by_id.end() || it->second->state() != proto::NODE_ALIVE ||
        it->second->info().incarnation() != x.incarnation()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "node ", x.node_id(), " holding stripes of region ", region.name(),
          " is not alive in the cluster map (epoch ", map.epoch(), ")"));
    }
    if (it->second->info().transport_addresses().empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("node ", x.node_id(), " has no transport address"));
    }
    out.push_back(it->second->info());
  }
  return out;
}

absl::StatusOr<std::unique_ptr<rdma::Transport>> TransportFor(
    absl::string_view address, const rdma::VerbsOptions& verbs) {
  if (absl::StartsWith(address, "tcp://")) return rdma::CreateTcpTransport();
  if (absl::StartsWith(address, "verbs://")) {
    return rdma::CreateVerbsTransport(verbs);
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "node address ", address, " uses a transport this bench cannot drive"));
}

}  // namespace

RawBench::~RawBench() = default;

absl::StatusOr<std::unique_ptr<RawBench>> RawBench::Create(
    const proto::RegionInfo& region, const proto::ClusterMap& map,
    const RawOptions& options) {
  if (options.lanes_per_node < 1 || options.lanes_per_node > kMaxLanesPerNode ||
      options.request_bytes == 0 ||
      options.request_bytes > rdma::kMaxTransferBytes || options.depth < 1 ||
      options.depth > rdma::kMaxOutstanding) {
    return absl::InvalidArgumentError(
        absl::StrCat("raw bench: lanes per node must be 1..", kMaxLanesPerNode,
                     ", request bytes 1..", rdma::kMaxTransferBytes,
                     ", depth 1..", rdma::kMaxOutstanding));
  }
  MESHPOOL_ASSIGN_OR_RETURN(placement::RegionLayout layout,
                            placement::RegionLayout::Create(region));
  MESHPOOL_ASSIGN_OR_RETURN(std::vector<proto::NodeInfo> infos,
                            ExtentNodes(region, map));
  std::unique_ptr<RawBench> bench(new RawBench());
  bench->options_ = options;
  const std::string& first = infos.front().transport_addresses(0);
  bench->transport_name_ = first.substr(0, first.find("://"));
  MESHPOOL_ASSIGN_OR_RETURN(bench->transport_,
                            TransportFor(first, options.verbs));
  client_internal::ConnectionOptions copts;
  copts.client_id = "weights-bench-raw";
  // The bench's own cluster runs without TLS.
  MESHPOOL_ASSIGN_OR_RETURN(copts.security,
                            auth::MakeChannelSecurity(auth::TlsConfig{}));
  copts.op_timeout = options.op_timeout;
  for (const proto::NodeInfo& info : infos) {
    if (!absl::StartsWith(info.transport_addresses(0),
                          bench->transport_name_ + "://")) {
      return absl::FailedPreconditionError(
          "the region's nodes use different transports; the raw bench "
          "drives one");
    }
    MESHPOOL_ASSIGN_OR_RETURN(
        auto node,
        client_internal::NodeConnection::Create(
            info, *bench->transport_, info.transport_addresses(0), copts));
    // The map carries no pool address or key: ask the node.
    MESHPOOL_RETURN_IF_ERROR(node->LearnPool());
    bench->nodes_.push_back(std::move(node));
  }
  bench->bytes_ = layout.size();
  bench->buffer_.reset(new (std::nothrow) char[bench->bytes_]);
  if (!bench->buffer_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot allocate a ", FormatSize(bench->bytes_),
        " buffer for the raw bench; use a smaller --scratch-bytes"));
  }
  std::memset(bench->buffer_.get(), 0, bench->bytes_);  // fault pages in
  MESHPOOL_ASSIGN_OR_RETURN(
      bench->registration_,
      bench->transport_->RegisterMemory(bench->buffer_.get(), bench->bytes_));
  // Every extent's requests in stripe order, cut into contiguous shares.
  std::vector<std::vector<rdma::WorkRequest>> per_node(infos.size());
  for (uint64_t s = 0; s < layout.stripes(); ++s) {
    const placement::StripeCopy copy = layout.Copy(s, 0);
    const client_internal::NodeConnection& node = *bench->nodes_[copy.extent];
    const uint64_t length = layout.StripeLength(s);
    for (uint64_t at = 0; at < length; at += options.request_bytes) {
      rdma::WorkRequest wr;
      wr.local = bench->buffer_.get() + s * layout.stripe_bytes() + at;
      wr.length =
          static_cast<uint32_t>(std::min(options.request_bytes, length - at));
      wr.lkey = bench->registration_->lkey();
      wr.remote_addr = node.pool_addr() + copy.pool_offset + at;
      wr.rkey = node.pool_rkey();
      wr.wr_id = per_node[copy.extent].size();
      per_node[copy.extent].push_back(wr);
    }
  }
  for (size_t n = 0; n < per_node.size(); ++n) {
    const std::vector<rdma::WorkRequest>& all = per_node[n];
    const size_t lanes = std::min(options.lanes_per_node, all.size());
    for (size_t l = 0; l < lanes; ++l) {
      Lane lane;
      lane.requests.assign(all.begin() + all.size() * l / lanes,
                           all.begin() + all.size() * (l + 1) / lanes);
      std::shared_ptr<client_internal::NodeConnection> node = bench->nodes_[n];
      MESHPOOL_ASSIGN_OR_RETURN(
          lane.endpoint,
          bench->transport_->Connect(
              node->info().transport_addresses(0),
              [node](const std::string& r) { return node->Handshake(r); }));
      bench->lanes_.push_back(std::move(lane));
    }
  }
  return bench;
}

absl::Status RawBench::RunLane(Lane& lane, rdma::Opcode op, int passes) const {
  const size_t n = lane.requests.size();
  std::vector<rdma::WorkRequest> batch;
  batch.reserve(std::min(options_.depth, rdma::kMaxBatch));
  std::vector<rdma::Completion> done(options_.depth);
  for (int pass = 0; pass < passes; ++pass) {
    size_t next = 0, completed = 0, outstanding = 0;
    while (completed < n) {
      batch.clear();
      while (next < n && outstanding + batch.size() < options_.depth &&
             batch.size() < rdma::kMaxBatch) {
        batch.push_back(lane.requests[next++]);
        batch.back().opcode = op;
      }
      if (!batch.empty()) {
        MESHPOOL_RETURN_IF_ERROR(lane.endpoint->Post(batch));
        outstanding += batch.size();
      }
      MESHPOOL_ASSIGN_OR_RETURN(
          size_t got,
          lane.endpoint->Poll(absl::MakeSpan(done), options_.op_timeout));
      if (got == 0) {
        return absl::DeadlineExceededError(absl::StrCat(
            "raw ", rdma::OpcodeName(op), ": no completion within ",
            absl::FormatDuration(options_.op_timeout)));
      }
      for (size_t i = 0; i < got; ++i) {
        if (!done[i].status.ok()) {
          return absl::Status(done[i].status.code(),
                              absl::StrCat("raw ", rdma::OpcodeName(op), ": ",
                                           done[i].status.message()));
        }
      }
      completed += got;
      outstanding -= got;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<absl::Duration> RawBench::Run(rdma::Opcode op, int passes) {
  std::vector<absl::Status> results(lanes_.size());
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (size_t i = 0; i < lanes_.size(); ++i) {
    threads.emplace_back([&, i] {
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      results[i] = RunLane(lanes_[i], op, passes);
    });
  }
  const absl::Time start = absl::Now();
  go.store(true, std::memory_order_release);
  for (std::thread& t : threads) t.join();
  const absl::Duration took = absl::Now() - start;
  for (const absl::Status& s : results) MESHPOOL_RETURN_IF_ERROR(s);
  return took;
}

}  // namespace meshpool::bench
