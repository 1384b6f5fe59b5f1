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
#include "placement/map_delta.h"
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

// The coordinators in "host:port[,host:port...]": one entry, as given, or
// several, each numeric IPv4 (InvalidArgument otherwise).
absl::StatusOr<std::vector<std::string>> ParseAddresses(
    const std::string& address) {
  if (address.find(',') == std::string::npos) return std::vector{address};
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
  return list;
}

// The gRPC target for the coordinators `list`, trying `first` (when not
// empty) before them. Several share one channel (numeric IPv4: gRPC's ipv4
// resolver; pick_first takes the first that accepts a connection). A
// standby accepts connections but refuses every call naming the leader, so
// the client dials again with the leader first (Rpc::Redirect).
std::string ChannelTarget(const std::vector<std::string>& list,
                          const std::string& first) {
  std::vector<std::string> order;
  if (!first.empty()) order.push_back(first);
  for (const std::string& a : list) {
    if (a != first) order.push_back(a);
  }
  const bool numeric = std::all_of(order.begin(), order.end(),
                                   [](auto& a) { return IsIpv4HostPort(a); });
  if (order.size() == 1 || !numeric) return order.front();
  return absl::StrCat("ipv4:", absl::StrJoin(order, ","));
}

// The leader a standby named in its reply's trailing metadata, or empty.
std::string LeaderHint(const grpc::ClientContext& context) {
  const auto& trailers = context.GetServerTrailingMetadata();
  auto it = trailers.find(
      grpc::string_ref(kLeaderMetadataKey.data(), kLeaderMetadataKey.size()));
  if (it == trailers.end()) return std::string();
  return std::string(it->second.data(), it->second.size());
}

}  // namespace

struct CoordinatorClient::Rpc {
  struct Conn {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<proto::Coordinator::Stub> stub;
  };
  Rpc(std::vector<std::string> addresses, grpc::ChannelArguments args,
      auth::ChannelSecurity security)
      : addresses(std::move(addresses)),
        args(std::move(args)),
        security(std::move(security)),
        target(ChannelTarget(this->addresses, "")),
        conn(Dial(target)),
        dialed(absl::Now()) {}

  std::shared_ptr<Conn> Dial(const std::string& to) const {
    auto c = std::make_shared<Conn>();
    c->channel = security.Dial(to, &args);
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
    conn = Dial(target);
    dialed = absl::Now();
  }
  // A standby refused a call on `failed`, naming `leader`: dial again with
  // the leader first (the same target again only after kRedialEvery).
  void Redirect(const std::shared_ptr<Conn>& failed,
                const std::string& leader) {
    absl::MutexLock lock(&mu);
    if (conn != failed) return;  // another call moved on already
    std::string to = ChannelTarget(addresses, leader);
    if (to == target && absl::Now() - dialed < kRedialEvery) return;
    target = std::move(to);
    conn = Dial(target);
    dialed = absl::Now();
  }
  // After a call on `c` failed Unavailable: follow a standby's redirect
  // (true: send the call again) or dial again.
  bool Recover(const std::shared_ptr<Conn>& c,
               const grpc::ClientContext& context, int hop) {
    const std::string leader = LeaderHint(context);
    if (!leader.empty()) {
      Redirect(c, leader);
      return hop < kMaxLeaderRedirects;
    }
    Redial(c);
    return false;
  }

  // One unary call with `timeout` as its deadline; `call` invokes the stub.
  // A standby did nothing with a call it refused, so sending the call to
  // the leader it named is safe for every call.
  template <typename Reply, typename Call>
  absl::StatusOr<Reply> Unary(absl::string_view what,
                              const std::string& address, Call call,
                              absl::Duration timeout = kCoordinatorRpcTimeout) {
    for (int hop = 0;; ++hop) {
      std::shared_ptr<Conn> c = Current();
      grpc::ClientContext context;
      context.set_deadline(DeadlineIn(timeout));
      Reply reply;
      const grpc::Status status = call(*c->stub, &context, &reply);
      if (status.error_code() == grpc::StatusCode::UNAVAILABLE &&
          Recover(c, context, hop)) {
        continue;
      }
      MESHPOOL_RETURN_IF_ERROR(
          FromGrpc(status, absl::StrCat(what, " at coordinator ", address)));
      return reply;
    }
  }

  const std::vector<std::string> addresses;
  const grpc::ChannelArguments args;
  const auth::ChannelSecurity security;
  absl::Mutex mu;
  std::string target ABSL_GUARDED_BY(mu);
  std::shared_ptr<Conn> conn ABSL_GUARDED_BY(mu);
  absl::Time dialed ABSL_GUARDED_BY(mu);
};

// Runs one stream at a time on its own thread; see WatchClusterMap.
class CoordinatorClient::MapWatch final : public CoordinatorClient::Watch {
 public:
  MapWatch(std::shared_ptr<Rpc> rpc, uint64_t known_epoch,
           std::function<void(const proto::ClusterMap&)> on_map)
      : rpc_(std::move(rpc)),
        on_map_(std::move(on_map)),
        known_epoch_(known_epoch),
        thread_([this] { Run(); }) {}

  ~MapWatch() override {
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
  // its lifetime (reconnect at once), false if it failed (back off; a
  // standby's redirect too, so that a stale leader name cannot spin it).
  // Returns false at once when stopping.
  bool RunStream() {
    const std::shared_ptr<Rpc::Conn> conn = rpc_->Current();
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(kWatchStreamLifetime));
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return false;
      context_ = &context;
    }
    proto::WatchClusterMapRequest request;
    request.set_known_epoch(known_epoch_);
    bool progressed = false;
    grpc::Status status;
    if (updates_) {
      status = ReadUpdates(*conn, context, request, progressed);
      if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
        updates_ = false;   // a coordinator from before deltas: whole maps
        progressed = true;  // retry at once
      }
    } else {
      status = ReadMaps(*conn, context, request, progressed);
    }
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
      rpc_->Recover(conn, context, /*hop=*/0);
    }
    absl::MutexLock lock(&mu_);
    context_ = nullptr;
    if (stopping_) return false;
    return progressed || status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
  }

  // Delivers `map` when it is news: newer than known, or the stream's first
  // and older (the coordinator lost its state).
  void Deliver(const proto::ClusterMap& map, bool first) {
    if (map.epoch() > known_epoch_ || (first && map.epoch() < known_epoch_)) {
      known_epoch_ = map.epoch();
      on_map_(map);
    }
  }

  grpc::Status ReadMaps(Rpc::Conn& conn, grpc::ClientContext& context,
                        const proto::WatchClusterMapRequest& request,
                        bool& progressed) {
    std::unique_ptr<grpc::ClientReader<proto::ClusterMap>> reader =
        conn.stub->WatchClusterMap(&context, request);
    proto::ClusterMap map;
    bool first = true;
    while (reader->Read(&map)) {
      Deliver(map, first);
      first = false;
      progressed = true;
    }
    return reader->Finish();
  }

  // Whole maps and deltas, applied to the stream's previous map. A delta
  // that does not apply ends the stream (the next one starts whole).
  grpc::Status ReadUpdates(Rpc::Conn& conn, grpc::ClientContext& context,
                           const proto::WatchClusterMapRequest& request,
                           bool& progressed) {
    std::unique_ptr<grpc::ClientReader<proto::ClusterMapUpdate>> reader =
        conn.stub->WatchClusterMapUpdates(&context, request);
    proto::ClusterMapUpdate update;
    proto::ClusterMap map;
    bool first = true;
    while (reader->Read(&update)) {
      if (update.has_map()) {
        map = std::move(*update.mutable_map());
      } else if (first || !ApplyMapDelta(update.delta(), map).ok()) {
        context.TryCancel();
        break;
      }
      Deliver(map, first);
      first = false;
      progressed = true;
    }
    return reader->Finish();
  }

  const std::shared_ptr<Rpc> rpc_;  // the client's channel, followed
  const std::function<void(const proto::ClusterMap&)> on_map_;
  uint64_t known_epoch_;  // only the watch thread touches it
  // Whether to ask for deltas (WatchClusterMapUpdates); false once a
  // coordinator answers UNIMPLEMENTED. Only the watch thread touches it.
  bool updates_ = true;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;  // the open stream
  std::thread thread_;  // last: starts once everything above exists
};

absl::StatusOr<std::unique_ptr<CoordinatorClient>> CoordinatorClient::Connect(
    std::string address, absl::Duration timeout, const auth::TlsConfig& tls) {
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
  MESHPOOL_ASSIGN_OR_RETURN(std::vector<std::string> addresses,
                            ParseAddresses(address));
  MESHPOOL_ASSIGN_OR_RETURN(auth::ChannelSecurity security,
                            auth::MakeChannelSecurity(tls));
  auto rpc = std::make_shared<Rpc>(std::move(addresses), std::move(args),
                                   std::move(security));
  if (!rpc->Current()->channel->WaitForConnected(DeadlineIn(timeout))) {
    return absl::UnavailableError(absl::StrCat(
        "cannot reach the meshpool coordinator at ", address, " within ",
        absl::FormatDuration(timeout),
        ": start one with `meshpool coordinator` and give its host:port as the "
        "coordinator address (or in MESHPOOL_COORDINATOR)",
        tls.enabled() ? "; with TLS, its certificate and this one must come "
                        "from the same CA, and it must serve TLS too"
                      : ""));
  }
  return std::unique_ptr<CoordinatorClient>(
      new CoordinatorClient(std::move(address), std::move(rpc)));
}

CoordinatorClient::CoordinatorClient(std::string address,
                                     std::shared_ptr<Rpc> rpc)
    : address_(std::move(address)), rpc_(std::move(rpc)) {}

CoordinatorClient::~CoordinatorClient() = default;

const std::string& CoordinatorClient::address() const { return address_; }

absl::StatusOr<proto::RegisterNodeReply> CoordinatorClient::RegisterNode(
    const proto::NodeInfo& info, uint64_t last_epoch) {
  proto::RegisterNodeRequest request;
  *request.mutable_info() = info;
  request.set_last_epoch(last_epoch);
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

absl::StatusOr<proto::WhoAmIReply> CoordinatorClient::WhoAmI() {
  const proto::WhoAmIRequest request;
  return rpc_->Unary<proto::WhoAmIReply>(
      "WhoAmI", address_,
      [&](proto::Coordinator::Stub& stub, grpc::ClientContext* context,
          auto* reply) { return stub.WhoAmI(context, request, reply); });
}

absl::StatusOr<std::unique_ptr<CoordinatorClient::Watch>> CoordinatorClient::WatchClusterMap(
    uint64_t known_epoch, std::function<void(const proto::ClusterMap&)> on_map) {
  if (!on_map) {
    return absl::InvalidArgumentError("WatchClusterMap: on_map is empty; pass a callback");
  }
  return std::unique_ptr<Watch>(
      std::make_unique<MapWatch>(rpc_, known_epoch, std::move(on_map)));
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
