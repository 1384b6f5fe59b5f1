// meshpool/rdma internal: the shm backend's node side.
//
//  * ShmNodeState: the exported memory files, the control page and the regions
//    registered in them (rkey -> range, fd offset, control slot). Builds the
//    hello a connecting client receives. Thread-safe; shared by the
//    transport, its regions (which may outlive it) and its listener.
//  * ShmListener: the unix-domain socket clients connect to (shm_socket.h).
//    One thread accepts, sends each client the hello with the files, and
//    holds the connection open (a node that dies hangs them all up) until
//    the client closes it. Thread-safe: Create, path() and destruction.
#ifndef MESHPOOL_RDMA_SHM_NODE_H_
#define MESHPOOL_RDMA_SHM_NODE_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "rdma/rdma.h"
#include "rdma/shm.h"
#include "rdma/shm_mapping.h"
#include "rdma/socket.h"

namespace meshpool::rdma::internal {

// Connections one listener holds open (one descriptor each); more are
// closed at once, and their clients see Unavailable.
inline constexpr size_t kMaxShmConnections = 4096;

class ShmNodeState : public std::enable_shared_from_this<ShmNodeState> {
 public:
  // Validates and duplicates the exports (see CreateShmTransport for the
  // rules; `need_rkeys`: every export must carry an rkey). Errors:
  // InvalidArgument (bad export), Internal / ResourceExhausted /
  // FailedPrecondition (the control page's memory file).
  static absl::StatusOr<std::shared_ptr<ShmNodeState>> Create(
      const std::vector<ShmExport>& exports, bool need_rkeys, uint64_t seed);

  // Registers [addr, addr+length), which must lie inside one export.
  // Errors: InvalidArgument (null, empty, not exported memory),
  // AlreadyExists (the export's preset rkey is taken), ResourceExhausted
  // (kMaxShmRegions live).
  absl::StatusOr<std::unique_ptr<MemoryRegion>> Register(void* addr,
                                                         size_t length);

  // The hello message and, in order, the descriptors to send with it
  // (valid while this state lives).
  void Hello(std::string* message, std::vector<int>* fds) const;

  // Tells every client's next Post that the node is gone.
  void MarkClosed();

 private:
  class Region;
  struct Export {
    uint64_t base;
    uint64_t length;
    uint64_t offset;
    uint32_t rkey;
    UniqueFd fd;
  };
  struct Registered {
    uint64_t addr;
    uint64_t length;
    uint64_t fd_offset;
    uint16_t export_index;
    uint16_t slot;
  };

  ShmNodeState(std::vector<Export> exports, ShmControlPage control,
               uint64_t seed);
  void Deregister(uint32_t rkey);
  void StoreSlot(uint16_t slot, uint32_t rkey);
  // A fresh random rkey no region uses and no export presets.
  uint32_t RandomRkeyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::vector<Export> exports_;
  const ShmControlPage control_;
  mutable absl::Mutex mu_;
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint32_t, Registered> regions_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> slot_used_ ABSL_GUARDED_BY(mu_);
};

class ShmListener {
 public:
  // Binds `path` (a stale socket file of a dead node is replaced; a live
  // node's is AlreadyExists, as is any other file there), sets its mode,
  // and starts serving `state` to peers whose user id is in `allowed_uids`
  // (others get a ShmRefusal). Errors: InvalidArgument (path too long),
  // AlreadyExists, PermissionDenied, Internal from the OS.
  static absl::StatusOr<std::unique_ptr<ShmListener>> Create(
      const std::string& path, uint32_t mode,
      std::vector<uint32_t> allowed_uids,
      std::shared_ptr<const ShmNodeState> state);
  ShmListener(const ShmListener&) = delete;
  ShmListener& operator=(const ShmListener&) = delete;
  // Stops accepting, hangs every client up, removes the socket file (if it
  // is still ours).
  ~ShmListener();

  const std::string& path() const { return path_; }

 private:
  ShmListener(std::string path, ino_t inode, UniqueFd fd, WakePipe wake,
              std::vector<uint32_t> allowed_uids,
              std::shared_ptr<const ShmNodeState> state);
  void Loop();
  void AcceptAll();
  // Whether the peer on `fd` runs as an allowed user; if not, tells it so.
  bool Admits(int fd) const;
  // Drops connections whose client hung up (`revents` of each).
  void Reap(const std::vector<short>& revents);

  const std::string path_;
  const ino_t inode_;
  const std::vector<uint32_t> allowed_uids_;
  const std::shared_ptr<const ShmNodeState> state_;
  UniqueFd listen_fd_;
  WakePipe wake_;
  std::atomic<bool> stopping_{false};
  std::vector<UniqueFd> connections_;  // the thread's only
  std::thread thread_;                 // last: started once all above exist
};

}  // namespace meshpool::rdma::internal

#endif  // MESHPOOL_RDMA_SHM_NODE_H_
