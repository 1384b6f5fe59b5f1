// meshpool/store/slot_clearer.h: how the node's evictor unlinks objects.
//
// Index slots change only by CAS through the transport, never by a CPU
// atomic on the node: on a real NIC, NIC atomics and CPU atomics on one word
// are not atomic with each other (DESIGN §3), and clients CAS slots with
// the NIC. So the evictor clears a slot with CAS(slot, word it saw, 0)
// posted on an endpoint the node opened to its own transport, exactly as a
// client's DELETE would.
//
// Thread-safety: a SlotClearer is used by one thread at a time (the node's
// background loop).
#ifndef MESHPOOL_STORE_SLOT_CLEARER_H_
#define MESHPOOL_STORE_SLOT_CLEARER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "rdma/rdma.h"

namespace meshpool::store {

// How long one batch of CASes may take before the endpoint is dropped.
inline constexpr absl::Duration kSlotClearTimeout = absl::Seconds(5);

// One index slot to clear: its pool offset and the word the evictor read.
struct SlotClear {
  uint64_t offset = 0;
  uint64_t expected = 0;
};

class SlotClearer {
 public:
  virtual ~SlotClearer() = default;
  // CAS(slot, expected, 0) for each slot, as one batch; old[i] receives the
  // slot's previous word (== expected: it was cleared).
  // REQUIRES: slots.size() <= rdma::kMaxBatch, old.size() == slots.size().
  // Errors: what the transport returns (some CASes may have landed: the
  // caller looks at the index again before believing anything).
  virtual absl::Status Clear(absl::Span<const SlotClear> slots,
                             absl::Span<uint64_t> old) = 0;
};

// Clears slots through an endpoint to the node's own transport: tcp and sim
// Connect to the address Listen returned (a wildcard host is dialled on
// loopback), verbs too, with a Handshake that hands the request straight
// to the transport's AcceptHandshake (a loopback QP). The CAS results land
// in a buffer registered with the transport (8 bytes per CAS).
class TransportSlotClearer final : public SlotClearer {
 public:
  // `transport` is listening at `listen_address` (what Listen returned) and
  // serves `pool`; it must outlive the clearer. Connects once now, and
  // again on the next Clear after the endpoint broke.
  // Errors: ResourceExhausted (the buffer cannot be registered), what
  // Connect returns.
  static absl::StatusOr<std::unique_ptr<TransportSlotClearer>> Create(
      rdma::Transport* transport, absl::string_view listen_address,
      rdma::RemoteRegion pool);
  ~TransportSlotClearer() override;

  absl::Status Clear(absl::Span<const SlotClear> slots,
                     absl::Span<uint64_t> old) override;

  // The address it dials (loopback in place of a wildcard host).
  const std::string& address() const { return address_; }

 private:
  TransportSlotClearer(rdma::Transport* transport, std::string address,
                       rdma::RemoteRegion pool);
  absl::Status Connect();

  rdma::Transport* const transport_;
  const std::string address_;
  const rdma::RemoteRegion pool_;
  // Teardown: the endpoint before the registration before the buffer.
  std::unique_ptr<uint64_t[]> buffer_;  // rdma::kMaxBatch words
  std::unique_ptr<rdma::MemoryRegion> region_;
  std::unique_ptr<rdma::Endpoint> endpoint_;
};

// The address to dial to reach `listen_address` from this host: a wildcard
// host (0.0.0.0, [::], ::) becomes loopback; anything else is unchanged.
std::string LoopbackAddress(absl::string_view listen_address);

}  // namespace meshpool::store

#endif  // MESHPOOL_STORE_SLOT_CLEARER_H_
