#include "bench/kv_compare_report.h"

#include <cerrno>
#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/common.h"
#include "common/json.h"

namespace meshpool::bench {
namespace {

const Row* FindRow(const Report& r, uint64_t block, const std::string& name) {
  for (const Row& row : r.rows) {
    if (row.block == block && row.system == name) return &row;
  }
  return nullptr;
}

std::string Number(std::optional<double> v) {
  return v.has_value() ? absl::StrFormat("%.6g", *v) : "null";
}

std::string Ratio(std::optional<double> v) {
  return v.has_value() ? absl::StrFormat("%.2f", *v) : "n/a";
}

}  // namespace

std::string QuoteCommand(int argc, char** argv) {
  std::vector<std::string> words;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    bool plain = !a.empty();
    for (char c : a) {
      plain = plain && (absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
                        std::string("_./:=,+-@%").find(c) != std::string::npos);
    }
    if (plain) {
      words.push_back(a);
      continue;
    }
    std::string q = "'";
    for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    words.push_back(q + "'");
  }
  return absl::StrJoin(words, " ");
}

std::vector<std::pair<std::string, std::optional<double>>> Ratios(
    const Report& report, uint64_t block, bool get) {
  std::vector<std::pair<std::string, std::optional<double>>> out;
  auto rate = [get](const Row* r) -> std::optional<double> {
    if (r == nullptr) return std::nullopt;
    return get ? r->get_gbs : r->put_gbs;
  };
  auto over = [&](const Row* mesh,
                  std::optional<double> base) -> std::optional<double> {
    std::optional<double> m = rate(mesh);
    if (!m.has_value() || !base.has_value() || !(*base > 0))
      return std::nullopt;
    return *m / *base;
  };
  auto gb = [](std::optional<double> bytes_s) -> std::optional<double> {
    if (!bytes_s.has_value()) return std::nullopt;
    return *bytes_s / 1e9;
  };
  // Each meshpool variant against the same references: over TCP the
  // network ceiling is iperf3, over shared memory it is memcpy.
  for (const char* name : {"meshpool", "meshpool-shm"}) {
    const Row* mesh = FindRow(report, block, name);
    if (mesh == nullptr) continue;
    out.emplace_back(absl::StrCat(name, "/redis"),
                     over(mesh, rate(FindRow(report, block, "redis"))));
    out.emplace_back(absl::StrCat(name, "/memcached"),
                     over(mesh, rate(FindRow(report, block, "memcached"))));
    out.emplace_back(
        absl::StrCat(name, "/iperf3(", report.threads, " streams)"),
        over(mesh, gb(report.iperf3_bytes_s)));
    out.emplace_back(
        absl::StrCat(name, "/memcpy(", report.threads, " threads)"),
        over(mesh, gb(report.memcpy_bytes_s)));
    if (auto it = report.copy_digest_bytes_s.find(block);
        it != report.copy_digest_bytes_s.end() &&
        std::string(name) == "meshpool-shm") {
      out.emplace_back(
          absl::StrCat(name, "/memcpy+xxh3(", report.threads, " threads)"),
          over(mesh, gb(it->second)));
    }
  }
  return out;
}

void PrintHeader(const Report& r, FILE* out) {
  absl::FPrintF(out, "systems: %s\n", absl::StrJoin(r.systems, "; "));
  absl::FPrintF(out,
                "threads %d (= connections, iperf3 streams, memcpy threads), "
                "batch %d, %.3g s per measurement, GET check: %s (and a sweep "
                "of every key after the timed rounds)\n",
                r.threads, r.batch, r.seconds, r.verify);
  auto gbs = [](std::optional<double> v) {
    return v.has_value() ? absl::StrFormat("%.2f GB/s", *v / 1e9)
                         : std::string("not measured");
  };
  absl::FPrintF(out,
                "ceilings: iperf3 loopback, %d streams: %s; memcpy, %d "
                "threads: %s\n",
                r.threads, gbs(r.iperf3_bytes_s), r.threads,
                gbs(r.memcpy_bytes_s));
  for (const auto& [block, rate] : r.copy_digest_bytes_s) {
    absl::FPrintF(out,
                  "ceiling: memcpy + XXH3 of each %s block, %d threads: %s\n",
                  FormatSize(block), r.threads, gbs(rate));
  }
  std::fflush(out);
}

void PrintBlockStart(uint64_t block, uint64_t ring, uint64_t working_set,
                     FILE* out) {
  absl::FPrintF(out,
                "\nblock %s: ring of %d key sets per thread, working set %s "
                "per system\n",
                FormatSize(block), ring, FormatSize(working_set));
  absl::FPrintF(out, "  %-8s %-10s %11s %9s %11s %9s %8s\n", "block", "system",
                "put blk/s", "put GB/s", "get blk/s", "get GB/s", "rounds");
  std::fflush(out);
}

void PrintRow(const Row& row, FILE* out) {
  absl::FPrintF(out, "  %-8s %-10s %11.0f %9.3f %11.0f %9.3f %8d\n",
                FormatSize(row.block), row.system, row.put_blk_s, row.put_gbs,
                row.get_blk_s, row.get_gbs, row.rounds);
  std::fflush(out);
}

void PrintRatios(const Report& r, uint64_t block, FILE* out) {
  for (bool get : {true, false}) {
    std::vector<std::string> parts;
    for (const auto& [name, v] : Ratios(r, block, get)) {
      parts.push_back(absl::StrCat(name, " ", Ratio(v)));
    }
    absl::FPrintF(out, "  ratios %s (%s GB/s): %s\n", FormatSize(block),
                  get ? "get" : "put", absl::StrJoin(parts, "  "));
  }
  std::fflush(out);
}

absl::Status WriteJson(const Report& r, const absl::Status& outcome,
                       const std::string& path) {
  std::string j = "{\n";
  absl::StrAppend(&j, "  \"command\": ", JsonQuote(r.command), ",\n");
  absl::StrAppend(&j, "  \"ok\": ", outcome.ok() ? "true" : "false", ",\n");
  absl::StrAppend(&j, "  \"error\": ",
                  outcome.ok() ? "null" : JsonQuote(outcome.ToString()), ",\n");
  absl::StrAppend(&j, "  \"threads\": ", r.threads, ", \"batch\": ", r.batch,
                  ", \"seconds\": ", Number(r.seconds),
                  ", \"verify\": ", JsonQuote(r.verify), ",\n");
  std::vector<std::string> systems;
  for (const std::string& s : r.systems) systems.push_back(JsonQuote(s));
  absl::StrAppend(&j, "  \"systems\": [", absl::StrJoin(systems, ", "), "],\n");
  auto gb = [](std::optional<double> v) {
    return Number(v.has_value() ? std::optional<double>(*v / 1e9) : v);
  };
  absl::StrAppend(&j, "  \"ceilings\": {\"iperf3_streams\": ", r.threads,
                  ", \"iperf3_gb_s\": ", gb(r.iperf3_bytes_s),
                  ", \"memcpy_threads\": ", r.threads,
                  ", \"memcpy_gb_s\": ", gb(r.memcpy_bytes_s));
  std::vector<std::string> copy_digest;
  for (const auto& [block, rate] : r.copy_digest_bytes_s) {
    copy_digest.push_back(absl::StrFormat("{\"block_bytes\": %d, \"gb_s\": %s}",
                                          block, Number(rate / 1e9)));
  }
  absl::StrAppend(&j, ", \"memcpy_xxh3\": [", absl::StrJoin(copy_digest, ", "),
                  "]},\n");
  std::vector<std::string> rows, ratios;
  std::vector<uint64_t> blocks;
  for (const Row& row : r.rows) {
    rows.push_back(absl::StrFormat(
        "    {\"block_bytes\": %d, \"system\": %s, \"put_blocks_s\": %s, "
        "\"put_gb_s\": %s, \"get_blocks_s\": %s, \"get_gb_s\": %s, "
        "\"rounds\": %d, \"wall_s\": %s}",
        row.block, JsonQuote(row.system), Number(row.put_blk_s),
        Number(row.put_gbs), Number(row.get_blk_s), Number(row.get_gbs),
        row.rounds, Number(row.wall_s)));
    if (blocks.empty() || blocks.back() != row.block) {
      blocks.push_back(row.block);
    }
  }
  for (uint64_t block : blocks) {
    for (bool get : {true, false}) {
      // Members after block_bytes and op; none when no meshpool row.
      std::string kv;
      for (const auto& [name, v] : Ratios(r, block, get)) {
        absl::StrAppend(&kv, ", ", JsonQuote(name), ": ", Number(v));
      }
      ratios.push_back(
          absl::StrFormat("    {\"block_bytes\": %d, \"op\": \"%s\"%s}", block,
                          get ? "get" : "put", kv));
    }
  }
  absl::StrAppend(&j, "  \"results\": [\n", absl::StrJoin(rows, ",\n"),
                  "\n  ],\n  \"ratios\": [\n", absl::StrJoin(ratios, ",\n"),
                  "\n  ]\n}\n");
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    return ErrnoToStatus(errno, absl::StrCat("open --json file ", path));
  }
  const bool wrote = std::fwrite(j.data(), 1, j.size(), f) == j.size();
  const int write_errno = errno;
  if (std::fclose(f) != 0 || !wrote) {
    return ErrnoToStatus(wrote ? errno : write_errno,
                         absl::StrCat("write --json file ", path));
  }
  return absl::OkStatus();
}

}  // namespace meshpool::bench
