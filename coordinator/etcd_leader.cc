// EtcdLeadership: create-if-absent of a lease-bound key, and its
// keep-alive.
#include "coordinator/etcd_leader.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/common.h"

namespace meshpool::coordinator {
namespace {

// One attempt: the key's create revision when this lease now holds it;
// nullopt with `holder` set when another does.
absl::StatusOr<std::optional<int64_t>> TryTake(EtcdClient& client,
                                               const std::string& key,
                                               const std::string& address,
                                               int64_t lease,
                                               std::string* holder) {
  etcdserverpb::TxnRequest txn;
  etcdserverpb::Compare* absent = txn.add_compare();
  absent->set_result(etcdserverpb::Compare::EQUAL);
  absent->set_target(etcdserverpb::Compare::CREATE);
  absent->set_key(key);
  absent->set_create_revision(0);
  etcdserverpb::PutRequest* put = txn.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(address);
  put->set_lease(lease);
  txn.add_success()->mutable_request_range()->set_key(key);
  txn.add_failure()->mutable_request_range()->set_key(key);
  MESHPOOL_ASSIGN_OR_RETURN(etcdserverpb::TxnResponse reply, client.Txn(txn));
  const etcdserverpb::RangeResponse& now =
      reply.responses(reply.succeeded() ? 1 : 0).response_range();
  if (now.kvs_size() == 0) return std::optional<int64_t>();  // gone meanwhile
  if (reply.succeeded())
    return std::optional<int64_t>(now.kvs(0).create_revision());
  *holder = now.kvs(0).value();
  return std::optional<int64_t>();
}

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdLeadership>> EtcdLeadership::Acquire(
    std::shared_ptr<EtcdClient> client, Options options) {
  Env* env = EnvOrDefault(options.env);
  std::string last_holder;
  int64_t lease = 0;
  while (true) {
    if (options.stop && options.stop()) {
      if (lease != 0) client->LeaseRevoke(lease).IgnoreError();
      return absl::CancelledError("stopped while waiting to lead");
    }
    absl::Status failed;
    std::string holder;  // who holds the key now, when etcd said
    if (lease == 0) {
      absl::StatusOr<int64_t> granted = client->LeaseGrant(kLeaderLeaseTtl);
      if (granted.ok()) {
        lease = *granted;
      } else {
        failed = granted.status();
      }
    }
    if (failed.ok()) {
      absl::StatusOr<std::optional<int64_t>> taken =
          TryTake(*client, options.key, options.address, lease, &holder);
      if (taken.ok() && taken->has_value()) {
        env->Log("coordinator", absl::StrCat("leading: holds ", options.key,
                                             " (revision ", **taken, ")"));
        return std::unique_ptr<EtcdLeadership>(new EtcdLeadership(
            std::move(client), std::move(options), lease, **taken));
      }
      if (!taken.ok()) failed = taken.status();
      if (taken.ok() && !holder.empty()) {
        if (!options.wait) {
          client->LeaseRevoke(lease).IgnoreError();
          return absl::FailedPreconditionError(absl::StrCat(
              "coordinator ", holder, " leads (it holds ", options.key,
              "); start this one as a standby, or stop that one"));
        }
        if (holder != last_holder) {
          env->Log("coordinator",
                   absl::StrCat("standing by: ", holder, " leads"));
          last_holder = holder;
        }
        // Our lease would expire while we wait: keep it.
        if (!client->LeaseKeepAlive(lease).ok()) lease = 0;
      }
    }
    if (options.on_holder) options.on_holder(holder);
    if (!failed.ok()) {
      if (!options.wait) return failed;
      if (absl::IsNotFound(failed)) lease = 0;  // our lease expired: a new one
      if (last_holder != "(etcd unreachable)") {
        env->Log("coordinator",
                 absl::StrCat("waiting for etcd: ", failed.ToString()));
        last_holder = "(etcd unreachable)";
      }
    }
    absl::SleepFor(kLeaderPollEvery);
  }
}

EtcdLeadership::EtcdLeadership(std::shared_ptr<EtcdClient> client,
                               Options options, int64_t lease,
                               int64_t create_revision)
    : client_(std::move(client)),
      options_(std::move(options)),
      lease_(lease),
      create_revision_(create_revision) {
  keepalive_ = std::thread([this] { KeepAliveLoop(); });
}

EtcdLeadership::~EtcdLeadership() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  keepalive_.join();
  if (!lost_) client_->LeaseRevoke(lease_).IgnoreError();
}

// Renews every TTL/4; the lease counts as lost when no renewal succeeded
// for a whole TTL (etcd may already have deleted the key).
void EtcdLeadership::KeepAliveLoop() {
  absl::Time renewed = absl::Now();
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stop_), kLeaderLeaseTtl / 4))
        return;
    }
    absl::StatusOr<absl::Duration> ttl = client_->LeaseKeepAlive(lease_);
    if (ttl.ok()) {
      renewed = absl::Now();
      continue;
    }
    if (absl::IsNotFound(ttl.status()) ||
        absl::Now() - renewed >= kLeaderLeaseTtl) {
      lost_ = true;
      EnvOrDefault(options_.env)
          ->Log("coordinator",
                absl::StrCat("lost the lead (", ttl.status().ToString(), ")"));
      if (options_.on_lost) options_.on_lost();
      return;
    }
  }
}

}  // namespace meshpool::coordinator
