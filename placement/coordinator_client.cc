// CoordinatorClient: a gRPC stub with deadlines, and the watch thread.
#include "placement/coordinator_client.h"

#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "common/common.h"
#include "placement/region_layout.h"
#include "proto/proto.h"

namespace meshpool::placement {
namespace {

// A watch stream is re-opened this often even when healthy, so that a
// coordinator that went silent (no RST) is noticed within this time.
constexpr absl::Duration kWatchStreamLifetime = absl::Seconds(30);
// Backoff between failed watch (re)connects.
constexpr absl::Duration kWatchInitialBackoff = absl::Milliseconds(50);
constexpr absl::Duration kWatchMaxBackoff = absl::Seconds(2);
static_assert(kWatchInitialBackoff < kWatchMaxBackoff);
static_assert(kWatchMaxBackoff < kWatchStreamLifetime);
// gRPC's own reconnect backoff on the channel (defaults start at 1 s and
// grow to 2 min): short, so that a client finds a restarted coordinator, or
// the new leader after a failover, within a fraction of a second.
constexpr int kChannelInitialReconnectMs = 100;
constexpr absl::Duration kRedialEvery = absl::Milliseconds(200);
constexpr int kChannelMaxReconnectMs = 500;
// How long one connection attempt may take (gRPC's "min reconnect
// backoff"): long enough for a handshake on a loaded machine. At 100 ms,
// attempts were cut short under load ("tcp handshaker shutdown") and a
// failover took seconds longer.
constexpr int kChannelConnectTimeoutMs = 2000;
static_assert(kChannelInitialReconnectMs < kChannelMaxReconnectMs);

std::chrono::system_clock::time_point DeadlineIn(absl::Duration timeout) {
  return absl::ToChronoTime(absl::Now() + timeout);
}

// The gRPC target for "host:port[,host:port...]". Several coordinators
// share one channel over all their addresses (numeric IPv4: gRPC's ipv4
// resolver; pick_first takes the first that accepts a connection). Only
// the leading coordinator listens (standbys bind nothing), so calls reach
// the leader, and after a failover the channel reconnects to the new one.
absl::StatusOr<std::string> ChannelTarget(const std::string& address) {
  if (address.find(',') == std::string::npos) return address;
  std::vector<std::string> list;
  for (absl::string_view a :
       absl::StrSplit(address, ',', absl::SkipWhitespace())) {
    a = absl::StripAsciiWhitespace(a);
    if (!IsIpv4HostPort(a)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "coordinator address '", a, "' in the list '", address,
          "' is not ip:port; list several coordinators by IPv4 address, e.g. "
          "10.0.0.1:7070,10.0.0.2:7070"));
    }
    list.emplace_back(a);
  }
  return absl::StrCat("ipv4:", absl::StrJoin(list, ","));
}

// Runs one stream at a time on its own thread; see WatchClusterMap.
class ClusterMapWatch final : public CoordinatorClient::Watch {
 public:
  ClusterMapWatch(std::shared_ptr<grpc::Channel> channel, uint64_t known_epoch,
                  std::function<void(const proto::ClusterMap&)> on_map)
      : stub_(proto::Coordinator::NewStub(channel)),
        on_map_(std::move(on_map)),
        known_epoch_(known_epoch),
        thread_([this] { Run(); }) {}

  ~ClusterMapWatch() override {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
      if (context_ != nullptr) context_->TryCancel();
    }
    thread_.join();
  }

 private:
  void Run() {
    absl::Duration backoff = kWatchInitialBackoff;
    while (true) {
      const bool progressed = RunStream();
      if (progressed) {
        backoff = kWatchInitialBackoff;
        continue;
      }
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), backoff)) return;
      backoff = std::min(backoff * 2, kWatchMaxBackoff);
    }
  }

  // One stream until it ends. True if it delivered a map or simply reached
  // its lifetime (reconnect at once), false if it failed (back off). Returns
  // false at once when stopping.
  bool RunStream() {
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(kWatchStreamLifetime));
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return false;
      context_ = &context;
    }
    proto::WatchClusterMapRequest request;
    request.set_known_epoch(known_epoch_);
    std::unique_ptr<grpc::ClientReader<proto::ClusterMap>> reader =
        stub_->WatchClusterMap(&context, request);
    bool progressed = false;
    bool first = true;
    proto::ClusterMap map;
    while (reader->Read(&map)) {
      // A first map below what we know: the coordinator lost its state.
      if (map.epoch() > known_epoch_ || (first && map.epoch() < known_epoch_)) {
        known_epoch_ = map.epoch();
        on_map_(map);
      }
      first = false;
      progressed = true;
    }
    const grpc::Status status = reader->Finish();
    absl::MutexLock lock(&mu_);
    context_ = nullptr;
    if (stopping_) return false;
    return progressed || status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
  }

  const std::unique_ptr<proto::Coordinator::Stub> stub_;
  const std::function<void(const proto::ClusterMap&)> on_map_;
  uint64_t known_epoch_;  // only the watch thread touches it
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;  // the open stream
  std::thread thread_;  // last: starts once everything above exists
};

}  // namespace

struct CoordinatorClient::Rpc {
  struct Conn {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<proto::Coordinator::Stub> stub;
  };
  Rpc(std::string target, grpc::ChannelArguments args)
      : target(std::move(target)),
        args(std::move(args)),
        conn(Dial()),
        dialed(absl::Now()) {}

  std::shared_ptr<Conn> Dial() {
    auto c = std::make_shared<Conn>();
    c->channel = grpc::CreateCustomChannel(
        target, grpc::InsecureChannelCredentials(), args);
    c->stub = proto::Coordinator::NewStub(c->channel);
    return c;
  }
  std::shared_ptr<Conn> Current() {
    absl::MutexLock lock(&mu);
    return conn;
  }
  // A channel whose calls fail Unavailable is replaced (at most every
  // kRedialEvery): gRPC backs a failed channel off before it dials again,
  // and after a failover the new leader must be reached at once.
  void Redial(const std::shared_ptr<Conn>& failed) {
    absl::MutexLock lock(&mu);
    if (conn != failed || absl::Now() - dialed < kRedialEvery) return;
    conn = Dial();
    dialed = absl::Now();
  }

  // One unary call with `timeout` as its deadline; `call` invokes the stub.
  template <typename Reply, typename Call>
  absl::StatusOr<Reply> Unary(absl::string_view what, const std::string& address, Call call,
                              absl::Duration timeout = kCoordinatorRpcTimeout) {
    std::shared_ptr<Conn> c = Current();
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(timeout));
    Reply reply;
    const grpc::Status status = call(*c->stub, &context, &reply);
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE) Redial(c);
    MESHPOOL_RETURN_IF_ERROR(
        FromGrpc(status, absl::StrCat(what, " at coordinator ", address)));
    return reply;
  }

  const std::string target;
  const grpc::ChannelArguments args;
  absl::Mutex mu;
  std::shared_ptr<Conn> conn ABSL_GUARDED_BY(mu);
  absl::Time dialed ABSL_GUARDED_BY(mu);
};

absl::StatusOr<std::unique_ptr<CoordinatorClient>> CoordinatorClient::Connect(
    std::string address, absl::Duration timeout) {
  if (address.empty()) {
    return absl::InvalidArgumentError(
        "no coordinator address: give the coordinator's host:port");
  }
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);  // control plane traffic is never proxied
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
              kChannelInitialReconnectMs);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, kChannelConnectTimeoutMs);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kChannelMaxReconnectMs);
  args.SetMaxReceiveMessageSize(static_cast<int>(kMaxRegionInfoBytes));  // GetRegion
  MESHPOOL_ASSIGN_OR_RETURN(std::string target, ChannelTarget(address));
  auto rpc = std::make_unique<Rpc>(std::move(target), std::move(args));
  if (!rpc->Current()->channel->WaitForConnected(DeadlineIn(timeout))) {
    return absl::UnavailableError(absl::StrCat(
        "cannot reach the meshpool coordinator at ", address, " within ",
        absl::FormatDuration(timeout),
        ": start one with `meshpool coordinator` and give its host:port as the "
        "coordinator address (or in MESHPOOL_COORDINATOR)"));
  }
  return std::unique_ptr<CoordinatorClient>(
      new CoordinatorClient(std::move(address), std::move(rpc)));
}

CoordinatorClient::CoordinatorClient(std::string address, std::unique_ptr<Rpc> rpc)
    : address_(std::move(address)), rpc_(std::move(rpc)) {}

CoordinatorClient::~CoordinatorClient() = default;

const std::string& CoordinatorClient::address() const { return address_; }

absl::StatusOr<proto::RegisterNodeReply> CoordinatorClient::RegisterNode(
    const proto::NodeInfo& info) {
  proto::RegisterNodeRequest request;
  *request.mutable_info() = info;
  return rpc_->Unary<proto::RegisterNodeReply>(
      "RegisterNode", address_,
      [&](proto::Coordinator::Stub& stub, grpc::ClientContext* context,
          auto* reply) { return stub.RegisterNode(context, request, reply); });
}

absl::StatusOr<proto::HeartbeatReply> CoordinatorClient::Heartbeat(
    const proto::HeartbeatRequest& request) {
  return rpc_->Unary<proto::HeartbeatReply>(
      "Heartbeat", address_,
      [&](proto::Coordinator::Stub& stub, grpc::ClientContext* context,
          auto* reply) { return stub.Heartbeat(context, request, reply); });
}

absl::StatusOr<proto::ClusterMap> CoordinatorClient::GetClusterMap() {
  const proto::GetClusterMapRequest request;
  return rpc_->Unary<proto::ClusterMap>(
      "GetClusterMap", address_,
      [&](proto::Coordinator::Stub& stub, grpc::ClientContext* context,
          auto* reply) { return stub.GetClusterMap(context, request, reply); });
}

absl::StatusOr<std::unique_ptr<CoordinatorClient::Watch>> CoordinatorClient::WatchClusterMap(
    uint64_t known_epoch, std::function<void(const proto::ClusterMap&)> on_map) {
  if (!on_map) {
    return absl::InvalidArgumentError("WatchClusterMap: on_map is empty; pass a callback");
  }
  return std::unique_ptr<Watch>(std::make_unique<ClusterMapWatch>(
      rpc_->Current()->channel, known_epoch, std::move(on_map)));
}

absl::StatusOr<proto::RegionInfo> CoordinatorClient::CreateRegion(
    const proto::CreateRegionRequest& request) {
  return rpc_->Unary<proto::RegionInfo>(
      "CreateRegion", address_,
      [&](proto::Coordinator::Stub& stub, grpc::ClientContext* context,
          auto* reply) { return stub.CreateRegion(context, request, reply); },
      kCreateRegionTimeout);
}

absl::StatusOr<proto::RegionInfo> CoordinatorClient::GetRegion(absl::string_view name) {
  proto::GetRegionRequest request;
  request.set_name(std::string(name));
  return rpc_->Unary<proto::RegionInfo>(
      "GetRegion", address_,
      [&](proto::Coordinator::Stub& stub, grpc::ClientContext* context,
          auto* reply) { return stub.GetRegion(context, request, reply); });
}

absl::Status CoordinatorClient::DeleteRegion(absl::string_view name) {
  proto::DeleteRegionRequest request;
  request.set_name(std::string(name));
  return rpc_
      ->Unary<proto::DeleteRegionReply>(
          "DeleteRegion", address_,
          [&](proto::Coordinator::Stub& stub, grpc::ClientContext* context,
              auto* reply) {
            return stub.DeleteRegion(context, request, reply);
          })
      .status();
}

absl::Status CoordinatorClient::RenameRegion(absl::string_view from, absl::string_view to,
                                             bool replace) {
  proto::RenameRegionRequest request;
  request.set_from(std::string(from));
  request.set_to(std::string(to));
  request.set_replace(replace);
  return rpc_
      ->Unary<proto::RenameRegionReply>(
          "RenameRegion", address_,
          [&](proto::Coordinator::Stub& stub, grpc::ClientContext* context,
              auto* reply) {
            return stub.RenameRegion(context, request, reply);
          })
      .status();
}

absl::StatusOr<std::vector<proto::RegionInfo>> CoordinatorClient::ListRegions(
    absl::string_view prefix) {
  proto::ListRegionsRequest request;
  request.set_prefix(std::string(prefix));
  MESHPOOL_ASSIGN_OR_RETURN(proto::ListRegionsReply reply,
                            rpc_->Unary<proto::ListRegionsReply>(
                                "ListRegions", address_,
                                [&](proto::Coordinator::Stub& stub,
                                    grpc::ClientContext* context, auto* reply) {
                                  return stub.ListRegions(context, request,
                                                          reply);
                                }));
  return std::vector<proto::RegionInfo>(std::make_move_iterator(reply.mutable_regions()->begin()),
                                        std::make_move_iterator(reply.mutable_regions()->end()));
}

}  // namespace meshpool::placement
