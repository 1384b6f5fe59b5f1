// `meshpool doctor`: Diagnose and the formatting on fabricated host facts (no
// device needed), the parsers, and the real binary on this host.
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "rdma/devices.h"
#include "tests/doctor_facts.h"
#include "tests/shell_util.h"
#include "tools/doctor.h"

namespace meshpool::tools {
namespace {

using ::meshpool::testing::Registered;
using ::meshpool::testing::WithSeverity;

constexpr uint64_t kMiB = 1ull << 20;

// A Soft-RoCE device as a VM shows it: rxe0 on eth0, GID 1 = RoCE v2 IPv4.
rdma::RdmaDeviceInfo Rxe0() {
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
HostFacts HealthyHost() {
  HostFacts facts;
  facts.devices = {Rxe0()};
  facts.memlock = {true, kUnlimited, kUnlimited, false};
  facts.hugepages = {true, 256, 256, 2 * kMiB, "madvise", "advise"};
  facts.kernel.sysfs_devices = {"rxe0"};
  facts.kernel.uverbs = {"uverbs0"};
  facts.kernel.rdma_rxe_loaded = true;
  facts.kernel.ib_uverbs_loaded = true;
  facts.registrations = {Registered("rxe0")};
  return facts;
}

// A host with nothing RDMA at all (like the build machines).
HostFacts BareHost() {
  HostFacts facts = HealthyHost();
  facts.devices.clear();
  facts.kernel = {};
  facts.registrations.clear();
  return facts;
}

// Diagnoses `facts`, checking what every report must satisfy: findings are
// one line each, errors carry a fix, the verdict matches the exit status.
DoctorReport Check(const HostFacts& facts, const DoctorOptions& options = {}) {
  DoctorReport report = Diagnose(facts, options);
  for (const Finding& f : report.findings) {
    EXPECT_FALSE(absl::StrContains(f.what, "\n")) << f.what;
    EXPECT_FALSE(absl::StrContains(f.fix, "\n")) << f.fix;
    if (f.severity == Severity::kError) {
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
Finding OnlyError(const DoctorReport& report) {
  std::vector<Finding> errors = WithSeverity(report, Severity::kError);
  EXPECT_EQ(errors.size(), 1u) << FormatText({}, report, {});
  return errors.empty() ? Finding{} : errors.front();
}

TEST(DoctorDiagnoseTest, HealthyRxe0ServesWithExitZeroAndNoFindings) {
  DoctorReport report = Check(HealthyHost());
  EXPECT_EQ(report.exit_code(), 0);
  EXPECT_EQ(report.serving_devices, std::vector<std::string>{"rxe0"});
  EXPECT_EQ(report.verdict, "doctor: this host can serve RDMA on rxe0");
  EXPECT_TRUE(report.findings.empty()) << FormatText(HealthyHost(), report, {});
}

TEST(DoctorDiagnoseTest, NoDevicesSaysLoadSoftRoce) {
  DoctorReport report = Check(BareHost());
  EXPECT_EQ(report.exit_code(), 1);
  Finding error = OnlyError(report);
  EXPECT_TRUE(absl::StartsWith(error.what, "no RDMA devices")) << error.what;
  EXPECT_EQ(error.fix,
            "load Soft-RoCE: `modprobe rdma_rxe && rdma link add rxe0 type rxe "
            "netdev eth0`, or install your NIC's driver and `apt install "
            "ibverbs-providers rdma-core`");
  EXPECT_TRUE(absl::StartsWith(report.verdict,
                               "doctor: this host cannot serve RDMA: no RDMA "
                               "devices"))
      << report.verdict;
}

TEST(DoctorDiagnoseTest, NoDevicesWithRxeLoadedSaysAddTheLink) {
  HostFacts facts = BareHost();
  facts.kernel.rdma_rxe_loaded = true;
  Finding error = OnlyError(Check(facts));
  EXPECT_TRUE(absl::StartsWith(error.fix,
                               "rdma_rxe is loaded: `rdma link add "
                               "rxe0 type rxe netdev eth0`"))
      << error.fix;
}

TEST(DoctorDiagnoseTest, KernelDevicesButNoneListedMeansProvidersMissing) {
  HostFacts facts = BareHost();
  facts.kernel.sysfs_devices = {"rxe0"};
  facts.kernel.uverbs = {"uverbs0"};
  DoctorReport report = Check(facts);
  EXPECT_EQ(report.exit_code(), 1);
  Finding error = OnlyError(report);
  EXPECT_TRUE(absl::StrContains(error.what, "provider is missing"))
      << error.what;
  EXPECT_TRUE(absl::StrContains(error.what, "rxe0")) << error.what;
  EXPECT_TRUE(
      absl::StartsWith(error.fix, "`apt install ibverbs-providers rdma-core`"))
      << error.fix;
}

TEST(DoctorDiagnoseTest, KernelDevicesWithoutUverbsSaysModprobeIbUverbs) {
  HostFacts facts = BareHost();
  facts.kernel.sysfs_devices = {"mlx5_0"};
  Finding error = OnlyError(Check(facts));
  EXPECT_TRUE(absl::StrContains(error.what, "ib_uverbs is not loaded"));
  EXPECT_EQ(error.fix, "`modprobe ib_uverbs`");
}

TEST(DoctorDiagnoseTest, UnreadableUverbsSaysRootOrChmod) {
  HostFacts facts = BareHost();
  facts.kernel.sysfs_devices = {"rxe0"};
  facts.kernel.uverbs = {"uverbs0"};
  facts.kernel.uverbs_denied = {"/dev/infiniband/uverbs0"};
  Finding error = OnlyError(Check(facts));
  EXPECT_TRUE(
      absl::StrContains(error.what, "cannot open /dev/infiniband/uverbs0"));
  EXPECT_TRUE(
      absl::StrContains(error.fix, "chmod 666 /dev/infiniband/uverbs*"));
}

TEST(DoctorDiagnoseTest, LibibverbsFailureIsAnError) {
  HostFacts facts = BareHost();
  facts.list_ok = false;
  facts.list_error = "UNAVAILABLE: ibv_get_device_list failed";
  Finding error = OnlyError(Check(facts));
  EXPECT_TRUE(absl::StrContains(error.what, "ibv_get_device_list failed"));
}

TEST(DoctorDiagnoseTest, LibibverbsFailureWithUnreadableUverbsSaysChmod) {
  HostFacts facts = BareHost();
  facts.list_ok = false;
  facts.list_error = "UNAVAILABLE: cannot inspect RDMA device rxe0: denied";
  facts.kernel.sysfs_devices = {"rxe0"};
  facts.kernel.uverbs = {"uverbs0"};
  facts.kernel.uverbs_denied = {"/dev/infiniband/uverbs0"};
  Finding error = OnlyError(Check(facts));
  EXPECT_TRUE(absl::StrContains(error.fix, "chmod 666")) << error.fix;
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

TEST(DoctorDiagnoseTest, LowMemlockIsAnErrorSayingUlimit) {
  HostFacts facts = HealthyHost();
  facts.memlock = {true, 8 * kMiB, 8 * kMiB, false};
  facts.registrations[0].ok = false;
  facts.registrations[0].error =
      "RESOURCE_EXHAUSTED: ibv_reg_mr: Cannot allocate memory";
  DoctorReport report = Check(facts);
  EXPECT_EQ(report.exit_code(), 1);
  std::vector<Finding> errors = WithSeverity(report, Severity::kError);
  ASSERT_EQ(errors.size(), 2u);
  // The registration failure blames the limit...
  EXPECT_TRUE(absl::StrContains(errors[0].what,
                                "registering a 256MiB pool on "
                                "rxe0 failed"))
      << errors[0].what;
  EXPECT_TRUE(absl::StrContains(errors[0].fix, "memlock limit (8MiB)"))
      << errors[0].fix;
  // ... and the limit itself says how to raise it, for now and for good.
  EXPECT_EQ(errors[1].what,
            "memlock limit is 8MiB, below the 256MiB pool (hard limit 8MiB: "
            "raising it needs root): registering the pool will fail");
  EXPECT_TRUE(absl::StartsWith(errors[1].fix, "`ulimit -l unlimited`"));
  EXPECT_TRUE(absl::StrContains(errors[1].fix, "/etc/security/limits.d"));
  EXPECT_TRUE(absl::StrContains(errors[1].fix, "LimitMEMLOCK=infinity"));
}

TEST(DoctorDiagnoseTest, LowMemlockWithIpcLockIsOnlyInformation) {
  HostFacts facts = HealthyHost();
  facts.memlock = {true, 8 * kMiB, kUnlimited, true};
  DoctorReport report = Check(facts);
  EXPECT_EQ(report.exit_code(), 0);
  ASSERT_EQ(report.findings.size(), 1u);
  EXPECT_EQ(report.findings[0].severity, Severity::kInfo);
  EXPECT_TRUE(absl::StrContains(report.findings[0].what, "CAP_IPC_LOCK"));
}

TEST(DoctorDiagnoseTest, MemlockAbovePoolIsFine) {
  HostFacts facts = HealthyHost();
  facts.memlock = {true, 512 * kMiB, 512 * kMiB, false};
  EXPECT_TRUE(Check(facts).findings.empty());
}

TEST(DoctorDiagnoseTest, NoHugePagesIsInformationWithSysctlForThePool) {
  HostFacts facts = HealthyHost();
  facts.hugepages = {true, 0, 0, 2 * kMiB, "madvise", ""};
  DoctorOptions options;
  options.pool_bytes = 1ull << 30;
  DoctorReport report = Check(facts, options);
  EXPECT_EQ(report.exit_code(), 0);  // not fatal
  ASSERT_EQ(report.findings.size(), 1u);
  EXPECT_EQ(report.findings[0].severity, Severity::kInfo);
  EXPECT_EQ(report.findings[0].fix, "`sysctl -w vm.nr_hugepages=512`");
}

TEST(DoctorDiagnoseTest, HugePagesInUseAreAddedToTheSysctl) {
  HostFacts facts = HealthyHost();
  facts.hugepages = {true, 10, 4, 2 * kMiB, "never", ""};  // 6 in use
  DoctorReport report = Check(facts);
  ASSERT_EQ(report.findings.size(), 1u);
  EXPECT_EQ(report.findings[0].fix, "`sysctl -w vm.nr_hugepages=134`");
  EXPECT_TRUE(absl::StrContains(report.findings[0].what,
                                "transparent huge pages are off"));
}

TEST(DoctorDiagnoseTest, ShmemHugePagesOffIsAWarningNamingBothFixes) {
  HostFacts facts = HealthyHost();
  facts.hugepages = {true, 0, 0, 2 * kMiB, "madvise", "never"};
  DoctorOptions options;
  options.pool_bytes = 1ull << 30;
  DoctorReport report = Check(facts, options);
  EXPECT_EQ(report.exit_code(), 0);  // slower, not broken
  ASSERT_EQ(report.findings.size(), 1u);
  EXPECT_EQ(report.findings[0].severity, Severity::kWarning);
  EXPECT_TRUE(
      absl::StrContains(report.findings[0].what, "shmem_enabled: never"))
      << report.findings[0].what;
  EXPECT_TRUE(absl::StrContains(report.findings[0].what, "4 KiB pages"));
  EXPECT_TRUE(absl::StrContains(report.findings[0].fix,
                                "`sysctl -w vm.nr_hugepages=512`"));
  EXPECT_TRUE(absl::StrContains(
      report.findings[0].fix,
      "`echo advise > /sys/kernel/mm/transparent_hugepage/shmem_enabled`"));
}

TEST(DoctorDiagnoseTest, ShmemHugePagesAllowedIsInformationEvenWithAnonThpOff) {
  HostFacts facts = HealthyHost();
  // The pool is shared memory: shmem_enabled decides, not enabled.
  facts.hugepages = {true, 0, 0, 2 * kMiB, "never", "advise"};
  DoctorReport report = Check(facts);
  ASSERT_EQ(report.findings.size(), 1u);
  EXPECT_EQ(report.findings[0].severity, Severity::kInfo);
  EXPECT_TRUE(absl::StrContains(report.findings[0].what,
                                "falls back to transparent huge pages"))
      << report.findings[0].what;
}

TEST(DoctorDiagnoseTest, EnoughReservedHugePagesNeedNoShmemHugePages) {
  HostFacts facts = HealthyHost();
  facts.hugepages = {true, 512, 512, 2 * kMiB, "never", "never"};
  DoctorOptions options;
  options.pool_bytes = 1ull << 30;
  EXPECT_TRUE(Check(facts, options).findings.empty());
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
  facts.hugepages = {true, 0, 0, 2 * kMiB, "madvise", ""};
  DoctorReport report = Check(facts);
  ASSERT_EQ(report.findings.size(), 2u);
  EXPECT_EQ(report.findings[0].severity, Severity::kError);
  EXPECT_EQ(report.findings[1].severity, Severity::kInfo);
}

// ---- Formatting -----------------------------------------------------------
TEST(DoctorFormatTest, TextListsDevicePortsGidsRegistrationThenVerdictLast) {
  HostFacts facts = HealthyHost();
  facts.hugepages = {true, 0, 0, 2 * kMiB, "madvise", ""};
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

TEST(DoctorFormatTest, TextForABareHostShowsNoneAndTheFix) {
  HostFacts facts = BareHost();
  DoctorReport report = Diagnose(facts, {});
  std::string text = FormatText(facts, report, {});
  std::cout << text;
  EXPECT_TRUE(absl::StrContains(text, "RDMA devices (libibverbs): none"));
  EXPECT_TRUE(absl::StrContains(text, "/sys/class/infiniband: none"));
  EXPECT_TRUE(absl::StrContains(
      text,
      "error: no RDMA devices: libibverbs lists none and "
      "/sys/class/infiniband is empty; fix: load Soft-RoCE: `modprobe "
      "rdma_rxe && rdma link add rxe0 type rxe netdev eth0`"));
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

// ---- Parsers --------------------------------------------------------------
TEST(DoctorParseTest, MeminfoHugePages) {
  HugePageFacts huge = ParseMeminfo(
      "MemTotal:       16384000 kB\n"
      "AnonHugePages:     98304 kB\n"
      "HugePages_Total:      64\n"
      "HugePages_Free:       60\n"
      "HugePages_Rsvd:        0\n"
      "Hugepagesize:       2048 kB\n"
      "Hugetlb:          131072 kB\n");
  EXPECT_TRUE(huge.known);
  EXPECT_EQ(huge.total, 64u);
  EXPECT_EQ(huge.free, 60u);
  EXPECT_EQ(huge.page_bytes, 2 * kMiB);
  EXPECT_FALSE(ParseMeminfo("MemTotal: 1 kB\n").known);
}

TEST(DoctorParseTest, TransparentHugePagesMode) {
  EXPECT_EQ(ParseTransparentHugePages("always [madvise] never\n"), "madvise");
  EXPECT_EQ(ParseTransparentHugePages("[always] madvise never\n"), "always");
  EXPECT_EQ(ParseTransparentHugePages("garbage"), "");
}

TEST(DoctorParseTest, IpcLockCapability) {
  EXPECT_TRUE(HasIpcLockCapability("Name: x\nCapEff:\t000001fffeffffff\n"));
  EXPECT_FALSE(HasIpcLockCapability("CapEff:\t0000000000000000\n"));
  EXPECT_TRUE(HasIpcLockCapability("CapEff:\t0000000000004000\n"));
  EXPECT_FALSE(HasIpcLockCapability("CapPrm:\t0000000000004000\n"));
}

TEST(DoctorParseTest, Ipv4MappedGids) {
  EXPECT_TRUE(IsIpv4MappedGid("::ffff:10.0.2.15"));
  EXPECT_TRUE(IsIpv4MappedGid("0000:0000:0000:0000:0000:ffff:0a00:020f"));
  EXPECT_FALSE(IsIpv4MappedGid("fe80::5054:ff:fe12:3456"));
  EXPECT_FALSE(IsIpv4MappedGid("::1"));
  EXPECT_FALSE(IsIpv4MappedGid("not a gid"));
}

// ---- The real binary on this host -----------------------------------------
using DoctorRun = ::meshpool::testing::ShellResult;

DoctorRun Doctor(const std::string& args) {
  return ::meshpool::testing::Shell(
      absl::StrCat(MESHPOOL_BINARY, " doctor ", args));
}

bool HostHasRdmaDevices() {
  std::error_code error;
  return !std::filesystem::is_empty("/sys/class/infiniband", error) && !error;
}

TEST(DoctorCliTest, HostWithoutRdmaExitsOneWithTheSoftRoceFix) {
  if (HostHasRdmaDevices()) {
    GTEST_SKIP() << "this host has RDMA devices; the `verbs` doctor test "
                    "covers it";
  }
  DoctorRun run = Doctor("--pool-size 16MiB");
  std::cout << run.output;
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(run.output, "RDMA devices (libibverbs): none"));
  EXPECT_TRUE(absl::StrContains(
      run.output,
      "error: no RDMA devices: libibverbs lists none and /sys/class/infiniband "
      "is empty; fix: "));
  EXPECT_TRUE(absl::StrContains(run.output,
                                "rdma link add rxe0 type rxe netdev eth0`"));
  EXPECT_TRUE(absl::StrContains(
      run.output, "doctor: this host cannot serve RDMA: no RDMA devices"));
}

TEST(DoctorCliTest, JsonOnAHostWithoutRdmaSaysCannotServe) {
  if (HostHasRdmaDevices()) GTEST_SKIP() << "this host has RDMA devices";
  DoctorRun run = Doctor("--json");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_TRUE(absl::StartsWith(run.output, "{")) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "\"can_serve\": false"));
  EXPECT_TRUE(absl::StrContains(run.output, "\"devices\": []"));
}

TEST(DoctorCliTest, BadFlagsExitTwo) {
  EXPECT_EQ(Doctor("--no-such-flag").exit_code, 2);
  EXPECT_EQ(Doctor("--pool-size lots").exit_code, 2);
  EXPECT_EQ(Doctor("--pool-size 0").exit_code, 2);
  EXPECT_EQ(Doctor("extra-argument").exit_code, 2);
}

TEST(DoctorCliTest, HelpExitsZeroAndNamesTheFlags) {
  DoctorRun run = Doctor("--help");
  EXPECT_EQ(run.exit_code, 0);
  for (const char* flag : {"--device", "--pool-size", "--json"}) {
    EXPECT_TRUE(absl::StrContains(run.output, flag)) << run.output;
  }
}

}  // namespace
}  // namespace meshpool::tools
