#include "bench/resp_client.h"

#include <hiredis/hiredis.h>

#include <climits>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "bench/host_port.h"
#include "common/common.h"

namespace meshpool::bench {
namespace {

struct ReplyDeleter {
  void operator()(redisReply* reply) const { freeReplyObject(reply); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

// hiredis copies each argument with memcpy: never hand it a null pointer.
const char* Data(absl::string_view s) { return s.empty() ? "" : s.data(); }

absl::string_view Text(const redisReply& reply) {
  return reply.str == nullptr ? absl::string_view()
                              : absl::string_view(reply.str, reply.len);
}

const char* TypeName(int type) {
  switch (type) {
    case REDIS_REPLY_STRING:
      return "string";
    case REDIS_REPLY_ARRAY:
      return "array";
    case REDIS_REPLY_INTEGER:
      return "integer";
    case REDIS_REPLY_NIL:
      return "nil";
    case REDIS_REPLY_STATUS:
      return "status";
    case REDIS_REPLY_ERROR:
      return "error";
    default:
      return "unknown";
  }
}

absl::Status Annotate(const absl::Status& s, absl::string_view what) {
  return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
}

// A reply other than the `expected` one: the server's error reply as
// FailedPrecondition (ResourceExhausted for OOM), any other type as DataLoss.
absl::Status Unexpected(const redisReply& reply, absl::string_view expected,
                        absl::string_view address) {
  if (reply.type == REDIS_REPLY_ERROR) {
    const std::string msg =
        absl::StrCat("redis at ", address, " answered: ", Text(reply));
    if (absl::StartsWith(Text(reply), "OOM")) {
      return absl::ResourceExhaustedError(
          absl::StrCat(msg, " (raise its maxmemory)"));
    }
    return absl::FailedPreconditionError(msg);
  }
  return absl::DataLossError(absl::StrCat(
      "redis at ", address, ": expected ", expected, ", got a reply of type ",
      TypeName(reply.type), " '", Text(reply).substr(0, 80), "'"));
}

// hiredis takes argument counts as int.
absl::Status CheckArgCount(size_t count) {
  if (count > static_cast<size_t>(INT_MAX)) {
    return absl::InvalidArgumentError(
        absl::StrCat(count, " arguments are more than hiredis takes"));
  }
  return absl::OkStatus();
}

}  // namespace

void RespClient::ContextDeleter::operator()(redisContext* context) const {
  redisFree(context);
}

RespClient::RespClient(std::string address, ContextPtr context)
    : address_(std::move(address)), context_(std::move(context)) {}

absl::StatusOr<RespClient> RespClient::Connect(absl::string_view address,
                                               absl::Duration timeout) {
  std::string host;
  int port = 0;
  MESHPOOL_RETURN_IF_ERROR(
      SplitHostPort(address, "127.0.0.1:6379", host, port));
  const timeval tv = absl::ToTimeval(timeout);
  ContextPtr context(redisConnectWithTimeout(host.c_str(), port, tv));
  if (context == nullptr) {
    return absl::ResourceExhaustedError(
        "hiredis could not allocate a connection context");
  }
  RespClient client{std::string(address), std::move(context)};
  if (client.context_->err != 0) {
    return client.ContextError("connect (is the server running?)");
  }
  // The connect timeout bounds the connect only; this bounds later I/O.
  if (redisSetTimeout(client.context_.get(), tv) != REDIS_OK) {
    return client.ContextError("set the timeout");
  }
  const absl::string_view ping[] = {"PING"};
  MESHPOOL_ASSIGN_OR_RETURN(std::string pong, client.Command(ping));
  if (pong != "PONG") {
    return absl::FailedPreconditionError(absl::StrCat(
        address, " answered PING with '", pong, "': not a Redis server?"));
  }
  return client;
}

absl::Status RespClient::CheckUsable() const {
  if (context_ == nullptr) {
    return absl::FailedPreconditionError("this RespClient was moved from");
  }
  if (context_->err != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the connection to redis at ", address_, " failed earlier (",
        context_->errstr, "); open a new one"));
  }
  return absl::OkStatus();
}

absl::Status RespClient::ContextError(absl::string_view what) const {
  const std::string msg =
      absl::StrCat("redis at ", address_, ": ", what, ": ", context_->errstr);
  switch (context_->err) {
    case REDIS_ERR_PROTOCOL:
      return absl::DataLossError(msg);
    case REDIS_ERR_OOM:
      return absl::ResourceExhaustedError(msg);
    default:  // REDIS_ERR_IO (timeouts too), REDIS_ERR_EOF, REDIS_ERR_OTHER
      return absl::UnavailableError(msg);
  }
}

absl::StatusOr<std::string> RespClient::Command(
    absl::Span<const absl::string_view> args) {
  MESHPOOL_RETURN_IF_ERROR(CheckUsable());
  if (args.empty()) return absl::InvalidArgumentError("empty command");
  MESHPOOL_RETURN_IF_ERROR(CheckArgCount(args.size()));
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  argv.reserve(args.size());
  lens.reserve(args.size());
  for (absl::string_view a : args) {
    argv.push_back(Data(a));
    lens.push_back(a.size());
  }
  ReplyPtr reply(static_cast<redisReply*>(
      redisCommandArgv(context_.get(), static_cast<int>(args.size()),
                       argv.data(), lens.data())));
  if (reply == nullptr) return ContextError(args[0]);
  if (reply->type == REDIS_REPLY_STATUS) return std::string(Text(*reply));
  if (reply->type == REDIS_REPLY_INTEGER) return absl::StrCat(reply->integer);
  return Annotate(Unexpected(*reply, "a status or an integer", address_),
                  args[0]);
}

absl::Status RespClient::SetBatch(absl::Span<const absl::string_view> keys,
                                  absl::Span<const absl::string_view> values) {
  MESHPOOL_RETURN_IF_ERROR(CheckUsable());
  if (keys.empty() || keys.size() != values.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SetBatch needs as many values as keys, at least one (got ",
        keys.size(), " keys, ", values.size(), " values)"));
  }
  // Queued in hiredis's output buffer; the first redisGetReply sends them.
  for (size_t i = 0; i < keys.size(); ++i) {
    const char* argv[] = {"SET", Data(keys[i]), Data(values[i])};
    const size_t lens[] = {3, keys[i].size(), values[i].size()};
    if (redisAppendCommandArgv(context_.get(), 3, argv, lens) != REDIS_OK) {
      return ContextError(absl::StrCat("queue SET ", keys[i]));
    }
  }
  absl::Status first = absl::OkStatus();
  for (size_t i = 0; i < keys.size(); ++i) {
    void* raw = nullptr;
    if (redisGetReply(context_.get(), &raw) != REDIS_OK) {
      return ContextError(absl::StrCat("SET ", keys[i]));
    }
    ReplyPtr reply(static_cast<redisReply*>(raw));
    if (reply == nullptr) {
      return absl::DataLossError(
          absl::StrCat("redis at ", address_, ": no reply to SET ", keys[i]));
    }
    if (reply->type == REDIS_REPLY_STATUS && Text(*reply) == "OK") continue;
    if (first.ok()) {
      first = Annotate(Unexpected(*reply, "the status OK", address_),
                       absl::StrCat("SET ", keys[i]));
    }
  }
  return first;
}

absl::StatusOr<std::vector<std::optional<size_t>>> RespClient::MGet(
    absl::Span<const absl::string_view> keys,
    absl::Span<const absl::Span<char>> outs) {
  MESHPOOL_RETURN_IF_ERROR(CheckUsable());
  if (keys.empty() || keys.size() != outs.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("MGet needs as many buffers as keys, at least one (got ",
                     keys.size(), " keys, ", outs.size(), " buffers)"));
  }
  MESHPOOL_RETURN_IF_ERROR(CheckArgCount(keys.size() + 1));
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  argv.reserve(keys.size() + 1);
  lens.reserve(keys.size() + 1);
  argv.push_back("MGET");
  lens.push_back(4);
  for (absl::string_view k : keys) {
    argv.push_back(Data(k));
    lens.push_back(k.size());
  }
  ReplyPtr reply(static_cast<redisReply*>(
      redisCommandArgv(context_.get(), static_cast<int>(argv.size()),
                       argv.data(), lens.data())));
  if (reply == nullptr) return ContextError("MGET");
  if (reply->type != REDIS_REPLY_ARRAY) {
    return Annotate(Unexpected(*reply, "an array", address_), "MGET");
  }
  if (reply->elements != keys.size()) {
    return absl::DataLossError(absl::StrCat("redis at ", address_, ": MGET of ",
                                            keys.size(), " keys returned ",
                                            reply->elements, " values"));
  }
  std::vector<std::optional<size_t>> lengths(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    const redisReply& value = *reply->element[i];
    if (value.type == REDIS_REPLY_NIL) continue;  // absent
    if (value.type != REDIS_REPLY_STRING) {
      return Annotate(Unexpected(value, "a string or nil", address_),
                      absl::StrCat("MGET ", keys[i]));
    }
    if (value.len > outs[i].size()) {
      return absl::OutOfRangeError(
          absl::StrCat("MGET ", keys[i], ": the value has ", value.len,
                       " bytes, the buffer ", outs[i].size()));
    }
    if (value.len > 0) std::memcpy(outs[i].data(), value.str, value.len);
    lengths[i] = value.len;
  }
  return lengths;
}

}  // namespace meshpool::bench
