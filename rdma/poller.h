// meshpool/rdma internal: a readiness set of descriptors, the one thing an
// event loop needs from the OS, with a wake-up built in.
//
// A Poller watches descriptors for level-triggered readiness (readable,
// writable; hang-ups and errors are always reported) and can be woken from
// any thread. Two backends: epoll on Linux (poller_epoll_linux.cc) and
// poll(2), which every POSIX system has (poller_poll.cc). kDefault picks
// epoll where it exists and poll elsewhere; the environment variable
// MESHPOOL_POLLER=poll forces poll on Linux too, which is how the tcp
// responder's tests run the backend macOS uses.
//
// Thread-safety: Wake may be called from any thread; Add, Modify, Remove and
// Wait from one thread (the loop's) only.
#ifndef MESHPOOL_RDMA_POLLER_H_
#define MESHPOOL_RDMA_POLLER_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace meshpool::rdma::internal {

class Poller {
 public:
  enum class Backend {
    kDefault,  // epoll on Linux, poll elsewhere; MESHPOOL_POLLER=poll: poll
    kPoll,     // poll(2)
  };
  // Interest and event bits.
  static constexpr uint32_t kReadable = 1;
  static constexpr uint32_t kWritable = 2;
  static constexpr uint32_t kHangUp = 4;  // reported, never asked for
  static constexpr uint32_t kError = 8;   // reported, never asked for
  struct Event {
    void* token;      // what Add/Modify named for the descriptor
    uint32_t events;  // k* bits
  };

  // Errors: Internal / ResourceExhausted from the OS (descriptors for the
  // set and the wake-up); InvalidArgument when MESHPOOL_POLLER names no
  // backend this platform has.
  static absl::StatusOr<std::unique_ptr<Poller>> Create(
      Backend backend = Backend::kDefault);

  virtual ~Poller() = default;
  Poller(const Poller&) = delete;
  Poller& operator=(const Poller&) = delete;

  // Starts watching `fd` (not owned; REQUIRES: not watched yet, Remove is
  // called before it is closed, and `token` is not null) for `interest`
  // (kReadable | kWritable, or 0 for hang-ups and errors only). Errors:
  // ResourceExhausted / Internal from the OS.
  virtual absl::Status Add(int fd, uint32_t interest, void* token) = 0;
  // REQUIRES: `fd` is watched. Errors as Add.
  virtual absl::Status Modify(int fd, uint32_t interest, void* token) = 0;
  // Stops watching `fd`; nothing if it is not watched.
  virtual void Remove(int fd) = 0;
  // Waits up to `timeout_ms` (0: do not wait; -1: no limit) until a watched
  // descriptor is ready or Wake was called, and fills `events` with up to
  // events.size() ready descriptors (level-triggered: one not served is
  // reported again). Returns how many; *woken tells whether a Wake was
  // consumed. An interrupted wait returns 0 events.
  virtual size_t Wait(int timeout_ms, absl::Span<Event> events,
                      bool* woken) = 0;
  // Makes the current or next Wait return; wake-ups before it coalesce.
  virtual void Wake() = 0;
  // "epoll" or "poll".
  virtual const char* name() const = 0;

 protected:
  Poller() = default;
};

}  // namespace meshpool::rdma::internal

#endif  // MESHPOOL_RDMA_POLLER_H_
