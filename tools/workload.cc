#include "tools/workload.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/common.h"

namespace meshpool::tools {
namespace {

std::string KeyName(uint64_t id) { return absl::StrCat("bench:", id); }

// Fills `value` so that it names its key and version and can be checked.
void FillValue(std::string& value, uint64_t id, uint64_t version) {
  std::memcpy(value.data(), &id, 8);
  std::memcpy(value.data() + 8, &version, 8);
  uint64_t x = id * 0x9e3779b97f4a7c15ull ^ version;
  for (size_t i = 16; i < value.size(); ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    value[i] = static_cast<char>(x >> 56);
  }
}

bool ValueIsIntact(absl::string_view value, uint64_t id, size_t expected) {
  if (value.size() != expected) return false;
  uint64_t got_id, version;
  std::memcpy(&got_id, value.data(), 8);
  std::memcpy(&version, value.data() + 8, 8);
  if (got_id != id) return false;
  std::string want(expected, '\0');
  FillValue(want, id, version);
  return value == want;
}

struct ThreadResult {
  WorkloadResult r;
  std::vector<double> latencies_us;
};

void Record(ThreadResult& t, const absl::Status& s) {
  if (s.ok()) return;
  if (s.code() == absl::StatusCode::kNotFound) {
    ++t.r.misses;
    return;
  }
  if (t.r.errors++ == 0) t.r.first_error = s.ToString();
}

void RunThread(Client& client, const WorkloadOptions& o, int thread,
               absl::Time end, ThreadResult& t) {
  std::mt19937_64 rng(o.seed * 1000003 + thread);
  std::uniform_int_distribution<uint64_t> pick(0, o.keys - 1);
  std::uniform_real_distribution<double> coin(0, 1);
  size_t batch = static_cast<size_t>(o.batch);
  std::vector<std::string> names(batch), values(batch, std::string(o.value_bytes, '\0'));
  std::vector<std::string> buffers(batch, std::string(o.value_bytes, '\0'));
  std::vector<uint64_t> ids(batch);
  uint64_t version = static_cast<uint64_t>(thread) << 40;
  // Registered like an engine's buffers, so large values move zero-copy.
  std::vector<std::unique_ptr<Client::RegisteredBuffer>> registered;
  if (o.register_buffers) {
    for (std::vector<std::string>* set : {&values, &buffers}) {
      for (std::string& b : *set) {
        auto r = client.RegisterBuffer(b.data(), b.size());
        if (r.ok()) registered.push_back(*std::move(r));
      }
    }
  }
  while (absl::Now() < end) {
    std::vector<absl::string_view> keys;
    for (size_t i = 0; i < batch; ++i) {
      ids[i] = pick(rng);
      names[i] = KeyName(ids[i]);
      keys.push_back(names[i]);
    }
    bool read = coin(rng) < o.read_fraction;
    absl::Time start = absl::Now();
    if (read) {
      std::vector<absl::Span<char>> outs;
      for (auto& b : buffers) outs.push_back(absl::MakeSpan(b));
      // One key: the single-key call, as a caller with one key would.
      auto results = batch == 1
                         ? std::vector<absl::StatusOr<size_t>>{client.Get(
                               keys[0], outs[0])}
                         : client.BatchGet(keys, outs);
      t.latencies_us.push_back(absl::ToDoubleMicroseconds(absl::Now() - start));
      for (size_t i = 0; i < batch; ++i) {
        Record(t, results[i].status());
        if (results[i].ok() &&
            !ValueIsIntact(absl::string_view(buffers[i].data(), *results[i]),
                           ids[i], o.value_bytes)) {
          ++t.r.corrupt;
        }
      }
      t.r.get_keys += batch;
    } else {
      std::vector<absl::string_view> vals;
      for (size_t i = 0; i < batch; ++i) {
        FillValue(values[i], ids[i], ++version);
        vals.push_back(values[i]);
      }
      auto results = batch == 1
                         ? std::vector<absl::Status>{client.Put(keys[0], vals[0])}
                         : client.BatchPut(keys, vals);
      t.latencies_us.push_back(absl::ToDoubleMicroseconds(absl::Now() - start));
      for (const absl::Status& s : results) Record(t, s);
      t.r.put_keys += batch;
    }
  }
}

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  size_t i = static_cast<size_t>(p * (sorted.size() - 1));
  return sorted[i];
}

}  // namespace

absl::StatusOr<WorkloadResult> RunWorkload(Client& client,
                                           const WorkloadOptions& o) {
  if (o.value_bytes < kMinWorkloadValueBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--value-size must be at least ", kMinWorkloadValueBytes,
        " bytes (values carry their key id and version)"));
  }
  if (o.threads < 1 || o.batch < 1 || o.keys < 1 || o.read_fraction < 0 ||
      o.read_fraction > 1) {
    return absl::InvalidArgumentError(
        "need --threads >= 1, --batch >= 1, --keys >= 1 and "
        "0 <= --read-fraction <= 1");
  }
  // Write every key once so GETs hit.
  std::string value(o.value_bytes, '\0');
  for (uint64_t id = 0; id < o.keys; ++id) {
    FillValue(value, id, 0);
    absl::Status s = client.Put(KeyName(id), value);
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("preloading key ", id, ": ",
                                                 s.message()));
    }
  }
  std::vector<ThreadResult> results(o.threads);
  std::vector<std::thread> threads;
  absl::Time start = absl::Now();
  absl::Time end = start + o.duration;
  for (int i = 0; i < o.threads; ++i) {
    threads.emplace_back(RunThread, std::ref(client), std::cref(o), i, end,
                         std::ref(results[i]));
  }
  for (auto& t : threads) t.join();
  WorkloadResult total;
  total.elapsed = absl::Now() - start;
  std::vector<double> latencies;
  for (ThreadResult& t : results) {
    total.get_keys += t.r.get_keys;
    total.put_keys += t.r.put_keys;
    total.misses += t.r.misses;
    total.errors += t.r.errors;
    total.corrupt += t.r.corrupt;
    if (total.first_error.empty()) total.first_error = t.r.first_error;
    latencies.insert(latencies.end(), t.latencies_us.begin(),
                     t.latencies_us.end());
  }
  std::sort(latencies.begin(), latencies.end());
  total.operations = latencies.size();
  total.p50_us = Percentile(latencies, 0.5);
  total.p99_us = Percentile(latencies, 0.99);
  total.p999_us = Percentile(latencies, 0.999);
  return total;
}

std::string FormatWorkload(const WorkloadOptions& o, const WorkloadResult& r) {
  double secs = absl::ToDoubleSeconds(r.elapsed);
  uint64_t keys = r.get_keys + r.put_keys;
  double gbps = keys * static_cast<double>(o.value_bytes) / secs / 1e9;
  std::string out = absl::StrFormat(
      "workload: %s values, %d threads, batch %d, %.0f%% reads, %d keys, "
      "%.1fs\n",
      FormatSize(o.value_bytes), o.threads, o.batch, o.read_fraction * 100,
      o.keys, secs);
  absl::StrAppendFormat(&out,
                        "  ops/s %.0f (keys/s %.0f: %.0f gets, %.0f puts)\n",
                        r.operations / secs, keys / secs, r.get_keys / secs,
                        r.put_keys / secs);
  absl::StrAppendFormat(&out, "  throughput %.3f GB/s\n", gbps);
  absl::StrAppendFormat(&out,
                        "  latency per op: p50 %.0fus  p99 %.0fus  p999 %.0fus\n",
                        r.p50_us, r.p99_us, r.p999_us);
  absl::StrAppendFormat(&out, "  misses %d  errors %d  corrupt values %d\n",
                        r.misses, r.errors, r.corrupt);
  if (!r.first_error.empty()) {
    absl::StrAppend(&out, "  first error: ", r.first_error, "\n");
  }
  return out;
}

}  // namespace meshpool::tools
