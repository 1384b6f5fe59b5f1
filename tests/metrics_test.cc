// metrics/: the text exposition format, and the HTTP server over real
// sockets on 127.0.0.1 (status codes, health, a taken port, many
// connections at once).
#include "metrics/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace meshpool::metrics {
namespace {

// One HTTP/1.0 request to 127.0.0.1:port; the whole response ("" when the
// connection fails).
std::string Fetch(int port, const std::string& request) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      write(fd, request.data(), request.size()) ==
          static_cast<ssize_t>(request.size())) {
    char buf[4096];
    for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) out.append(buf, n);
  }
  close(fd);
  return out;
}

std::string Get(int port, const std::string& path) {
  return Fetch(port, absl::StrCat("GET ", path, " HTTP/1.0\r\n\r\n"));
}

TEST(TextBuilderTest, WritesHelpAndTypeOncePerFamilyAndEscapesLabels) {
  TextBuilder m;
  m.Gauge("meshpool_x", "An x.\nSecond line \\ here.", 3, {{"node", "a"}});
  m.Gauge("meshpool_x", "An x.", 4.5, {{"node", "b\"q\\\n"}});
  m.Counter("meshpool_y_total", "Ys.", 12345678901234);
  m.Gauge("meshpool_z", "Zs.", 0.25);
  EXPECT_EQ(m.text(),
            "# HELP meshpool_x An x.\\nSecond line \\\\ here.\n"
            "# TYPE meshpool_x gauge\n"
            "meshpool_x{node=\"a\"} 3\n"
            "meshpool_x{node=\"b\\\"q\\\\\\n\"} 4.5\n"
            "# HELP meshpool_y_total Ys.\n"
            "# TYPE meshpool_y_total counter\n"
            "meshpool_y_total 12345678901234\n"
            "# HELP meshpool_z Zs.\n"
            "# TYPE meshpool_z gauge\n"
            "meshpool_z 0.25\n");
}

TEST(HttpServerTest, ServesMetricsHealthAndRefusesTheRest) {
  std::atomic<bool> healthy{true};
  HttpServer::Handlers handlers;
  handlers.metrics = [] { return std::string("meshpool_up 1\n"); };
  handlers.health = [&] {
    return healthy ? absl::OkStatus()
                   : absl::FailedPreconditionError("fenced: restart it");
  };
  auto server = HttpServer::Start("127.0.0.1:0", std::move(handlers));
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  ASSERT_GT(port, 0);
  EXPECT_EQ((*server)->url(),
            absl::StrCat("http://127.0.0.1:", port, "/metrics"));

  std::string r = Get(port, "/metrics");
  EXPECT_TRUE(absl::StartsWith(r, "HTTP/1.0 200") ||
              absl::StartsWith(r, "HTTP/1.1 200"))
      << r;
  EXPECT_TRUE(absl::StrContains(r, "text/plain; version=0.0.4")) << r;
  EXPECT_TRUE(absl::EndsWith(r, "\r\n\r\nmeshpool_up 1\n")) << r;
  EXPECT_TRUE(absl::StrContains(Get(port, "/healthz"), " 200 "))
      << Get(port, "/healthz");
  healthy = false;
  r = Get(port, "/healthz");
  EXPECT_TRUE(absl::StrContains(r, " 503 ")) << r;
  EXPECT_TRUE(absl::EndsWith(r, "fenced: restart it\n")) << r;
  EXPECT_TRUE(absl::StrContains(Get(port, "/"), " 404 "));
  EXPECT_TRUE(absl::StrContains(
      Fetch(port, "POST /metrics HTTP/1.0\r\nContent-Length: 0\r\n\r\n"),
      " 405 "));
  // Garbage is refused, and the server keeps serving.
  Fetch(port, "\x01\x02 not http\r\n\r\n");
  EXPECT_TRUE(absl::StrContains(Get(port, "/metrics"), "meshpool_up 1"));
}

TEST(HttpServerTest, ManyScrapersAtOnceAllGetThePage) {
  std::atomic<int> calls{0};
  HttpServer::Handlers handlers;
  handlers.metrics = [&] {
    ++calls;
    return std::string("meshpool_up 1\n");
  };
  auto server = HttpServer::Start("127.0.0.1:0", std::move(handlers));
  ASSERT_TRUE(server.ok()) << server.status();
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20; ++i)
        ok += absl::StrContains(Get((*server)->port(), "/metrics"),
                                "meshpool_up 1");
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(ok.load(), 160);
  EXPECT_EQ(calls.load(), 160);
}

TEST(HttpServerTest, BadOrTakenAddressesSaySo) {
  HttpServer::Handlers handlers;
  handlers.metrics = [] { return std::string(); };
  auto first = HttpServer::Start("127.0.0.1:0", handlers);
  ASSERT_TRUE(first.ok()) << first.status();
  auto taken =
      HttpServer::Start(absl::StrCat("127.0.0.1:", (*first)->port()), handlers);
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kFailedPrecondition)
      << taken.status();
  EXPECT_TRUE(absl::StrContains(taken.status().message(), "--metrics-listen"));
  EXPECT_EQ(HttpServer::Start("127.0.0.1", handlers).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HttpServer::Start("127.0.0.1:99999", handlers).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      HttpServer::Start("127.0.0.1:0", HttpServer::Handlers()).status().code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace meshpool::metrics
