// `meshpool doctor` on Linux: why a Linux host lists no device (kernel
// modules, /sys/class/infiniband, /dev/infiniband, providers), the memlock
// limit and huge pages against the pool, the /proc parsers, and the real
// binary on this host (which has no RDMA device here, or the `verbs`
// doctor test covers it). Linux only; the portable judgement is in
// tools_doctor_test.cc.
#include <filesystem>
#include <iostream>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/doctor_facts.h"
#include "tests/shell_util.h"
#include "tools/doctor.h"

namespace meshpool::tools {
namespace {

using ::meshpool::testing::BareHost;
using ::meshpool::testing::Check;
using ::meshpool::testing::HealthyHost;
using ::meshpool::testing::kDoctorMiB;
using ::meshpool::testing::OnlyError;
using ::meshpool::testing::Registered;
using ::meshpool::testing::WithSeverity;

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

TEST(DoctorDiagnoseTest, LowMemlockIsAnErrorSayingUlimit) {
  HostFacts facts = HealthyHost();
  facts.memlock = {true, 8 * kDoctorMiB, 8 * kDoctorMiB, false};
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
  facts.memlock = {true, 8 * kDoctorMiB, kUnlimited, true};
  DoctorReport report = Check(facts);
  EXPECT_EQ(report.exit_code(), 0);
  ASSERT_EQ(report.findings.size(), 1u);
  EXPECT_EQ(report.findings[0].severity, Severity::kInfo);
  EXPECT_TRUE(absl::StrContains(report.findings[0].what, "CAP_IPC_LOCK"));
}

TEST(DoctorDiagnoseTest, MemlockAbovePoolIsFine) {
  HostFacts facts = HealthyHost();
  facts.memlock = {true, 512 * kDoctorMiB, 512 * kDoctorMiB, false};
  EXPECT_TRUE(Check(facts).findings.empty());
}

TEST(DoctorDiagnoseTest, NoHugePagesIsInformationWithSysctlForThePool) {
  HostFacts facts = HealthyHost();
  facts.hugepages = {true, 0, 0, 2 * kDoctorMiB, "madvise", ""};
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
  facts.hugepages = {true, 10, 4, 2 * kDoctorMiB, "never", ""};  // 6 in use
  DoctorReport report = Check(facts);
  ASSERT_EQ(report.findings.size(), 1u);
  EXPECT_EQ(report.findings[0].fix, "`sysctl -w vm.nr_hugepages=134`");
  EXPECT_TRUE(absl::StrContains(report.findings[0].what,
                                "transparent huge pages are off"));
}

TEST(DoctorDiagnoseTest, ShmemHugePagesOffIsAWarningNamingBothFixes) {
  HostFacts facts = HealthyHost();
  facts.hugepages = {true, 0, 0, 2 * kDoctorMiB, "madvise", "never"};
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
  facts.hugepages = {true, 0, 0, 2 * kDoctorMiB, "never", "advise"};
  DoctorReport report = Check(facts);
  ASSERT_EQ(report.findings.size(), 1u);
  EXPECT_EQ(report.findings[0].severity, Severity::kInfo);
  EXPECT_TRUE(absl::StrContains(report.findings[0].what,
                                "falls back to transparent huge pages"))
      << report.findings[0].what;
}

TEST(DoctorDiagnoseTest, EnoughReservedHugePagesNeedNoShmemHugePages) {
  HostFacts facts = HealthyHost();
  facts.hugepages = {true, 512, 512, 2 * kDoctorMiB, "never", "never"};
  DoctorOptions options;
  options.pool_bytes = 1ull << 30;
  EXPECT_TRUE(Check(facts, options).findings.empty());
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
  EXPECT_EQ(huge.page_bytes, 2 * kDoctorMiB);
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
