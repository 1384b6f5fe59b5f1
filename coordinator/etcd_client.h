// meshpool/coordinator/etcd_client.h: the coordinator's stub for etcd v3
// (proto/etcd.proto): KV reads and transactions, and leases. The one place
// gRPC meets etcd; coordinator/etcd_state.h builds the durable state on it.
//
// Thread-safety: EtcdClient is thread-safe (one gRPC channel).
#ifndef MESHPOOL_COORDINATOR_ETCD_CLIENT_H_
#define MESHPOOL_COORDINATOR_ETCD_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/etcd.pb.h"

namespace meshpool::coordinator {

// Every call's deadline.
inline constexpr absl::Duration kEtcdCallTimeout = absl::Seconds(3);
// A failed channel is replaced at most this often.
inline constexpr absl::Duration kRedialEvery = absl::Milliseconds(200);

// The end of the key range holding every key that starts with `prefix`
// (its last byte below 0xff incremented, the rest cut; "\0" for all keys).
std::string EtcdPrefixEnd(absl::string_view prefix);

class EtcdClient {
 public:
  // A client of the etcd members at `endpoints` ("host:port[,host:port...]";
  // an "http://" in front of each is allowed). Calls go to one member and
  // move to another when it fails. Connecting is lazy: a wrong address
  // shows as Unavailable on the first call. InvalidArgument for an empty
  // or malformed list.
  static absl::StatusOr<std::unique_ptr<EtcdClient>> Create(
      absl::string_view endpoints);
  ~EtcdClient();

  // Every key in [key, range_end), in key order.
  absl::StatusOr<etcdserverpb::RangeResponse> Range(
      absl::string_view key, absl::string_view range_end);
  absl::StatusOr<etcdserverpb::TxnResponse> Txn(
      const etcdserverpb::TxnRequest& request);

  // A lease of `ttl` (whole seconds, at least 1); its id.
  absl::StatusOr<int64_t> LeaseGrant(absl::Duration ttl);
  // Renews the lease once; its remaining TTL. NotFound when it expired.
  absl::StatusOr<absl::Duration> LeaseKeepAlive(int64_t id);
  absl::Status LeaseRevoke(int64_t id);

  // Every call's errors: Unavailable (no member answered in time: retry),
  // and etcd's own codes (e.g. InvalidArgument "request is too large").

  struct Stubs;  // etcd_client.cc

 private:
  EtcdClient(std::string target, std::string endpoints);
  // The current channel's stubs.
  std::shared_ptr<Stubs> stubs();
  // After an Unavailable: a new channel, at most every kRedialEvery. gRPC
  // backs a failed channel off for many seconds before it dials again; a
  // member that restarts, or the next one in the list, must be reached
  // sooner.
  void Redial(const std::shared_ptr<Stubs>& failed);
  // Runs call(stubs, context) with the deadline set; redials on
  // Unavailable.
  template <typename Call>
  absl::Status Run(absl::string_view what, Call call);

  const std::string target_;
  const std::string endpoints_;
  absl::Mutex mu_;
  std::shared_ptr<Stubs> stubs_ ABSL_GUARDED_BY(mu_);
  absl::Time dialed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace meshpool::coordinator

#endif  // MESHPOOL_COORDINATOR_ETCD_CLIENT_H_
