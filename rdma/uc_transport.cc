// The uc Transport: registrations in a RegionRegistry, a UcResponder once
// Listen() is called, UcEndpoints for Connect() on a view of the one link
// (UDP socket or UC QP; the devices opened on first need) the transport
// keeps to each node while any lane uses it, and with require_token the
// book of session tokens its handshake issues and its UDP responder redeems.
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/common.h"
#include "rdma/rdma.h"
#include "rdma/region_registry.h"
#include "rdma/tokens.h"
#include "rdma/uc.h"
#include "rdma/uc_endpoint.h"
#include "rdma/uc_link.h"
#include "rdma/uc_link_mux.h"
#include "rdma/uc_responder.h"
#include "rdma/uc_wire.h"
#include "rdma/verbs_uc_link.h"

namespace meshpool::rdma {
namespace {

class UcTransport : public internal::RegistryTransport {
 public:
  UcTransport(const UcOptions& options, uint64_t rkey_seed)
      : RegistryTransport(rkey_seed),
        options_(options),
        tokens_(options.require_token ? std::make_shared<internal::TokenBook>()
                                      : nullptr) {}

  TransportKind kind() const override { return TransportKind::kUc; }

  absl::StatusOr<std::string> Listen(absl::string_view bind) override {
    absl::MutexLock lock(&mu_);
    if (responder_ != nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "uc transport already listens on ", responder_->address(),
          "; create another transport to serve a second address"));
    }
    if (options_.link == UcLinkKind::kVerbs) {
      MESHPOOL_ASSIGN_OR_RETURN(internal::VerbsUcLinks * links, LinksLocked());
      // The instance tells apart the nodes of one host (they share its
      // name) and a node from its restarted self: each gets its own links.
      absl::BitGen gen;
      const std::string address = absl::StrCat(
          kScheme, links->self_name(), "/",
          absl::Hex(absl::Uniform<uint64_t>(gen), absl::kZeroPad16));
      MESHPOOL_ASSIGN_OR_RETURN(
          responder_,
          internal::UcResponder::CreateForLinks(address, options_, registry_));
    } else {
      internal::UcResponder::Admit admit;
      if (tokens_ != nullptr) {
        admit = [tokens = tokens_](absl::string_view token) {
          return tokens->Redeem(token, absl::Now());
        };
      }
      MESHPOOL_ASSIGN_OR_RETURN(
          responder_, internal::UcResponder::Create(bind, options_, registry_,
                                                    std::move(admit)));
    }
    return responder_->address();
  }

  // A client's UC QP handshake: a link for it, served by the responder. Or
  // a UDP client's token request: a token, or nothing when none is needed.
  absl::StatusOr<std::string> AcceptHandshake(
      absl::string_view request, const DataAccess& access) override {
    absl::MutexLock lock(&mu_);
    if (request == internal::kUcTokenRequest) {
      if (options_.link != UcLinkKind::kUdp) {
        return absl::FailedPreconditionError(
            "this uc transport serves UC queue pairs, whose handshake needs "
            "no token; its address names how to reach it");
      }
      if (tokens_ == nullptr) return std::string();
      return tokens_->Issue(absl::Now(), access);
    }
    if (responder_ == nullptr || options_.link != UcLinkKind::kVerbs) {
      return absl::FailedPreconditionError(
          "this uc transport does not serve UC queue pairs (it listens on "
          "UDP, or not yet); its address names how to reach it");
    }
    MESHPOOL_ASSIGN_OR_RETURN(internal::VerbsUcLinks::Accepted accepted,
                              links_->Accept(request));
    responder_->AddLink(std::move(accepted.link), access);
    return std::move(accepted.reply);
  }

  absl::StatusOr<std::unique_ptr<Endpoint>> Connect(
      absl::string_view peer_address, const Handshake& handshake) override {
    if (!absl::StartsWith(peer_address, kScheme)) {
      return absl::InvalidArgumentError(
          absl::StrCat("malformed address '", peer_address,
                       "'; use uc://host:port or uc://NAME"));
    }
    absl::string_view rest = peer_address.substr(kScheme.size());
    if (const size_t slash = rest.find('/'); slash != absl::string_view::npos) {
      const absl::string_view instance = rest.substr(slash + 1);
      if (instance.size() != 16 ||
          instance.find_first_not_of("0123456789abcdef") !=
              absl::string_view::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat("malformed address '", peer_address,
                         "'; use uc://host:port, uc://NAME or "
                         "uc://NAME/INSTANCE (16 hex digits)"));
      }
      rest = rest.substr(0, slash);
    }
    if (!rest.empty() &&
        rest.find_first_not_of("0123456789.") == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("malformed address '", peer_address,
                       "': an IP address needs a port (uc://host:port); "
                       "uc://NAME names a node reached over UC queue pairs"));
    }
    // A lane on UDP presents a token when the node hands one out.
    std::string token;
    if (rest.find(':') != absl::string_view::npos && handshake) {
      MESHPOOL_ASSIGN_OR_RETURN(token, FetchToken(peer_address, handshake));
    }
    // A lane joins the transport's link to this node; the first one (or
    // the first after the link was retired) makes it. A link the node no
    // longer knows (it restarted, or dropped the link while idle) answers
    // no hello: the lane is tried once more on a new link.
    for (int attempt = 0;; ++attempt) {
      bool joined = false;
      MESHPOOL_ASSIGN_OR_RETURN(
          std::unique_ptr<internal::UcLink> lane,
          JoinLink(peer_address, rest, handshake, &joined));
      absl::StatusOr<std::unique_ptr<Endpoint>> endpoint =
          internal::UcEndpoint::Open(std::move(lane), std::string(peer_address),
                                     options_, token);
      if (endpoint.ok() || !joined || attempt > 0) return endpoint;
      // The token was spent on the lane that got no answer: another one.
      if (!token.empty()) {
        MESHPOOL_ASSIGN_OR_RETURN(token, FetchToken(peer_address, handshake));
      }
    }
  }

 private:
  static constexpr absl::string_view kScheme = "uc://";

  // The token a lane presents to the node at `peer_address` over UDP;
  // empty when the node needs none (or has no handshake for it).
  static absl::StatusOr<std::string> FetchToken(absl::string_view peer_address,
                                                const Handshake& handshake) {
    absl::StatusOr<std::string> reply = handshake(internal::kUcTokenRequest);
    if (!reply.ok()) {
      if (absl::IsUnimplemented(reply.status())) return std::string();
      return absl::Status(
          reply.status().code(),
          absl::StrCat("no uc session token from ", peer_address, ": ",
                       reply.status().message()));
    }
    if (!reply->empty() && reply->size() != internal::kTokenBytes) {
      return absl::InternalError(
          absl::StrCat(peer_address, " answered a uc token of ", reply->size(),
                       " bytes, not ", internal::kTokenBytes,
                       "; is it another meshpool version?"));
    }
    return reply;
  }

  // The link shared by this transport's lanes to one node.
  struct PeerLink {
    absl::Mutex mu;  // held while the link is made: one handshake at a time
    std::weak_ptr<internal::UcLinkMux> mux ABSL_GUARDED_BY(mu);
  };

  // A view of the link to `peer_address` (`rest` is what follows the
  // scheme), making the link when there is none to join. `joined`: the
  // link existed before.
  absl::StatusOr<std::unique_ptr<internal::UcLink>> JoinLink(
      absl::string_view peer_address, absl::string_view rest,
      const Handshake& handshake, bool* joined) {
    std::shared_ptr<PeerLink> slot;
    {
      absl::MutexLock lock(&peers_mu_);
      auto it = peers_.find(peer_address);
      if (it == peers_.end()) {
        ForgetUnusedPeersLocked();
        it = peers_
                 .emplace(std::string(peer_address),
                          std::make_shared<PeerLink>())
                 .first;
      }
      slot = it->second;
    }
    absl::MutexLock lock(&slot->mu);
    std::shared_ptr<internal::UcLinkMux> mux = slot->mux.lock();
    if (mux != nullptr && !mux->retired()) {
      absl::StatusOr<std::unique_ptr<internal::UcLink>> view = mux->Join();
      if (view.ok()) {
        *joined = true;
        return view;
      }
    }
    MESHPOOL_ASSIGN_OR_RETURN(std::unique_ptr<internal::UcLink> link,
                              NewLink(peer_address, rest, handshake));
    mux = internal::UcLinkMux::Create(std::move(link));
    slot->mux = mux;
    return mux->Join();
  }

  // Drops the entries of nodes no lane uses (a restarted node is another
  // address), so that the map does not grow with every node instance ever
  // dialled. An entry only the map holds has no thread in JoinLink, so its
  // lock is free.
  void ForgetUnusedPeersLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(peers_mu_) {
    for (auto it = peers_.begin(); it != peers_.end();) {
      bool unused = false;
      if (it->second.use_count() == 1) {
        absl::MutexLock slot_lock(&it->second->mu);
        unused = it->second->mux.expired();
      }
      it = unused ? peers_.erase(it) : std::next(it);
    }
  }

  // A link of its own to the node at `peer_address`.
  absl::StatusOr<std::unique_ptr<internal::UcLink>> NewLink(
      absl::string_view peer_address, absl::string_view rest,
      const Handshake& handshake) {
    if (!rest.empty() && !absl::StrContains(rest, ':')) {
      internal::VerbsUcLinks* links;
      {
        absl::MutexLock lock(&mu_);
        MESHPOOL_ASSIGN_OR_RETURN(links, LinksLocked());
      }
      return links->Connect(rest, handshake);
    }
    MESHPOOL_ASSIGN_OR_RETURN(internal::HostPort peer,
                              internal::ParseHostPort(peer_address, kScheme));
    if (peer.port == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("malformed address '", peer_address,
                       "' (port 0); use uc://host:port"));
    }
    absl::StatusOr<std::unique_ptr<internal::UdpLink>> udp =
        internal::UdpLink::Connect(peer, options_.frame_bytes, options_.faults);
    if (!udp.ok()) {
      return absl::UnavailableError(
          absl::StrCat("cannot reach the uc responder at ", peer_address, ": ",
                       udp.status().message()));
    }
    return std::unique_ptr<internal::UcLink>(*std::move(udp));
  }

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
  // Null unless require_token; shared with the UDP responder's admission.
  const std::shared_ptr<internal::TokenBook> tokens_;
  // Lock order: peers_mu_, then a PeerLink's mu, then mu_ (a link is made
  // under its PeerLink's lock and opens the devices under mu_). One lock
  // for both maps would be taken in both orders, which absl's deadlock
  // detector (on in Debian's build) aborts on.
  absl::Mutex peers_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::map<std::string, std::shared_ptr<PeerLink>, std::less<>> peers_
      ABSL_GUARDED_BY(peers_mu_);
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
      channel, [](absl::Span<const uint8_t>, absl::Span<const uint8_t>) {
        return true;
      });
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
  if (options.busy_poll < absl::ZeroDuration() ||
      options.busy_poll > kUcMaxBusyPoll) {
    return absl::InvalidArgumentError(absl::StrCat(
        "UcOptions.busy_poll must be 0..", absl::FormatDuration(kUcMaxBusyPoll),
        " (polling longer than that only burns a core)"));
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
