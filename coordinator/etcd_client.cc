// EtcdClient: etcd's KV and Lease services over one gRPC channel.
#include "coordinator/etcd_client.h"

#include <grpcpp/grpcpp.h>

#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/common.h"
#include "proto/etcd.grpc.pb.h"
#include "proto/proto.h"

namespace meshpool::coordinator {

struct EtcdClient::Stubs {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<etcdserverpb::KV::Stub> kv;
  std::unique_ptr<etcdserverpb::Lease::Stub> lease;
};

namespace {

std::shared_ptr<EtcdClient::Stubs> Dial(const std::string& target) {
  grpc::ChannelArguments args;
  // A channel of its own: it must not share a backed-off subchannel with
  // the one it replaces.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto stubs = std::make_shared<EtcdClient::Stubs>();
  stubs->channel = grpc::CreateCustomChannel(
      target, grpc::InsecureChannelCredentials(), args);
  stubs->kv = etcdserverpb::KV::NewStub(stubs->channel);
  stubs->lease = etcdserverpb::Lease::NewStub(stubs->channel);
  return stubs;
}

}  // namespace

std::string EtcdPrefixEnd(absl::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    const unsigned char last = static_cast<unsigned char>(end.back());
    if (last < 0xff) {
      end.back() = static_cast<char>(last + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(
    absl::string_view endpoints) {
  std::vector<std::string> list;
  for (absl::string_view e :
       absl::StrSplit(endpoints, ',', absl::SkipWhitespace())) {
    e = absl::StripAsciiWhitespace(e);
    absl::ConsumePrefix(&e, "http://");
    if (e.empty() || e.find(':') == absl::string_view::npos ||
        absl::StrContains(e, "/")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "etcd endpoint '", e,
          "' is not host:port; give --etcd as host:port[,host:port...]"));
    }
    list.emplace_back(e);
  }
  if (list.empty()) {
    return absl::InvalidArgumentError(
        "no etcd endpoint; give --etcd host:port[,host:port...]");
  }
  // Numeric IPv4 members: one channel over all of them (pick_first moves
  // to the next when one fails). Names: the first one (DNS may give
  // several addresses).
  bool numeric = true;
  for (const std::string& e : list) numeric = numeric && IsIpv4HostPort(e);
  std::string target =
      numeric ? absl::StrCat("ipv4:", absl::StrJoin(list, ",")) : list[0];
  return std::unique_ptr<EtcdClient>(
      new EtcdClient(std::move(target), absl::StrJoin(list, ",")));
}

EtcdClient::EtcdClient(std::string target, std::string endpoints)
    : target_(std::move(target)), endpoints_(std::move(endpoints)) {
  absl::MutexLock lock(&mu_);
  stubs_ = Dial(target_);
  dialed_ = absl::Now();
}

EtcdClient::~EtcdClient() = default;

std::shared_ptr<EtcdClient::Stubs> EtcdClient::stubs() {
  absl::MutexLock lock(&mu_);
  return stubs_;
}

void EtcdClient::Redial(const std::shared_ptr<Stubs>& failed) {
  absl::MutexLock lock(&mu_);
  if (stubs_ != failed || absl::Now() - dialed_ < kRedialEvery) return;
  stubs_ = Dial(target_);
  dialed_ = absl::Now();
}

template <typename Call>
absl::Status EtcdClient::Run(absl::string_view what, Call call) {
  std::shared_ptr<Stubs> stubs = this->stubs();
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kEtcdCallTimeout));
  const grpc::Status s = call(*stubs, context);
  if (s.ok()) return absl::OkStatus();
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE) Redial(stubs);
  return FromGrpc(s, absl::StrCat("etcd ", what, " at ", endpoints_));
}

absl::StatusOr<etcdserverpb::RangeResponse> EtcdClient::Range(
    absl::string_view key, absl::string_view range_end) {
  etcdserverpb::RangeRequest request;
  request.set_key(std::string(key));
  request.set_range_end(std::string(range_end));
  etcdserverpb::RangeResponse reply;
  MESHPOOL_RETURN_IF_ERROR(
      Run("Range", [&](Stubs& stubs, grpc::ClientContext& context) {
        return stubs.kv->Range(&context, request, &reply);
      }));
  return reply;
}

absl::StatusOr<etcdserverpb::TxnResponse> EtcdClient::Txn(
    const etcdserverpb::TxnRequest& request) {
  etcdserverpb::TxnResponse reply;
  MESHPOOL_RETURN_IF_ERROR(
      Run("Txn", [&](Stubs& stubs, grpc::ClientContext& context) {
        return stubs.kv->Txn(&context, request, &reply);
      }));
  return reply;
}

absl::StatusOr<int64_t> EtcdClient::LeaseGrant(absl::Duration ttl) {
  etcdserverpb::LeaseGrantRequest request;
  request.set_ttl(std::max<int64_t>(1, absl::ToInt64Seconds(ttl)));
  etcdserverpb::LeaseGrantResponse reply;
  MESHPOOL_RETURN_IF_ERROR(
      Run("LeaseGrant", [&](Stubs& stubs, grpc::ClientContext& context) {
        return stubs.lease->LeaseGrant(&context, request, &reply);
      }));
  if (!reply.error().empty()) {
    return absl::UnavailableError(
        absl::StrCat("etcd LeaseGrant: ", reply.error()));
  }
  return reply.id();
}

absl::StatusOr<absl::Duration> EtcdClient::LeaseKeepAlive(int64_t id) {
  etcdserverpb::LeaseKeepAliveRequest request;
  request.set_id(id);
  etcdserverpb::LeaseKeepAliveResponse reply;
  bool got = false;
  MESHPOOL_RETURN_IF_ERROR(
      Run("LeaseKeepAlive", [&](Stubs& stubs, grpc::ClientContext& context) {
        auto stream = stubs.lease->LeaseKeepAlive(&context);
        got = stream->Write(request) && stream->WritesDone() &&
              stream->Read(&reply);
        return stream->Finish();
      }));
  if (!got) {
    return absl::UnavailableError(
        absl::StrCat("etcd LeaseKeepAlive at ", endpoints_, ": no answer"));
  }
  if (reply.ttl() <= 0) {
    return absl::NotFoundError(absl::StrCat("etcd lease ", id, " expired"));
  }
  return absl::Seconds(reply.ttl());
}

absl::Status EtcdClient::LeaseRevoke(int64_t id) {
  etcdserverpb::LeaseRevokeRequest request;
  request.set_id(id);
  etcdserverpb::LeaseRevokeResponse reply;
  return Run("LeaseRevoke", [&](Stubs& stubs, grpc::ClientContext& context) {
    return stubs.lease->LeaseRevoke(&context, request, &reply);
  });
}

}  // namespace meshpool::coordinator
