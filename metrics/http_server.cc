// HttpServer over libmicrohttpd: one internal polling thread, connections
// capped and timed out, GET /metrics and /healthz.
#include <microhttpd.h>
#include <netdb.h>
#include <sys/socket.h>

#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "metrics/metrics.h"

namespace meshpool::metrics {

struct HttpServer::Daemon {
  Handlers handlers;
  MHD_Daemon* daemon = nullptr;
  ~Daemon() {
    if (daemon != nullptr) MHD_stop_daemon(daemon);  // joins its threads
  }
};

namespace {

MHD_Result Respond(MHD_Connection* connection, unsigned status,
                   const std::string& body, const char* content_type) {
  MHD_Response* response = MHD_create_response_from_buffer(
      body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return MHD_NO;
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
  const MHD_Result result = MHD_queue_response(connection, status, response);
  MHD_destroy_response(response);
  return result;
}

MHD_Result Handle(void* cls, MHD_Connection* connection, const char* url,
                  const char* method, const char* /*version*/,
                  const char* /*upload_data*/, size_t* upload_data_size,
                  void** /*con_cls*/) {
  const auto* daemon = static_cast<const HttpServer::Daemon*>(cls);
  constexpr const char* kText = "text/plain; charset=utf-8";
  if (std::strcmp(method, MHD_HTTP_METHOD_GET) != 0 &&
      std::strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
    return Respond(connection, MHD_HTTP_METHOD_NOT_ALLOWED, "use GET\n", kText);
  }
  *upload_data_size = 0;  // a GET body is ignored
  const absl::string_view path = url;
  if (path == "/metrics") {
    return Respond(connection, MHD_HTTP_OK, daemon->handlers.metrics(),
                   "text/plain; version=0.0.4; charset=utf-8");
  }
  if (path == "/healthz") {
    const absl::Status health =
        daemon->handlers.health ? daemon->handlers.health() : absl::OkStatus();
    if (health.ok()) return Respond(connection, MHD_HTTP_OK, "ok\n", kText);
    return Respond(connection, MHD_HTTP_SERVICE_UNAVAILABLE,
                   absl::StrCat(health.message(), "\n"), kText);
  }
  return Respond(connection, MHD_HTTP_NOT_FOUND,
                 "not found: try /metrics or /healthz\n", kText);
}

struct HostPortText {
  std::string host;
  std::string port;
};

absl::StatusOr<HostPortText> Split(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon + 1 == listen.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address '", listen,
                     "' needs a port: use host:port (e.g. 127.0.0.1:9464)"));
  }
  HostPortText out{listen.substr(0, colon), listen.substr(colon + 1)};
  if (out.host.size() >= 2 && out.host.front() == '[' &&
      out.host.back() == ']') {
    out.host = out.host.substr(1, out.host.size() - 2);
  }
  uint32_t port = 0;
  if (!absl::SimpleAtoi(out.port, &port) || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics address '", listen, "' has a bad port '", out.port, "'"));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const std::string& listen, Handlers handlers) {
  if (!handlers.metrics) {
    return absl::InvalidArgumentError("metrics server: no metrics handler");
  }
  absl::StatusOr<HostPortText> where = Split(listen);
  if (!where.ok()) return where.status();
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int rc =
      getaddrinfo(where->host.empty() ? nullptr : where->host.c_str(),
                  where->port.c_str(), &hints, &found);
  if (rc != 0 || found == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics address '", listen, "' does not resolve: ", gai_strerror(rc)));
  }
  auto daemon = std::make_unique<Daemon>();
  daemon->handlers = std::move(handlers);
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD;
  if (found->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
  daemon->daemon = MHD_start_daemon(
      flags, /*port (ignored with SOCK_ADDR)=*/0, nullptr, nullptr, &Handle,
      daemon.get(), MHD_OPTION_SOCK_ADDR, found->ai_addr,
      MHD_OPTION_CONNECTION_LIMIT, kMaxConnections,
      MHD_OPTION_CONNECTION_TIMEOUT,
      static_cast<unsigned>(absl::ToInt64Seconds(kConnectionTimeout)),
      MHD_OPTION_END);
  freeaddrinfo(found);
  if (daemon->daemon == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot serve metrics on ", listen,
        ": the address is in use or not on this host; pick another "
        "--metrics-listen (port 0 picks a free one)"));
  }
  const MHD_DaemonInfo* info =
      MHD_get_daemon_info(daemon->daemon, MHD_DAEMON_INFO_BIND_PORT);
  const int port = info != nullptr ? info->port : 0;
  std::string host = where->host;
  if (host.empty() || host == "0.0.0.0" || host == "::") host = "127.0.0.1";
  return std::unique_ptr<HttpServer>(
      new HttpServer(std::move(daemon), std::move(host), port));
}

HttpServer::HttpServer(std::unique_ptr<Daemon> daemon, std::string host,
                       int port)
    : daemon_(std::move(daemon)), host_(std::move(host)), port_(port) {}

HttpServer::~HttpServer() = default;

std::string HttpServer::url() const {
  const bool v6 = host_.find(':') != std::string::npos;
  return absl::StrCat("http://", v6 ? "[" : "", host_, v6 ? "]" : "", ":",
                      port_, "/metrics");
}

}  // namespace meshpool::metrics
