// meshpool/rdma/sim.h: the simulated backend, for tests: a deterministic
// (seeded) in-process fabric with injectable faults and a hook between any
// two requests. Thread-safe.
#ifndef MESHPOOL_RDMA_SIM_H_
#define MESHPOOL_RDMA_SIM_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "rdma/rdma.h"

namespace meshpool::rdma {

// Faults a test can inject into the simulated fabric.
struct SimFaults {
  // A lost request completes DeadlineExceeded; every fenced request after
  // it on that endpoint completes Aborted without executing.
  double drop_probability = 0;
  double delay_probability = 0;  // request held back, executed later
  uint32_t max_delay_polls = 4;  // how many Poll() rounds a delay lasts
};

// A deterministic in-process fabric. Transports created from it reach each
// other by name ("sim://<name>"). All memory operations execute under one
// fabric lock, in an order chosen by a PRNG seeded with `seed`.
class SimFabric {
 public:
  static std::shared_ptr<SimFabric> Create(uint64_t seed);
  virtual ~SimFabric() = default;
  virtual uint64_t seed() const = 0;
  // A transport whose Listen() makes it reachable as "sim://<name>".
  virtual std::unique_ptr<Transport> CreateTransport(std::string name) = 0;
  virtual void SetFaults(const SimFaults& faults) = 0;
  // Every endpoint to `name` fails (Unavailable) from now on; new Connects
  // are refused; its memory is no longer reachable. Models node death.
  virtual void KillNode(absl::string_view name) = 0;
  // Breaks every endpoint currently open to `name` (QP error); reconnecting
  // works.
  virtual void BreakEndpoints(absl::string_view name) = 0;
  // Test hook: `hook` runs right before each request executes (after its
  // faults were applied), with no fabric lock held, naming the target node
  // and the request. It may change that node's memory, e.g. replace an object
  // exactly between a client's index READ and its object READ. Pass nullptr
  // to remove it. The hook must not Post/Poll on the endpoint being polled.
  virtual void SetBeforeExecute(
      std::function<void(absl::string_view node, const WorkRequest&)> hook) = 0;
};

}  // namespace meshpool::rdma

#endif  // MESHPOOL_RDMA_SIM_H_
