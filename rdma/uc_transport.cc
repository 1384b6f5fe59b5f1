// The uc Transport: registrations in a RegionRegistry, a UcResponder once
// Listen() is called, UcEndpoints for Connect().
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/common.h"
#include "rdma/rdma.h"
#include "rdma/region_registry.h"
#include "rdma/uc.h"
#include "rdma/uc_endpoint.h"
#include "rdma/uc_responder.h"

namespace meshpool::rdma {
namespace {

class UcTransport : public Transport {
 public:
  UcTransport(const UcOptions& options, uint64_t rkey_seed)
      : options_(options),
        registry_(std::make_shared<internal::RegionRegistry>(rkey_seed)) {}

  TransportKind kind() const override { return TransportKind::kUc; }

  absl::StatusOr<std::unique_ptr<MemoryRegion>> RegisterMemory(
      void* addr, size_t length) override {
    return internal::RegisteredRegion::Create(registry_, addr, length);
  }

  absl::StatusOr<std::string> Listen(absl::string_view bind) override {
    absl::MutexLock lock(&mu_);
    if (responder_ != nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "uc transport already listens on ", responder_->address(),
          "; create another transport to serve a second address"));
    }
    MESHPOOL_ASSIGN_OR_RETURN(
        responder_, internal::UcResponder::Create(bind, options_, registry_));
    return responder_->address();
  }

  absl::StatusOr<std::unique_ptr<Endpoint>> Connect(
      absl::string_view peer_address, const Handshake& handshake) override {
    return internal::UcEndpoint::Connect(peer_address, options_);
  }

 private:
  const UcOptions options_;
  const std::shared_ptr<internal::RegionRegistry> registry_;
  absl::Mutex mu_;
  // Last: destroyed first, so no session outlives the transport.
  std::unique_ptr<internal::UcResponder> responder_ ABSL_GUARDED_BY(mu_);
};

bool IsProbability(double p) { return p >= 0 && p <= 1; }

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> CreateUcTransport(
    const UcOptions& options) {
  // The channel's own checks, once, here rather than per connection.
  internal::UcChannel::Options channel = internal::ChannelOptions(options, 0);
  absl::StatusOr<internal::UcChannel> probe = internal::UcChannel::Create(
      channel, [](absl::Span<const uint8_t>) { return true; });
  if (!probe.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("UcOptions: ", probe.status().message()));
  }
  if (options.max_request_bytes == 0 ||
      options.max_request_bytes > kUcChunkBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("UcOptions.max_request_bytes must be 1..", kUcChunkBytes));
  }
  if (options.connect_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "UcOptions.connect_timeout must be positive");
  }
  if (!IsProbability(options.faults.drop) ||
      !IsProbability(options.faults.duplicate) ||
      !IsProbability(options.faults.corrupt)) {
    return absl::InvalidArgumentError(
        "UcOptions.faults: probabilities are 0..1");
  }
  absl::BitGen gen;
  return std::unique_ptr<Transport>(
      new UcTransport(options, absl::Uniform<uint64_t>(gen)));
}

}  // namespace meshpool::rdma
