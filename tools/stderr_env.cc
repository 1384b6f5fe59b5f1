#include "tools/stderr_env.h"

#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace meshpool::tools {
namespace {

class StderrEnvImpl final : public Env {
 public:
  absl::Time Now() override { return absl::Now(); }
  void Log(absl::string_view source, absl::string_view message) override {
    // One write per line, so lines of concurrent threads never interleave.
    const std::string line =
        absl::StrCat("meshpool ", source, ": ", message, "\n");
    size_t done = 0;
    while (done < line.size()) {
      ssize_t n =
          ::write(STDERR_FILENO, line.data() + done, line.size() - done);
      if (n <= 0) return;  // stderr closed: nowhere left to report
      done += static_cast<size_t>(n);
    }
  }
};

}  // namespace

Env* StderrEnv() {
  static StderrEnvImpl* const env = new StderrEnvImpl();
  return env;
}

}  // namespace meshpool::tools
