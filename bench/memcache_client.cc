#include "bench/memcache_client.h"

#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/common.h"

namespace meshpool::bench {
namespace {

absl::Status CheckKey(absl::string_view key) {
  bool ok = !key.empty() && key.size() <= kMaxMemcacheKey;
  for (char c : key) {
    ok = ok && static_cast<unsigned char>(c) > ' ' && c != 0x7f;
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "memcached key '", key.substr(0, 60), "' is empty, longer than ",
        kMaxMemcacheKey, " bytes, or holds spaces or control characters"));
  }
  return absl::OkStatus();
}

absl::Status CheckSpans(size_t keys, size_t others, absl::string_view what) {
  if (keys == 0 || keys != others) {
    return absl::InvalidArgumentError(
        absl::StrCat("needs as many ", what, " as keys, at least one (got ",
                     keys, " keys, ", others, " ", what, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<MemcacheClient> MemcacheClient::Connect(
    absl::string_view address, absl::Duration timeout) {
  MESHPOOL_ASSIGN_OR_RETURN(TcpStream stream,
                            TcpStream::Connect(address, timeout));
  MemcacheClient client(std::move(stream));
  const absl::string_view request[] = {"version\r\n"};
  MESHPOOL_RETURN_IF_ERROR(client.stream_.Send(request));
  MESHPOOL_ASSIGN_OR_RETURN(absl::string_view line, client.stream_.ReadLine());
  if (!absl::ConsumePrefix(&line, "VERSION ")) {
    return absl::FailedPreconditionError(
        absl::StrCat(address, " answered `version` with '", line.substr(0, 80),
                     "': not a memcached server?"));
  }
  client.version_ = std::string(line);
  return client;
}

absl::Status MemcacheClient::Broken() const {
  return absl::FailedPreconditionError(
      absl::StrCat("the connection to memcached at ", stream_.address(),
                   " failed earlier and is out of step; open a new one"));
}

absl::Status MemcacheClient::ServerError(absl::string_view line) const {
  const std::string msg =
      absl::StrCat("memcached at ", stream_.address(), " answered: ", line);
  if (absl::StrContains(line, "out of memory")) {
    return absl::ResourceExhaustedError(absl::StrCat(msg, " (raise its -m)"));
  }
  return absl::FailedPreconditionError(msg);
}

absl::Status MemcacheClient::Unexpected(absl::string_view what,
                                        absl::string_view line) const {
  return absl::DataLossError(absl::StrCat("memcached at ", stream_.address(),
                                          ": expected ", what, ", got '",
                                          line.substr(0, 200), "'"));
}

absl::Status MemcacheClient::SetBatch(
    absl::Span<const absl::string_view> keys,
    absl::Span<const absl::string_view> values) {
  if (broken_) return Broken();
  MESHPOOL_RETURN_IF_ERROR(CheckSpans(keys.size(), values.size(), "values"));
  for (absl::string_view k : keys) MESHPOOL_RETURN_IF_ERROR(CheckKey(k));
  // Segment i: "\r\n" ending value i-1 (none for i = 0) and the command line
  // of value i; the value follows its segment.
  std::string meta;
  std::vector<size_t> ends;
  ends.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i > 0) meta += "\r\n";
    absl::StrAppend(&meta, "set ", keys[i], " 0 0 ", values[i].size(), "\r\n");
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
  broken_ = true;  // until every reply has been read
  MESHPOOL_RETURN_IF_ERROR(stream_.Send(pieces));
  absl::Status first = absl::OkStatus();
  for (size_t i = 0; i < keys.size(); ++i) {
    MESHPOOL_ASSIGN_OR_RETURN(absl::string_view line, stream_.ReadLine());
    if (line == "STORED") continue;
    if (!absl::StartsWith(line, "SERVER_ERROR")) {
      return Unexpected(absl::StrCat("STORED for set ", keys[i]), line);
    }
    if (first.ok()) {
      absl::Status e = ServerError(line);
      first = absl::Status(e.code(),
                           absl::StrCat("set ", keys[i], ": ", e.message()));
    }
  }
  broken_ = false;
  return first;
}

absl::StatusOr<std::vector<std::optional<size_t>>> MemcacheClient::GetMulti(
    absl::Span<const absl::string_view> keys,
    absl::Span<const absl::Span<char>> outs) {
  if (broken_) return Broken();
  MESHPOOL_RETURN_IF_ERROR(CheckSpans(keys.size(), outs.size(), "buffers"));
  std::string request = "get";
  for (absl::string_view k : keys) {
    MESHPOOL_RETURN_IF_ERROR(CheckKey(k));
    absl::StrAppend(&request, " ", k);
  }
  request += "\r\n";
  broken_ = true;
  const absl::string_view pieces[] = {request};
  MESHPOOL_RETURN_IF_ERROR(stream_.Send(pieces));
  std::vector<std::optional<size_t>> lengths(keys.size());
  size_t next = 0;  // hits come back in request order, misses left out
  while (true) {
    MESHPOOL_ASSIGN_OR_RETURN(absl::string_view line, stream_.ReadLine());
    if (line == "END") break;
    if (absl::StartsWith(line, "SERVER_ERROR")) {
      // memcached sends nothing more for this request after SERVER_ERROR.
      broken_ = false;
      return ServerError(line);
    }
    // "VALUE <key> <flags> <bytes>[ <cas>]"
    std::vector<absl::string_view> words =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    size_t n = 0;
    if (words.size() < 4 || words[0] != "VALUE" ||
        !absl::SimpleAtoi(words[3], &n)) {
      return Unexpected("VALUE <key> <flags> <bytes> or END", line);
    }
    while (next < keys.size() && keys[next] != words[1]) ++next;
    if (next == keys.size()) {
      return Unexpected("only the requested keys, in order", line);
    }
    if (n > outs[next].size()) {
      return absl::OutOfRangeError(
          absl::StrCat("get ", keys[next], ": the value has ", n,
                       " bytes, the buffer ", outs[next].size()));
    }
    MESHPOOL_RETURN_IF_ERROR(stream_.ReadExact(outs[next].first(n)));
    MESHPOOL_RETURN_IF_ERROR(stream_.Expect("\r\n"));
    lengths[next++] = n;
  }
  broken_ = false;
  return lengths;
}

}  // namespace meshpool::bench
