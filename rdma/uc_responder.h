// meshpool/rdma internal: the uc backend's node side. Serves one-sided
// READ/WRITE/CAS/FAA on the memory of one RegionRegistry to every client
// session that reaches it and opens with a hello (on the socket, with a
// token `admit` accepts when the node requires one: rdma/uc_wire.h), each
// over its own UcChannel: sessions on its UDP
// socket (many clients, told apart by address and session id), and the
// sessions on each link handed to it (a UC QP, one per client transport and
// device, carrying that client's lanes: rdma/uc_link_mux.h).
//
// One thread polls the socket and the links, feeds each frame to its
// session's channel, executes the requests the channels deliver (checked
// as the tcp responder checks them: rdma/region_registry.h CheckRequest)
// and pumps the channels. Sessions end on a goodbye, a malformed request
// (at once, unanswered), a refused one (once its denial is acknowledged), a
// silent peer (the channel's liveness), a broken link, or kUcSessionIdle
// without a frame; at most kMaxUcSessions live at once, and
// kMaxUcSessionsPerLink on one link. A link is destroyed when it breaks,
// when its last session ends with kUcByeLast (the client's last lane on it
// closed), or kUcLinkUnusedTimeout after it last had no session (or was
// handed over and never used). Thread-safe: the public operations
// are Create, AddLink, address() and destruction (which joins the thread).
#ifndef MESHPOOL_RDMA_UC_RESPONDER_H_
#define MESHPOOL_RDMA_UC_RESPONDER_H_

#include <poll.h>
#include <sys/socket.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "rdma/region_registry.h"
#include "rdma/socket.h"
#include "rdma/uc.h"
#include "rdma/uc_channel.h"
#include "rdma/uc_link.h"
#include "rdma/uc_wire.h"

namespace meshpool::rdma::internal {

inline constexpr size_t kMaxUcSessions = 1024;
inline constexpr size_t kMaxUcSessionsPerLink = 64;
static_assert(kMaxUcSessionsPerLink >= kUcLanesPerLink);
static_assert(kMaxUcSessionsPerLink <= kMaxUcSessions);
inline constexpr absl::Duration kUcSessionIdle = absl::Seconds(60);
inline constexpr absl::Duration kUcLinkUnusedTimeout = absl::Seconds(10);

class UcResponder {
 public:
  // Whom a token presented in a hello on the socket admits its session as;
  // nullopt: it is not admitted.
  using Admit =
      std::function<std::optional<DataAccess>(absl::string_view token)>;

  // Binds `bind` ("host:port", port 0 = any free one) and serves the
  // memory registered in `registry`. `admit` null: a hello needs no token
  // and sessions on the socket have unrestricted access.
  // Errors: InvalidArgument (malformed bind), Unavailable / AlreadyExists /
  // Internal from the OS.
  static absl::StatusOr<std::unique_ptr<UcResponder>> Create(
      absl::string_view bind, const UcOptions& options,
      std::shared_ptr<const RegionRegistry> registry, Admit admit = nullptr);
  // A responder without a socket, serving only the links AddLink hands it;
  // `address` is what address() reports ("uc://NAME/INSTANCE").
  static absl::StatusOr<std::unique_ptr<UcResponder>> CreateForLinks(
      std::string address, const UcOptions& options,
      std::shared_ptr<const RegionRegistry> registry);
  UcResponder(const UcResponder&) = delete;
  UcResponder& operator=(const UcResponder&) = delete;
  ~UcResponder();

  // "uc://host:port" with the port actually bound, or "uc://NAME/INSTANCE".
  const std::string& address() const { return address_; }

  // Serves the sessions that open on `link` (connected to one client
  // transport), with `access` (whom the handshake that made the link
  // admitted). Takes effect at the loop's next turn.
  void AddLink(std::unique_ptr<UcLink> link, DataAccess access);

 private:
  // Where a frame came from: a link, or the socket and an address.
  struct From {
    UcLink* link = nullptr;
    const sockaddr_storage* addr = nullptr;
    socklen_t addr_len = 0;
  };
  struct Session {
    UcLink* link = nullptr;  // null: on the socket, at `peer`
    sockaddr_storage peer;
    socklen_t peer_len;
    std::optional<UcChannel> channel;
    absl::Time last_frame;
    absl::Time opened;
    bool admitted = false;      // its hello was accepted
    DataAccess access;          // whom it was admitted as
    bool closing = false;       // refused a request: ends once acknowledged
    bool done = false;          // ends now
    bool last_on_link = false;  // said kUcByeLast: its link goes with it
  };
  UcResponder(UniqueFd fd, WakePipe wake, std::string address,
              const UcOptions& options,
              std::shared_ptr<const RegionRegistry> registry, Admit admit);
  struct LinkEntry {
    std::unique_ptr<UcLink> link;
    DataAccess access;
    absl::Time unused_since;  // when it was added or lost its last session
    size_t sessions = 0;
    bool broken = false;
  };
  void Loop();
  // Takes every datagram the socket holds and every frame the links hold.
  void Drain(absl::Time now);
  void DrainLink(LinkEntry& entry, absl::Time now);
  void OnFrame(absl::Span<const uint8_t> frame, const From& from,
               absl::Time now);
  // Sleeps until a frame may have arrived, a wake-up, or `until`.
  void Wait(absl::Time until);
  // Executes one message of `s` and queues its response.
  void Handle(Session& s, const std::vector<uint8_t>& message);
  // The first message of `s`: admits it if it is a hello (with a token
  // admit_ accepts, on the socket when the node requires one).
  void AdmitSession(Session& s, const std::vector<uint8_t>& message);
  // Runs every session's channel; drops the sessions that ended, and the
  // links that broke, lost their session or were never used.
  absl::Time PumpAll(absl::Time now);
  void DropLinks(absl::Time now);

  const UcOptions options_;
  const std::shared_ptr<const RegionRegistry> registry_;
  const Admit admit_;
  const std::string address_;
  UniqueFd fd_;  // invalid: links only
  WakePipe wake_;
  UdpFrameSender sender_;
  // Only the loop thread touches these. links_ before sessions_: a
  // session's channel sends through its link.
  std::map<UcLink*, LinkEntry> links_;
  std::map<uint64_t, Session> sessions_;
  std::vector<uint8_t> rx_;
  std::vector<pollfd> poll_fds_;
  // Loop polls instead of sleeping until then (a frame arrived within
  // UcOptions::busy_poll).
  absl::Time poll_until_ = absl::InfinitePast();
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<LinkEntry> added_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // last: started once everything above exists
};

}  // namespace meshpool::rdma::internal

#endif  // MESHPOOL_RDMA_UC_RESPONDER_H_
