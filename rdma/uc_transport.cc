// The uc Transport: registrations in a RegionRegistry, a UcResponder once
// Listen() is called, UcEndpoints for Connect(), each on a UDP link or a UC
// QP link (the devices opened on first need).
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/common.h"
#include "rdma/rdma.h"
#include "rdma/region_registry.h"
#include "rdma/uc.h"
#include "rdma/uc_endpoint.h"
#include "rdma/uc_link.h"
#include "rdma/uc_responder.h"
#include "rdma/verbs_uc_link.h"

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
    if (options_.link == UcLinkKind::kVerbs) {
      MESHPOOL_ASSIGN_OR_RETURN(internal::VerbsUcLinks * links, LinksLocked());
      MESHPOOL_ASSIGN_OR_RETURN(
          responder_,
          internal::UcResponder::CreateForLinks(
              absl::StrCat(kScheme, links->self_name()), options_, registry_));
    } else {
      MESHPOOL_ASSIGN_OR_RETURN(
          responder_, internal::UcResponder::Create(bind, options_, registry_));
    }
    return responder_->address();
  }

  // A client's UC QP handshake: a link for it, served by the responder.
  absl::StatusOr<std::string> AcceptHandshake(
      absl::string_view request) override {
    absl::MutexLock lock(&mu_);
    if (responder_ == nullptr || options_.link != UcLinkKind::kVerbs) {
      return absl::FailedPreconditionError(
          "this uc transport does not serve UC queue pairs (it listens on "
          "UDP, or not yet); its address names how to reach it");
    }
    MESHPOOL_ASSIGN_OR_RETURN(internal::VerbsUcLinks::Accepted accepted,
                              links_->Accept(request));
    responder_->AddLink(std::move(accepted.link));
    return std::move(accepted.reply);
  }

  absl::StatusOr<std::unique_ptr<Endpoint>> Connect(
      absl::string_view peer_address, const Handshake& handshake) override {
    if (!absl::StartsWith(peer_address, kScheme)) {
      return absl::InvalidArgumentError(
          absl::StrCat("malformed address '", peer_address,
                       "'; use uc://host:port or uc://NAME"));
    }
    const absl::string_view rest = peer_address.substr(kScheme.size());
    if (!rest.empty() &&
        rest.find_first_not_of("0123456789.") == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("malformed address '", peer_address,
                       "': an IP address needs a port (uc://host:port); "
                       "uc://NAME names a node reached over UC queue pairs"));
    }
    std::unique_ptr<internal::UcLink> link;
    if (!rest.empty() && !absl::StrContains(rest, ':')) {
      internal::VerbsUcLinks* links;
      {
        absl::MutexLock lock(&mu_);
        MESHPOOL_ASSIGN_OR_RETURN(links, LinksLocked());
      }
      MESHPOOL_ASSIGN_OR_RETURN(link, links->Connect(rest, handshake));
    } else {
      MESHPOOL_ASSIGN_OR_RETURN(internal::HostPort peer,
                                internal::ParseHostPort(peer_address, kScheme));
      if (peer.port == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("malformed address '", peer_address,
                         "' (port 0); use uc://host:port"));
      }
      absl::StatusOr<std::unique_ptr<internal::UdpLink>> udp =
          internal::UdpLink::Connect(peer, options_.frame_bytes,
                                     options_.faults);
      if (!udp.ok()) {
        return absl::UnavailableError(
            absl::StrCat("cannot reach the uc responder at ", peer_address,
                         ": ", udp.status().message()));
      }
      link = *std::move(udp);
    }
    return internal::UcEndpoint::Open(std::move(link),
                                      std::string(peer_address), options_);
  }

 private:
  static constexpr absl::string_view kScheme = "uc://";

  // The UC QP devices, opened on first use.
  absl::StatusOr<internal::VerbsUcLinks*> LinksLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (links_ == nullptr) {
      absl::StatusOr<std::shared_ptr<internal::VerbsUcLinks>> links =
          internal::VerbsUcLinks::Open(options_);
      if (!links.ok()) {
        return absl::Status(
            links.status().code(),
            absl::StrCat("uc over UC queue pairs needs an RDMA device: ",
                         links.status().message()));
      }
      links_ = *std::move(links);
    }
    return links_.get();
  }

  const UcOptions options_;
  const std::shared_ptr<internal::RegionRegistry> registry_;
  absl::Mutex mu_;
  std::shared_ptr<internal::VerbsUcLinks> links_ ABSL_GUARDED_BY(mu_);
  // Last: destroyed first, so no session outlives the transport.
  std::unique_ptr<internal::UcResponder> responder_ ABSL_GUARDED_BY(mu_);
};

bool IsProbability(double p) { return p >= 0 && p <= 1; }

}  // namespace

absl::string_view UcProfileName(UcProfile profile) {
  switch (profile) {
    case UcProfile::kNone:
      return "none";
    case UcProfile::kThunderbolt:
      return "thunderbolt";
  }
  return "unknown";
}

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
  if (options.profile == UcProfile::kThunderbolt &&
      options.frame_bytes != kThunderboltFrameBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "UcOptions.frame_bytes must be ", kThunderboltFrameBytes,
        " under the thunderbolt profile (a receive must cover a send, in "
        "Apple's 4 KiB frames)"));
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
