#include "bench/kv_compare_ceilings.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/common.h"
#include "common/json.h"
#include "common/posix.h"
#include "format/layout.h"
#include "xxhash.h"

extern char** environ;

namespace meshpool::bench {
namespace {

// iperf3's JSON report is a few KiB per stream; refuse runaway output.
constexpr size_t kMaxIperfOutput = size_t{16} << 20;
constexpr int kMaxStreams = 128;
constexpr uint64_t kMinMemcpyBytes = uint64_t{1} << 20;

// Runs argv[0] (searched in PATH) with `args`, returns its stdout and sets
// `exit_status` (-1 when it did not exit normally).
absl::StatusOr<std::string> RunCapture(const std::vector<std::string>& args,
                                       int& exit_status) {
  int fds[2];
  if (PipeCloexec(fds) != 0) return ErrnoToStatus(errno, "pipe");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  std::vector<char*> argv;
  for (const std::string& a : args)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc =
      ::posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    return absl::NotFoundError(
        absl::StrCat("cannot run ", args[0], ": ", std::strerror(rc),
                     " (install the iperf3 package or pass --iperf3-binary)"));
  }
  std::string out;
  char buf[65536];
  while (true) {
    ssize_t n = ::read(fds[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (out.size() < kMaxIperfOutput) out.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

// The raw text of the value of top-level member `name` of the JSON object
// `text`, or nullopt. Only strings and nesting are tracked, so a document
// the strict reader rejects elsewhere still yields its parts: iperf3 3.12
// repeats "sock_bufsize" inside "start", which ParseJson rightly refuses.
std::optional<absl::string_view> TopLevelMember(absl::string_view text,
                                                absl::string_view name) {
  int depth = 0;
  size_t value_start = 0;
  bool capturing = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"') {  // a string: skip it, and see whether it is our key
      const size_t start = i + 1;
      for (++i; i < text.size() && text[i] != '"'; ++i) {
        if (text[i] == '\\') ++i;
      }
      if (i >= text.size()) return std::nullopt;
      if (depth == 1 && !capturing && text.substr(start, i - start) == name) {
        size_t j = i + 1;
        while (j < text.size() && absl::ascii_isspace(text[j])) ++j;
        if (j < text.size() && text[j] == ':') {
          capturing = true;
          value_start = j + 1;
          i = j;
        }
      }
      continue;
    }
    if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']' || (c == ',' && depth == 1)) {
      if (c != ',') --depth;
      if (capturing && depth <= 1 && (c == ',' || depth == 0)) {
        return absl::StripAsciiWhitespace(
            text.substr(value_start, i - value_start));
      }
    }
  }
  return std::nullopt;
}

}  // namespace

absl::StatusOr<double> MeasureIperf3(const std::string& binary,
                                     absl::string_view address, int streams,
                                     double seconds) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port <= 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("iperf3 address '", address,
                     "' is not HOST:PORT (e.g. 127.0.0.1:5201)"));
  }
  if (streams < 1 || streams > kMaxStreams || !(seconds > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "iperf3 needs 1..", kMaxStreams, " streams and seconds > 0"));
  }
  // iperf3 takes whole seconds.
  const int whole = std::max(1, static_cast<int>(std::ceil(seconds)));
  int exit_status = 0;
  MESHPOOL_ASSIGN_OR_RETURN(
      std::string out,
      RunCapture({binary, "-c", std::string(address.substr(0, colon)), "-p",
                  absl::StrCat(port), "-P", absl::StrCat(streams), "-t",
                  absl::StrCat(whole), "-J"},
                 exit_status));
  // Only the members we read are parsed (strictly): see TopLevelMember.
  if (auto e = TopLevelMember(out, "error"); e.has_value()) {
    absl::StatusOr<JsonValue> error = ParseJson(*e);
    return absl::UnavailableError(absl::StrCat(
        "iperf3 -c ", address,
        " failed: ", error.ok() ? error->string_value() : std::string(*e),
        " (is `iperf3 -s -p ", port, "` running?)"));
  }
  if (exit_status != 0) {
    return absl::UnavailableError(
        absl::StrCat("iperf3 -c ", address, " exited with status ", exit_status,
                     "; its output began: ", out.substr(0, 300)));
  }
  std::optional<absl::string_view> end_text = TopLevelMember(out, "end");
  if (!end_text.has_value()) {
    return absl::DataLossError(absl::StrCat(
        "iperf3 -J printed no top-level \"end\" member; its output began: ",
        out.substr(0, 300)));
  }
  absl::StatusOr<JsonValue> json = ParseJson(*end_text);
  if (!json.ok()) {
    return absl::DataLossError(
        absl::StrCat("iperf3's \"end\" member is not valid JSON: ",
                     json.status().message()));
  }
  const JsonValue* sum = json->Find("sum_received");
  const JsonValue* bps =
      sum != nullptr ? sum->Find("bits_per_second") : nullptr;
  double bits = 0;
  if (bps == nullptr || !bps->is_number() ||
      !absl::SimpleAtod(bps->number_text(), &bits) || !(bits > 0)) {
    return absl::DataLossError(
        "iperf3's JSON has no positive end.sum_received.bits_per_second");
  }
  return bits / 8;
}

namespace {

// Runs `threads` threads, each with its own source and destination of
// `bytes_per_thread`, calling pass(src, dst, bytes) over and over for
// `seconds`; returns bytes passed per second, all threads together.
template <typename Pass>
absl::StatusOr<double> MeasurePasses(int threads, uint64_t bytes_per_thread,
                                     double seconds, const char* what,
                                     Pass pass) {
  if (threads < 1 || bytes_per_thread < kMinMemcpyBytes || !(seconds > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " needs threads >= 1, at least 1 MiB per thread, seconds > 0"));
  }
  struct Buffers {
    std::unique_ptr<char[]> src, dst;
  };
  std::vector<Buffers> buffers(static_cast<size_t>(threads));
  for (Buffers& b : buffers) {
    b.src.reset(new (std::nothrow) char[bytes_per_thread]);
    b.dst.reset(new (std::nothrow) char[bytes_per_thread]);
    if (b.src == nullptr || b.dst == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "cannot allocate 2 x ", FormatSize(bytes_per_thread), " x ", threads,
          " for the ", what, " ceiling (lower --memcpy-bytes)"));
    }
    // Fault every page in before timing.
    std::memset(b.src.get(), 0x5a, bytes_per_thread);
    std::memset(b.dst.get(), 0, bytes_per_thread);
  }
  using Clock = std::chrono::steady_clock;
  absl::Notification go;
  Clock::time_point deadline;  // written before go is notified
  std::vector<uint64_t> passes(buffers.size(), 0);
  std::vector<std::thread> workers;
  for (size_t t = 0; t < buffers.size(); ++t) {
    workers.emplace_back([&, t] {
      go.WaitForNotification();
      uint64_t n = 0;
      do {
        pass(buffers[t].src.get(), buffers[t].dst.get(), bytes_per_thread);
        ++n;
      } while (Clock::now() < deadline);
      passes[t] = n;
    });
  }
  const Clock::time_point start = Clock::now();
  deadline = start + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(seconds));
  go.Notify();
  for (std::thread& w : workers) w.join();
  const double wall =
      std::chrono::duration<double>(Clock::now() - start).count();
  uint64_t total = 0;
  for (uint64_t n : passes) total += n * bytes_per_thread;
  return static_cast<double>(total) / wall;
}

}  // namespace

absl::StatusOr<double> MeasureMemcpy(int threads, uint64_t bytes_per_thread,
                                     double seconds) {
  return MeasurePasses(
      threads, bytes_per_thread, seconds, "memcpy",
      [](const char* src, char* dst, uint64_t n) { std::memcpy(dst, src, n); });
}

absl::StatusOr<double> MeasureCopyAndDigest(int threads,
                                            uint64_t bytes_per_thread,
                                            uint64_t block_bytes,
                                            double seconds) {
  if (block_bytes == 0 || block_bytes > bytes_per_thread) {
    return absl::InvalidArgumentError(
        "memcpy+XXH3 needs a block of at least 1 byte and at most the buffer");
  }
  std::atomic<uint64_t> sink{0};  // keeps the digests from being optimized out
  absl::StatusOr<double> rate = MeasurePasses(
      threads, bytes_per_thread, seconds, "memcpy+XXH3",
      [&](const char* src, char* dst, uint64_t n) {
        uint64_t x = 0;
        for (uint64_t at = 0; at + block_bytes <= n; at += block_bytes) {
          std::memcpy(dst + at, src + at, block_bytes);
          for (uint64_t c = 0; c < block_bytes;
               c += format::kDigestChunkBytes) {
            x ^= XXH3_64bits_withSeed(
                dst + at + c,
                std::min<uint64_t>(format::kDigestChunkBytes, block_bytes - c),
                c);
          }
        }
        sink.fetch_xor(x, std::memory_order_relaxed);
      });
  if (!rate.ok()) return rate;
  // Whole blocks only were passed: scale to the bytes actually moved.
  return *rate *
         static_cast<double>(bytes_per_thread / block_bytes * block_bytes) /
         static_cast<double>(bytes_per_thread);
}

}  // namespace meshpool::bench
