// KV-cache subcommands: `meshpool pin` (pin keys, optionally holding them
// while the command runs) and `meshpool prefix` (longest present prefix).
#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "meshpool/client.h"
#include "meshpool/kv_cache.h"
#include "tools/commands.h"
#include "tools/flags.h"

namespace meshpool::tools {
namespace {

volatile std::sig_atomic_t stop_holding = 0;
void OnSignal(int) { stop_holding = 1; }

std::vector<absl::string_view> Keys(const Flags& flags) {
  return {flags.positional().begin(), flags.positional().end()};
}

}  // namespace

int RunPin(int argc, char** argv) {
  Flags flags("meshpool pin KEY... [--ttl DURATION | --hard] [--hold]",
              "Pins keys so the nodes do not evict them. A pin lasts for "
              "--ttl, or with --hard until unpinned, and never longer than "
              "the client that made it: without --hold this command's pins "
              "end when it exits. With --hold it keeps them (renewing its "
              "session) until interrupted, then unpins.");
  DefineClientFlags(flags);
  flags.Define("ttl", "60s", "how long each pin lasts");
  flags.DefineBool("hard", "pin until unpinned (no ttl)");
  flags.DefineBool("hold",
                   "keep running, holding the pins, until SIGINT/SIGTERM");
  int rc = 0;
  auto client = OpenClient(flags, argc, argv, "pin", 1, 1 << 20, &rc);
  if (!client) return rc;
  absl::StatusOr<absl::Duration> ttl = flags.GetDuration("ttl");
  if (!ttl.ok()) return Fail("pin", ttl.status());
  std::vector<absl::string_view> keys = Keys(flags);
  std::vector<absl::Status> pinned =
      Pin(*client, keys, flags.GetBool("hard") ? kHardPin : *ttl);
  int failed = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (pinned[i].ok()) continue;
    ++failed;
    std::fprintf(stderr, "meshpool pin: %s: %s\n", std::string(keys[i]).c_str(),
                 ForCommandLine(pinned[i].ToString()).c_str());
  }
  std::printf("pinned %zu of %zu keys\n", keys.size() - failed, keys.size());
  std::fflush(stdout);
  if (!flags.GetBool("hold")) return failed == 0 ? 0 : 1;
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  while (!stop_holding) absl::SleepFor(absl::Milliseconds(100));
  Unpin(*client, keys);
  return failed == 0 ? 0 : 1;
}

int RunPrefix(int argc, char** argv) {
  Flags flags("meshpool prefix KEY...",
              "Prints how many leading keys are present (the longest cached "
              "prefix of a block chain).");
  DefineClientFlags(flags);
  int rc = 0;
  auto client = OpenClient(flags, argc, argv, "prefix", 1, 1 << 20, &rc);
  if (!client) return rc;
  absl::StatusOr<size_t> n = PrefixMatch(*client, Keys(flags));
  if (!n.ok()) return Fail("prefix", n.status());
  std::printf("%zu\n", *n);
  return 0;
}

}  // namespace meshpool::tools
