// weights_bench: in one run, on one cluster, measures
//   1. the raw one-sided bandwidth (WRITE, then READ) of the memory holding
//      a scratch region, driven with the rdma transport directly (the
//      ceiling: bench/weights_bench_raw.h),
//   2. LoadSafetensors of a generated multi-file model (load GB/s = tensor
//      bytes / seconds; target >= 0.7 x raw write),
//   3. WeightStore::ReadTensor of every tensor from --threads threads into
//      one registered buffer, twice (the second pass is timed against the
//      target, >= 0.85 x raw read; the first is a breakdown row), then
//      checks every byte against the XXH3 recorded when the model was
//      generated,
// and, with --breakdown (the default), the pieces a load is made of:
// CreateRegion, Region::Write/Verify/Read in the loader's 8 MiB calls, the
// loader's per-piece pattern alone (pread + Write + Verify + chunk
// digests), how long the real load took to its first piece (parse, plan,
// CreateRegion of the model region), file reads and XXH3. Prints one table.
// It starts a local cluster itself unless --coordinator is given; its nodes
// serve this host's client over --transport, as the raw phases measure,
// not over shared memory (--shm 1 for that).
// Exit status: 0 when every phase ran and every byte was right (targets
// missed or not), 1 on any error or wrong byte, 2 for bad flags.
// See bench/weights_bench.sh.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "bench/weights_bench_model.h"
#include "bench/weights_bench_raw.h"
#include "bench/weights_bench_report.h"
#include "bench/weights_bench_util.h"
#include "client/region_transfer.h"
#include "common/common.h"
#include "common/posix.h"
#include "meshpool/client.h"
#include "meshpool/region.h"
#include "meshpool/weights.h"
#include "placement/coordinator_client.h"
#include "tools/flags.h"
#include "tools/local_cluster.h"
#include "tools/transport_flags.h"
#include "xxhash.h"

namespace meshpool::bench {
namespace {

// The region phases of --breakdown move pieces of this size per call, as
// the loader does (kLoadIoBytes, private to client/weights_load.cc: keep
// the two equal).
constexpr uint64_t kLoaderIoBytes = uint64_t{8} << 20;
// Page alignment of each tensor in the read buffer.
constexpr uint64_t kReadAlign = 4096;
// The raw phases repeat whole passes; at most this many.
constexpr int kMaxRawPasses = 1000;
// Per-node pool sizing when --capacity is 0: this much headroom over an
// even share of scratch + model, plus room for slab rounding.
constexpr double kCapacityHeadroom = 1.1;
constexpr uint64_t kCapacitySlack = uint64_t{192} << 20;

struct Options {
  std::string coordinator;
  std::string meshpool_binary;
  int nodes = 3;
  uint64_t capacity = 0;
  uint64_t model_bytes = 0;
  int files = 0;
  int parallel = 0;
  int threads = 0;
  uint64_t scratch_bytes = 0;
  RawOptions raw;
  absl::Duration raw_time;
  bool breakdown = true;
  bool shm = false;
  uint64_t seed = 1;
  std::string dir;
};

void DefineFlags(tools::Flags& flags) {
  flags.Define("coordinator", "",
               "use this cluster (host:port) instead of starting a local one");
  flags.Define("meshpool", "",
               "meshpool binary for the local cluster (default: "
               "../tools/meshpool next to this executable)");
  flags.Define("nodes", "3", "memory nodes of the local cluster");
  flags.Define("capacity", "0",
               "pool size per node (0: enough for scratch + model)");
  flags.Define("model-bytes", "2GiB", "total tensor bytes of the model");
  flags.Define("files", "4", "shard files of the model");
  flags.Define("parallel", "4", "LoadOptions.parallel_files");
  flags.Define("threads", "4", "reader threads for ReadTensor");
  flags.Define("scratch-bytes", "0",
               "region size for the raw phases (0: min(1GiB, model))");
  flags.Define("raw-request", "4MiB", "bytes per raw READ/WRITE");
  flags.Define("raw-depth", "16", "raw requests in flight per endpoint");
  flags.Define("raw-lanes", "0",
               "raw endpoints per node (0: as many as a region transfer "
               "uses, kMaxRegionLanesPerNode)");
  flags.Define("raw-time", "2s",
               "each raw direction repeats passes for at least this long");
  flags.Define("breakdown", "1",
               "1: also time CreateRegion, Region::Write/Verify/Read, the "
               "loader's pread + Write + Verify pattern, file reads and "
               "XXH3; 0: skip");
  flags.Define("shm", "0",
               "1: the local cluster's nodes serve this host's client over "
               "shared memory (as `meshpool node` does by default); 0: over "
               "--transport, which the raw phases measure");
  flags.Define("seed", "1", "seed of the model's sizes and bytes");
  flags.Define("dir", "",
               "where the model's temporary directory goes (default: "
               "$TMPDIR, else /tmp)");
  tools::DefineTransportFlags(flags, /*with_transport=*/true);
}

std::string DefaultBinary() {
  std::string self;
  if (SelfExecutablePath(&self) != 0) return "meshpool";
  return self.substr(0, self.rfind('/')) + "/../tools/meshpool";
}

absl::StatusOr<Options> ParseOptions(const tools::Flags& flags) {
  Options o;
  o.coordinator = flags.Get("coordinator");
  o.meshpool_binary = flags.Get("meshpool");
  if (o.meshpool_binary.empty()) o.meshpool_binary = DefaultBinary();
  o.dir = flags.Get("dir");
  if (o.dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    o.dir = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  }
  MESHPOOL_ASSIGN_OR_RETURN(int64_t nodes, flags.GetInt("nodes"));
  MESHPOOL_ASSIGN_OR_RETURN(o.capacity, flags.GetSize("capacity"));
  MESHPOOL_ASSIGN_OR_RETURN(o.model_bytes, flags.GetSize("model-bytes"));
  MESHPOOL_ASSIGN_OR_RETURN(int64_t files, flags.GetInt("files"));
  MESHPOOL_ASSIGN_OR_RETURN(int64_t parallel, flags.GetInt("parallel"));
  MESHPOOL_ASSIGN_OR_RETURN(int64_t threads, flags.GetInt("threads"));
  MESHPOOL_ASSIGN_OR_RETURN(o.scratch_bytes, flags.GetSize("scratch-bytes"));
  MESHPOOL_ASSIGN_OR_RETURN(o.raw.request_bytes, flags.GetSize("raw-request"));
  MESHPOOL_ASSIGN_OR_RETURN(int64_t depth, flags.GetInt("raw-depth"));
  MESHPOOL_ASSIGN_OR_RETURN(int64_t lanes, flags.GetInt("raw-lanes"));
  MESHPOOL_ASSIGN_OR_RETURN(o.raw_time, flags.GetDuration("raw-time"));
  MESHPOOL_ASSIGN_OR_RETURN(int64_t breakdown, flags.GetInt("breakdown"));
  MESHPOOL_ASSIGN_OR_RETURN(int64_t shm, flags.GetInt("shm"));
  MESHPOOL_ASSIGN_OR_RETURN(int64_t seed, flags.GetInt("seed"));
  if (nodes < 1 || nodes > 64 || files < 1 || files > 10000 || parallel < 1 ||
      parallel > 64 || threads < 1 || threads > 256 || depth < 1 || lanes < 0 ||
      o.model_bytes == 0) {
    return absl::InvalidArgumentError(
        "need 1 <= --nodes <= 64, 1 <= --files <= 10000, 1 <= --parallel <= "
        "64, 1 <= --threads <= 256, --raw-depth >= 1, --raw-lanes >= 0 and "
        "--model-bytes > 0");
  }
  o.nodes = static_cast<int>(nodes);
  o.files = static_cast<int>(files);
  o.parallel = static_cast<int>(parallel);
  o.threads = static_cast<int>(threads);
  o.raw.depth = static_cast<size_t>(depth);
  o.raw.lanes_per_node = lanes == 0 ? client_internal::kMaxRegionLanesPerNode
                                    : static_cast<size_t>(lanes);
  o.breakdown = breakdown != 0;
  o.shm = shm != 0;
  o.seed = static_cast<uint64_t>(seed);
  if (o.scratch_bytes == 0) {
    o.scratch_bytes = std::min<uint64_t>(uint64_t{1} << 30, o.model_bytes);
  }
  MESHPOOL_ASSIGN_OR_RETURN(o.raw.verbs, tools::VerbsOptionsFromFlags(flags));
  if (o.capacity == 0) {
    const double share = static_cast<double>(o.scratch_bytes + o.model_bytes) /
                         o.nodes * kCapacityHeadroom;
    // The index takes 1/64 of a pool.
    const double pool = (share + kCapacitySlack) * 64 / 63;
    o.capacity = (static_cast<uint64_t>(pool) / (1 << 20) + 1) << 20;
  }
  return o;
}

std::string Passes(int n) {
  return absl::StrCat(n, n == 1 ? " pass" : " passes");
}

// One piece of the loader's copy loop (Copier::CopyItem in
// client/weights_load.cc) at region offset `at`: pread into `src`
// (registered), Region::Write, Region::Verify (the nodes hash their copies;
// nothing is read back), then XXH3 of each 1 MiB chunk for the manifest.
absl::Status CopyPiece(const GeneratedModel& model, const FilePiece& p,
                       Region& region, uint64_t at, char* src,
                       std::atomic<uint64_t>& sink) {
  MESHPOOL_RETURN_IF_ERROR(ReadPiece(model, p, src));
  const auto data = absl::MakeConstSpan(src, p.n);
  MESHPOOL_RETURN_IF_ERROR(region.Write(at, data));
  MESHPOOL_RETURN_IF_ERROR(region.Verify(at, data));
  uint64_t chunks = 0;
  for (uint64_t c = 0; c < p.n; c += kWeightChunkBytes) {
    chunks ^= XXH3_64bits(src + c, std::min(kWeightChunkBytes, p.n - c));
  }
  sink.fetch_xor(chunks, std::memory_order_relaxed);  // keeps the work
  return absl::OkStatus();
}

// The loader's copy loop alone (without planning, region creation and
// publication): --parallel workers each run CopyPiece over the shards'
// kLoaderIoBytes pieces. Region offsets wrap at the scratch region's size.
// `buffer`: registered, at least --parallel * kLoaderIoBytes bytes.
absl::Status LoaderPatternPhase(const Options& o, Region& scratch, char* buffer,
                                const GeneratedModel& model,
                                const std::vector<pid_t>& nodes,
                                Report& report) {
  const uint64_t wrap = scratch.size() / kLoaderIoBytes * kLoaderIoBytes;
  uint64_t bytes = 0;
  MESHPOOL_ASSIGN_OR_RETURN(std::vector<FilePiece> pieces,
                            ShardPieces(model, kLoaderIoBytes, &bytes));
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> sink{0};
  std::vector<absl::Status> results(o.parallel);
  Meter meter(nodes);
  std::vector<std::thread> workers;
  for (int w = 0; w < o.parallel; ++w) {
    workers.emplace_back([&, w] {
      char* src = buffer + w * kLoaderIoBytes;
      for (size_t i = next++; i < pieces.size() && results[w].ok();
           i = next++) {
        results[w] = CopyPiece(model, pieces[i], scratch,
                               i * kLoaderIoBytes % wrap, src, sink);
      }
    });
  }
  for (std::thread& t : workers) t.join();
  for (const absl::Status& s : results) MESHPOOL_RETURN_IF_ERROR(s);
  Phase p = meter.Stop("loader pattern", bytes);
  p.detail = absl::StrCat(o.parallel, " thr: pread+Write+Verify+XXH3");
  report.breakdown.push_back(p);
  return absl::OkStatus();
}

// Region::Write, Region::Verify and Region::Read on the scratch region, then
// the loader's pattern, from --parallel threads in kLoaderIoBytes calls,
// with `buffer` (region-sized, holding bytes whose XXH3 is `want`)
// registered with the client.
absl::Status RegionPhases(const Options& o, Client& client, Region& scratch,
                          char* buffer, uint64_t want,
                          const GeneratedModel& model,
                          const std::vector<pid_t>& nodes, Report& report) {
  const uint64_t bytes = scratch.size();
  MESHPOOL_ASSIGN_OR_RETURN(auto registered,
                            client.RegisterBuffer(buffer, bytes));
  const size_t pieces = (bytes + kLoaderIoBytes - 1) / kLoaderIoBytes;
  enum class Op { kWrite, kVerify, kRead };
  struct Mode {
    const char* name;
    Op op;
  };
  for (Mode m :
       {Mode{"region write", Op::kWrite}, Mode{"region verify", Op::kVerify},
        Mode{"region read", Op::kRead}}) {
    // Whole passes for at least half the raw phases' time.
    Meter meter(nodes);
    const absl::Time start = absl::Now();
    int passes = 0;
    do {
      MESHPOOL_RETURN_IF_ERROR(ParallelFor(o.parallel, pieces, [&](size_t i) {
        const uint64_t at = i * kLoaderIoBytes;
        const uint64_t n = std::min(kLoaderIoBytes, bytes - at);
        switch (m.op) {
          case Op::kWrite:
            return scratch.Write(at, absl::MakeConstSpan(buffer + at, n));
          case Op::kVerify:
            return scratch.Verify(at, absl::MakeConstSpan(buffer + at, n));
          case Op::kRead:
            return scratch.Read(at, absl::MakeSpan(buffer + at, n));
        }
        return absl::InternalError("unknown region op");
      }));
    } while (++passes < kMaxRawPasses && absl::Now() - start < o.raw_time / 2);
    Phase p = meter.Stop(m.name, bytes * passes);
    p.detail = absl::StrCat(o.parallel, " thr x ", FormatSize(kLoaderIoBytes),
                            ", ", Passes(passes));
    report.breakdown.push_back(p);
    if (m.op == Op::kRead && XXH3_64bits(buffer, bytes) != want) {
      return absl::DataLossError(absl::StrCat(
          m.name, ": Region::Read returned other bytes than were written"));
    }
  }
  if (bytes < kLoaderIoBytes * o.parallel) return absl::OkStatus();
  return LoaderPatternPhase(o, scratch, buffer, model, nodes, report);
}

int PassesFor(absl::Duration one_pass, absl::Duration want) {
  const double ratio = absl::FDivDuration(want, one_pass);
  return std::clamp(static_cast<int>(std::ceil(ratio)), 1, kMaxRawPasses);
}

// Raw READ/WRITE bandwidth on the scratch region's memory, then (with
// breakdown) Region::Write/Read on the same region through the client.
absl::Status RawPhases(const Options& o, Client& client, Region& scratch,
                       const std::string& coordinator,
                       const GeneratedModel& model,
                       const std::vector<pid_t>& nodes, Report& report) {
  MESHPOOL_ASSIGN_OR_RETURN(auto coord,
                            placement::CoordinatorClient::Connect(coordinator));
  MESHPOOL_ASSIGN_OR_RETURN(proto::RegionInfo info,
                            coord->GetRegion(scratch.name()));
  MESHPOOL_ASSIGN_OR_RETURN(proto::ClusterMap map, coord->GetClusterMap());
  MESHPOOL_ASSIGN_OR_RETURN(std::unique_ptr<RawBench> raw,
                            RawBench::Create(info, map, o.raw));
  report.transport = raw->transport();
  report.raw_endpoints = raw->endpoints();
  report.stripe_bytes = scratch.stripe_bytes();
  const uint64_t bytes = raw->bytes();
  FillTensorBytes(o.seed, "raw-pattern", 0, raw->buffer(), bytes);
  const uint64_t want = XXH3_64bits(raw->buffer(), bytes);
  for (rdma::Opcode op : {rdma::Opcode::kWrite, rdma::Opcode::kRead}) {
    const bool read = op == rdma::Opcode::kRead;
    if (read) std::memset(raw->buffer(), 0, bytes);
    MESHPOOL_ASSIGN_OR_RETURN(absl::Duration warm, raw->Run(op, 1));
    if (read && XXH3_64bits(raw->buffer(), bytes) != want) {
      return absl::DataLossError(
          "raw READs returned other bytes than the raw WRITEs stored");
    }
    const int passes = PassesFor(warm, o.raw_time);
    Meter meter(nodes);
    MESHPOOL_ASSIGN_OR_RETURN(absl::Duration took, raw->Run(op, passes));
    Phase p = meter.Stop(read ? "raw read" : "raw write", bytes * passes);
    p.seconds = absl::ToDoubleSeconds(took);  // without thread start-up
    p.detail = Passes(passes);
    (read ? report.raw_read : report.raw_write) = p;
  }
  if (!o.breakdown) return absl::OkStatus();
  // The same buffer (holding the pattern again) through the Region API.
  return RegionPhases(o, client, scratch, raw->buffer(), want, model, nodes,
                      report);
}

absl::Status LoadPhase(const Options& o, Client& client,
                       const GeneratedModel& model, const std::string& name,
                       const std::vector<pid_t>& nodes, Report& report) {
  LoadOptions options;
  options.replace = true;
  options.parallel_files = o.parallel;
  const std::vector<std::string> paths = {model.index_path};
  Meter meter(nodes);
  // The first progress report comes when the first piece is in: parsing,
  // planning and creating the model region happened before it.
  Phase first;
  options.progress = [&](const LoadProgress& p) {  // serialised
    if (first.name.empty() && p.bytes_done > 0) {
      first = meter.Stop("load: to 1st piece", 0);
    }
  };
  MESHPOOL_ASSIGN_OR_RETURN(ModelInfo info,
                            LoadSafetensors(client, name, paths, options));
  report.load = meter.Stop("load", model.tensor_bytes);
  if (o.breakdown && !first.name.empty()) {
    first.detail =
        absl::StrCat(absl::FormatDuration(absl::Seconds(first.seconds)),
                     ": parse, plan, CreateRegion, 8MiB");
    report.breakdown.push_back(first);
  }
  if (info.tensors != model.tensors.size() ||
      info.tensor_bytes != model.tensor_bytes) {
    return absl::DataLossError(
        absl::StrCat("LoadSafetensors reports ", info.tensors, " tensors of ",
                     info.tensor_bytes, " bytes; the model has ",
                     model.tensors.size(), " of ", model.tensor_bytes));
  }
  return absl::OkStatus();
}

// Checks every tensor read into `buffer` (at `offsets`) against the
// generated digests; times it as a breakdown row.
absl::Status Verify(const Options& o, const GeneratedModel& model,
                    const std::vector<TensorInfo>& tensors, const char* buffer,
                    const std::vector<uint64_t>& offsets,
                    const std::vector<pid_t>& nodes, Report& report) {
  if (tensors.size() != model.tensors.size()) {
    return absl::DataLossError(
        absl::StrCat("the loaded model has ", tensors.size(), " tensors; ",
                     model.tensors.size(), " were generated"));
  }
  absl::flat_hash_map<std::string, const GeneratedTensor*> by_name;
  for (const GeneratedTensor& t : model.tensors) by_name[t.tensor.name] = &t;
  absl::Mutex mu;
  std::vector<std::string> wrong;
  Meter meter(nodes);
  MESHPOOL_RETURN_IF_ERROR(
      ParallelFor(o.threads, tensors.size(), [&](size_t i) {
        const TensorInfo& t = tensors[i];
        auto it = by_name.find(t.name);
        const bool right =
            it != by_name.end() && it->second->tensor.bytes() == t.length &&
            XXH3_64bits(buffer + offsets[i], t.length) == it->second->digest;
        if (!right) {
          absl::MutexLock lock(&mu);
          wrong.push_back(t.name);
        }
        return absl::OkStatus();
      }));
  Phase p = meter.Stop("XXH3 (verify)", model.tensor_bytes);
  p.detail = absl::StrCat(o.threads, " threads");
  report.breakdown.push_back(p);
  if (!wrong.empty()) {
    std::sort(wrong.begin(), wrong.end());
    wrong.resize(std::min<size_t>(wrong.size(), 5));
    return absl::DataLossError(
        absl::StrCat("wrong bytes read back for tensors (first few): ",
                     absl::StrJoin(wrong, ", ")));
  }
  report.verified_tensors = tensors.size();
  report.verified_bytes = model.tensor_bytes;
  return absl::OkStatus();
}

absl::Status ReadPhase(const Options& o, Client& client,
                       const GeneratedModel& model, const std::string& name,
                       const std::vector<pid_t>& nodes, Report& report) {
  Meter open_meter(nodes);
  MESHPOOL_ASSIGN_OR_RETURN(std::unique_ptr<WeightStore> store,
                            WeightStore::Open(client, name));
  Phase open = open_meter.Stop("WeightStore::Open", 0);
  const std::vector<TensorInfo>& tensors = store->Tensors();
  open.detail = absl::StrCat("manifest of ", tensors.size(), " tensors");
  std::vector<uint64_t> offsets;
  uint64_t total = 0, payload = 0;
  for (const TensorInfo& t : tensors) {
    offsets.push_back(total);
    total += (t.length + kReadAlign - 1) / kReadAlign * kReadAlign;
    payload += t.length;
  }
  total = std::max<uint64_t>(total, kReadAlign);
  std::unique_ptr<char[]> buffer(new (std::nothrow) char[total]);
  if (!buffer) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot allocate ", FormatSize(total), " to read the model into"));
  }
  std::memset(buffer.get(), 0, total);  // fault the pages in, untimed
  MESHPOOL_ASSIGN_OR_RETURN(auto registered,
                            client.RegisterBuffer(buffer.get(), total));
  auto read_all = [&] {
    return ParallelFor(o.threads, tensors.size(), [&](size_t i) {
      const TensorInfo& t = tensors[i];
      MESHPOOL_ASSIGN_OR_RETURN(
          size_t n,
          store->ReadTensor(
              t.name, absl::MakeSpan(buffer.get() + offsets[i], t.length)));
      if (n != t.length) {
        return absl::InternalError(absl::StrCat(
            "ReadTensor(", t.name, ") read ", n, " of ", t.length, " bytes"));
      }
      return absl::OkStatus();
    });
  };
  // Two passes. The first writes into memory untouched since its memset,
  // which costs a fault per page on some machines (docs/BENCHMARKS.md); the
  // second, into the same buffer, is what the raw READ (reused buffers)
  // compares with and is the "read" row.
  Meter first_meter(nodes);
  MESHPOOL_RETURN_IF_ERROR(read_all());
  Phase first = first_meter.Stop("read, 1st pass", payload);
  first.detail = "ReadTensor into the buffer's pages first";
  Meter meter(nodes);
  MESHPOOL_RETURN_IF_ERROR(read_all());
  report.read = meter.Stop("read", payload);
  report.breakdown.push_back(first);
  report.breakdown.push_back(open);
  return Verify(o, model, tensors, buffer.get(), offsets, nodes, report);
}

// How fast the loader's source is: pread of every shard in kLoaderIoBytes
// pieces from --parallel threads (the page cache, as the load saw it).
absl::Status FileReadPhase(const Options& o, const GeneratedModel& model,
                           const std::vector<pid_t>& nodes, Report& report) {
  uint64_t bytes = 0;
  MESHPOOL_ASSIGN_OR_RETURN(std::vector<FilePiece> pieces,
                            ShardPieces(model, kLoaderIoBytes, &bytes));
  Meter meter(nodes);
  MESHPOOL_RETURN_IF_ERROR(
      ParallelFor(o.parallel, pieces.size(), [&](size_t i) {
        thread_local std::unique_ptr<char[]> buf;
        if (!buf) buf.reset(new char[kLoaderIoBytes]);
        return ReadPiece(model, pieces[i], buf.get());
      }));
  Phase p = meter.Stop("file read (pread)", bytes);
  p.detail =
      absl::StrCat(o.parallel, " threads x ", FormatSize(kLoaderIoBytes));
  report.breakdown.push_back(p);
  return absl::OkStatus();
}

void DescribeParams(const Options& o, const tools::Flags& flags,
                    const std::string& command, const std::string& coordinator,
                    bool local, const GeneratedModel& model, Report& r) {
  auto& p = r.params;
  p.emplace_back("command", command);
  p.emplace_back("cluster",
                 local ? absl::StrCat("local: ", o.nodes, " nodes x ",
                                      FormatSize(o.capacity), " (coordinator ",
                                      coordinator, ")")
                       : absl::StrCat("external: coordinator ", coordinator));
  std::string transport = r.transport;
  if (transport == "verbs") {
    absl::StrAppend(&transport, " (device ",
                    flags.Get("device").empty() ? "any" : flags.Get("device"),
                    ", gid-index ", flags.Get("gid-index"), ")");
  }
  if (local) {
    absl::StrAppend(&transport, o.shm ? "; the client's load and reads over "
                                        "shared memory (--shm 1)"
                                      : "; the client too (nodes --no-shm)");
  }
  p.emplace_back("transport", transport);
  p.emplace_back(
      "model",
      absl::StrCat(FormatSize(model.tensor_bytes), " (", model.tensor_bytes,
                   " bytes) in ", model.files.size(), " shards + index; ",
                   model.tensors.size(), " tensors: ", model.big,
                   " big (32-128MiB, scaled down under 512MiB), ", model.medium,
                   " of 1-4MiB, ", model.small, " small; seed ", o.seed));
  p.emplace_back(
      "raw",
      absl::StrCat("scratch region ", FormatSize(o.scratch_bytes), " (stripe ",
                   FormatSize(r.stripe_bytes), "), ", r.raw_endpoints,
                   " endpoints (", o.raw.lanes_per_node, " per node), ",
                   FormatSize(o.raw.request_bytes), " requests, ", o.raw.depth,
                   " in flight per endpoint, >= ",
                   absl::FormatDuration(o.raw_time), " per direction"));
  p.emplace_back("load", absl::StrCat("LoadSafetensors(index.json), "
                                      "parallel_files ",
                                      o.parallel, ", replicas 1"));
  p.emplace_back(
      "read", absl::StrCat("WeightStore::ReadTensor of every "
                           "tensor, ",
                           o.threads, " threads, into one registered buffer"));
}

absl::StatusOr<std::unique_ptr<tools::LocalCluster>> StartCluster(
    const Options& o, const tools::Flags& flags) {
  MESHPOOL_RETURN_IF_ERROR(tools::ResolveTransport(flags).status());
  if (::access(o.meshpool_binary.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("no meshpool binary at ", o.meshpool_binary,
                     ": build the meshpool target or pass --meshpool PATH"));
  }
  tools::LocalClusterOptions lo;
  lo.binary = o.meshpool_binary;
  lo.nodes = o.nodes;
  lo.capacity_bytes = o.capacity;
  lo.node_args = tools::TransportArgs(flags);
  if (!o.shm) lo.node_args.push_back("--no-shm");
  absl::FPrintF(stderr, "weights_bench: starting %d nodes x %s\n", o.nodes,
                FormatSize(o.capacity));
  return tools::LocalCluster::Start(lo);
}

absl::Status Run(const tools::Flags& flags, const std::string& command,
                 Report& report) {
  MESHPOOL_ASSIGN_OR_RETURN(Options o, ParseOptions(flags));
  MESHPOOL_ASSIGN_OR_RETURN(ScopedDir dir, ScopedDir::Create(o.dir));
  absl::FPrintF(stderr, "weights_bench: writing a %s model in %d files to %s\n",
                FormatSize(o.model_bytes), o.files, dir.path());
  absl::Time t0 = absl::Now();
  MESHPOOL_ASSIGN_OR_RETURN(
      GeneratedModel model,
      WriteModel(dir.path(), o.model_bytes, o.files, o.seed));
  absl::FPrintF(stderr, "weights_bench: %d tensors written in %s\n",
                model.tensors.size(), absl::FormatDuration(absl::Now() - t0));
  std::unique_ptr<tools::LocalCluster> cluster;
  std::string coordinator = o.coordinator;
  std::vector<pid_t> nodes;
  if (coordinator.empty()) {
    MESHPOOL_ASSIGN_OR_RETURN(cluster, StartCluster(o, flags));
    coordinator = cluster->coordinator_address();
    nodes = cluster->node_pids();
  }
  ClientOptions copts;
  copts.coordinator = coordinator;
  MESHPOOL_ASSIGN_OR_RETURN(copts.rdma, tools::ClientRdmaFromFlags(flags));
  MESHPOOL_ASSIGN_OR_RETURN(std::unique_ptr<Client> client,
                            Client::Connect(copts));
  {
    const std::string scratch_name =
        absl::StrCat("bench/raw-scratch-", ::getpid());
    absl::FPrintF(stderr, "weights_bench: raw bandwidth on a %s region\n",
                  FormatSize(o.scratch_bytes));
    Meter create(nodes);
    MESHPOOL_ASSIGN_OR_RETURN(
        std::unique_ptr<Region> scratch,
        CreateRegion(*client, scratch_name, o.scratch_bytes));
    Phase created = create.Stop("CreateRegion (scratch)", o.scratch_bytes);
    created.detail =
        absl::StrCat(absl::FormatDuration(absl::Seconds(created.seconds)),
                     ": allocate (+ zero reused slabs)");
    report.breakdown.push_back(created);
    Defer drop([&] { (void)DeleteRegion(*client, scratch_name); });
    MESHPOOL_RETURN_IF_ERROR(
        RawPhases(o, *client, *scratch, coordinator, model, nodes, report));
  }
  DescribeParams(o, flags, command, coordinator, cluster != nullptr, model,
                 report);
  const std::string model_name = absl::StrCat("weights-bench-", ::getpid());
  Defer remove([&] { (void)RemoveModel(*client, model_name); });
  absl::FPrintF(stderr, "weights_bench: loading\n");
  MESHPOOL_RETURN_IF_ERROR(
      LoadPhase(o, *client, model, model_name, nodes, report));
  absl::FPrintF(stderr, "weights_bench: reading back\n");
  MESHPOOL_RETURN_IF_ERROR(
      ReadPhase(o, *client, model, model_name, nodes, report));
  if (o.breakdown)
    MESHPOOL_RETURN_IF_ERROR(FileReadPhase(o, model, nodes, report));
  return absl::OkStatus();
}

}  // namespace
}  // namespace meshpool::bench

int main(int argc, char** argv) {
  meshpool::tools::Flags flags(
      "weights_bench [flags]",
      "Raw one-sided bandwidth vs. LoadSafetensors and ReadTensor of a "
      "generated multi-file model, on one cluster (a local one unless "
      "--coordinator is given).");
  meshpool::bench::DefineFlags(flags);
  absl::Status parsed = flags.Parse(argc - 1, argv + 1);
  if (!parsed.ok() || !flags.positional().empty()) {
    absl::FPrintF(stderr, "weights_bench: %s\n\n%s",
                  parsed.ok() ? "unexpected arguments" : parsed.message(),
                  flags.Help());
    return 2;
  }
  if (flags.help_requested()) {
    absl::PrintF("%s", flags.Help());
    return 0;
  }
  std::vector<std::string> args(argv, argv + argc);
  meshpool::bench::Report report;
  absl::Status s =
      meshpool::bench::Run(flags, absl::StrJoin(args, " "), report);
  if (!s.ok()) {
    // What was measured before the failure still shows.
    if (!report.params.empty()) meshpool::bench::PrintReport(report, stdout);
    std::fflush(stdout);
    absl::FPrintF(stderr, "weights_bench: FAILED: %s\n", s.ToString());
    return absl::IsInvalidArgument(s) ? 2 : 1;
  }
  meshpool::bench::PrintReport(report, stdout);
  return 0;
}
