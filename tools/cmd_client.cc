// Client subcommands: put, get, del, bench (stat: cmd_stat.cc).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/common.h"
#include "meshpool/client.h"
#include "tools/commands.h"
#include "tools/flags.h"
#include "tools/tls.h"
#include "tools/transport_flags.h"
#include "tools/workload.h"

namespace meshpool::tools {
namespace {

absl::StatusOr<std::string> ReadInput(const std::string& path) {
  if (path == "-") {
    std::ostringstream ss;
    ss << std::cin.rdbuf();
    return ss.str();
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot open '", path, "'"));
  }
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

void DefineClientFlags(Flags& flags) {
  flags.Define("coordinator", "",
               "coordinator HOST:PORT (default: $MESHPOOL_COORDINATOR)");
  DefineTransportFlags(flags, /*with_transport=*/false);
  DefineTlsFlags(flags, /*server=*/false);
}

std::unique_ptr<Client> OpenClient(Flags& flags, int argc, char** argv,
                                   const char* command, size_t min_positional,
                                   size_t max_positional, int* rc) {
  if (int parsed = ParseFlags(flags, argc, argv, command); parsed >= 0) {
    *rc = parsed;
    return nullptr;
  }
  size_t n = flags.positional().size();
  if (n < min_positional || n > max_positional) {
    *rc = Fail(command, absl::InvalidArgumentError(absl::StrCat(
                            "wrong number of arguments\n\n", flags.Help())));
    return nullptr;
  }
  auto address = CoordinatorAddress(flags);
  if (!address.ok()) {
    *rc = Fail(command, address.status());
    return nullptr;
  }
  ClientOptions options;
  options.coordinator = *address;
  auto rdma = ClientRdmaFromFlags(flags);
  if (!rdma.ok()) {
    *rc = Fail(command, rdma.status());
    return nullptr;
  }
  options.rdma = *std::move(rdma);
  auto tls = TlsFromFlags(flags, "client");
  if (!tls.ok()) {
    *rc = Fail(command, tls.status());
    return nullptr;
  }
  options.tls_ca_file = tls->ca_file;
  options.tls_cert_file = tls->cert_file;
  options.tls_key_file = tls->key_file;
  auto client = Client::Connect(options);
  if (!client.ok()) {
    *rc = Fail(command, client.status());
    return nullptr;
  }
  return *std::move(client);
}

int RunPut(int argc, char** argv) {
  Flags flags("meshpool put KEY [FILE|-]",
              "Stores the contents of FILE (or stdin, the default) under KEY.");
  DefineClientFlags(flags);
  int rc = 0;
  auto client = OpenClient(flags, argc, argv, "put", 1, 2, &rc);
  if (!client) return rc;
  const auto& args = flags.positional();
  auto value = ReadInput(args.size() > 1 ? args[1] : "-");
  if (!value.ok()) return Fail("put", value.status());
  absl::Status s = client->Put(args[0], *value);
  if (!s.ok()) return Fail("put", s);
  std::fprintf(stderr, "stored %s under '%s'\n",
               FormatSize(value->size()).c_str(), args[0].c_str());
  return 0;
}

int RunGet(int argc, char** argv) {
  Flags flags("meshpool get KEY [-o FILE]",
              "Writes the value of KEY to stdout, or to FILE with -o.");
  DefineClientFlags(flags);
  flags.Define("output", "", "write the value to this file instead of stdout");
  flags.Alias("o", "output");
  int rc = 0;
  auto client = OpenClient(flags, argc, argv, "get", 1, 1, &rc);
  if (!client) return rc;
  auto value = client->Get(flags.positional()[0]);
  if (!value.ok()) return Fail("get", value.status());
  std::string out = flags.Get("output");
  if (out.empty()) {
    std::fwrite(value->data(), 1, value->size(), stdout);
    return std::fflush(stdout) == 0 ? 0 : 1;
  }
  std::ofstream file(out, std::ios::binary | std::ios::trunc);
  file.write(value->data(), static_cast<std::streamsize>(value->size()));
  if (!file.good()) {
    return Fail("get", absl::UnavailableError(
                           absl::StrCat("cannot write '", out, "'")));
  }
  return 0;
}

int RunDel(int argc, char** argv) {
  Flags flags("meshpool del KEY", "Deletes KEY.");
  DefineClientFlags(flags);
  int rc = 0;
  auto client = OpenClient(flags, argc, argv, "del", 1, 1, &rc);
  if (!client) return rc;
  absl::Status s = client->Delete(flags.positional()[0]);
  if (!s.ok()) return Fail("del", s);
  return 0;
}

int RunBench(int argc, char** argv) {
  Flags flags(
      "meshpool bench [--value-size SIZE] [--threads N] [--batch N] "
      "[--read-fraction F] [--duration D]",
      "Loads the cluster with GETs and PUTs and prints ops/s, GB/s "
      "and p50/p99/p999 latency. Every GET is checked byte for byte.");
  DefineClientFlags(flags);
  flags.Define("value-size", "4KiB", "value size");
  flags.Define("threads", "4", "client threads");
  flags.Define("batch", "1",
               "keys per operation (1: Get/Put, more: BatchGet/BatchPut)");
  flags.DefineBool("no-register",
                   "do not RegisterBuffer the value buffers (stage values)");
  flags.Define("read-fraction", "0.9", "share of operations that are GETs");
  flags.Define("duration", "5s", "how long to run");
  flags.Define("keys", "1000", "key space (written once before timing)");
  flags.Define("seed", "1", "seed for key choice");
  int rc = 0;
  auto client = OpenClient(flags, argc, argv, "bench", 0, 0, &rc);
  if (!client) return rc;
  WorkloadOptions w;
  auto size = flags.GetSize("value-size");
  auto threads = flags.GetInt("threads");
  auto batch = flags.GetInt("batch");
  auto reads = flags.GetDouble("read-fraction");
  auto duration = flags.GetDuration("duration");
  auto keys = flags.GetInt("keys");
  auto seed = flags.GetInt("seed");
  for (const absl::Status& s :
       {size.status(), threads.status(), batch.status(), reads.status(),
        duration.status(), keys.status(), seed.status()}) {
    if (!s.ok()) return Fail("bench", s);
  }
  w.value_bytes = *size;
  w.threads = static_cast<int>(*threads);
  w.batch = static_cast<int>(*batch);
  w.register_buffers = !flags.GetBool("no-register");
  w.read_fraction = *reads;
  w.duration = *duration;
  w.keys = static_cast<uint64_t>(std::max<int64_t>(*keys, 0));
  w.seed = static_cast<uint64_t>(*seed);
  std::printf("seed %llu\n", static_cast<unsigned long long>(w.seed));
  auto result = RunWorkload(*client, w);
  if (!result.ok()) return Fail("bench", result.status());
  std::fputs(FormatWorkload(w, *result).c_str(), stdout);
  return result->errors == 0 && result->corrupt == 0 ? 0 : 1;
}

}  // namespace meshpool::tools
