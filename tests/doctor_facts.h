// Fabricated `meshpool doctor` facts and report helpers shared by the
// doctor tests (portable, Linux and macOS): a Soft-RoCE host that can serve
// and one with nothing RDMA, and Check, which diagnoses while asserting
// what every report must satisfy.
#ifndef MESHPOOL_TESTS_DOCTOR_FACTS_H_
#define MESHPOOL_TESTS_DOCTOR_FACTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rdma/devices.h"
#include "tools/doctor.h"

namespace meshpool::testing {

// A pool of the default size registered on `device`.
inline tools::RegistrationFacts Registered(const std::string& device) {
  tools::RegistrationFacts reg;
  reg.device = device;
  reg.ok = true;
  reg.bytes = tools::kDefaultDoctorPoolBytes;
  reg.seconds = 0.125;
  reg.page_kind = "transparent huge pages";
  return reg;
}

// The findings of `report` with `severity`, in order.
inline std::vector<tools::Finding> WithSeverity(
    const tools::DoctorReport& report, tools::Severity severity) {
  std::vector<tools::Finding> out;
  for (const tools::Finding& f : report.findings) {
    if (f.severity == severity) out.push_back(f);
  }
  return out;
}

inline constexpr uint64_t kDoctorMiB = uint64_t{1} << 20;

// A Soft-RoCE device as a VM shows it: rxe0 on eth0, GID 1 = RoCE v2 IPv4.
inline rdma::RdmaDeviceInfo Rxe0() {
  rdma::RdmaDeviceInfo device;
  device.name = "rxe0";
  device.transport = "InfiniBand";
  device.max_mr_size = ~0ull;
  device.max_qp_rd_atom = 128;
  device.max_qp_wr = 1048576;
  device.max_inline_data = 256;
  device.atomics = true;
  rdma::RdmaPortInfo port;
  port.port = 1;
  port.state = "ACTIVE";
  port.active = true;
  port.link_layer = "Ethernet";
  port.active_mtu = 1024;
  port.gids = {{0, "fe80::5054:ff:fe12:3456", "RoCE v2", "eth0"},
               {1, "::ffff:10.0.2.15", "RoCE v2", "eth0"}};
  device.ports = {port};
  return device;
}

// A host that can serve on rxe0: unlimited memlock, enough huge pages.
inline tools::HostFacts HealthyHost() {
  tools::HostFacts facts;
  facts.devices = {Rxe0()};
  facts.memlock = {true, tools::kUnlimited, tools::kUnlimited, false};
  facts.hugepages = {true, 256, 256, 2 * kDoctorMiB, "madvise", "advise"};
  facts.kernel.sysfs_devices = {"rxe0"};
  facts.kernel.uverbs = {"uverbs0"};
  facts.kernel.rdma_rxe_loaded = true;
  facts.kernel.ib_uverbs_loaded = true;
  facts.registrations = {Registered("rxe0")};
  return facts;
}

// A host with nothing RDMA at all (like the build machines).
inline tools::HostFacts BareHost() {
  tools::HostFacts facts = HealthyHost();
  facts.devices.clear();
  facts.kernel = {};
  facts.registrations.clear();
  return facts;
}

// Diagnoses `facts`, checking what every report must satisfy: findings are
// one line each, errors carry a fix, the verdict matches the exit status.
inline tools::DoctorReport Check(const tools::HostFacts& facts,
                                 const tools::DoctorOptions& options = {}) {
  tools::DoctorReport report = tools::Diagnose(facts, options);
  for (const tools::Finding& f : report.findings) {
    EXPECT_FALSE(absl::StrContains(f.what, "\n")) << f.what;
    EXPECT_FALSE(absl::StrContains(f.fix, "\n")) << f.fix;
    if (f.severity == tools::Severity::kError) {
      EXPECT_FALSE(f.fix.empty()) << f.what;
    }
  }
  EXPECT_EQ(report.can_serve, report.exit_code() == 0);
  const std::string what =
      options.thunderbolt ? "uc (thunderbolt profile)" : "RDMA";
  EXPECT_TRUE(absl::StartsWith(
      report.verdict,
      absl::StrCat("doctor: this host ", report.can_serve ? "can" : "cannot",
                   " serve ", what)))
      << report.verdict;
  return report;
}

// The one error finding of `report` (fails the test if not exactly one).
inline tools::Finding OnlyError(const tools::DoctorReport& report) {
  std::vector<tools::Finding> errors =
      WithSeverity(report, tools::Severity::kError);
  EXPECT_EQ(errors.size(), 1u) << tools::FormatText({}, report, {});
  return errors.empty() ? tools::Finding{} : errors.front();
}

}  // namespace meshpool::testing

#endif  // MESHPOOL_TESTS_DOCTOR_FACTS_H_
