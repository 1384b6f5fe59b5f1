#include "client/node_session.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "client/node_connection.h"
#include "common/common.h"

namespace meshpool::client_internal {

proto::KvClientStats NodeKvCounters::ToProto() const {
  proto::KvClientStats s;
  s.set_hits(hits.load(std::memory_order_relaxed));
  s.set_misses(misses.load(std::memory_order_relaxed));
  s.set_puts(puts.load(std::memory_order_relaxed));
  s.set_bytes_in(bytes_in.load(std::memory_order_relaxed));
  s.set_bytes_out(bytes_out.load(std::memory_order_relaxed));
  s.set_pins(pins.load(std::memory_order_relaxed));
  return s;
}

void NodeKvCounters::CountGet(const absl::Status& status, size_t bytes) {
  if (status.ok()) {
    hits.fetch_add(1, std::memory_order_relaxed);
    bytes_out.fetch_add(bytes, std::memory_order_relaxed);
  } else if (status.code() == absl::StatusCode::kNotFound) {
    misses.fetch_add(1, std::memory_order_relaxed);
  }
}

void NodeKvCounters::CountPut(const absl::Status& status, size_t bytes) {
  if (!status.ok()) return;
  puts.fetch_add(1, std::memory_order_relaxed);
  bytes_in.fetch_add(bytes, std::memory_order_relaxed);
}

bool NodeKvCounters::any() const {
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
  const format::PoolLayout& layout = node_.layout();
  uint64_t table_bytes = uint64_t{reply.pin_entries()} * format::kPinEntryBytes;
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

absl::Status NodeSession::WritableLocked(const PinTable* table) const {
  if (!open_ || table_.get() != table) {
    return absl::UnavailableError(
        absl::StrCat("the pin session on ", node_.Describe(),
                     " ended (the node expired it or restarted); retry"));
  }
  absl::Duration margin = std::min(kMaxWriteMargin, lease_ / 4);
  if (absl::Now() > last_renew_sent_ + lease_ - margin) {
    return absl::UnavailableError(absl::StrCat(
        "the pin session on ", node_.Describe(),
        " is not being renewed (the node is unreachable or slow); retry"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<PinTable>> NodeSession::Table() {
  absl::MutexLock lock(&mu_);
  if (!open_) MESHPOOL_RETURN_IF_ERROR(OpenLocked());
  MESHPOOL_RETURN_IF_ERROR(WritableLocked(table_.get()));
  return table_;
}

absl::Status NodeSession::CheckWritable(const PinTable* table) const {
  absl::MutexLock lock(&mu_);
  return WritableLocked(table);
}

uint64_t NodeSession::NodeNowMs() const {
  absl::MutexLock lock(&mu_);
  return static_cast<uint64_t>(absl::ToUnixMillis(absl::Now()) +
                               clock_offset_ms_);
}

void NodeSession::KeepAlive(const NodeKvCounters& counters) {
  uint32_t session;
  uint64_t token;
  {
    absl::MutexLock lock(&mu_);
    absl::Time now = absl::Now();
    if (!open_) {
      // Open for counters alone only now and then: a node whose tables are
      // all taken is not asked every round.
      if (counters.any() && now >= next_open_ && !OpenLocked().ok()) {
        next_open_ = now + kOpenBackoff;
      }
      return;
    }
    if (renewing_ || now < last_renew_sent_ + lease_ / 4) return;
    renewing_ = true;
    session = session_;
    token = token_;
  }
  // The RPC runs without the lock: pins on this node do not wait for it.
  absl::Time sent = absl::Now();
  absl::StatusOr<proto::RenewSessionReply> reply =
      node_.RenewSession(session, token, counters.ToProto());
  absl::MutexLock lock(&mu_);
  renewing_ = false;
  if (!open_ || token_ != token) return;  // closed or replaced meanwhile
  if (reply.ok()) {
    Adopt(sent, absl::Now(), reply->node_clock_ms(), reply->lease_ms());
  } else if (reply.status().code() == absl::StatusCode::kNotFound ||
             reply.status().code() == absl::StatusCode::kFailedPrecondition) {
    open_ = false;  // expired or the node restarted: its pins are gone
    table_.reset();
  }
}

void NodeSession::Close(const NodeKvCounters& counters) {
  absl::MutexLock lock(&mu_);
  if (!open_) return;
  node_.CloseSession(session_, token_, counters.ToProto()).IgnoreError();
  open_ = false;
  table_.reset();
}

}  // namespace meshpool::client_internal
