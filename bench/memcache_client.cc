#include "bench/memcache_client.h"

#include <libmemcached/memcached.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "bench/host_port.h"
#include "common/common.h"

namespace meshpool::bench {
namespace {

absl::StatusCode CodeOf(memcached_return_t rc) {
  switch (rc) {
    case MEMCACHED_HOST_LOOKUP_FAILURE:
    case MEMCACHED_CONNECTION_FAILURE:
    case MEMCACHED_WRITE_FAILURE:
    case MEMCACHED_READ_FAILURE:
    case MEMCACHED_UNKNOWN_READ_FAILURE:
    case MEMCACHED_ERRNO:
    case MEMCACHED_TIMEOUT:
    case MEMCACHED_SERVER_MARKED_DEAD:
    case MEMCACHED_SERVER_TEMPORARILY_DISABLED:
      return absl::StatusCode::kUnavailable;
    case MEMCACHED_MEMORY_ALLOCATION_FAILURE:
    case MEMCACHED_SERVER_MEMORY_ALLOCATION_FAILURE:
      return absl::StatusCode::kResourceExhausted;
    case MEMCACHED_BAD_KEY_PROVIDED:
    case MEMCACHED_NO_KEY_PROVIDED:
    case MEMCACHED_KEY_TOO_BIG:
    case MEMCACHED_INVALID_ARGUMENTS:
      return absl::StatusCode::kInvalidArgument;
    case MEMCACHED_SERVER_ERROR:
    case MEMCACHED_E2BIG:  // SERVER_ERROR object too large for cache (-I)
    case MEMCACHED_NOTSTORED:
    case MEMCACHED_DATA_EXISTS:
    case MEMCACHED_NOT_SUPPORTED:
      return absl::StatusCode::kFailedPrecondition;
    case MEMCACHED_NOTFOUND:
      return absl::StatusCode::kNotFound;
    case MEMCACHED_PROTOCOL_ERROR:
    case MEMCACHED_CLIENT_ERROR:
    case MEMCACHED_ERROR:
    case MEMCACHED_PARTIAL_READ:
      return absl::StatusCode::kDataLoss;
    default:
      return absl::StatusCode::kInternal;
  }
}

// libmemcached's result `rc` of `what` as a Status. The text is
// libmemcached's: the last error's message when it has one (it carries the
// server's text or the failing host), memcached_strerror otherwise.
absl::Status MemcachedError(const memcached_st* memc, memcached_return_t rc,
                            absl::string_view address, absl::string_view what) {
  std::string text = memcached_strerror(memc, rc);
  const memcached_return_t last = memcached_last_error(memc);
  // memcached_version reports a failing server as SOME_ERRORS; the server's
  // own error is the last one.
  if (rc == MEMCACHED_SOME_ERRORS && memcached_failed(last)) rc = last;
  if (memcached_failed(last)) {
    const char* detail = memcached_last_error_message(memc);
    text = last == rc ? detail : absl::StrCat(text, " (", detail, ")");
  }
  if (rc == MEMCACHED_SERVER_MEMORY_ALLOCATION_FAILURE) {
    absl::StrAppend(&text, " (raise its -m)");
  }
  return absl::Status(CodeOf(rc), absl::StrCat("memcached at ", address, ": ",
                                               what, ": ", text));
}

absl::Status CheckSpans(size_t keys, size_t others, absl::string_view what) {
  if (keys == 0 || keys != others) {
    return absl::InvalidArgumentError(
        absl::StrCat("needs as many ", what, " as keys, at least one (got ",
                     keys, " keys, ", others, " ", what, ")"));
  }
  return absl::OkStatus();
}

// The index of `key` in `keys`, searching from `hint` on (results usually
// come back in request order) and wrapping around; keys.size() if absent.
size_t FindKey(absl::Span<const absl::string_view> keys, absl::string_view key,
               size_t hint) {
  for (size_t n = 0; n < keys.size(); ++n) {
    const size_t i = (hint + n) % keys.size();
    if (keys[i] == key) return i;
  }
  return keys.size();
}

// A memcached_result_st for memcached_fetch_result, owned here: the caller
// passes it in so that libmemcached reuses one value buffer for every result.
class FetchResult {
 public:
  explicit FetchResult(memcached_st* memc)
      : created_(memcached_result_create(memc, &result_) != nullptr) {}
  FetchResult(const FetchResult&) = delete;
  FetchResult& operator=(const FetchResult&) = delete;
  ~FetchResult() {
    if (created_) memcached_result_free(&result_);
  }
  // Null when libmemcached could not set it up.
  memcached_result_st* get() { return created_ ? &result_ : nullptr; }

 private:
  memcached_result_st result_{};
  const bool created_;
};

}  // namespace

void MemcacheClient::MemcachedDeleter::operator()(memcached_st* memc) const {
  memcached_free(memc);
}

MemcacheClient::MemcacheClient(std::string address, MemcachedPtr memc)
    : address_(std::move(address)), memc_(std::move(memc)) {}

absl::StatusOr<MemcacheClient> MemcacheClient::Connect(
    absl::string_view address, absl::Duration timeout) {
  std::string host;
  int port = 0;
  MESHPOOL_RETURN_IF_ERROR(
      SplitHostPort(address, "127.0.0.1:11211", host, port));
  MemcachedPtr memc(memcached_create(nullptr));
  if (memc == nullptr) {
    return absl::ResourceExhaustedError(
        "libmemcached could not allocate a memcached_st");
  }
  MemcacheClient client(std::string(address), std::move(memc));
  memcached_st* m = client.memc_.get();
  // The connect and poll timeouts are in milliseconds, the socket send and
  // receive timeouts (SO_SNDTIMEO, SO_RCVTIMEO) in microseconds.
  const uint64_t ms =
      std::clamp<int64_t>(absl::ToInt64Milliseconds(timeout), 1, INT32_MAX);
  const uint64_t us =
      std::clamp<int64_t>(absl::ToInt64Microseconds(timeout), 1, INT32_MAX);
  const std::pair<memcached_behavior_t, uint64_t> behaviors[] = {
      {MEMCACHED_BEHAVIOR_CONNECT_TIMEOUT, ms},
      {MEMCACHED_BEHAVIOR_POLL_TIMEOUT, ms},
      {MEMCACHED_BEHAVIOR_SND_TIMEOUT, us},
      {MEMCACHED_BEHAVIOR_RCV_TIMEOUT, us},
      {MEMCACHED_BEHAVIOR_TCP_NODELAY, 1},
      // Rejects keys with spaces or control characters before sending.
      {MEMCACHED_BEHAVIOR_VERIFY_KEY, 1},
  };
  for (const auto& [flag, value] : behaviors) {
    const memcached_return_t rc = memcached_behavior_set(m, flag, value);
    if (memcached_failed(rc)) {
      return MemcachedError(m, rc, address, "memcached_behavior_set");
    }
  }
  memcached_return_t rc =
      memcached_server_add(m, host.c_str(), static_cast<in_port_t>(port));
  if (memcached_failed(rc)) {
    return MemcachedError(m, rc, address, "add the server");
  }
  // The first request: connects, and fills in the server's version.
  rc = memcached_version(m);
  if (memcached_failed(rc)) {
    return MemcachedError(m, rc, address, "`version` (is the server running?)");
  }
  const memcached_instance_st* server =
      memcached_server_instance_by_position(m, 0);
  if (server == nullptr ||
      memcached_server_major_version(server) == UINT8_MAX) {
    return absl::FailedPreconditionError(absl::StrCat(
        address, " answered no version to `version`: not a memcached server?"));
  }
  client.version_ = absl::StrCat(
      static_cast<int>(memcached_server_major_version(server)), ".",
      static_cast<int>(memcached_server_minor_version(server)), ".",
      static_cast<int>(memcached_server_micro_version(server)));
  return client;
}

absl::Status MemcacheClient::CheckUsable() const {
  if (memc_ == nullptr) {
    return absl::FailedPreconditionError("this MemcacheClient was moved from");
  }
  return absl::OkStatus();
}

absl::Status MemcacheClient::SetBatch(
    absl::Span<const absl::string_view> keys,
    absl::Span<const absl::string_view> values) {
  MESHPOOL_RETURN_IF_ERROR(CheckUsable());
  MESHPOOL_RETURN_IF_ERROR(CheckSpans(keys.size(), values.size(), "values"));
  for (size_t i = 0; i < keys.size(); ++i) {
    // Sends the set and waits for its reply (STORED: MEMCACHED_SUCCESS).
    const memcached_return_t rc =
        memcached_set(memc_.get(), keys[i].data(), keys[i].size(),
                      values[i].data(), values[i].size(), 0, 0);
    if (rc != MEMCACHED_SUCCESS) {
      return MemcachedError(memc_.get(), rc, address_,
                            absl::StrCat("set ", keys[i]));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::optional<size_t>>> MemcacheClient::GetMulti(
    absl::Span<const absl::string_view> keys,
    absl::Span<const absl::Span<char>> outs) {
  MESHPOOL_RETURN_IF_ERROR(CheckUsable());
  MESHPOOL_RETURN_IF_ERROR(CheckSpans(keys.size(), outs.size(), "buffers"));
  memcached_st* m = memc_.get();
  std::vector<const char*> key_data;
  std::vector<size_t> key_lengths;
  key_data.reserve(keys.size());
  key_lengths.reserve(keys.size());
  for (absl::string_view k : keys) {
    key_data.push_back(k.data());
    key_lengths.push_back(k.size());
  }
  // Sends `get k1 k2 ...`; the values are read by memcached_fetch_result.
  memcached_return_t rc =
      memcached_mget(m, key_data.data(), key_lengths.data(), keys.size());
  if (memcached_failed(rc)) return MemcachedError(m, rc, address_, "get");
  FetchResult result(m);
  if (result.get() == nullptr) {
    return absl::ResourceExhaustedError(
        "libmemcached could not allocate a result");
  }
  std::vector<std::optional<size_t>> lengths(keys.size());
  absl::Status first = absl::OkStatus();  // kept until the reply is read
  size_t next = 0;
  while (const memcached_result_st* r =
             memcached_fetch_result(m, result.get(), &rc)) {
    const absl::string_view key(memcached_result_key_value(r),
                                memcached_result_key_length(r));
    const size_t i = FindKey(keys, key, next);
    if (i == keys.size()) {
      if (first.ok()) {
        first = absl::DataLossError(absl::StrCat(
            "memcached at ", address_, " returned key '", key.substr(0, 80),
            "', which the get did not ask for"));
      }
      continue;
    }
    next = i + 1;
    const size_t n = memcached_result_length(r);
    if (n > outs[i].size()) {
      if (first.ok()) {
        first = absl::OutOfRangeError(
            absl::StrCat("get ", keys[i], ": the value has ", n,
                         " bytes, the buffer ", outs[i].size()));
      }
      continue;
    }
    if (n > 0) std::memcpy(outs[i].data(), memcached_result_value(r), n);
    lengths[i] = n;
  }
  // The end of the reply: END, or NOTFOUND when no key was returned.
  if (rc != MEMCACHED_END && rc != MEMCACHED_NOTFOUND) {
    return MemcachedError(m, rc, address_, "get");
  }
  MESHPOOL_RETURN_IF_ERROR(first);
  return lengths;
}

}  // namespace meshpool::bench
