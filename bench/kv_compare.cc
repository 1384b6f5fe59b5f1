// kv_compare: the side-by-side KV-cache benchmark of issue 4. The same
// workload against Redis, memcached and a meshpool cluster, with the same
// client concurrency, next to the machine's ceilings measured in the same
// run (iperf3 over loopback with as many streams as client threads,
// memcpy with as many threads, and per block size memcpy + XXH3 of each
// copied block: the work of a verified GET over shared memory).
//
// Workload, per block size: every client thread repeats rounds of a batched
// PUT of --batch blocks, then a batched GET of the same keys, and checks
// every GET: status, length, and the stamps in each block's first and last
// 8 bytes (key and round; --verify full compares every byte). Keys are
// distinct per thread and per round within a ring of key sets per thread
// sized to stay under --working-set, so no store needs to evict; a miss or
// wrong byte fails the run. The ring is written once untimed first, and
// read back whole (untimed) after the timed rounds, so a store that evicted
// older keys fails too.
//
// Rates: the timed rounds run in lockstep (barriers): all threads PUT, then
// all GET, then all check their GETs untimed. put blk/s = blocks PUT by all
// threads / the summed wall time of the PUT phases (barrier to barrier, so
// the slowest thread of a round sets its length); likewise for GET. GB = 1e9
// bytes.
//
// Exit status: 0 when every measurement ran and every GET was right, 1 on
// any failure (what was measured before it is still printed), 2 for bad
// flags. bench/kv_compare.sh starts the servers and runs this.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "bench/kv_compare_ceilings.h"
#include "bench/kv_compare_report.h"
#include "bench/kv_compare_systems.h"
#include "common/common.h"
#include "tools/flags.h"

namespace meshpool::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kMaxThreads = 256;
constexpr int kMaxBatch = 1024;
// Ring slots per thread: at least two (so a round's keys differ from the
// previous round's), at most this many.
constexpr uint64_t kMinRingSlots = 2;
constexpr uint64_t kMaxRingSlots = 4096;
// A block carries 8-byte stamps at both ends.
constexpr uint64_t kMinBlockBytes = 16;
constexpr uint64_t kMaxBlockBytes = uint64_t{64} << 20;
// Key ids pack thread, ring slot and index in the batch.
static_assert(kMaxRingSlots <= (1u << 20) && kMaxBatch <= (1 << 20),
              "slot and index must fit their 20-bit fields");

struct Options {
  std::vector<uint64_t> block_sizes;
  int threads = 4;
  int batch = 32;
  double seconds = 3;
  uint64_t working_set = 0;
  std::vector<std::string> systems;
  std::string redis, memcached, coordinator, shm_coordinator, iperf3,
      iperf3_binary;
  uint64_t memcpy_bytes = 0;
  bool verify_full = false;
  std::string json;
  absl::Duration timeout;
};

void DefineFlags(tools::Flags& flags) {
  flags.Define("block-sizes", "16KiB,256KiB,2MiB", "comma-separated sizes");
  flags.Define("threads", "4",
               "client threads (= connections, iperf3 "
               "streams, memcpy threads)");
  flags.Define("batch", "32", "blocks per batched PUT and GET");
  flags.Define("seconds", "3", "timed seconds per measurement");
  flags.Define("working-set", "256MiB",
               "bytes of keys each system holds per block size, all threads "
               "together (at least 2 rounds' worth)");
  flags.Define("systems", "redis,memcached,meshpool",
               "which stores to run, comma-separated (redis, memcached, "
               "meshpool, meshpool-shm)");
  flags.Define("redis", "127.0.0.1:6379", "redis HOST:PORT");
  flags.Define("memcached", "127.0.0.1:11211", "memcached HOST:PORT");
  flags.Define("coordinator", "",
               "meshpool coordinator HOST:PORT (or MESHPOOL_COORDINATOR)");
  flags.Define("shm-coordinator", "",
               "coordinator of a meshpool cluster whose nodes serve this host "
               "over shared memory (system meshpool-shm)");
  flags.Define("iperf3", "",
               "HOST:PORT of a running `iperf3 -s` (empty: "
               "skip the iperf3 ceiling)");
  flags.Define("iperf3-binary", "iperf3", "the iperf3 client to run");
  flags.Define("memcpy-bytes", "64MiB",
               "buffer per memcpy thread (0: skip the memcpy ceiling)");
  flags.Define("verify", "stamps",
               "stamps: check each block's first/last 8 bytes; full: every "
               "byte");
  flags.Define("timeout", "10s", "connect and reply timeout");
  flags.Define("json", "", "also write the results as JSON to this file");
}

absl::StatusOr<Options> ParseOptions(const tools::Flags& flags) {
  Options o;
  for (absl::string_view s :
       absl::StrSplit(flags.Get("block-sizes"), ',', absl::SkipEmpty())) {
    MESHPOOL_ASSIGN_OR_RETURN(uint64_t b, ParseSize(s));
    if (b < kMinBlockBytes || b > kMaxBlockBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("--block-sizes: ", s, " is outside [16 bytes, 64MiB]"));
    }
    o.block_sizes.push_back(b);
  }
  MESHPOOL_ASSIGN_OR_RETURN(int64_t threads, flags.GetInt("threads"));
  MESHPOOL_ASSIGN_OR_RETURN(int64_t batch, flags.GetInt("batch"));
  MESHPOOL_ASSIGN_OR_RETURN(o.seconds, flags.GetDouble("seconds"));
  MESHPOOL_ASSIGN_OR_RETURN(o.working_set, flags.GetSize("working-set"));
  MESHPOOL_ASSIGN_OR_RETURN(o.memcpy_bytes, flags.GetSize("memcpy-bytes"));
  MESHPOOL_ASSIGN_OR_RETURN(o.timeout, flags.GetDuration("timeout"));
  if (o.block_sizes.empty() || threads < 1 || threads > kMaxThreads ||
      batch < 1 || batch > kMaxBatch || !(o.seconds > 0) ||
      o.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "need --block-sizes, 1 <= --threads <= ", kMaxThreads,
        ", 1 <= --batch <= ", kMaxBatch, ", --seconds > 0, --timeout > 0"));
  }
  o.threads = static_cast<int>(threads);
  o.batch = static_cast<int>(batch);
  for (absl::string_view s :
       absl::StrSplit(flags.Get("systems"), ',', absl::SkipEmpty())) {
    if (s != "redis" && s != "memcached" && s != "meshpool" &&
        s != "meshpool-shm") {
      return absl::InvalidArgumentError(
          absl::StrCat("--systems: unknown '", s,
                       "' (redis, memcached, meshpool, meshpool-shm)"));
    }
    o.systems.emplace_back(s);
  }
  if (o.systems.empty()) return absl::InvalidArgumentError("--systems empty");
  o.redis = flags.Get("redis");
  o.memcached = flags.Get("memcached");
  o.iperf3 = flags.Get("iperf3");
  o.iperf3_binary = flags.Get("iperf3-binary");
  if (std::find(o.systems.begin(), o.systems.end(), "meshpool") !=
      o.systems.end()) {
    MESHPOOL_ASSIGN_OR_RETURN(o.coordinator, tools::CoordinatorAddress(flags));
  }
  o.shm_coordinator = flags.Get("shm-coordinator");
  if (std::find(o.systems.begin(), o.systems.end(), "meshpool-shm") !=
          o.systems.end() &&
      o.shm_coordinator.empty()) {
    return absl::InvalidArgumentError(
        "system meshpool-shm needs --shm-coordinator");
  }
  const std::string verify = flags.Get("verify");
  if (verify != "stamps" && verify != "full") {
    return absl::InvalidArgumentError("--verify is stamps or full");
  }
  o.verify_full = verify == "full";
  o.json = flags.Get("json");
  return o;
}

// Page-aligned anonymous memory, faulted in; unmapped when destroyed.
class PageBuffer {
 public:
  static absl::StatusOr<PageBuffer> Create(size_t bytes) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      return ErrnoToStatus(errno, absl::StrCat("mmap of ", FormatSize(bytes),
                                               " of client buffers"));
    }
    // Faulted in before timing starts (a write per page, on every OS).
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    for (size_t off = 0; off < bytes; off += page) {
      static_cast<volatile char*>(p)[off] = 0;
    }
    return PageBuffer(static_cast<char*>(p), bytes);
  }
  PageBuffer(PageBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)),
        size_(std::exchange(o.size_, 0)) {}
  PageBuffer& operator=(PageBuffer&&) = delete;
  ~PageBuffer() {
    if (data_ != nullptr) ::munmap(data_, size_);
  }
  absl::Span<char> span() const { return {data_, size_}; }

 private:
  PageBuffer(char* data, size_t size) : data_(data), size_(size) {}
  char* data_;
  size_t size_;
};

// One thread's buffers and keys for one block size.
struct ThreadState {
  PageBuffer put, get;
  std::vector<std::string> keys;  // ring slot s, index i: keys[s*batch + i]
};

// The workload of one block size.
struct Plan {
  uint64_t block = 0;
  size_t batch = 0;
  uint64_t ring = 0;   // key sets per thread
  uint64_t nonce = 0;  // differs per run, so stale values never verify
  bool verify_full = false;
};

uint64_t Mix(uint64_t x) {  // splitmix64's finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t KeyId(int thread, uint64_t slot, size_t i) {
  return (uint64_t(thread) << 40) | (slot << 20) | i;
}

void StampBlock(char* b, const Plan& p, uint64_t key_id, uint64_t round) {
  const uint64_t head = Mix(p.nonce ^ key_id);
  const uint64_t tail = Mix(head + round);
  std::memcpy(b, &head, 8);
  std::memcpy(b + p.block - 8, &tail, 8);
}

// Every GET result: its length, then its stamps (or every byte).
absl::Status CheckBlock(absl::string_view system, absl::string_view key,
                        size_t length, const char* got, const char* want,
                        const Plan& p) {
  if (length != p.block) {
    return absl::DataLossError(absl::StrCat(system, ": GET ", key, " returned ",
                                            length, " bytes, expected ",
                                            p.block));
  }
  const bool ok = p.verify_full ? std::memcmp(got, want, p.block) == 0
                                : std::memcmp(got, want, 8) == 0 &&
                                      std::memcmp(got + p.block - 8,
                                                  want + p.block - 8, 8) == 0;
  if (!ok) {
    return absl::DataLossError(
        absl::StrCat(system, ": GET ", key, " returned wrong bytes (",
                     p.verify_full ? "full compare" : "key/round stamps", ")"));
  }
  return absl::OkStatus();
}

// One thread's view of the current round: which keys, where their values
// come from and go to (reused round after round).
struct RoundIo {
  std::vector<absl::string_view> keys, values;
  std::vector<absl::Span<char>> outs;
  std::vector<size_t> lengths;
};

// Stamps this round's blocks in the put buffer and points `io` at them.
void PrepareRound(ThreadState& st, int thread, const Plan& p, uint64_t round,
                  RoundIo& io) {
  const uint64_t slot = round % p.ring;
  io.keys.resize(p.batch);
  io.values.resize(p.batch);
  io.outs.resize(p.batch);
  for (size_t i = 0; i < p.batch; ++i) {
    char* b = st.put.span().data() + i * p.block;
    StampBlock(b, p, KeyId(thread, slot, i), round);
    io.keys[i] = st.keys[slot * p.batch + i];
    io.values[i] = absl::string_view(b, p.block);
    io.outs[i] = st.get.span().subspan(i * p.block, p.block);
  }
}

absl::Status CheckRound(absl::string_view system, const Plan& p,
                        const RoundIo& io) {
  for (size_t i = 0; i < p.batch; ++i) {
    MESHPOOL_RETURN_IF_ERROR(CheckBlock(system, io.keys[i], io.lengths[i],
                                        io.outs[i].data(), io.values[i].data(),
                                        p));
  }
  return absl::OkStatus();
}

// The timed rounds, run in lockstep: every thread PUTs its batch, all wait,
// every thread GETs, all wait, every thread checks its GETs (untimed), all
// wait. A phase lasts from the barrier that opens it to the one that
// closes it, so a rate is what all threads together move while doing that
// operation. Barrier completions run on one thread at a time.
class Lockstep {
 public:
  Lockstep(size_t threads, double seconds)
      : seconds_(seconds),
        barrier_(static_cast<ptrdiff_t>(threads), Completion{this}) {}
  // Opens a round; false when the time is up or a thread failed.
  bool StartRound() {
    barrier_.arrive_and_wait();
    return !stop_;
  }
  void EndPut() { barrier_.arrive_and_wait(); }
  void EndGet() { barrier_.arrive_and_wait(); }
  // A failing thread leaves: the others stop at the next round.
  void Fail() {
    failed_ = true;
    barrier_.arrive_and_drop();
  }
  uint64_t rounds() const { return rounds_; }
  double put_s() const { return put_ns_ / 1e9; }
  double get_s() const { return get_ns_ / 1e9; }
  double wall_s() const {
    return std::chrono::duration<double>(last_ - first_).count();
  }

 private:
  struct Completion {
    Lockstep* self;
    void operator()() noexcept { self->Step(); }
  };
  // Barriers come in threes: round start, put done, get done.
  void Step() noexcept {
    const Clock::time_point now = Clock::now();
    switch (step_++ % 3) {
      case 0:
        if (step_ == 1) {
          first_ = now;
          deadline_ = now + std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double>(seconds_));
        }
        stop_ = failed_ || now >= deadline_;
        break;
      case 1:
        put_ns_ += (now - last_).count();
        break;
      case 2:
        get_ns_ += (now - last_).count();
        ++rounds_;
        break;
    }
    last_ = now;
  }

  const double seconds_;
  std::atomic<bool> failed_{false};
  // Written only by Step (under the barrier), read after it releases.
  uint64_t step_ = 0, rounds_ = 0;
  int64_t put_ns_ = 0, get_ns_ = 0;
  bool stop_ = false;
  Clock::time_point first_, last_, deadline_;
  std::barrier<Completion> barrier_;
};

static_assert(std::is_same_v<Clock::duration::period, std::nano>,
              "Lockstep counts nanoseconds");

// One thread of Measure: fills its ring (untimed), then runs the lockstep
// rounds. Returns the first failure.
absl::Status RunThread(absl::string_view system, KvSession& session,
                       ThreadState& st, int thread, const Plan& p,
                       Lockstep& lock) {
  RoundIo io;
  uint64_t round = 1;
  absl::Status s = session.Attach(st.put.span(), st.get.span());
  for (; s.ok() && round <= p.ring; ++round) {
    PrepareRound(st, thread, p, round, io);
    s = session.Put(io.keys, io.values);
    if (s.ok()) s = session.Get(io.keys, io.outs, io.lengths);
    if (s.ok()) s = CheckRound(system, p, io);
  }
  if (!s.ok()) {
    lock.Fail();
    return s;
  }
  while (lock.StartRound()) {
    PrepareRound(st, thread, p, round++, io);
    s = session.Put(io.keys, io.values);
    if (!s.ok()) break;
    lock.EndPut();
    s = session.Get(io.keys, io.outs, io.lengths);
    if (!s.ok()) break;
    lock.EndGet();
    s = CheckRound(system, p, io);
    if (!s.ok()) break;
  }
  if (!s.ok()) {
    lock.Fail();
    return s;
  }
  // Sweep: every key of the ring must still hold what its last round
  // stored. A store that evicted (or lost) an older key fails here, though
  // each round only reads back the keys it just wrote.
  const uint64_t last = round - 1;  // >= p.ring: the warm-up wrote them all
  for (uint64_t slot = 0; s.ok() && slot < p.ring; ++slot) {
    const uint64_t r = last - (last % p.ring + p.ring - slot) % p.ring;
    PrepareRound(st, thread, p, r, io);  // re-stamps what round r stored
    s = session.Get(io.keys, io.outs, io.lengths);
    if (s.ok()) s = CheckRound(system, p, io);
  }
  return s;
}

// Runs `sessions` (one per thread) through the lockstep rounds for
// `seconds` and returns the rates.
absl::StatusOr<Row> Measure(const std::string& system,
                            std::vector<std::unique_ptr<KvSession>>& sessions,
                            std::vector<ThreadState>& states, const Plan& p,
                            double seconds) {
  const size_t n = states.size();
  Lockstep lock(n, seconds);
  std::vector<absl::Status> status(n);
  std::vector<std::thread> workers;
  for (size_t t = 0; t < n; ++t) {
    workers.emplace_back([&, t] {
      status[t] = RunThread(system, *sessions[t], states[t],
                            static_cast<int>(t), p, lock);
    });
  }
  for (std::thread& w : workers) w.join();
  for (size_t t = 0; t < n; ++t) {
    if (!status[t].ok()) {
      return absl::Status(
          status[t].code(),
          absl::StrCat(system, ", block ", FormatSize(p.block), ", thread ", t,
                       ": ", status[t].message()));
    }
  }
  Row row;
  row.block = p.block;
  row.system = system;
  row.wall_s = lock.wall_s();
  row.rounds = lock.rounds() * n;
  const double blocks = static_cast<double>(row.rounds * p.batch);
  row.put_blk_s = lock.put_s() > 0 ? blocks / lock.put_s() : 0;
  row.get_blk_s = lock.get_s() > 0 ? blocks / lock.get_s() : 0;
  row.put_gbs = row.put_blk_s * p.block / 1e9;
  row.get_gbs = row.get_blk_s * p.block / 1e9;
  return row;
}

// Buffers and keys of every thread for one block size.
absl::StatusOr<std::vector<ThreadState>> MakeStates(const Plan& p,
                                                    int threads) {
  std::vector<ThreadState> states;
  for (int t = 0; t < threads; ++t) {
    MESHPOOL_ASSIGN_OR_RETURN(PageBuffer put,
                              PageBuffer::Create(p.batch * p.block));
    MESHPOOL_ASSIGN_OR_RETURN(PageBuffer get,
                              PageBuffer::Create(p.batch * p.block));
    // Bytes between the stamps: varied, fixed for the run.
    uint64_t x = Mix(p.nonce + t);
    absl::Span<char> s = put.span();
    for (size_t i = 0; i + 8 <= s.size(); i += 8) {
      x = Mix(x + i);
      std::memcpy(s.data() + i, &x, 8);
    }
    ThreadState st{std::move(put), std::move(get), {}};
    st.keys.reserve(p.ring * p.batch);
    for (uint64_t slot = 0; slot < p.ring; ++slot) {
      for (size_t i = 0; i < p.batch; ++i) {
        st.keys.push_back(
            absl::StrCat("kvc:", p.block, ":", t, ":", slot, ":", i));
      }
    }
    states.push_back(std::move(st));
  }
  return states;
}

absl::Status Run(const Options& o, Report& report) {
  report.threads = o.threads;
  report.batch = o.batch;
  report.seconds = o.seconds;
  report.verify = o.verify_full ? "full" : "stamps";
  // Open every system first, so a missing server fails before any timing.
  std::vector<std::unique_ptr<KvSystem>> systems;
  for (const std::string& name : o.systems) {
    absl::StatusOr<std::unique_ptr<KvSystem>> s =
        name == "redis"       ? OpenRedis(o.redis, o.timeout)
        : name == "memcached" ? OpenMemcached(o.memcached, o.timeout)
        : name == "meshpool"  ? OpenMeshpool(name, o.coordinator, o.timeout)
                             : OpenMeshpool(name, o.shm_coordinator, o.timeout);
    MESHPOOL_RETURN_IF_ERROR(s.status());
    report.systems.push_back((*s)->description());
    systems.push_back(*std::move(s));
  }
  if (!o.iperf3.empty()) {
    MESHPOOL_ASSIGN_OR_RETURN(
        report.iperf3_bytes_s,
        MeasureIperf3(o.iperf3_binary, o.iperf3, o.threads, o.seconds));
  }
  if (o.memcpy_bytes > 0) {
    MESHPOOL_ASSIGN_OR_RETURN(
        report.memcpy_bytes_s,
        MeasureMemcpy(o.threads, o.memcpy_bytes, o.seconds));
    for (uint64_t block : o.block_sizes) {
      MESHPOOL_ASSIGN_OR_RETURN(
          report.copy_digest_bytes_s[block],
          MeasureCopyAndDigest(o.threads, std::max(o.memcpy_bytes, block),
                               block, o.seconds));
    }
  }
  PrintHeader(report, stdout);
  // Sessions go before their systems (KvSystem's contract).
  std::vector<std::vector<std::unique_ptr<KvSession>>> sessions(systems.size());
  for (size_t s = 0; s < systems.size(); ++s) {
    for (int t = 0; t < o.threads; ++t) {
      MESHPOOL_ASSIGN_OR_RETURN(std::unique_ptr<KvSession> session,
                                systems[s]->OpenSession());
      sessions[s].push_back(std::move(session));
    }
  }
  const uint64_t nonce =
      Mix(static_cast<uint64_t>(Clock::now().time_since_epoch().count()));
  for (uint64_t block : o.block_sizes) {
    Plan p;
    p.block = block;
    p.batch = static_cast<size_t>(o.batch);
    p.nonce = nonce;
    p.verify_full = o.verify_full;
    const uint64_t per_slot = uint64_t(o.threads) * p.batch * block;
    p.ring = std::clamp(o.working_set / per_slot, kMinRingSlots, kMaxRingSlots);
    MESHPOOL_ASSIGN_OR_RETURN(std::vector<ThreadState> states,
                              MakeStates(p, o.threads));
    PrintBlockStart(block, p.ring, p.ring * per_slot, stdout);
    for (size_t s = 0; s < systems.size(); ++s) {
      MESHPOOL_ASSIGN_OR_RETURN(
          Row row,
          Measure(systems[s]->name(), sessions[s], states, p, o.seconds));
      PrintRow(row, stdout);
      report.rows.push_back(std::move(row));
    }
    PrintRatios(report, block, stdout);
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace meshpool::bench

int main(int argc, char** argv) {
  // As the meshpool binary does (tools/main.cc): no per-Mutex cycle check.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  meshpool::tools::Flags flags(
      "kv_compare [flags]",
      "The same batched PUT/GET workload against redis, memcached and a "
      "meshpool cluster, next to iperf3 loopback and memcpy ceilings "
      "measured in the same run (bench/kv_compare.sh starts the servers).");
  meshpool::bench::DefineFlags(flags);
  absl::Status parsed = flags.Parse(argc - 1, argv + 1);
  if (!parsed.ok() || !flags.positional().empty()) {
    absl::FPrintF(stderr, "kv_compare: %s\n\n%s",
                  parsed.ok() ? "unexpected arguments" : parsed.message(),
                  flags.Help());
    return 2;
  }
  if (flags.help_requested()) {
    absl::PrintF("%s", flags.Help());
    return 0;
  }
  absl::StatusOr<meshpool::bench::Options> options =
      meshpool::bench::ParseOptions(flags);
  if (!options.ok()) {
    absl::FPrintF(stderr, "kv_compare: %s\n", options.status().message());
    return 2;
  }
  meshpool::bench::Report report;
  report.command = meshpool::bench::QuoteCommand(argc, argv);
  absl::PrintF("%s\n", report.command);
  std::fflush(stdout);
  absl::Status s = meshpool::bench::Run(*options, report);
  if (!options->json.empty()) {
    absl::Status w = meshpool::bench::WriteJson(report, s, options->json);
    if (!w.ok()) absl::FPrintF(stderr, "kv_compare: %s\n", w.message());
  }
  if (!s.ok()) {
    std::fflush(stdout);
    absl::FPrintF(stderr, "kv_compare: FAILED: %s\n", s.ToString());
    return 1;
  }
  return 0;
}
