// `meshpool doctor`: Diagnose and the formatting on fabricated host facts (no
// device needed): devices, ports, GIDs, profiles and registrations, on any
// platform. The Linux kernel's part (modules, /sys, /dev, memlock, huge
// pages), its parsers and the real binary on this host are in
// tools_doctor_test_linux.cc; a Mac's in tools_doctor_mac_test.cc.
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "rdma/devices.h"
#include "tests/doctor_facts.h"
#include "tools/doctor.h"

namespace meshpool::tools {
namespace {

using ::meshpool::testing::BareHost;
using ::meshpool::testing::Check;
using ::meshpool::testing::HealthyHost;
using ::meshpool::testing::kDoctorMiB;
using ::meshpool::testing::OnlyError;
using ::meshpool::testing::Registered;
using ::meshpool::testing::Rxe0;
using ::meshpool::testing::WithSeverity;

TEST(DoctorDiagnoseTest, HealthyRxe0ServesWithExitZeroAndNoFindings) {
  DoctorReport report = Check(HealthyHost());
  EXPECT_EQ(report.exit_code(), 0);
  EXPECT_EQ(report.serving_devices, std::vector<std::string>{"rxe0"});
  EXPECT_EQ(report.verdict, "doctor: this host can serve RDMA on rxe0");
  EXPECT_TRUE(report.findings.empty()) << FormatText(HealthyHost(), report, {});
}

TEST(DoctorDiagnoseTest, EthernetPortDownSaysIpLinkSetUp) {
  HostFacts facts = HealthyHost();
  facts.devices[0].ports[0].state = "DOWN";
  facts.devices[0].ports[0].active = false;
  facts.registrations.clear();  // gathering skips devices with no active port
  DoctorReport report = Check(facts);
  EXPECT_EQ(report.exit_code(), 1);
  Finding error = OnlyError(report);
  EXPECT_EQ(error.what, "rxe0 port 1 is DOWN (Ethernet on eth0)");
  EXPECT_EQ(error.fix, "`ip link set eth0 up`");
  EXPECT_EQ(report.verdict,
            "doctor: this host cannot serve RDMA: rxe0 port 1 is DOWN "
            "(Ethernet on eth0)");
}

TEST(DoctorDiagnoseTest, EthernetPortDownWithoutNetdevNamesAPlaceholder) {
  HostFacts facts = HealthyHost();
  facts.devices[0].ports[0].state = "DOWN";
  facts.devices[0].ports[0].active = false;
  facts.devices[0].ports[0].gids.clear();
  facts.registrations.clear();
  Finding error = OnlyError(Check(facts));
  EXPECT_TRUE(absl::StrContains(error.fix, "`ip link set <netdev> up`"))
      << error.fix;
}

rdma::RdmaDeviceInfo InfiniBandDevice(const std::string& state) {
  rdma::RdmaDeviceInfo device = Rxe0();
  device.name = "mlx5_0";
  device.ports[0].state = state;
  device.ports[0].active = state == "ACTIVE";
  device.ports[0].link_layer = "InfiniBand";
  device.ports[0].active_mtu = 4096;
  device.ports[0].gids = {{0, "fe80::248a:703:49:d4b0", "IB/RoCE v1", ""}};
  return device;
}

TEST(DoctorDiagnoseTest, InfiniBandPortInitSaysStartASubnetManager) {
  HostFacts facts = HealthyHost();
  facts.devices = {InfiniBandDevice("INIT")};
  facts.registrations.clear();
  DoctorReport report = Check(facts);
  EXPECT_EQ(report.exit_code(), 1);
  Finding error = OnlyError(report);
  EXPECT_EQ(error.what, "mlx5_0 port 1 is INIT (InfiniBand)");
  EXPECT_TRUE(absl::StrContains(error.fix, "`opensm`")) << error.fix;
}

TEST(DoctorDiagnoseTest, InfiniBandPortDownSaysCheckTheCable) {
  HostFacts facts = HealthyHost();
  facts.devices = {InfiniBandDevice("DOWN")};
  facts.registrations.clear();
  Finding error = OnlyError(Check(facts));
  EXPECT_EQ(error.what, "mlx5_0 port 1 is DOWN (InfiniBand)");
  EXPECT_TRUE(absl::StrContains(error.fix, "cable")) << error.fix;
  EXPECT_TRUE(absl::StrContains(error.fix, "`opensm`")) << error.fix;
}

TEST(DoctorDiagnoseTest, ActiveInfiniBandPortWithAnyGidServes) {
  HostFacts facts = HealthyHost();
  facts.devices = {InfiniBandDevice("ACTIVE")};
  facts.registrations = {Registered("mlx5_0")};
  DoctorReport report = Check(facts);
  EXPECT_EQ(report.exit_code(), 0);
  EXPECT_EQ(report.verdict, "doctor: this host can serve RDMA on mlx5_0");
}

TEST(DoctorDiagnoseTest, NoRoceV2Ipv4GidSaysIpAddrAdd) {
  HostFacts facts = HealthyHost();
  facts.devices[0].ports[0].gids.resize(1);  // only the link-local one
  DoctorReport report = Check(facts);
  EXPECT_EQ(report.exit_code(), 1);
  Finding error = OnlyError(report);
  EXPECT_EQ(error.what,
            "rxe0 port 1 has no RoCE v2 IPv4 GID (eth0 has no IPv4 address)");
  EXPECT_EQ(error.fix, "`ip addr add <addr>/<len> dev eth0`");
}

TEST(DoctorDiagnoseTest, RegistrationRefusedForAMissingGidIsNotRepeated) {
  HostFacts facts = HealthyHost();
  facts.devices[0].ports[0].gids.resize(1);
  facts.registrations[0].ok = false;
  facts.registrations[0].error =
      "opening the device: FAILED_PRECONDITION: rxe0 port 1 has no RoCE v2 "
      "GID with an IPv4 address";
  Finding error = OnlyError(Check(facts));
  EXPECT_TRUE(absl::StrContains(error.what, "no RoCE v2 IPv4 GID"));
}

TEST(DoctorDiagnoseTest, UsablePortWithoutARegistrationCannotServe) {
  HostFacts facts = HealthyHost();
  facts.registrations.clear();
  EXPECT_EQ(Check(facts).exit_code(), 1);
}

TEST(DoctorDiagnoseTest, RoceV1Ipv4GidIsNotEnough) {
  HostFacts facts = HealthyHost();
  facts.devices[0].ports[0].gids = {
      {1, "::ffff:10.0.2.15", "IB/RoCE v1", "eth0"}};
  EXPECT_EQ(Check(facts).exit_code(), 1);
}

TEST(DoctorDiagnoseTest, NoAtomicsCannotServe) {
  HostFacts facts = HealthyHost();
  facts.devices[0].atomics = false;
  DoctorReport report = Check(facts);
  EXPECT_EQ(report.exit_code(), 1);
  EXPECT_TRUE(absl::StrContains(OnlyError(report).what, "atomics"));
}

DoctorOptions ThunderboltProfile() {
  DoctorOptions options;
  options.thunderbolt = true;
  return options;
}

TEST(DoctorDiagnoseTest, ThunderboltProfileServesWithoutAtomics) {
  HostFacts facts = HealthyHost();
  facts.devices[0].atomics = false;
  facts.devices[0].uc_queue_pairs = true;
  DoctorReport report = Check(facts, ThunderboltProfile());
  EXPECT_EQ(report.exit_code(), 0) << FormatText(facts, report, {});
  EXPECT_EQ(report.verdict,
            "doctor: this host can serve uc (thunderbolt profile) on rxe0");
  // It says what the profile's budget means.
  std::vector<Finding> info = WithSeverity(report, Severity::kInfo);
  ASSERT_EQ(info.size(), 1u);
  EXPECT_TRUE(absl::StrContains(info[0].what, "at most 10 UC queue pairs"))
      << info[0].what;
}

TEST(DoctorDiagnoseTest, ThunderboltProfileWithoutUcQueuePairsSaysRdmaCtl) {
  HostFacts facts = HealthyHost();
  facts.devices[0].uc_queue_pairs = false;
  DoctorReport report = Check(facts, ThunderboltProfile());
  EXPECT_EQ(report.exit_code(), 1);
  Finding error = OnlyError(report);
  EXPECT_TRUE(absl::StrContains(error.what, "UC queue pair")) << error.what;
  EXPECT_TRUE(absl::StrContains(error.fix, "rdma_ctl enable")) << error.fix;
}

TEST(DoctorDiagnoseTest, ThunderboltProfileAcceptsALinkLocalGidOnly) {
  HostFacts facts = HealthyHost();
  facts.devices[0].uc_queue_pairs = true;
  facts.devices[0].ports[0].gids = {
      {0, "fe80::5054:ff:fe12:3456", "RoCE v2", "en2"}};
  EXPECT_EQ(Check(facts, ThunderboltProfile()).exit_code(), 0);
  // verbs RC keeps refusing it: its GID choice wants IPv4.
  EXPECT_EQ(Check(facts).exit_code(), 1);
}

TEST(DoctorDiagnoseTest, ThunderboltProfileRefusesShallowQueues) {
  HostFacts facts = HealthyHost();
  facts.devices[0].uc_queue_pairs = true;
  facts.devices[0].max_qp_wr = 16;
  Finding error = OnlyError(Check(facts, ThunderboltProfile()));
  EXPECT_TRUE(absl::StrContains(error.what, "work requests per queue pair"))
      << error.what;
}

TEST(DoctorDiagnoseTest, IwarpDeviceCannotServe) {
  HostFacts facts = HealthyHost();
  facts.devices[0].transport = "iWARP";
  DoctorReport report = Check(facts);
  EXPECT_EQ(report.exit_code(), 1);
  EXPECT_TRUE(absl::StrContains(OnlyError(report).what, "rdma_cm"));
}

TEST(DoctorDiagnoseTest, RegistrationFailureIsAnErrorWithTheCause) {
  HostFacts facts = HealthyHost();
  facts.registrations[0].ok = false;
  facts.registrations[0].error =
      "PERMISSION_DENIED: ibv_reg_mr: Permission denied";
  DoctorReport report = Check(facts);
  EXPECT_EQ(report.exit_code(), 1);
  Finding error = OnlyError(report);
  EXPECT_EQ(error.what,
            "registering a 256MiB pool on rxe0 failed: PERMISSION_DENIED: "
            "ibv_reg_mr: Permission denied");
  EXPECT_TRUE(absl::StrContains(error.fix, "run as root")) << error.fix;
}

TEST(DoctorDiagnoseTest, UnexplainedRegistrationFailurePointsAtDmesg) {
  HostFacts facts = HealthyHost();
  facts.registrations[0].ok = false;
  facts.registrations[0].error = "INTERNAL: ibv_reg_mr: Bad address";
  EXPECT_TRUE(absl::StrContains(OnlyError(Check(facts)).fix, "dmesg"));
}

TEST(DoctorDiagnoseTest, SecondPortDownDoesNotBlockAnActiveFirstPort) {
  HostFacts facts = HealthyHost();
  rdma::RdmaPortInfo down = facts.devices[0].ports[0];
  down.port = 2;
  down.state = "DOWN";
  down.active = false;
  facts.devices[0].ports.push_back(down);
  DoctorReport report = Check(facts);
  EXPECT_EQ(report.exit_code(), 0);
  ASSERT_EQ(report.findings.size(), 1u);
  EXPECT_EQ(report.findings[0].severity, Severity::kInfo);
  EXPECT_EQ(report.findings[0].what, "rxe0 port 2 is DOWN (Ethernet on eth0)");
}

// rxe0 healthy, mlx5_0 down: any device will do without --device.
HostFacts TwoDevices() {
  HostFacts facts = HealthyHost();
  facts.devices.push_back(InfiniBandDevice("DOWN"));
  return facts;
}

TEST(DoctorDiagnoseTest, OneServingDeviceIsEnough) {
  DoctorReport report = Check(TwoDevices());
  EXPECT_EQ(report.exit_code(), 0);
  EXPECT_EQ(report.serving_devices, std::vector<std::string>{"rxe0"});
  EXPECT_EQ(WithSeverity(report, Severity::kError).size(), 1u);  // mlx5_0
}

TEST(DoctorDiagnoseTest, DeviceFlagJudgesOnlyThatDevice) {
  DoctorOptions options;
  options.device = "mlx5_0";
  DoctorReport report = Check(TwoDevices(), options);
  EXPECT_EQ(report.exit_code(), 1);
  EXPECT_EQ(report.verdict,
            "doctor: this host cannot serve RDMA on mlx5_0: mlx5_0 port 1 is "
            "DOWN (InfiniBand)");
  options.device = "rxe0";
  report = Check(TwoDevices(), options);
  EXPECT_EQ(report.exit_code(), 0);
  EXPECT_TRUE(report.findings.empty());
}

TEST(DoctorDiagnoseTest, UnknownDeviceFlagNamesTheDevicesThereAre) {
  DoctorOptions options;
  options.device = "rxe9";
  DoctorReport report = Check(TwoDevices(), options);
  EXPECT_EQ(report.exit_code(), 1);
  Finding error = OnlyError(report);
  EXPECT_EQ(error.what,
            "no RDMA device named 'rxe9' (this host has rxe0, mlx5_0)");
  EXPECT_EQ(error.fix, "`meshpool doctor --device rxe0`");
}

TEST(DoctorDiagnoseTest, ErrorsComeBeforeInformation) {
  HostFacts facts = BareHost();
  facts.hugepages = {true, 0, 0, 2 * kDoctorMiB, "madvise", ""};
  DoctorReport report = Check(facts);
  ASSERT_EQ(report.findings.size(), 2u);
  EXPECT_EQ(report.findings[0].severity, Severity::kError);
  EXPECT_EQ(report.findings[1].severity, Severity::kInfo);
}

// ---- Formatting -----------------------------------------------------------
TEST(DoctorFormatTest, TextListsDevicePortsGidsRegistrationThenVerdictLast) {
  HostFacts facts = HealthyHost();
  facts.hugepages = {true, 0, 0, 2 * kDoctorMiB, "madvise", ""};
  DoctorReport report = Diagnose(facts, {});
  std::string text = FormatText(facts, report, {});
  std::cout << text;
  for (const char* want :
       {"RDMA devices (libibverbs): 1", "rxe0", "atomics=yes",
        "max_mr_size=unlimited", "port 1  ACTIVE", "Ethernet", "mtu 1024",
        "::ffff:10.0.2.15", "RoCE v2", "eth0", "memlock: soft unlimited",
        "huge pages: 0 of 0 free, 2MiB each; transparent: madvise; "
        "shmem: unknown",
        "pool registration (256MiB", "ok in 125 ms (500 ms/GiB)",
        "info: 0 of 0 huge pages", "fix: `sysctl -w vm.nr_hugepages=128`"}) {
    EXPECT_TRUE(absl::StrContains(text, want)) << "missing '" << want << "'";
  }
  std::vector<std::string> lines =
      absl::StrSplit(text, '\n', absl::SkipEmpty());
  EXPECT_EQ(lines.back(), "doctor: this host can serve RDMA on rxe0");
}

TEST(DoctorFormatTest, TextShowsAFailedRegistration) {
  HostFacts facts = HealthyHost();
  facts.registrations[0].ok = false;
  facts.registrations[0].error = "RESOURCE_EXHAUSTED: no";
  std::string text = FormatText(facts, Diagnose(facts, {}), {});
  EXPECT_TRUE(absl::StrContains(text, "FAILED: RESOURCE_EXHAUSTED: no"))
      << text;
}

TEST(DoctorFormatTest, JsonCarriesFactsFindingsAndVerdict) {
  HostFacts facts = HealthyHost();
  facts.memlock = {true, 64 << 10, kUnlimited, false};
  facts.registrations[0].ok = false;
  facts.registrations[0].error = "INTERNAL: \"quoted\"\tand\\slash";
  DoctorReport report = Diagnose(facts, {});
  std::string json = FormatJson(facts, report, {});
  std::cout << json;
  for (const char* want :
       {"\"pool_bytes\": 268435456", "\"name\": \"rxe0\"",
        "\"state\": \"ACTIVE\"", "\"link_layer\": \"Ethernet\"",
        "\"active_mtu\": 1024", "\"gid\": \"::ffff:10.0.2.15\"",
        "\"type\": \"RoCE v2\"", "\"netdev\": \"eth0\"", "\"atomics\": true",
        "\"soft\": 65536", "\"hard\": \"unlimited\"",
        "\"error\": \"INTERNAL: \\\"quoted\\\"\\tand\\\\slash\"",
        "\"severity\": \"error\"", "\"can_serve\": false",
        "\"verdict\": \"doctor: this host cannot serve RDMA: "}) {
    EXPECT_TRUE(absl::StrContains(json, want)) << "missing '" << want << "'";
  }
  // Balanced, outside strings.
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < json.size(); ++i) {
    char c = json[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') in_string = true;
    if (c == '{' || c == '[') ++depth;
    if (c == '}' || c == ']') --depth;
    ASSERT_GE(depth, 0);
  }
  EXPECT_EQ(depth, 0);
  EXPECT_FALSE(in_string);
}

TEST(DoctorParseTest, Ipv4MappedGids) {
  EXPECT_TRUE(IsIpv4MappedGid("::ffff:10.0.2.15"));
  EXPECT_TRUE(IsIpv4MappedGid("0000:0000:0000:0000:0000:ffff:0a00:020f"));
  EXPECT_FALSE(IsIpv4MappedGid("fe80::5054:ff:fe12:3456"));
  EXPECT_FALSE(IsIpv4MappedGid("::1"));
  EXPECT_FALSE(IsIpv4MappedGid("not a gid"));
}

}  // namespace
}  // namespace meshpool::tools
