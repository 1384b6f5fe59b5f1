#include "bench/weights_bench_report.h"

#include <string>

#include "absl/strings/str_format.h"

namespace meshpool::bench {
namespace {

std::string Cpu(double seconds) {
  return seconds < 0 ? "-" : absl::StrFormat("%.2f", seconds);
}

void Row(std::FILE* out, const Phase& p, const std::string& ratio,
         const std::string& target) {
  absl::FPrintF(out, "%-24s %8.3f %9.2f %11s %10s  %-22s %s\n", p.name,
                p.gbps(), p.seconds, Cpu(p.client_cpu), Cpu(p.node_cpu), ratio,
                target);
}

void Compare(std::FILE* out, const Phase& p, const Phase& raw, double target) {
  const double ratio = raw.gbps() > 0 ? p.gbps() / raw.gbps() : 0;
  Row(out, p, absl::StrFormat("%.2f x %s", ratio, raw.name),
      absl::StrFormat(">= %.2f %s", target,
                      ratio >= target ? "met" : "MISSED"));
}

}  // namespace

void PrintReport(const Report& r, std::FILE* out) {
  absl::FPrintF(out, "\nmeshpool weights bench\n");
  for (const auto& [key, value] : r.params) {
    absl::FPrintF(out, "  %-14s %s\n", key, value);
  }
  absl::FPrintF(out, "\n%-24s %8s %9s %11s %10s  %-22s %s\n", "phase", "GB/s",
                "seconds", "client CPU", "nodes CPU", "ratio", "target");
  // Phases a failed run did not reach have no name and are left out.
  if (!r.raw_write.name.empty()) Row(out, r.raw_write, r.raw_write.detail, "");
  if (!r.raw_read.name.empty()) Row(out, r.raw_read, r.raw_read.detail, "");
  if (!r.load.name.empty()) Compare(out, r.load, r.raw_write, kLoadTarget);
  if (!r.read.name.empty()) Compare(out, r.read, r.raw_read, kReadTarget);
  if (!r.breakdown.empty()) {
    absl::FPrintF(out,
                  "breakdown (GB/s of payload; CPU seconds over the "
                  "phase):\n");
    for (const Phase& p : r.breakdown) Row(out, p, p.detail, "");
  }
  if (r.verified_tensors == 0) {
    absl::FPrintF(out, "NOT verified: the run failed before the check\n");
    return;
  }
  absl::FPrintF(out,
                "verified: %d tensors, %d bytes read back equal the generated "
                "ones (XXH3-64 per tensor)\n",
                r.verified_tensors, r.verified_bytes);
  absl::FPrintF(out, "(GB/s = 10^9 bytes/s; CPU = user + system seconds)\n");
}

}  // namespace meshpool::bench
