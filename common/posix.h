// meshpool/common: descriptors that close on exec, made the same way on
// every POSIX system. Linux creates them atomically (a flag of the call
// itself); elsewhere (macOS) the flags are set right after the call, so a
// fork in another thread at that instant may inherit one. All of
// meshpool's socket, accept and pipe calls go through these, so the one
// difference lives in posix.cc.
//
// Also the peer's user id on a Unix socket, which Linux and macOS ask for
// differently. These mirror the system calls they wrap: they return the
// descriptor (0 for PipeCloexec and PeerUid) or -1 with errno set, for callers
// that act on errno (EAGAIN, EMFILE) before turning it into a Status with
// ErrnoToStatus. Thread-safe.
#ifndef MESHPOOL_COMMON_POSIX_H_
#define MESHPOOL_COMMON_POSIX_H_

#include <poll.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>

namespace meshpool {

// socket(2); non-blocking too when `nonblocking`.
int SocketCloexec(int domain, int type, int protocol, bool nonblocking = false);

// accept(2); the new socket non-blocking too when `nonblocking`.
int AcceptCloexec(int listen_fd, sockaddr* peer, socklen_t* peer_len,
                  bool nonblocking);

// pipe(2) into fds[0] (read end) and fds[1] (write end); both non-blocking
// too when `nonblocking`.
int PipeCloexec(int fds[2], bool nonblocking = false);

// The user id of the process at the other end of a connected Unix socket,
// as the kernel recorded it when it connected (not something the peer
// says): into *uid, 0 on success, -1 with errno otherwise.
int PeerUid(int fd, uint32_t* uid);

// In a child between fork and exec: asks the kernel to kill this process
// when its parent dies (Linux). Elsewhere nothing does that, and callers
// stop their children themselves; a parent killed outright (SIGKILL)
// leaves them running there.
void DieWithParent();

// recvmsg(2) whose received descriptors (SCM_RIGHTS) close on exec:
// atomically on Linux, set right after the call elsewhere.
ssize_t RecvmsgCloexec(int fd, msghdr* msg, int flags);

// poll(2)'s "the peer shut its sending side" event where the OS has one
// (Linux's POLLRDHUP), else 0; a reader that must see a hang-up everywhere
// also treats end-of-file on a readable socket as one.
#ifdef __linux__
inline constexpr short kPollReadHangUp = POLLRDHUP;
#else
inline constexpr short kPollReadHangUp = 0;
#endif

// The path of this process's executable: into *path, 0 on success, -1
// with errno otherwise (ENAMETOOLONG past 4 KiB).
int SelfExecutablePath(std::string* path);

}  // namespace meshpool

#endif  // MESHPOOL_COMMON_POSIX_H_
