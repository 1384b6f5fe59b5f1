// For bench/kv_compare: a memcached client for what the benchmark needs (a
// batch of `set`s, one multi-key get, the server's version), wrapping
// libmemcached, the standard C/C++ client library of memcached. The benchmark
// measures memcached as its users reach it, through the client library they
// use, rather than through a protocol implementation of ours. One client is one
// memcached_st with one server: one TCP connection (text protocol,
// TCP_NODELAY), which libmemcached opens lazily and reopens after a failure.
//
// Sets are not pipelined: SetBatch runs one memcached_set, one round trip,
// per key. libmemcached pipelines sets only in ways that lose their results
// (MEMCACHED_BEHAVIOR_BUFFER_REQUESTS queues them and later reads their
// replies only to discard them; NOREPLY asks the server for none), and
// with BUFFER_REQUESTS, 2 MiB values fail here after a few batches
// ("SYSTEM ERROR(Bad file descriptor)" from libmemcached 1.1.4). So
// memcached's PUT figures in kv_compare are one round trip per value, as a
// libmemcached user who checks each set gets them. The get is one request
// for all keys (memcached_mget), its values copied from libmemcached's
// result into the caller's buffers.
//
// Errors (libmemcached's memcached_return_t, with its message): Unavailable
// when the server cannot be reached, the connection fails, or the server
// does not answer within the timeout (libmemcached then also refuses calls
// for a couple of seconds, MEMCACHED_SERVER_TEMPORARILY_DISABLED, before it
// reconnects); InvalidArgument for a key memcached cannot take (empty, over
// 250 bytes, or with spaces or control characters) or malformed arguments;
// ResourceExhausted when the server is out of memory (raise -m; memcached
// must run with -M so that it fails instead of evicting); FailedPrecondition
// for another refusal by the server (e.g. an item over -I), carrying its
// text; DataLoss for a reply the protocol does not allow there; OutOfRange
// when a value is larger than its buffer. The client stays usable after any
// of them.
//
// Thread-compatible: one thread uses a client at a time (open one per
// thread). Move-only; a moved-from client fails every call with
// FailedPrecondition.
#ifndef MESHPOOL_BENCH_MEMCACHE_CLIENT_H_
#define MESHPOOL_BENCH_MEMCACHE_CLIENT_H_

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

struct memcached_st;  // <libmemcached/memcached.h>

namespace meshpool::bench {

class MemcacheClient {
 public:
  // Sets up a client for memcached at "host:port" and checks that the
  // server answers `version`. `timeout` bounds the connect and every later
  // send and reply. InvalidArgument for a malformed address; Unavailable
  // when nothing answers; FailedPrecondition when the peer gives no
  // version (not a memcached server?).
  static absl::StatusOr<MemcacheClient> Connect(absl::string_view address,
                                                absl::Duration timeout);

  MemcacheClient(MemcacheClient&&) noexcept = default;
  MemcacheClient& operator=(MemcacheClient&&) noexcept = default;
  MemcacheClient(const MemcacheClient&) = delete;
  MemcacheClient& operator=(const MemcacheClient&) = delete;
  ~MemcacheClient() = default;

  // The server's version, "major.minor.micro" (e.g. "1.6.18").
  const std::string& version() const { return version_; }

  // `set` keys[i] values[i] (flags 0, no expiry) for every i, one after the
  // other (see the header comment). OK when every set was stored;
  // otherwise the first failure, naming its key, and the keys after it are
  // not set. InvalidArgument when the spans' sizes differ or are empty.
  absl::Status SetBatch(absl::Span<const absl::string_view> keys,
                        absl::Span<const absl::string_view> values);

  // One get of every key: value i lands in outs[i]; lengths[i] is its
  // length, or nullopt when the server did not return the key. REQUIRES:
  // distinct keys. InvalidArgument when the spans' sizes differ or are
  // empty; OutOfRange naming the key when a value does not fit its buffer
  // (the rest of the reply is still read).
  absl::StatusOr<std::vector<std::optional<size_t>>> GetMulti(
      absl::Span<const absl::string_view> keys,
      absl::Span<const absl::Span<char>> outs);

 private:
  struct MemcachedDeleter {
    void operator()(memcached_st* memc) const;
  };
  using MemcachedPtr = std::unique_ptr<memcached_st, MemcachedDeleter>;

  MemcacheClient(std::string address, MemcachedPtr memc);
  // FailedPrecondition after a move.
  absl::Status CheckUsable() const;

  std::string address_;
  MemcachedPtr memc_;
  std::string version_;
};

}  // namespace meshpool::bench

#endif  // MESHPOOL_BENCH_MEMCACHE_CLIENT_H_
