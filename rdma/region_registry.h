// meshpool/rdma internal: the registrations of one transport and the checks
// every backend applies before touching memory. Shared by tcp, uc and sim.
//
//  * RegionRegistry: rkey -> [base, base+length). Hands out random, nonzero,
//    unique 32-bit rkeys from a PRNG seeded by the owner (sim passes a value
//    derived from the fabric seed so runs repeat); and the ranges reserved
//    for tenants (Transport::ReserveForTenant), which Resolve refuses to
//    callers admitted for another tenant. Thread-safe.
//  * RegisteredRegion: the MemoryRegion tcp and sim return; deregisters its
//    rkey on destruction.
//  * ValidateLocalRequest / ValidateLocalBatch: what Endpoint::Post checks
//    before anything is sent.
//  * CheckRequest: what a responder (tcp, uc) checks of a request from the
//    wire before it touches memory.
//  * RegistryTransport: the base of tcp's and uc's Transport, which keep
//    their registrations and reservations in one registry.
#ifndef MESHPOOL_RDMA_REGION_REGISTRY_H_
#define MESHPOOL_RDMA_REGION_REGISTRY_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "rdma/rdma.h"
#include "rdma/tcp_wire.h"

namespace meshpool::rdma::internal {

// Most live registrations one transport holds (verbs devices allow far fewer).
inline constexpr size_t kMaxRegistrations = 1 << 16;
static_assert(kMaxRegistrations < (1ull << 32) / 2, "rkey space must stay sparse");

class RegionRegistry {
 public:
  explicit RegionRegistry(uint64_t seed) : rng_(seed) {}
  RegionRegistry(const RegionRegistry&) = delete;
  RegionRegistry& operator=(const RegionRegistry&) = delete;

  // Registers [addr, addr+length) and returns its new rkey.
  // Errors: InvalidArgument (null, empty, wraps around), ResourceExhausted
  // (kMaxRegistrations live).
  absl::StatusOr<uint32_t> Add(void* addr, size_t length);

  // Forgets `rkey`; later requests naming it are refused.
  void Remove(uint32_t rkey);

  // Returns the host address of [remote_addr, remote_addr+length) when it
  // lies inside the registration named by `rkey` and touches no range
  // reserved for a tenant `access` does not act for; PermissionDenied
  // otherwise (unknown rkey, out of bounds, another tenant's memory).
  absl::StatusOr<uint8_t*> Resolve(uint32_t rkey, uint64_t remote_addr,
                                   uint64_t length,
                                   const DataAccess& access) const;

  // Reserves [addr, addr+length) for `tenant`; reservations it overlaps
  // keep only what lies outside it (those bytes now hold the new tenant's
  // data).
  // InvalidArgument for a null, empty or wrapping range.
  absl::Status Reserve(const void* addr, size_t length,
                       absl::string_view tenant);
  // Ends the reservation that starts at `addr` (none: no-op).
  void EndReservation(const void* addr);

 private:
  struct Range {
    uint64_t base;
    uint64_t length;
  };
  struct Reservation {
    uint64_t end;
    std::string tenant;
  };
  // Whether [addr, addr+length) touches a range reserved for a tenant
  // other than `tenant`.
  bool TouchesOthersLocked(uint64_t addr, uint64_t length,
                           absl::string_view tenant) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint32_t, Range> regions_ ABSL_GUARDED_BY(mu_);
  // By start address; never overlapping.
  std::map<uint64_t, Reservation> reservations_ ABSL_GUARDED_BY(mu_);
};

// The MemoryRegion of the tcp and sim backends. Keeps the registry alive so
// it may outlive its transport.
class RegisteredRegion : public MemoryRegion {
 public:
  // Registers with `registry`; errors as RegionRegistry::Add.
  static absl::StatusOr<std::unique_ptr<MemoryRegion>> Create(
      std::shared_ptr<RegionRegistry> registry, void* addr, size_t length);
  ~RegisteredRegion() override;

 private:
  RegisteredRegion(std::shared_ptr<RegionRegistry> registry, void* addr,
                   size_t length, uint32_t rkey);
  std::shared_ptr<RegionRegistry> registry_;
};

// InvalidArgument naming the problem when `wr` is malformed: unknown opcode,
// null local buffer, length 0 or > kMaxTransferBytes, atomic with length !=
// kAtomicBytes or a remote_addr not aligned to it.
absl::Status ValidateLocalRequest(const WorkRequest& wr);

// ValidateLocalRequest on each, plus batch.size() <= kMaxBatch and
// outstanding + batch.size() <= kMaxOutstanding (else ResourceExhausted). An empty
// batch is valid (nothing to post).
absl::Status ValidateLocalBatch(absl::Span<const WorkRequest> batch,
                                size_t outstanding);

// The base of the transports whose node serves requests it checks against
// a RegionRegistry (tcp, uc): registrations and tenant reservations live
// there, shared with the responder. Thread-safe.
class RegistryTransport : public Transport {
 public:
  absl::StatusOr<std::unique_ptr<MemoryRegion>> RegisterMemory(
      void* addr, size_t length) override {
    return RegisteredRegion::Create(registry_, addr, length);
  }
  absl::Status ReserveForTenant(const void* addr, size_t length,
                                absl::string_view tenant) override {
    return registry_->Reserve(addr, length, tenant);
  }
  void EndReservation(const void* addr) override {
    registry_->EndReservation(addr);
  }
  bool enforces_reservations() const override { return true; }

 protected:
  explicit RegistryTransport(uint64_t rkey_seed)
      : registry_(std::make_shared<RegionRegistry>(rkey_seed)) {}

  const std::shared_ptr<RegionRegistry> registry_;
};

// A responder's verdict on a request header from the wire.
enum class RequestVerdict {
  kExecute,    // *target is where it reads or writes
  kDenied,     // well formed, but names memory it may not touch
  kMalformed,  // bad magic or opcode, length 0 or over max_request_bytes,
               // an atomic not 8 bytes or not aligned
};
// `access`: whom the request's connection was admitted as.
RequestVerdict CheckRequest(const RequestHeader& h, uint32_t max_request_bytes,
                            const RegionRegistry& registry,
                            const DataAccess& access, uint8_t** target);

// True for the four opcodes rdma.h defines.
bool IsKnownOpcode(uint8_t opcode);
inline bool IsAtomic(Opcode op) {
  return op == Opcode::kCompareSwap || op == Opcode::kFetchAdd;
}

// Applies CAS/FAA to the 8-byte aligned word at `word`; returns the old
// value. REQUIRES: `word` is 8-byte aligned; only the executing agent
// (responder or fabric) modifies it concurrently.
uint64_t ExecuteAtomic(Opcode op, uint8_t* word, uint64_t compare_add,
                       uint64_t swap);

}  // namespace meshpool::rdma::internal

#endif  // MESHPOOL_RDMA_REGION_REGISTRY_H_
