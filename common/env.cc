#include "common/env.h"

#include "absl/time/clock.h"

namespace meshpool {
namespace {

class DefaultEnv final : public Env {
 public:
  absl::Time Now() override { return absl::Now(); }
  void Log(absl::string_view, absl::string_view) override {}
};

}  // namespace

Env* Env::Default() {
  static DefaultEnv* const env = new DefaultEnv();
  return env;
}

}  // namespace meshpool
