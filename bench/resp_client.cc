#include "bench/resp_client.h"

#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/common.h"

namespace meshpool::bench {
namespace {

// One RESP bulk string header and body: "$<n>\r\n<bytes>\r\n".
void AppendBulk(std::string& out, absl::string_view arg) {
  absl::StrAppend(&out, "$", arg.size(), "\r\n", arg, "\r\n");
}

// The status of a RESP error reply (`line` starts with '-').
absl::Status ServerError(absl::string_view line, absl::string_view address) {
  const std::string msg =
      absl::StrCat("redis at ", address, " answered: ", line.substr(1));
  if (absl::StartsWith(line, "-OOM")) {
    return absl::ResourceExhaustedError(
        absl::StrCat(msg, " (raise its maxmemory)"));
  }
  return absl::FailedPreconditionError(msg);
}

absl::Status Unexpected(absl::string_view what, absl::string_view line,
                        absl::string_view address) {
  return absl::DataLossError(absl::StrCat("redis at ", address, ": expected ",
                                          what, ", got '", line.substr(0, 200),
                                          "'"));
}

}  // namespace

absl::StatusOr<RespClient> RespClient::Connect(absl::string_view address,
                                               absl::Duration timeout) {
  MESHPOOL_ASSIGN_OR_RETURN(TcpStream stream,
                            TcpStream::Connect(address, timeout));
  RespClient client(std::move(stream));
  const absl::string_view ping[] = {"PING"};
  MESHPOOL_ASSIGN_OR_RETURN(std::string pong, client.Command(ping));
  if (pong != "PONG") {
    return absl::FailedPreconditionError(absl::StrCat(
        address, " answered PING with '", pong, "': not a Redis server?"));
  }
  return client;
}

absl::Status RespClient::Broken() const {
  return absl::FailedPreconditionError(
      absl::StrCat("the connection to redis at ", stream_.address(),
                   " failed earlier and is out of step; open a new one"));
}

absl::StatusOr<std::string> RespClient::ReadSimpleReply() {
  MESHPOOL_ASSIGN_OR_RETURN(absl::string_view line, stream_.ReadLine());
  if (line.empty()) return Unexpected("a reply", line, stream_.address());
  if (line[0] == '-') return ServerError(line, stream_.address());
  if (line[0] != '+' && line[0] != ':') {
    return Unexpected("a simple reply", line, stream_.address());
  }
  return std::string(line.substr(1));
}

absl::StatusOr<std::string> RespClient::Command(
    absl::Span<const absl::string_view> args) {
  if (broken_) return Broken();
  if (args.empty()) return absl::InvalidArgumentError("empty command");
  std::string request = absl::StrCat("*", args.size(), "\r\n");
  for (absl::string_view a : args) AppendBulk(request, a);
  broken_ = true;  // until the reply has been read in full
  const absl::string_view pieces[] = {request};
  MESHPOOL_RETURN_IF_ERROR(stream_.Send(pieces));
  absl::StatusOr<std::string> reply = ReadSimpleReply();
  if (reply.ok() || !absl::IsDataLoss(reply.status())) broken_ = false;
  return reply;
}

absl::Status RespClient::SetBatch(absl::Span<const absl::string_view> keys,
                                  absl::Span<const absl::string_view> values) {
  if (broken_) return Broken();
  if (keys.empty() || keys.size() != values.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SetBatch needs as many values as keys, at least one (got ",
        keys.size(), " keys, ", values.size(), " values)"));
  }
  // Command i is segment i (its header, key and the value's "$n\r\n"), then
  // the value itself; "\r\n" ends each value and opens the next segment.
  std::string meta;
  std::vector<size_t> ends;
  ends.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i > 0) meta += "\r\n";
    meta += "*3\r\n$3\r\nSET\r\n";
    AppendBulk(meta, keys[i]);
    absl::StrAppend(&meta, "$", values[i].size(), "\r\n");
    ends.push_back(meta.size());
  }
  meta += "\r\n";
  std::vector<absl::string_view> pieces;
  pieces.reserve(2 * keys.size() + 1);
  size_t start = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    pieces.push_back(absl::string_view(meta).substr(start, ends[i] - start));
    pieces.push_back(values[i]);
    start = ends[i];
  }
  pieces.push_back(absl::string_view(meta).substr(start));
  broken_ = true;
  MESHPOOL_RETURN_IF_ERROR(stream_.Send(pieces));
  absl::Status first = absl::OkStatus();
  for (size_t i = 0; i < keys.size(); ++i) {
    MESHPOOL_ASSIGN_OR_RETURN(absl::string_view line, stream_.ReadLine());
    if (line == "+OK") continue;
    if (line.empty() || line[0] != '-') {
      return Unexpected("+OK to SET", line, stream_.address());
    }
    if (first.ok()) {
      first = ServerError(line, stream_.address());
      first = absl::Status(
          first.code(), absl::StrCat("SET ", keys[i], ": ", first.message()));
    }
  }
  broken_ = false;
  return first;
}

absl::StatusOr<std::vector<std::optional<size_t>>> RespClient::MGet(
    absl::Span<const absl::string_view> keys,
    absl::Span<const absl::Span<char>> outs) {
  if (broken_) return Broken();
  if (keys.empty() || keys.size() != outs.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("MGet needs as many buffers as keys, at least one (got ",
                     keys.size(), " keys, ", outs.size(), " buffers)"));
  }
  std::string request = absl::StrCat("*", keys.size() + 1, "\r\n");
  AppendBulk(request, "MGET");
  for (absl::string_view k : keys) AppendBulk(request, k);
  broken_ = true;
  const absl::string_view pieces[] = {request};
  MESHPOOL_RETURN_IF_ERROR(stream_.Send(pieces));
  MESHPOOL_ASSIGN_OR_RETURN(absl::string_view head, stream_.ReadLine());
  if (!head.empty() && head[0] == '-') {
    broken_ = false;
    return ServerError(head, stream_.address());
  }
  size_t count = 0;
  if (head.empty() || head[0] != '*' ||
      !absl::SimpleAtoi(head.substr(1), &count) || count != keys.size()) {
    return Unexpected(absl::StrCat("*", keys.size(), " (the MGET array)"), head,
                      stream_.address());
  }
  std::vector<std::optional<size_t>> lengths(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    MESHPOOL_ASSIGN_OR_RETURN(absl::string_view line, stream_.ReadLine());
    if (line == "$-1") continue;  // absent
    size_t n = 0;
    if (line.empty() || line[0] != '$' ||
        !absl::SimpleAtoi(line.substr(1), &n)) {
      return Unexpected("a bulk string", line, stream_.address());
    }
    if (n > outs[i].size()) {
      return absl::OutOfRangeError(
          absl::StrCat("MGET ", keys[i], ": the value has ", n,
                       " bytes, the buffer ", outs[i].size()));
    }
    MESHPOOL_RETURN_IF_ERROR(stream_.ReadExact(outs[i].first(n)));
    MESHPOOL_RETURN_IF_ERROR(stream_.Expect("\r\n"));
    lengths[i] = n;
  }
  broken_ = false;
  return lengths;
}

}  // namespace meshpool::bench
