// For bench/kv_compare: a blocking TCP stream with a read buffer, shared by
// the minimal Redis (bench/resp_client.h) and memcached
// (bench/memcache_client.h) clients.
//
// TcpStream owns one connected socket (TCP_NODELAY, send and receive
// timeouts). Sends gather many pieces into few writev-style calls; reads go
// through a 64 KiB buffer, and large reads land straight in the caller's
// memory (one readv fills the caller's span and refills the buffer).
//
// Errors: Unavailable when the peer cannot be reached, closes the
// connection, or does not answer within the timeout; DataLoss when a line
// is longer than kMaxLineBytes (a protocol mismatch). After any error the
// stream is out of step with the peer: drop it.
//
// Thread-compatible: one thread uses a stream at a time.
#ifndef MESHPOOL_BENCH_KV_SOCKET_H_
#define MESHPOOL_BENCH_KV_SOCKET_H_

#include <cstddef>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace meshpool::bench {

// Read buffer size; also the longest line ReadLine returns.
inline constexpr size_t kStreamBufferBytes = size_t{64} << 10;
inline constexpr size_t kMaxLineBytes = kStreamBufferBytes;
static_assert(kStreamBufferBytes >= 4096, "lines of a few KiB must fit");

class TcpStream {
 public:
  // Connects to "host:port". InvalidArgument for a malformed address;
  // Unavailable when nothing answers within `timeout` (the message names
  // the address: start the server or fix the flag). `timeout` also bounds
  // every later send and receive.
  static absl::StatusOr<TcpStream> Connect(absl::string_view address,
                                           absl::Duration timeout);

  TcpStream(TcpStream&& other) noexcept;
  TcpStream& operator=(TcpStream&& other) noexcept;
  ~TcpStream();

  // Sends every byte of `pieces`, in order.
  absl::Status Send(absl::Span<const absl::string_view> pieces);

  // The next line, without its "\r\n" (or "\n"). The view stays valid until
  // the next call on this stream.
  absl::StatusOr<absl::string_view> ReadLine();
  // Fills `out` exactly.
  absl::Status ReadExact(absl::Span<char> out);
  // Reads exactly `want` and fails with DataLoss when the bytes differ
  // (e.g. the "\r\n" after a value).
  absl::Status Expect(absl::string_view want);

  const std::string& address() const { return address_; }

 private:
  TcpStream(int fd, std::string address);
  // Reads at least one more byte into the buffer (after compacting it).
  absl::Status Fill();
  absl::Status RecvError(long got) const;

  int fd_ = -1;
  std::string address_;
  std::unique_ptr<char[]> buf_;
  size_t begin_ = 0;  // unread bytes are buf_[begin_, end_)
  size_t end_ = 0;
};

}  // namespace meshpool::bench

#endif  // MESHPOOL_BENCH_KV_SOCKET_H_
