#include "store/slot_clearer.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/common.h"

namespace meshpool::store {

std::string LoopbackAddress(absl::string_view listen_address) {
  const size_t scheme = listen_address.find("://");
  const size_t host_begin = scheme == absl::string_view::npos ? 0 : scheme + 3;
  const size_t colon = listen_address.rfind(':');
  if (colon == absl::string_view::npos || colon < host_begin) {
    return std::string(listen_address);
  }
  absl::string_view host =
      listen_address.substr(host_begin, colon - host_begin);
  absl::string_view loopback;
  if (host == "0.0.0.0" || host.empty()) loopback = "127.0.0.1";
  if (host == "[::]" || host == "::") loopback = "[::1]";
  if (loopback.empty()) return std::string(listen_address);
  return absl::StrCat(listen_address.substr(0, host_begin), loopback,
                      listen_address.substr(colon));
}

TransportSlotClearer::TransportSlotClearer(rdma::Transport* transport,
                                           std::string address,
                                           rdma::RemoteRegion pool)
    : transport_(transport), address_(std::move(address)), pool_(pool) {}

TransportSlotClearer::~TransportSlotClearer() = default;

absl::StatusOr<std::unique_ptr<TransportSlotClearer>>
TransportSlotClearer::Create(rdma::Transport* transport,
                             absl::string_view listen_address,
                             rdma::RemoteRegion pool) {
  if (transport == nullptr) {
    return absl::InvalidArgumentError("TransportSlotClearer needs a transport");
  }
  std::unique_ptr<TransportSlotClearer> clearer(new TransportSlotClearer(
      transport, LoopbackAddress(listen_address), pool));
  clearer->buffer_ = std::make_unique<uint64_t[]>(rdma::kMaxBatch);
  MESHPOOL_ASSIGN_OR_RETURN(
      clearer->region_,
      transport->RegisterMemory(clearer->buffer_.get(),
                                rdma::kMaxBatch * sizeof(uint64_t)));
  MESHPOOL_RETURN_IF_ERROR(clearer->Connect());
  return clearer;
}

absl::Status TransportSlotClearer::Connect() {
  endpoint_.reset();
  // verbs: the node is its own peer, so its handshake is answered here.
  rdma::Transport* transport = transport_;
  rdma::Handshake loopback = [transport](const std::string& request) {
    return transport->AcceptHandshake(request,
                                      rdma::DataAccess::Unrestricted());
  };
  absl::StatusOr<std::unique_ptr<rdma::Endpoint>> endpoint =
      transport_->Connect(address_, loopback);
  if (!endpoint.ok()) {
    return absl::Status(
        endpoint.status().code(),
        absl::StrCat("the evictor cannot open an endpoint to this node's own "
                     "transport at ",
                     address_, ": ", endpoint.status().message()));
  }
  endpoint_ = *std::move(endpoint);
  return absl::OkStatus();
}

absl::Status TransportSlotClearer::Clear(absl::Span<const SlotClear> slots,
                                         absl::Span<uint64_t> old) {
  if (slots.size() > rdma::kMaxBatch || old.size() != slots.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Clear takes at most ", rdma::kMaxBatch,
                     " slots and as many result words; got ", slots.size(),
                     " and ", old.size()));
  }
  if (slots.empty()) return absl::OkStatus();
  if (endpoint_ == nullptr || !endpoint_->healthy()) {
    MESHPOOL_RETURN_IF_ERROR(Connect());
  }
  std::vector<rdma::WorkRequest> batch(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    buffer_[i] = slots[i].expected;  // overwritten by the CAS
    rdma::WorkRequest& wr = batch[i];
    wr.wr_id = i;
    wr.opcode = rdma::Opcode::kCompareSwap;
    wr.local = &buffer_[i];
    wr.length = rdma::kAtomicBytes;
    wr.lkey = region_->lkey();
    wr.remote_addr = pool_.addr + slots[i].offset;
    wr.rkey = pool_.rkey;
    wr.compare_add = slots[i].expected;
    wr.swap = 0;
  }
  std::vector<rdma::Completion> done(slots.size());
  absl::Status s = rdma::PostAndWait(*endpoint_, batch, absl::MakeSpan(done),
                                     kSlotClearTimeout);
  if (!s.ok()) {
    endpoint_.reset();  // requests may still be in flight on it: drop it
    return s;
  }
  for (size_t i = 0; i < slots.size(); ++i) old[i] = buffer_[i];
  return absl::OkStatus();
}

}  // namespace meshpool::store
