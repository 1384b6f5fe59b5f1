// For bench/kv_compare: a minimal memcached client speaking the text
// protocol over one TCP connection: a pipelined batch of `set`s, one
// multi-key `get`, and `version`.
//
// Values move without intermediate copies on our side: `set` sends the
// caller's bytes with gather writes, `get` receives each value straight into
// the caller's buffer.
//
// Errors: the stream's (bench/kv_socket.h: Unavailable, DataLoss);
// InvalidArgument for a key memcached cannot take (empty, over kMaxMemcacheKey
// bytes, or with spaces or control characters); a SERVER_ERROR reply becomes
// ResourceExhausted when the server is out of memory (raise -m; memcached
// must run with -M so that it fails instead of evicting) and
// FailedPrecondition otherwise (e.g. an item over -I), carrying the server's
// text; DataLoss for a reply the protocol does not allow there (also ERROR
// and CLIENT_ERROR); OutOfRange when a value is larger than its buffer.
// After an error other than SERVER_ERROR the connection is out of step and
// every later call fails with FailedPrecondition: open a new client.
//
// Thread-compatible: one thread uses a client at a time (open one per
// thread).
#ifndef MESHPOOL_BENCH_MEMCACHE_CLIENT_H_
#define MESHPOOL_BENCH_MEMCACHE_CLIENT_H_

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "bench/kv_socket.h"

namespace meshpool::bench {

// memcached's longest key.
inline constexpr size_t kMaxMemcacheKey = 250;

class MemcacheClient {
 public:
  // Connects to memcached at "host:port" and checks it answers `version`.
  // `timeout` bounds the connect and every later reply.
  static absl::StatusOr<MemcacheClient> Connect(absl::string_view address,
                                                absl::Duration timeout);

  // The server's version string (e.g. "1.6.18").
  const std::string& version() const { return version_; }

  // `set` keys[i] values[i] (flags 0, no expiry) for every i, pipelined:
  // every command is sent, then every reply is read. OK when every reply is
  // STORED; otherwise the first SERVER_ERROR (the others are still read).
  // InvalidArgument when the spans' sizes differ or are empty, or for a bad
  // key.
  absl::Status SetBatch(absl::Span<const absl::string_view> keys,
                        absl::Span<const absl::string_view> values);

  // `get k1 k2 ...`: value i lands in outs[i]; lengths[i] is its length, or
  // nullopt when the server did not return the key. REQUIRES: distinct keys.
  // InvalidArgument when the spans' sizes differ or are empty, or for a bad
  // key.
  absl::StatusOr<std::vector<std::optional<size_t>>> GetMulti(
      absl::Span<const absl::string_view> keys,
      absl::Span<const absl::Span<char>> outs);

 private:
  explicit MemcacheClient(TcpStream stream) : stream_(std::move(stream)) {}
  absl::Status Broken() const;
  absl::Status ServerError(absl::string_view line) const;
  absl::Status Unexpected(absl::string_view what, absl::string_view line) const;

  TcpStream stream_;
  std::string version_;
  bool broken_ = false;
};

}  // namespace meshpool::bench

#endif  // MESHPOOL_BENCH_MEMCACHE_CLIENT_H_
