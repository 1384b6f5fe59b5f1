// For bench/kv_compare: the stores under test behind one interface, so the
// driver runs the same workload against each.
//
//   redis      bench/resp_client.h (hiredis): pipelined SET x N, then one
//              MGET.
//   memcached  bench/memcache_client.h (libmemcached): `set` x N, one round
//              trip each, then one multi-key get.
//   meshpool   meshpool::Client (one per process, shared by every session):
//              BatchPut / BatchGet on buffers registered with
//              RegisterBuffer, so values move zero-copy.
//
// A KvSystem opens one KvSession per client thread (redis and memcached: a
// TCP connection each). Every session must be destroyed before the system
// that opened it.
//
// Thread-safety: a KvSystem's OpenSession may be called from any thread; a
// KvSession is used by one thread at a time.
#ifndef MESHPOOL_BENCH_KV_COMPARE_SYSTEMS_H_
#define MESHPOOL_BENCH_KV_COMPARE_SYSTEMS_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace meshpool::bench {

class KvSession {
 public:
  virtual ~KvSession() = default;

  // Tells the session which memory later Puts take values from and Gets
  // write into (meshpool registers it for zero-copy transfers; the others
  // ignore it). Replaces an earlier Attach. REQUIRES: the two do not
  // overlap and stay valid until the next Attach or the session's end; no
  // operation of this session is in flight.
  virtual absl::Status Attach(absl::Span<char> put, absl::Span<char> get) {
    (void)put;
    (void)get;
    return absl::OkStatus();
  }

  // Stores values[i] under keys[i] for every i. OK only when every value
  // was stored; otherwise the first failure, naming its key.
  virtual absl::Status Put(absl::Span<const absl::string_view> keys,
                           absl::Span<const absl::string_view> values) = 0;

  // Reads keys[i] into outs[i] for every i and sets lengths[i] to its
  // length. OK only when every key was read; NotFound naming the key when
  // one is absent (a benchmark must never count a miss as throughput);
  // otherwise the first failure, naming its key.
  virtual absl::Status Get(absl::Span<const absl::string_view> keys,
                           absl::Span<const absl::Span<char>> outs,
                           std::vector<size_t>& lengths) = 0;
};

class KvSystem {
 public:
  virtual ~KvSystem() = default;
  // "redis", "memcached" or "meshpool".
  virtual std::string name() const = 0;
  // What was reached, for the report ("memcached 1.6.18 at 127.0.0.1:11211").
  virtual std::string description() const = 0;
  // A new session (a connection of its own for redis and memcached).
  virtual absl::StatusOr<std::unique_ptr<KvSession>> OpenSession() = 0;
};

// Each checks that the server answers (PING, `version`, the cluster map)
// and returns the stream's or client's error otherwise. `timeout` bounds
// connects and every reply.
absl::StatusOr<std::unique_ptr<KvSystem>> OpenRedis(absl::string_view address,
                                                    absl::Duration timeout);
absl::StatusOr<std::unique_ptr<KvSystem>> OpenMemcached(
    absl::string_view address, absl::Duration timeout);
// `coordinator`: "host:port" of the meshpool cluster's coordinator;
// `name`: the system's name in the report ("meshpool", "meshpool-shm").
absl::StatusOr<std::unique_ptr<KvSystem>> OpenMeshpool(
    absl::string_view name, absl::string_view coordinator,
    absl::Duration timeout);

}  // namespace meshpool::bench

#endif  // MESHPOOL_BENCH_KV_COMPARE_SYSTEMS_H_
