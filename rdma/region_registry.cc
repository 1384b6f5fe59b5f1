#include "rdma/region_registry.h"

#include <atomic>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "common/common.h"

namespace meshpool::rdma::internal {

absl::StatusOr<uint32_t> RegionRegistry::Add(void* addr, size_t length) {
  if (addr == nullptr || length == 0) {
    return absl::InvalidArgumentError(
        "RegisterMemory needs a non-null address and a non-zero length");
  }
  const uint64_t base = reinterpret_cast<uint64_t>(addr);
  if (base + length < base) {
    return absl::InvalidArgumentError(
        "RegisterMemory range wraps around the address space; pass a valid "
        "buffer");
  }
  absl::MutexLock lock(&mu_);
  if (regions_.size() >= kMaxRegistrations) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "transport already holds ", kMaxRegistrations,
        " registrations; register fewer, larger regions"));
  }
  uint32_t rkey = 0;
  // The table is sparse (static_assert above), so this ends quickly.
  while (rkey == 0 || regions_.contains(rkey)) {
    rkey = static_cast<uint32_t>(rng_());
  }
  regions_.emplace(rkey, Range{base, length});
  return rkey;
}

void RegionRegistry::Remove(uint32_t rkey) {
  absl::MutexLock lock(&mu_);
  regions_.erase(rkey);
}

absl::StatusOr<uint8_t*> RegionRegistry::Resolve(
    uint32_t rkey, uint64_t remote_addr, uint64_t length,
    const DataAccess& access) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = regions_.find(rkey);
  if (it == regions_.end()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "rkey ", rkey, " is not registered at the peer; refresh the region "
        "descriptor and reconnect"));
  }
  const Range& r = it->second;
  // Overflow-safe form of base <= addr && addr + length <= base + r.length.
  if (remote_addr < r.base || length > r.length ||
      remote_addr - r.base > r.length - length) {
    return absl::PermissionDeniedError(absl::StrCat(
        "remote range [", remote_addr, ", +", length,
        ") is outside the region of rkey ", rkey, "; check the address"));
  }
  if (!access.unrestricted &&
      TouchesOthersLocked(remote_addr, length, access.tenant)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "remote range [", remote_addr, ", +", length,
        ") holds another tenant's memory; address your own regions"));
  }
  return reinterpret_cast<uint8_t*>(remote_addr);
}

bool RegionRegistry::TouchesOthersLocked(uint64_t addr, uint64_t length,
                                         absl::string_view tenant) const {
  if (reservations_.empty()) return false;
  const uint64_t end = addr + length;  // inside a registration: no wrap
  // The reservation starting at or before addr, then every one starting
  // before end.
  auto it = reservations_.upper_bound(addr);
  if (it != reservations_.begin()) {
    auto before = std::prev(it);
    if (before->second.end > addr && before->second.tenant != tenant) {
      return true;
    }
  }
  for (; it != reservations_.end() && it->first < end; ++it) {
    if (it->second.tenant != tenant) return true;
  }
  return false;
}

absl::Status RegionRegistry::Reserve(const void* addr, size_t length,
                                     absl::string_view tenant) {
  const uint64_t begin = reinterpret_cast<uint64_t>(addr);
  if (addr == nullptr || length == 0 || begin + length < begin) {
    return absl::InvalidArgumentError(
        "ReserveForTenant needs a non-null, non-empty range that does not "
        "wrap around");
  }
  const uint64_t end = begin + length;
  absl::MutexLock lock(&mu_);
  // Reservations the new one overlaps keep what lies outside it.
  auto it = reservations_.upper_bound(begin);
  if (it != reservations_.begin() && std::prev(it)->second.end > begin) {
    it = std::prev(it);
  }
  while (it != reservations_.end() && it->first < end) {
    if (it->second.end > end) {
      reservations_.emplace(end,
                            Reservation{it->second.end, it->second.tenant});
    }
    if (it->first < begin) {
      it->second.end = begin;
      ++it;
    } else {
      it = reservations_.erase(it);
    }
  }
  reservations_.emplace(begin, Reservation{end, std::string(tenant)});
  return absl::OkStatus();
}

void RegionRegistry::EndReservation(const void* addr) {
  absl::MutexLock lock(&mu_);
  reservations_.erase(reinterpret_cast<uint64_t>(addr));
}

absl::StatusOr<std::unique_ptr<MemoryRegion>> RegisteredRegion::Create(
    std::shared_ptr<RegionRegistry> registry, void* addr, size_t length) {
  MESHPOOL_ASSIGN_OR_RETURN(uint32_t rkey, registry->Add(addr, length));
  return std::unique_ptr<MemoryRegion>(
      new RegisteredRegion(std::move(registry), addr, length, rkey));
}

RegisteredRegion::RegisteredRegion(std::shared_ptr<RegionRegistry> registry,
                                   void* addr, size_t length, uint32_t rkey)
    : MemoryRegion(addr, length, /*lkey=*/0, rkey),
      registry_(std::move(registry)) {}

RegisteredRegion::~RegisteredRegion() { registry_->Remove(remote().rkey); }

bool IsKnownOpcode(uint8_t opcode) {
  return opcode >= static_cast<uint8_t>(Opcode::kRead) &&
         opcode <= static_cast<uint8_t>(Opcode::kFetchAdd);
}

absl::Status ValidateLocalRequest(const WorkRequest& wr) {
  if (!IsKnownOpcode(static_cast<uint8_t>(wr.opcode))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "work request ", wr.wr_id, " has unknown opcode ",
        static_cast<int>(wr.opcode), "; use READ, WRITE, CAS or FAA"));
  }
  if (wr.local == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "work request ", wr.wr_id, " has a null local buffer"));
  }
  if (wr.length == 0 || wr.length > kMaxTransferBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "work request ", wr.wr_id, " has length ", wr.length,
        "; use 1..", kMaxTransferBytes, " bytes and split bigger transfers"));
  }
  if (IsAtomic(wr.opcode) &&
      (wr.length != kAtomicBytes || wr.remote_addr % kAtomicBytes != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        OpcodeName(wr.opcode), " work request ", wr.wr_id,
        " needs length ", kAtomicBytes, " and a ", kAtomicBytes,
        "-byte aligned remote address (got length ", wr.length, ", addr ",
        wr.remote_addr, ")"));
  }
  return absl::OkStatus();
}

absl::Status ValidateLocalBatch(absl::Span<const WorkRequest> batch,
                                size_t outstanding) {
  if (outstanding + batch.size() > kMaxOutstanding) {
    return absl::ResourceExhaustedError(absl::StrCat(
        outstanding, " requests are outstanding and ", batch.size(),
        " more would pass the limit of ", kMaxOutstanding,
        "; poll completions first"));
  }
  if (batch.size() > kMaxBatch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a batch holds at most ", kMaxBatch, " work requests, got ", batch.size(),
        "; split it"));
  }
  for (const WorkRequest& wr : batch) {
    MESHPOOL_RETURN_IF_ERROR(ValidateLocalRequest(wr));
  }
  return absl::OkStatus();
}

uint64_t ExecuteAtomic(Opcode op, uint8_t* word, uint64_t compare_add,
                       uint64_t swap) {
  std::atomic_ref<uint64_t> ref(*reinterpret_cast<uint64_t*>(word));
  if (op == Opcode::kFetchAdd) return ref.fetch_add(compare_add);
  uint64_t expected = compare_add;
  ref.compare_exchange_strong(expected, swap);
  return expected;  // the old value whether or not the swap happened
}

RequestVerdict CheckRequest(const RequestHeader& h, uint32_t max_request_bytes,
                            const RegionRegistry& registry,
                            const DataAccess& access, uint8_t** target) {
  if (h.magic != kRequestMagic || !IsKnownOpcode(h.opcode)) {
    return RequestVerdict::kMalformed;
  }
  if (h.length == 0 || h.length > max_request_bytes) {
    return RequestVerdict::kMalformed;
  }
  const auto op = static_cast<Opcode>(h.opcode);
  if (IsAtomic(op) &&
      (h.length != kAtomicBytes || h.remote_addr % kAtomicBytes != 0)) {
    return RequestVerdict::kMalformed;
  }
  absl::StatusOr<uint8_t*> where =
      registry.Resolve(h.rkey, h.remote_addr, h.length, access);
  if (!where.ok()) return RequestVerdict::kDenied;
  *target = *where;
  return RequestVerdict::kExecute;
}

}  // namespace meshpool::rdma::internal
