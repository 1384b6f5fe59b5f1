// meshpool/metrics/metrics.h: what nodes and the coordinator show a
// monitoring system — Prometheus text metrics and a health check, served
// over HTTP by libmicrohttpd (Debian's libmicrohttpd-dev; only
// metrics/http_server.cc includes it).
//
//   GET /metrics  the text exposition format 0.0.4 (`Handlers.metrics`)
//   GET /healthz  200 "ok" while `Handlers.health` is OK, else 503 and its
//                 message
// Anything else is 404 (other paths) or 405 (other methods). The server
// caps connections (kMaxConnections) and drops idle ones
// (kConnectionTimeout), so a scraper cannot hold it hostage.
//
// Thread-safety: TextBuilder is thread-compatible. HttpServer calls its
// handlers from its own threads, one request at a time per connection and
// possibly several at once: handlers must be thread-safe.
#ifndef MESHPOOL_METRICS_METRICS_H_
#define MESHPOOL_METRICS_METRICS_H_

#include <functional>
#include <initializer_list>
#include <memory>
#include <set>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace meshpool::metrics {

inline constexpr unsigned kMaxConnections = 64;
inline constexpr absl::Duration kConnectionTimeout = absl::Seconds(10);

// Builds a text exposition page. Each family (metric name) gets its HELP
// and TYPE lines before its first sample; add a family's samples together.
class TextBuilder {
 public:
  enum class Type { kGauge, kCounter };
  using Labels =
      std::initializer_list<std::pair<absl::string_view, absl::string_view>>;

  // One sample. `name` matches [a-zA-Z_:][a-zA-Z0-9_:]* (counters end in
  // _total); label values are escaped as the format requires.
  void Add(absl::string_view name, Type type, absl::string_view help,
           double value, Labels labels = {});
  void Gauge(absl::string_view name, absl::string_view help, double value,
             Labels labels = {}) {
    Add(name, Type::kGauge, help, value, labels);
  }
  void Counter(absl::string_view name, absl::string_view help, double value,
               Labels labels = {}) {
    Add(name, Type::kCounter, help, value, labels);
  }

  // The page so far.
  const std::string& text() const { return text_; }

 private:
  std::string text_;
  std::set<std::string, std::less<>> families_;
};

class HttpServer {
 public:
  struct Handlers {
    std::function<std::string()> metrics;  // the /metrics page
    std::function<absl::Status()> health;  // null: always healthy
  };

  // Serves on `listen` ("host:port"; host a numeric IPv4 or IPv6 address
  // or a name that resolves to one; port 0 picks a free one). Errors:
  // InvalidArgument (malformed address, no metrics handler),
  // FailedPrecondition (the address cannot be bound: in use, or not
  // local).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const std::string& listen, Handlers handlers);
  // Stops serving; no handler runs after it returns.
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }
  // "http://<host>:<port>/metrics" with the host as given (127.0.0.1 for a
  // wildcard).
  std::string url() const;

  struct Daemon;  // http_server.cc: the libmicrohttpd daemon and handlers

 private:
  HttpServer(std::unique_ptr<Daemon> daemon, std::string host, int port);
  std::unique_ptr<Daemon> daemon_;
  std::string host_;
  int port_;
};

}  // namespace meshpool::metrics

#endif  // MESHPOOL_METRICS_METRICS_H_
