// meshpool/rdma internal: the uc backend's node side. Serves one-sided
// READ/WRITE/CAS/FAA on the memory of one RegionRegistry to every client
// session that reaches its UDP socket, each over its own UcChannel.
//
// One thread polls the socket, feeds each frame to its session's channel,
// executes the requests the channels deliver (checked as the tcp responder
// checks them: rdma/region_registry.h CheckRequest) and pumps the channels.
// Sessions end on a goodbye, a malformed request (at once, unanswered), a
// refused one (once its denial is acknowledged), a silent peer (the
// channel's liveness) or kUcSessionIdle without a frame; at most
// kMaxUcSessions live at once. Thread-safe: the only public operations are
// Create, address() and destruction (which joins the thread).
#ifndef MESHPOOL_RDMA_UC_RESPONDER_H_
#define MESHPOOL_RDMA_UC_RESPONDER_H_

#include <sys/socket.h>

#include <cstdint>
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
#include "rdma/uc_wire.h"

namespace meshpool::rdma::internal {

inline constexpr size_t kMaxUcSessions = 1024;
inline constexpr absl::Duration kUcSessionIdle = absl::Seconds(60);

class UcResponder {
 public:
  // Binds `bind` ("host:port", port 0 = any free one) and serves the
  // memory registered in `registry`. Errors: InvalidArgument (malformed
  // bind), Unavailable / AlreadyExists / Internal from the OS.
  static absl::StatusOr<std::unique_ptr<UcResponder>> Create(
      absl::string_view bind, const UcOptions& options,
      std::shared_ptr<const RegionRegistry> registry);
  UcResponder(const UcResponder&) = delete;
  UcResponder& operator=(const UcResponder&) = delete;
  ~UcResponder();

  // "uc://host:port" with the port actually bound.
  const std::string& address() const { return address_; }

 private:
  struct Session {
    sockaddr_storage peer;
    socklen_t peer_len;
    std::optional<UcChannel> channel;
    absl::Time last_frame;
    bool closing = false;  // refused a request: ends once acknowledged
    bool done = false;     // ends now
  };
  UcResponder(UniqueFd fd, WakePipe wake, std::string address,
              const UcOptions& options,
              std::shared_ptr<const RegionRegistry> registry);
  void Loop();
  // Takes every datagram the socket holds.
  void Drain(absl::Time now);
  void OnDatagram(absl::Span<const uint8_t> frame, const sockaddr_storage& from,
                  socklen_t from_len, absl::Time now);
  // Executes one message of `s` and queues its response.
  void Handle(Session& s, const std::vector<uint8_t>& message);
  // Runs every session's channel; drops the sessions that ended.
  absl::Time PumpAll(absl::Time now);

  const UcOptions options_;
  const std::shared_ptr<const RegionRegistry> registry_;
  const std::string address_;
  UniqueFd fd_;
  WakePipe wake_;
  UdpFrameSender sender_;
  // Only the loop thread touches the sessions and the buffer.
  std::map<uint64_t, Session> sessions_;
  std::vector<uint8_t> rx_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: started once everything above exists
};

}  // namespace meshpool::rdma::internal

#endif  // MESHPOOL_RDMA_UC_RESPONDER_H_
