// bench/kv_instructions: the work a client does per KV operation, for
// bench/kv_instructions.sh, which runs it under
// `valgrind --tool=callgrind --instr-atstart=no` against a running cluster.
//
// Connects, writes --keys keys of --value-size bytes and reads and writes
// each once more (connections, lanes, slab leases and slot hints warm), then
// counts only the measured loops: instrumentation starts before --ops GETs
// (into a caller buffer, the zero-copy-free path most callers take) and the
// counters are dumped as "get" (checking sizes only; the bytes are checked
// afterwards, uncounted); then --ops PUTs of the same keys, dumped as
// "put". Every thread of the client counts (its transport and session
// threads work for the operations too); the node is another process and
// does not. Run natively, the callgrind requests do nothing and it is a
// quick self-check: every GET must return the value last put.
#include <valgrind/callgrind.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "client/meshpool/client.h"

namespace {

struct Flags {
  std::string coordinator;
  uint64_t value_size = 4096;
  uint64_t ops = 2000;
  uint64_t keys = 100;
};

bool ParseFlags(int argc, char** argv, Flags* flags) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    auto value_of = [arg](absl::string_view name, absl::string_view* out) {
      absl::string_view rest = arg;
      if (!absl::ConsumePrefix(&rest, name) ||
          !absl::ConsumePrefix(&rest, "=")) {
        return false;
      }
      *out = rest;
      return true;
    };
    absl::string_view v;
    if (value_of("--coordinator", &v)) {
      flags->coordinator = std::string(v);
    } else if (value_of("--value-size", &v)) {
      if (!absl::SimpleAtoi(v, &flags->value_size)) return false;
    } else if (value_of("--ops", &v)) {
      if (!absl::SimpleAtoi(v, &flags->ops)) return false;
    } else if (value_of("--keys", &v)) {
      if (!absl::SimpleAtoi(v, &flags->keys)) return false;
    } else {
      std::fprintf(stderr, "kv_instructions: unknown flag %s\n", argv[i]);
      return false;
    }
  }
  return !flags->coordinator.empty() && flags->keys > 0 && flags->ops > 0 &&
         flags->value_size > 0;
}

std::string ValueOf(uint64_t key, uint64_t round, uint64_t size) {
  std::string value(size, '\0');
  for (uint64_t i = 0; i < size; ++i) {
    value[i] = static_cast<char>(key * 131 + round * 7 + i);
  }
  return value;
}

int Fail(absl::string_view what, const absl::Status& status) {
  std::fprintf(stderr, "kv_instructions: %.*s: %s\n",
               static_cast<int>(what.size()), what.data(),
               status.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (!ParseFlags(argc, argv, &flags)) {
    std::fprintf(stderr,
                 "usage: kv_instructions --coordinator=HOST:PORT "
                 "[--value-size=4096] [--ops=2000] [--keys=100]\n");
    return 2;
  }
  // As the meshpool binaries do (tools/main.cc): Debian's abseil checks
  // every Mutex for lock-order cycles otherwise.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  meshpool::ClientOptions options;
  options.coordinator = flags.coordinator;
  auto client = meshpool::Client::Connect(options);
  if (!client.ok()) return Fail("connect", client.status());
  std::vector<std::string> keys;
  std::vector<std::string> values;
  for (uint64_t k = 0; k < flags.keys; ++k) {
    keys.push_back(absl::StrCat("instructions-", k));
    values.push_back(ValueOf(k, 0, flags.value_size));
  }
  std::string out(flags.value_size, '\0');
  // Warm-up: put, get, put again, get again (the measured state).
  for (int round = 0; round < 2; ++round) {
    for (uint64_t k = 0; k < flags.keys; ++k) {
      if (absl::Status s = (*client)->Put(keys[k], values[k]); !s.ok()) {
        return Fail("put", s);
      }
      auto got = (*client)->Get(keys[k], absl::MakeSpan(out));
      if (!got.ok()) return Fail("get", got.status());
    }
  }

  CALLGRIND_START_INSTRUMENTATION;
  CALLGRIND_ZERO_STATS;
  uint64_t wrong_sizes = 0;
  for (uint64_t i = 0; i < flags.ops; ++i) {
    const uint64_t k = i % flags.keys;
    auto got = (*client)->Get(keys[k], absl::MakeSpan(out));
    if (!got.ok()) return Fail("get", got.status());
    if (*got != values[k].size()) ++wrong_sizes;
  }
  CALLGRIND_DUMP_STATS_AT("get");
  for (uint64_t i = 0; i < flags.ops; ++i) {
    const uint64_t k = i % flags.keys;
    if (absl::Status s = (*client)->Put(keys[k], values[k]); !s.ok()) {
      return Fail("put", s);
    }
  }
  CALLGRIND_DUMP_STATS_AT("put");
  CALLGRIND_STOP_INSTRUMENTATION;
  // Uncounted: every key's bytes (the counted GETs checked sizes only, so
  // that comparing values is not counted as the client's work).
  uint64_t wrong = wrong_sizes;
  for (uint64_t k = 0; k < flags.keys; ++k) {
    auto got = (*client)->Get(keys[k], absl::MakeSpan(out));
    if (!got.ok()) return Fail("get", got.status());
    if (absl::string_view(out.data(), *got) != values[k]) ++wrong;
  }
  if (wrong != 0) {
    std::fprintf(stderr, "kv_instructions: %llu GETs returned a wrong value\n",
                 static_cast<unsigned long long>(wrong));
    return 1;
  }
  std::printf("ops %llu value_size %llu keys %llu\n",
              static_cast<unsigned long long>(flags.ops),
              static_cast<unsigned long long>(flags.value_size),
              static_cast<unsigned long long>(flags.keys));
  return 0;
}
