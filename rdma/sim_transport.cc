// The simulated fabric.
//
// Each SimTransport owns a SimNode (name + RegionRegistry). Listen() enters
// the node into the fabric's table of reachable nodes. An endpoint keeps a
// FIFO of its posted requests; each request's fate (dropped, delayed for
// max_delay_polls Poll() rounds, or normal) is drawn from the fabric's
// std::mt19937_64 when it is posted, so the same seed and the same call
// sequence give the same outcomes. Poll() executes the endpoint's queue head
// first: a delayed head holds back everything behind it (FIFO per endpoint)
// and loses one round of delay per Poll() call. Execution happens under the
// fabric lock, after the SetBeforeExecute hook ran without it, with the same
// rkey/bounds checks as tcp; a violation completes PermissionDenied and
// breaks the endpoint (a verbs QP enters the error state). Sim Poll() never
// blocks: the timeout is ignored.
#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "common/common.h"
#include "rdma/rdma.h"
#include "rdma/region_registry.h"
#include "rdma/sim.h"

namespace meshpool::rdma {
namespace {

constexpr absl::string_view kScheme = "sim://";

struct SimNode {
  SimNode(std::string n, uint64_t seed)
      : name(std::move(n)),
        registry(std::make_shared<internal::RegionRegistry>(seed)) {}
  const std::string name;
  const std::shared_ptr<internal::RegionRegistry> registry;
  // Guarded by the fabric's mutex.
  bool dead = false;
  uint64_t generation = 0;  // bumped by BreakEndpoints
};

struct Fate {
  bool dropped = false;
  uint32_t delay_polls = 0;
};

using BeforeExecute =
    std::function<void(absl::string_view node, const WorkRequest&)>;

class SimFabricImpl : public SimFabric,
                      public std::enable_shared_from_this<SimFabricImpl> {
 public:
  explicit SimFabricImpl(uint64_t seed) : seed_(seed), rng_(seed) {}

  uint64_t seed() const override { return seed_; }
  std::unique_ptr<Transport> CreateTransport(std::string name) override;
  void SetFaults(const SimFaults& faults) override {
    absl::MutexLock lock(&mu_);
    faults_ = faults;
  }
  void KillNode(absl::string_view name) override {
    absl::MutexLock lock(&mu_);
    auto it = listening_.find(name);
    if (it != listening_.end()) it->second->dead = true;
  }
  void BreakEndpoints(absl::string_view name) override {
    absl::MutexLock lock(&mu_);
    auto it = listening_.find(name);
    if (it != listening_.end()) ++it->second->generation;
  }
  void SetBeforeExecute(BeforeExecute hook) override {
    absl::MutexLock lock(&mu_);
    hook_ = std::move(hook);
  }

  // ---- used by SimTransport / SimEndpoint ----
  absl::StatusOr<std::string> Listen(std::shared_ptr<SimNode> node);
  void Unlisten(SimNode& node);
  absl::StatusOr<std::unique_ptr<Endpoint>> Connect(absl::string_view address);
  std::vector<Fate> DrawFates(size_t count);
  BeforeExecute hook() {
    absl::MutexLock lock(&mu_);
    return hook_;
  }
  // Unavailable when `node` died or was broken after `generation`.
  absl::Status CheckAlive(const SimNode& node, uint64_t generation) {
    absl::MutexLock lock(&mu_);
    return CheckAliveLocked(node, generation);
  }
  absl::Status Execute(const SimNode& node, uint64_t generation,
                       const WorkRequest& wr);

 private:
  absl::Status CheckAliveLocked(const SimNode& node, uint64_t generation)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  double NextUnitLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return static_cast<double>(rng_() >> 11) * 0x1.0p-53;
  }

  const uint64_t seed_;
  absl::Mutex mu_;
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
  SimFaults faults_ ABSL_GUARDED_BY(mu_);
  BeforeExecute hook_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<SimNode>> listening_
      ABSL_GUARDED_BY(mu_);
};

class SimEndpoint : public Endpoint {
 public:
  SimEndpoint(std::shared_ptr<SimFabricImpl> fabric,
              std::shared_ptr<SimNode> node, uint64_t generation)
      : fabric_(std::move(fabric)),
        node_(std::move(node)),
        generation_(generation) {}

  absl::Status Post(absl::Span<const WorkRequest> batch) override {
    MESHPOOL_RETURN_IF_ERROR(
        internal::ValidateLocalBatch(batch, queue_.size()));
    if (broken_.ok()) {
      absl::Status alive = fabric_->CheckAlive(*node_, generation_);
      if (!alive.ok()) Break(alive.message());
    }
    if (!broken_.ok()) return broken_;
    std::vector<Fate> fates = fabric_->DrawFates(batch.size());
    for (size_t i = 0; i < batch.size(); ++i) {
      queue_.push_back(Queued{batch[i], fates[i]});
    }
    return absl::OkStatus();
  }

  absl::StatusOr<size_t> Poll(absl::Span<Completion> out,
                              absl::Duration timeout) override;

  bool healthy() const override { return broken_.ok(); }

 private:
  struct Queued {
    WorkRequest wr;
    Fate fate;
  };
  void Break(absl::string_view why) {
    if (!broken_.ok()) return;
    broken_ = absl::UnavailableError(absl::StrCat(
        "sim endpoint to ", node_->name, " broken (", why,
        "); drop it and Connect again"));
  }
  void Complete(Completion* out, absl::Status status) {
    out->wr_id = queue_.front().wr.wr_id;
    out->opcode = queue_.front().wr.opcode;
    out->status = std::move(status);
    queue_.pop_front();
  }

  const std::shared_ptr<SimFabricImpl> fabric_;
  const std::shared_ptr<SimNode> node_;
  const uint64_t generation_;
  absl::Status broken_;
  // A request was lost: fenced requests after it never execute.
  bool dropped_earlier_ = false;
  std::deque<Queued> queue_;
};

absl::StatusOr<size_t> SimEndpoint::Poll(absl::Span<Completion> out,
                                         absl::Duration timeout) {
  if (queue_.empty()) {
    if (!broken_.ok()) return broken_;
    return 0;
  }
  size_t n = 0;
  while (n < out.size() && !queue_.empty()) {
    Queued& head = queue_.front();
    if (broken_.ok()) {
      absl::Status alive = fabric_->CheckAlive(*node_, generation_);
      if (!alive.ok()) Break(alive.message());
    }
    if (!broken_.ok()) {
      Complete(&out[n++], broken_);
      continue;
    }
    if (head.fate.delay_polls > 0) {
      --head.fate.delay_polls;
      break;  // this round, nothing behind the head moves either
    }
    if (head.fate.dropped) {
      dropped_earlier_ = true;
      Complete(&out[n++], absl::DeadlineExceededError(absl::StrCat(
                              OpcodeName(head.wr.opcode), " wr_id ",
                              head.wr.wr_id, " was lost by the fabric")));
      continue;
    }
    if (head.wr.fence && dropped_earlier_) {
      Complete(
          &out[n++],
          absl::AbortedError(absl::StrCat(
              "fenced ", OpcodeName(head.wr.opcode), " wr_id ", head.wr.wr_id,
              " not executed: a request before it on this endpoint was "
              "lost; drop the endpoint and retry the operation")));
      continue;
    }
    if (BeforeExecute hook = fabric_->hook()) hook(node_->name, head.wr);
    absl::Status status = fabric_->Execute(*node_, generation_, head.wr);
    if (absl::IsUnavailable(status)) {
      Break(status.message());  // died while the hook ran; completes above
      continue;
    }
    if (!status.ok()) Break(status.message());
    Complete(&out[n++], std::move(status));
  }
  return n;
}

class SimTransport : public Transport {
 public:
  SimTransport(std::shared_ptr<SimFabricImpl> fabric,
               std::shared_ptr<SimNode> node)
      : fabric_(std::move(fabric)), node_(std::move(node)) {}
  ~SimTransport() override { fabric_->Unlisten(*node_); }

  TransportKind kind() const override { return TransportKind::kSim; }
  absl::StatusOr<std::unique_ptr<MemoryRegion>> RegisterMemory(
      void* addr, size_t length) override {
    return internal::RegisteredRegion::Create(node_->registry, addr, length);
  }
  absl::StatusOr<std::string> Listen(absl::string_view bind) override {
    return fabric_->Listen(node_);
  }
  absl::StatusOr<std::unique_ptr<Endpoint>> Connect(
      absl::string_view peer_address, const Handshake& handshake) override {
    return fabric_->Connect(peer_address);
  }

 private:
  const std::shared_ptr<SimFabricImpl> fabric_;
  const std::shared_ptr<SimNode> node_;
};

std::unique_ptr<Transport> SimFabricImpl::CreateTransport(std::string name) {
  uint64_t rkey_seed;
  {
    absl::MutexLock lock(&mu_);
    rkey_seed = rng_();
  }
  return std::make_unique<SimTransport>(
      shared_from_this(), std::make_shared<SimNode>(std::move(name), rkey_seed));
}

absl::StatusOr<std::string> SimFabricImpl::Listen(
    std::shared_ptr<SimNode> node) {
  absl::MutexLock lock(&mu_);
  if (node->name.empty()) {
    return absl::InvalidArgumentError(
        "a sim transport needs a non-empty name to listen");
  }
  auto [it, inserted] = listening_.try_emplace(node->name, node);
  if (!inserted) {
    if (it->second == node) {
      return absl::FailedPreconditionError(absl::StrCat(
          "sim transport ", node->name, " already listens"));
    }
    if (!it->second->dead) {
      return absl::AlreadyExistsError(absl::StrCat(
          "another live sim transport is named ", node->name,
          "; pick a unique name"));
    }
    it->second = node;  // a restarted node takes over a dead one's name
  }
  return absl::StrCat(kScheme, node->name);
}

void SimFabricImpl::Unlisten(SimNode& node) {
  absl::MutexLock lock(&mu_);
  node.dead = true;  // its memory may be freed after this
  auto it = listening_.find(node.name);
  if (it != listening_.end() && it->second.get() == &node) {
    listening_.erase(it);
  }
}

absl::StatusOr<std::unique_ptr<Endpoint>> SimFabricImpl::Connect(
    absl::string_view address) {
  absl::string_view name = address;
  if (!absl::ConsumePrefix(&name, kScheme) || name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "malformed sim address '", address, "'; use sim://<name>"));
  }
  absl::MutexLock lock(&mu_);
  auto it = listening_.find(name);
  if (it == listening_.end() || it->second->dead) {
    return absl::UnavailableError(absl::StrCat(
        "no live sim node listens as ", address,
        "; wait for it to come back or pick another node"));
  }
  return std::unique_ptr<Endpoint>(
      new SimEndpoint(shared_from_this(), it->second, it->second->generation));
}

std::vector<Fate> SimFabricImpl::DrawFates(size_t count) {
  absl::MutexLock lock(&mu_);
  std::vector<Fate> fates(count);
  for (Fate& fate : fates) {
    fate.dropped = NextUnitLocked() < faults_.drop_probability;
    if (!fate.dropped && NextUnitLocked() < faults_.delay_probability) {
      fate.delay_polls = faults_.max_delay_polls;
    }
  }
  return fates;
}

absl::Status SimFabricImpl::CheckAliveLocked(const SimNode& node,
                                             uint64_t generation) {
  if (node.dead) {
    return absl::UnavailableError(absl::StrCat("node ", node.name, " is dead"));
  }
  if (node.generation != generation) {
    return absl::UnavailableError(
        absl::StrCat("endpoints to ", node.name, " were broken"));
  }
  return absl::OkStatus();
}

absl::Status SimFabricImpl::Execute(const SimNode& node, uint64_t generation,
                                    const WorkRequest& wr) {
  absl::MutexLock lock(&mu_);
  MESHPOOL_RETURN_IF_ERROR(CheckAliveLocked(node, generation));
  MESHPOOL_ASSIGN_OR_RETURN(
      uint8_t * target,
      node.registry->Resolve(wr.rkey, wr.remote_addr, wr.length,
                             DataAccess::Unrestricted()));
  switch (wr.opcode) {
    case Opcode::kRead:
      std::memmove(wr.local, target, wr.length);
      break;
    case Opcode::kWrite:
      std::memmove(target, wr.local, wr.length);
      break;
    case Opcode::kCompareSwap:
    case Opcode::kFetchAdd: {
      uint64_t old =
          internal::ExecuteAtomic(wr.opcode, target, wr.compare_add, wr.swap);
      std::memcpy(wr.local, &old, sizeof(old));
      break;
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::shared_ptr<SimFabric> SimFabric::Create(uint64_t seed) {
  return std::make_shared<SimFabricImpl>(seed);
}

}  // namespace meshpool::rdma
