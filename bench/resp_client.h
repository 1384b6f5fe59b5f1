// For bench/kv_compare: a minimal Redis client speaking RESP2 over one TCP
// connection. Just what the benchmark needs: a pipelined batch of SETs, one
// MGET, and single commands with simple replies (PING, FLUSHALL).
//
// Values move without intermediate copies on our side: SET sends the
// caller's bytes with gather writes, MGET receives each value straight into
// the caller's buffer.
//
// Errors: the stream's (bench/kv_socket.h: Unavailable, DataLoss); a server
// error reply ("-ERR ...", "-OOM ...") becomes FailedPrecondition, or
// ResourceExhausted for -OOM, carrying the server's text; DataLoss for a
// reply that is not what RESP allows there; OutOfRange when a value is
// larger than its output buffer. After an error other than a server error
// reply the connection is out of step and every later call fails with
// FailedPrecondition: open a new client.
//
// Thread-compatible: one thread uses a client at a time (open one per
// thread).
#ifndef MESHPOOL_BENCH_RESP_CLIENT_H_
#define MESHPOOL_BENCH_RESP_CLIENT_H_

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

class RespClient {
 public:
  // Connects to a Redis server at "host:port" and checks it answers PING.
  // `timeout` bounds the connect and every later reply.
  static absl::StatusOr<RespClient> Connect(absl::string_view address,
                                            absl::Duration timeout);

  // Runs one command whose reply is a simple string or an integer (PING,
  // FLUSHALL, DEL, ...) and returns the reply's text.
  absl::StatusOr<std::string> Command(absl::Span<const absl::string_view> args);

  // SET keys[i] values[i] for every i, pipelined: every command is sent,
  // then every reply is read. OK when every reply is +OK; otherwise the
  // first error reply (the others are still read, so the connection stays
  // usable). InvalidArgument when the spans' sizes differ or are empty.
  absl::Status SetBatch(absl::Span<const absl::string_view> keys,
                        absl::Span<const absl::string_view> values);

  // MGET keys...: value i lands in outs[i]; lengths[i] is its length, or
  // nullopt when the key is absent. InvalidArgument when the spans' sizes
  // differ or are empty.
  absl::StatusOr<std::vector<std::optional<size_t>>> MGet(
      absl::Span<const absl::string_view> keys,
      absl::Span<const absl::Span<char>> outs);

 private:
  explicit RespClient(TcpStream stream) : stream_(std::move(stream)) {}
  // FailedPrecondition: the connection is out of step after an error.
  absl::Status Broken() const;
  // Reads a reply expected to be "+..." or ":..."; server errors as above.
  absl::StatusOr<std::string> ReadSimpleReply();

  TcpStream stream_;
  bool broken_ = false;
};

}  // namespace meshpool::bench

#endif  // MESHPOOL_BENCH_RESP_CLIENT_H_
