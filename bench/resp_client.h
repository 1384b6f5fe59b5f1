// For bench/kv_compare: a Redis client for what the benchmark needs (a
// pipelined batch of SETs, one MGET, and single commands with simple replies
// such as PING), wrapping hiredis, Redis's official C client. The benchmark
// measures Redis as its users reach it, through the client library they use,
// rather than through a protocol implementation of ours.
//
// Costs that come with hiredis: SET arguments are copied into hiredis's
// output buffer, and every MGET value is parsed into a reply object and then
// copied into the caller's buffer.
//
// Errors: Unavailable when the server cannot be reached, closes the
// connection, or does not answer within the timeout; DataLoss when hiredis
// cannot parse what the server sent, or a reply has a type the command does
// not allow; a server error reply ("ERR ...", "OOM ...") becomes
// FailedPrecondition, or ResourceExhausted for OOM, carrying the server's
// text (ResourceExhausted also when hiredis itself runs out of memory);
// OutOfRange when a value is larger than its output buffer; InvalidArgument
// for malformed arguments. After an error of the connection (Unavailable,
// DataLoss, hiredis out of memory) hiredis keeps it in the context, and
// every later call fails with FailedPrecondition: open a new client. The
// other errors leave the connection usable.
//
// Thread-compatible: one thread uses a client at a time (open one per
// thread). Move-only; a moved-from client fails every call with
// FailedPrecondition.
#ifndef MESHPOOL_BENCH_RESP_CLIENT_H_
#define MESHPOOL_BENCH_RESP_CLIENT_H_

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

struct redisContext;  // <hiredis/hiredis.h>

namespace meshpool::bench {

class RespClient {
 public:
  // Connects to a Redis server at "host:port" and checks it answers PING.
  // `timeout` bounds the connect and every later send and reply.
  // InvalidArgument for a malformed address; Unavailable when nothing
  // answers; FailedPrecondition when the peer is not a Redis server.
  static absl::StatusOr<RespClient> Connect(absl::string_view address,
                                            absl::Duration timeout);

  RespClient(RespClient&&) noexcept = default;
  RespClient& operator=(RespClient&&) noexcept = default;
  RespClient(const RespClient&) = delete;
  RespClient& operator=(const RespClient&) = delete;
  ~RespClient() = default;

  // Runs one command whose reply is a status or an integer (PING, FLUSHALL,
  // DEL, ...) and returns the reply's text. InvalidArgument for no `args`.
  absl::StatusOr<std::string> Command(absl::Span<const absl::string_view> args);

  // SET keys[i] values[i] for every i, pipelined: every command is queued
  // (redisAppendCommandArgv), then every reply is read (redisGetReply). OK
  // when every reply is the status OK; otherwise the first failing reply,
  // naming its key (every reply is still read, so the connection stays
  // usable). InvalidArgument when the spans' sizes differ or are empty.
  absl::Status SetBatch(absl::Span<const absl::string_view> keys,
                        absl::Span<const absl::string_view> values);

  // MGET keys...: value i lands in outs[i]; lengths[i] is its length, or
  // nullopt when the key is absent. InvalidArgument when the spans' sizes
  // differ or are empty; OutOfRange naming the key when a value does not
  // fit its buffer.
  absl::StatusOr<std::vector<std::optional<size_t>>> MGet(
      absl::Span<const absl::string_view> keys,
      absl::Span<const absl::Span<char>> outs);

 private:
  struct ContextDeleter {
    void operator()(redisContext* context) const;
  };
  using ContextPtr = std::unique_ptr<redisContext, ContextDeleter>;

  RespClient(std::string address, ContextPtr context);
  // OK when the connection can take a command; FailedPrecondition after a
  // connection error or a move.
  absl::Status CheckUsable() const;
  // The context's error (err, errstr) after `what` failed, as a Status:
  // see the header comment.
  absl::Status ContextError(absl::string_view what) const;

  std::string address_;
  ContextPtr context_;
};

}  // namespace meshpool::bench

#endif  // MESHPOOL_BENCH_RESP_CLIENT_H_
