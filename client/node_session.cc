#include "client/node_session.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "client/node_connection.h"
#include "common/common.h"

namespace meshpool::client_internal {

proto::KvClientStats KvCounters::ToProto() const {
  proto::KvClientStats s;
  s.set_hits(hits.load(std::memory_order_relaxed));
  s.set_misses(misses.load(std::memory_order_relaxed));
  s.set_puts(puts.load(std::memory_order_relaxed));
  s.set_bytes_in(bytes_in.load(std::memory_order_relaxed));
  s.set_bytes_out(bytes_out.load(std::memory_order_relaxed));
  s.set_pins(pins.load(std::memory_order_relaxed));
  return s;
}

void KvCounters::CountGet(const absl::Status& status, size_t bytes) {
  if (status.ok()) {
    hits.fetch_add(1, std::memory_order_relaxed);
    bytes_out.fetch_add(bytes, std::memory_order_relaxed);
  } else if (status.code() == absl::StatusCode::kNotFound) {
    misses.fetch_add(1, std::memory_order_relaxed);
  }
}

void KvCounters::CountPut(const absl::Status& status, size_t bytes) {
  if (!status.ok()) return;
  puts.fetch_add(1, std::memory_order_relaxed);
  bytes_in.fetch_add(bytes, std::memory_order_relaxed);
}

bool KvCounters::any() const {
  return hits.load() + misses.load() + puts.load() + pins.load() > 0;
}

void NodeSession::Adopt(absl::Time sent, absl::Time received,
                        uint64_t node_clock_ms, uint32_t lease_ms) {
  // The node read its clock between send and receive: take the middle.
  absl::Time mid = sent + (received - sent) / 2;
  clock_offset_ms_ =
      static_cast<int64_t>(node_clock_ms) - absl::ToUnixMillis(mid);
  lease_ = absl::Milliseconds(lease_ms);
  last_renew_sent_ = sent;
}

absl::Status NodeSession::OpenLocked() {
  absl::Time sent = absl::Now();
  MESHPOOL_ASSIGN_OR_RETURN(proto::OpenSessionReply reply, node_.OpenSession());
  const store::PoolLayout& layout = node_.layout();
  uint64_t table_bytes = uint64_t{reply.pin_entries()} * store::kPinEntryBytes;
  if (reply.pin_entries() == 0 ||
      reply.pin_table_offset() < layout.pin_area_offset ||
      reply.pin_table_offset() + table_bytes > layout.slab_area_offset) {
    return absl::InternalError(
        absl::StrCat(node_.Describe(),
                     " opened a session whose pin table lies outside "
                     "its pin area; upgrade the node"));
  }
  open_ = true;
  session_ = reply.session();
  token_ = reply.token();
  table_ =
      std::make_shared<PinTable>(reply.pin_table_offset(), reply.pin_entries());
  Adopt(sent, absl::Now(), reply.node_clock_ms(), reply.lease_ms());
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<PinTable>> NodeSession::Table() {
  absl::MutexLock lock(&mu_);
  if (!open_) MESHPOOL_RETURN_IF_ERROR(OpenLocked());
  absl::Duration margin = std::min(kMaxWriteMargin, lease_ / 4);
  if (absl::Now() > last_renew_sent_ + lease_ - margin) {
    return absl::UnavailableError(absl::StrCat(
        "the pin session on ", node_.Describe(),
        " is not being renewed (the node is unreachable or slow); retry"));
  }
  return table_;
}

uint64_t NodeSession::NodeNowMs() const {
  absl::MutexLock lock(&mu_);
  return static_cast<uint64_t>(absl::ToUnixMillis(absl::Now()) +
                               clock_offset_ms_);
}

void NodeSession::KeepAlive(const KvCounters& counters) {
  absl::MutexLock lock(&mu_);
  if (!open_) {
    if (counters.any()) OpenLocked().IgnoreError();  // retried next round
    return;
  }
  absl::Time now = absl::Now();
  if (now < last_renew_sent_ + lease_ / 4) return;
  absl::StatusOr<proto::RenewSessionReply> reply =
      node_.RenewSession(session_, token_, counters.ToProto());
  if (reply.ok()) {
    Adopt(now, absl::Now(), reply->node_clock_ms(), reply->lease_ms());
  } else if (reply.status().code() == absl::StatusCode::kNotFound ||
             reply.status().code() == absl::StatusCode::kFailedPrecondition) {
    open_ = false;  // expired or the node restarted: its pins are gone
    table_.reset();
  }
}

void NodeSession::Close(const KvCounters& counters) {
  absl::MutexLock lock(&mu_);
  if (!open_) return;
  node_.CloseSession(session_, token_, counters.ToProto()).IgnoreError();
  open_ = false;
  table_.reset();
}

}  // namespace meshpool::client_internal
