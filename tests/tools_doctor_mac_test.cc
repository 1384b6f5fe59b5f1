// `meshpool doctor` on macOS, tested without a Mac: recorded outputs of
// Apple's tools (tests/data/macos, see its README for where the formats
// come from) through the parsers, Diagnose on the facts they give, the
// mesh check of a hostfile, and the real binary with fake commands on PATH.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "rdma/devices.h"
#include "tests/doctor_facts.h"
#include "tests/shell_util.h"
#include "tools/doctor.h"
#include "tools/hostfile.h"

namespace meshpool::tools {
namespace {

using ::meshpool::testing::Registered;
using ::meshpool::testing::WithSeverity;

constexpr uint64_t kGiB = 1ull << 30;

std::string Fixture(const std::string& name) {
  const std::string path = absl::StrCat(MESHPOOL_MAC_FIXTURES, "/", name);
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "missing fixture " << path;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Which recorded output each of Apple's commands prints; a command left
// out is "not installed".
struct MacOutputs {
  std::string rdma_ctl = "rdma_ctl_enabled.txt";
  std::string profiler = "thunderbolt_tb5_two_cables.txt";
  std::string hardware_ports = "hardware_ports.txt";
  std::string ifconfig = "ifconfig_bridge_off.txt";
  std::string memsize = "137438953472";  // 128 GiB
  std::string wired_limit_mb = "0";
};

CommandRunner FakeMac(const MacOutputs& outputs) {
  return
      [outputs](
          const std::vector<std::string>& argv) -> absl::StatusOr<std::string> {
        const std::string command = absl::StrJoin(argv, " ");
        auto file = [](const std::string& name) -> absl::StatusOr<std::string> {
          if (name.empty()) {
            return absl::NotFoundError("no such command on PATH");
          }
          return Fixture(name);
        };
        auto value = [](const std::string& v) -> absl::StatusOr<std::string> {
          if (v.empty()) return absl::UnavailableError("sysctl: unknown oid");
          return v + "\n";
        };
        if (command == "rdma_ctl status") return file(outputs.rdma_ctl);
        if (command == "system_profiler SPThunderboltDataType") {
          return file(outputs.profiler);
        }
        if (command == "networksetup -listallhardwareports") {
          return file(outputs.hardware_ports);
        }
        if (command == "ifconfig") return file(outputs.ifconfig);
        if (command == "sysctl -n hw.memsize") return value(outputs.memsize);
        if (command == "sysctl -n iogpu.wired_limit_mb") {
          return value(outputs.wired_limit_mb);
        }
        ADD_FAILURE() << "unexpected command: " << command;
        return absl::NotFoundError(command);
      };
}

// One cable's device as Apple's libibverbs shows it: UC only, no atomics,
// GID 0 link-local, GID 1 the IPv4-mapped one when the interface has IPv4.
rdma::RdmaDeviceInfo AppleDevice(const std::string& netdev,
                                 const std::string& ipv4, bool active = true) {
  rdma::RdmaDeviceInfo device;
  device.name = "rdma_" + netdev;
  device.transport = "InfiniBand";
  device.max_mr_size = 1ull << 36;
  device.max_qp_wr = 4095;
  device.atomics = false;
  device.uc_queue_pairs = true;
  rdma::RdmaPortInfo port;
  port.port = 1;
  port.state = active ? "ACTIVE" : "DOWN";
  port.active = active;
  port.link_layer = "Ethernet";
  port.active_mtu = 4096;
  port.gids = {{0, "fe80::20:1", "RoCE v2", netdev}};
  if (!ipv4.empty())
    port.gids.push_back({1, "::ffff:" + ipv4, "RoCE v2", netdev});
  device.ports = {port};
  return device;
}

// A Mac Studio with two Thunderbolt 5 cables: rdma_en2 (IPv4) and rdma_en3
// (link-local only), as the default MacOutputs describe it.
HostFacts MacHost(const MacOutputs& outputs = {}) {
  HostFacts facts;
  facts.devices = {AppleDevice("en2", "10.0.1.1"), AppleDevice("en3", "")};
  facts.registrations = {Registered("rdma_en2"), Registered("rdma_en3")};
  facts.mac = GatherMacFacts(FakeMac(outputs));
  return facts;
}

// The same Mac with no RDMA device listed.
HostFacts MacWithoutDevices(const MacOutputs& outputs = {}) {
  HostFacts facts = MacHost(outputs);
  facts.devices.clear();
  facts.registrations.clear();
  return facts;
}

DoctorOptions MacOptions() {
  DoctorOptions options;
  options.macos = true;
  options.thunderbolt = true;
  return options;
}

// Diagnose, checking what every report must hold: one line per finding, a
// fix on every error and warning.
DoctorReport Check(const HostFacts& facts, const DoctorOptions& options) {
  DoctorReport report = Diagnose(facts, options);
  for (const Finding& f : report.findings) {
    EXPECT_FALSE(absl::StrContains(f.what, "\n")) << f.what;
    if (f.severity != Severity::kInfo) EXPECT_FALSE(f.fix.empty()) << f.what;
  }
  return report;
}

// The findings of `severity` whose text holds `needle`.
int Count(const DoctorReport& report, Severity severity,
          absl::string_view needle) {
  int n = 0;
  for (const Finding& f : WithSeverity(report, severity)) {
    n += absl::StrContains(f.what, needle);
  }
  return n;
}

const Finding* Find(const DoctorReport& report, absl::string_view needle) {
  for (const Finding& f : report.findings) {
    if (absl::StrContains(f.what, needle)) return &f;
  }
  return nullptr;
}

// ---- Parsers ----------------------------------------------------------------

TEST(DoctorMacParseTest, RdmaCtlStatusReadsTheOneWord) {
  EXPECT_EQ(ParseRdmaCtlStatus("enabled\n"), RdmaCtlState::kEnabled);
  EXPECT_EQ(ParseRdmaCtlStatus("  Disabled \n"), RdmaCtlState::kDisabled);
  EXPECT_EQ(ParseRdmaCtlStatus(""), RdmaCtlState::kUnknown);
  EXPECT_EQ(ParseRdmaCtlStatus("not enabled"), RdmaCtlState::kUnknown);
  EXPECT_EQ(ParseRdmaCtlStatus("enabled (pending restart)"),
            RdmaCtlState::kUnknown);
}

TEST(DoctorMacParseTest, ThunderboltTreeGivesEachPortItsSpeedAndPeer) {
  std::vector<ThunderboltPort> ports =
      ParseThunderboltProfile(Fixture("thunderbolt_tb5_two_cables.txt"));
  ASSERT_EQ(ports.size(), 4u);
  EXPECT_EQ(ports[0].bus, "Thunderbolt/USB4 Bus 0");
  EXPECT_EQ(ports[0].receptacle, "1");
  EXPECT_TRUE(ports[0].connected);
  EXPECT_EQ(ports[0].speed_gbps, 80);
  EXPECT_FALSE(ports[0].speed_up_to);
  EXPECT_EQ(ports[0].peer, "Mac Studio");
  EXPECT_EQ(ports[0].peer_model, "Mac16,9");  // not this Mac's own name
  EXPECT_TRUE(ports[0].peer_rdma);
  EXPECT_TRUE(ports[1].connected);
  EXPECT_EQ(ports[1].receptacle, "2");
  for (int i : {2, 3}) {
    EXPECT_FALSE(ports[i].connected) << i;
    EXPECT_TRUE(ports[i].speed_up_to) << i;
    EXPECT_EQ(ports[i].speed_gbps, 120) << i;
    EXPECT_EQ(ports[i].peer, "") << i;
  }
}

TEST(DoctorMacParseTest, ThunderboltFourCableIsFortyGbpsWithoutRdma) {
  std::vector<ThunderboltPort> ports =
      ParseThunderboltProfile(Fixture("thunderbolt_tb4_one_cable.txt"));
  ASSERT_EQ(ports.size(), 2u);
  EXPECT_TRUE(ports[0].connected);
  EXPECT_EQ(ports[0].speed_gbps, 40);
  EXPECT_EQ(ports[0].peer_model, "Mac13,1");
  EXPECT_FALSE(ports[0].peer_rdma);
  EXPECT_FALSE(ports[1].connected);
}

TEST(DoctorMacParseTest, NothingThunderboltParsesToNoPorts) {
  EXPECT_TRUE(ParseThunderboltProfile("").empty());
  EXPECT_TRUE(ParseThunderboltProfile("Thunderbolt/USB4:\n\n").empty());
}

TEST(DoctorMacParseTest, HardwarePortsNameEachInterface) {
  auto ports = ParseHardwarePorts(Fixture("hardware_ports.txt"));
  ASSERT_EQ(ports.size(), 7u);
  EXPECT_EQ(ports[2],
            (std::pair<std::string, std::string>{"en2", "Thunderbolt 1"}));
  EXPECT_EQ(ports[6], (std::pair<std::string, std::string>{
                          "bridge0", "Thunderbolt Bridge"}));
}

TEST(DoctorMacParseTest, IfconfigGivesAddressesStatusAndBridgeMembers) {
  std::vector<MacInterface> off =
      ParseIfconfig(Fixture("ifconfig_bridge_off.txt"));
  ASSERT_EQ(off.size(), 6u);
  EXPECT_EQ(off[2].name, "en2");
  EXPECT_TRUE(off[2].up);
  EXPECT_TRUE(off[2].active);
  EXPECT_EQ(off[2].ipv4, std::vector<std::string>{"10.0.1.1"});
  EXPECT_TRUE(off[2].ipv6_link_local);
  EXPECT_TRUE(off[3].ipv4.empty());
  EXPECT_TRUE(off[3].ipv6_link_local);
  EXPECT_FALSE(off[4].active);
  EXPECT_EQ(off[5].name, "bridge0");
  EXPECT_FALSE(off[5].up);
  EXPECT_TRUE(off[5].members.empty());
  std::vector<MacInterface> on =
      ParseIfconfig(Fixture("ifconfig_bridge_on.txt"));
  ASSERT_EQ(on.size(), 4u);
  EXPECT_TRUE(on[3].up);
  EXPECT_EQ(on[3].members, (std::vector<std::string>{"en2", "en3"}));
}

// ---- Diagnose ---------------------------------------------------------------

TEST(DoctorMacDiagnoseTest, TwoCableMacServesOnBothDevices) {
  DoctorReport report = Check(MacHost(), MacOptions());
  EXPECT_TRUE(report.can_serve) << FormatText(MacHost(), report, MacOptions());
  EXPECT_EQ(report.serving_devices,
            (std::vector<std::string>{"rdma_en2", "rdma_en3"}));
  EXPECT_TRUE(WithSeverity(report, Severity::kError).empty());
  EXPECT_EQ(
      Count(report, Severity::kInfo, "Thunderbolt: 2 of 4 ports connected"), 1);
  // en3 has only a link-local address: served, but said.
  const Finding* en3 = Find(report, "en3 (under rdma_en3) has no IPv4");
  ASSERT_NE(en3, nullptr);
  EXPECT_EQ(en3->severity, Severity::kWarning);
  EXPECT_TRUE(absl::StrContains(en3->fix, "sudo ifconfig en3 inet"));
  EXPECT_EQ(Find(report, "en2 (under rdma_en2)"), nullptr);
}

TEST(DoctorMacDiagnoseTest, LinuxChecksDoNotRunOnAMac) {
  HostFacts facts = MacHost();
  facts.memlock = {true, 64 << 10, 64 << 10, false};  // would be an error
  DoctorReport report = Check(facts, MacOptions());
  EXPECT_EQ(Find(report, "memlock"), nullptr);
  EXPECT_EQ(Find(report, "huge pages"), nullptr);
}

TEST(DoctorMacDiagnoseTest, RdmaDisabledWithoutDevicesSaysRecovery) {
  MacOutputs outputs;
  outputs.rdma_ctl = "rdma_ctl_disabled.txt";
  HostFacts facts = MacWithoutDevices(outputs);
  DoctorReport report = Check(facts, MacOptions());
  EXPECT_FALSE(report.can_serve);
  std::vector<Finding> errors = WithSeverity(report, Severity::kError);
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(Count(report, Severity::kError, "rdma_ctl status`: disabled"), 1);
  EXPECT_EQ(Count(report, Severity::kError,
                  "no RDMA devices: RDMA over "
                  "Thunderbolt is not enabled"),
            1);
  for (const Finding& f : errors) {
    EXPECT_TRUE(absl::StrContains(f.fix, "`rdma_ctl enable`")) << f.fix;
    EXPECT_TRUE(absl::StrContains(f.fix, "Recovery")) << f.fix;
  }
}

TEST(DoctorMacDiagnoseTest, NoRdmaCtlMeansMacosBefore262) {
  MacOutputs outputs;
  outputs.rdma_ctl = "";
  HostFacts facts = MacHost(outputs);
  DoctorReport report = Check(facts, MacOptions());
  const Finding* f = Find(report, "rdma_ctl is not on this Mac");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, Severity::kError);
  EXPECT_TRUE(absl::StrContains(f->what, "26.2"));
  EXPECT_TRUE(absl::StrContains(f->fix, "Software Update"));
}

TEST(DoctorMacDiagnoseTest, UnreadableRdmaCtlOutputIsQuoted) {
  HostFacts facts = MacHost();
  facts.mac.rdma = RdmaCtlState::kUnknown;
  facts.mac.rdma_ctl_output = "RDMA: pending";
  DoctorReport report = Check(facts, MacOptions());
  const Finding* f = Find(report, "printed 'RDMA: pending'");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, Severity::kWarning);
}

TEST(DoctorMacDiagnoseTest, ThunderboltFourMacIsToldRdmaNeedsThunderboltFive) {
  MacOutputs outputs;
  outputs.profiler = "thunderbolt_tb4_one_cable.txt";
  HostFacts facts = MacWithoutDevices(outputs);
  DoctorReport report = Check(facts, MacOptions());
  EXPECT_FALSE(report.can_serve);
  std::vector<Finding> errors = WithSeverity(report, Severity::kError);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_TRUE(absl::StrContains(errors[0].what, "40 Gb/s or less"));
  EXPECT_TRUE(absl::StrContains(errors[0].what, "Thunderbolt 5"));
  EXPECT_TRUE(absl::StrContains(errors[0].fix, "--transport tcp"));
  EXPECT_EQ(Count(report, Severity::kWarning,
                  "receptacle 1 (Thunderbolt/USB4 Bus 0) links to Mac Studio "
                  "at up to 40 Gb/s"),
            1);
  EXPECT_EQ(Count(report, Severity::kInfo, "lists no rdma service"), 1);
}

TEST(DoctorMacDiagnoseTest, NoCableMeansNoDevice) {
  HostFacts facts = MacWithoutDevices();
  for (ThunderboltPort& port : facts.mac.thunderbolt) port.connected = false;
  DoctorReport report = Check(facts, MacOptions());
  std::vector<Finding> errors = WithSeverity(report, Severity::kError);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_TRUE(absl::StrContains(errors[0].what, "no Thunderbolt cable"));
}

TEST(DoctorMacDiagnoseTest, EnabledWithAFastCableButNoDeviceSaysRestart) {
  HostFacts facts = MacWithoutDevices();
  DoctorReport report = Check(facts, MacOptions());
  std::vector<Finding> errors = WithSeverity(report, Severity::kError);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_TRUE(absl::StrContains(errors[0].fix, "restart this Mac"));
}

TEST(DoctorMacDiagnoseTest, ThunderboltBridgeUpIsAnErrorNamingItsMembers) {
  MacOutputs outputs;
  outputs.ifconfig = "ifconfig_bridge_on.txt";
  DoctorReport report = Check(MacHost(outputs), MacOptions());
  const Finding* f = Find(report, "Thunderbolt Bridge (bridge0) is up");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, Severity::kError);
  EXPECT_TRUE(absl::StrContains(f->what, "en2, en3"));
  EXPECT_TRUE(absl::StrContains(f->fix, "`sudo ifconfig bridge0 down`"));
  EXPECT_TRUE(absl::StrContains(
      f->fix,
      "networksetup -setnetworkserviceenabled \"Thunderbolt Bridge\" off"));
}

TEST(DoctorMacDiagnoseTest, AnInterfaceWithNoAddressAtAllIsAnError) {
  HostFacts facts = MacHost();
  for (MacInterface& i : facts.mac.interfaces) {
    if (i.name == "en3") i.ipv6_link_local = false;
  }
  DoctorReport report = Check(facts, MacOptions());
  EXPECT_EQ(
      Count(report, Severity::kError, "en3 (under rdma_en3) has no address"),
      1);
}

TEST(DoctorMacDiagnoseTest, ACableOutIsNamedWithoutLinuxCommands) {
  HostFacts facts = MacHost();
  facts.devices[1] = AppleDevice("en3", "", /*active=*/false);
  DoctorReport report = Check(facts, MacOptions());
  const Finding* f = Find(report, "rdma_en3 port 1 is DOWN");
  ASSERT_NE(f, nullptr);
  EXPECT_TRUE(absl::StrContains(f->what, "Thunderbolt cable is out"));
  EXPECT_FALSE(absl::StrContains(f->fix, "ip link")) << f->fix;
}

TEST(DoctorMacDiagnoseTest, PoolAsLargeAsMemoryIsAnError) {
  MacOutputs outputs;
  outputs.memsize = "17179869184";  // 16 GiB
  DoctorOptions options = MacOptions();
  options.pool_bytes = 16 * kGiB;
  DoctorReport report = Check(MacHost(outputs), options);
  EXPECT_EQ(Count(report, Severity::kError, "is not below this Mac's 16GiB"),
            1);
}

TEST(DoctorMacDiagnoseTest, PoolAndASetWiredLimitBeyondMemoryIsAWarning) {
  MacOutputs outputs;
  outputs.wired_limit_mb = "122880";  // 120 GiB of 128
  DoctorOptions options = MacOptions();
  options.pool_bytes = 16 * kGiB;
  DoctorReport report = Check(MacHost(outputs), options);
  const Finding* f = Find(report, "GPU's wired-memory limit");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, Severity::kWarning);
  EXPECT_TRUE(absl::StrContains(f->fix, "iogpu.wired_limit_mb=114688"));
}

TEST(DoctorMacDiagnoseTest, TheDefaultWiredLimitIsInformation) {
  DoctorReport report = Check(MacHost(), MacOptions());
  const Finding* f = Find(report, "memory: 128GiB");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, Severity::kInfo);
  EXPECT_TRUE(absl::StrContains(f->what, "macOS's default"));
}

// ---- The mesh of a hostfile -------------------------------------------------

Hostfile Mesh(const std::string& json) {
  absl::StatusOr<Hostfile> hostfile = ParseHostfile(json);
  EXPECT_TRUE(hostfile.ok()) << hostfile.status();
  return hostfile.ok() ? *hostfile : Hostfile{};
}

// Three Macs, a full mesh: mac1 reaches mac2 on rdma_en2, mac3 on rdma_en3.
constexpr char kThreeMacs[] = R"({"hosts": [
  {"name": "mac1", "address": "10.1.0.1",
   "links": {"mac2": "rdma_en2", "mac3": "rdma_en3"}},
  {"name": "mac2", "address": "10.1.0.2",
   "links": {"mac1": "rdma_en2", "mac3": "rdma_en3"}},
  {"name": "mac3", "address": "10.1.0.3",
   "links": {"mac1": "rdma_en2", "mac2": "rdma_en3"}}]})";

TEST(DoctorMeshTest, AFullMeshWithEveryCableInPlaceAddsNoFinding) {
  const Hostfile hostfile = Mesh(kThreeMacs);
  DoctorOptions options = MacOptions();
  options.hostfile = &hostfile;
  options.host_name = "mac1";
  DoctorReport report = Check(MacHost(), options);
  EXPECT_TRUE(report.can_serve);
  EXPECT_TRUE(WithSeverity(report, Severity::kError).empty());
  EXPECT_EQ(Find(report, "the mesh is not full"), nullptr);
  EXPECT_EQ(Find(report, "has no RDMA device"), nullptr);
  EXPECT_EQ(Find(report, "Thunderbolt ports have a device"), nullptr);
}

TEST(DoctorMeshTest, ALinkWhoseDeviceIsMissingOrDownIsAnErrorEach) {
  const Hostfile hostfile = Mesh(kThreeMacs);
  DoctorOptions options = MacOptions();
  options.hostfile = &hostfile;
  options.host_name = "mac1";
  HostFacts facts = MacHost();
  facts.devices = {AppleDevice("en3", "", /*active=*/false)};
  DoctorReport report = Check(facts, options);
  EXPECT_EQ(Count(report, Severity::kError,
                  "host mac1 has no RDMA device rdma_en2 (its link to mac2"),
            1);
  EXPECT_EQ(Count(report, Severity::kError,
                  "rdma_en3 (its link to mac3) has no active port"),
            1);
}

TEST(DoctorMeshTest, PairsWithoutACableMakeTheMeshNotFull) {
  const Hostfile hostfile = Mesh(R"({"hosts": [
    {"name": "mac1", "address": "10.1.0.1",
     "links": {"mac2": "rdma_en2", "mac3": "rdma_en3"}},
    {"name": "mac2", "address": "10.1.0.2", "links": {"mac1": "rdma_en2"}},
    {"name": "mac3", "address": "10.1.0.3", "links": {"mac1": "rdma_en2"}}]})");
  DoctorOptions options = MacOptions();
  options.hostfile = &hostfile;
  options.host_name = "mac1";
  DoctorReport report = Check(MacHost(), options);
  const Finding* f = Find(report, "the mesh is not full");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, Severity::kWarning);
  EXPECT_TRUE(absl::StrContains(f->what, "no cable joins mac2-mac3"));
  EXPECT_TRUE(
      absl::StrContains(f->fix, "3 hosts needs 2 cables on each, 3 in all"));
}

TEST(DoctorMeshTest, FewerConnectedPortsThanCablesListedIsAnError) {
  const Hostfile hostfile = Mesh(R"({"hosts": [
    {"name": "mac1", "address": "10.1.0.1",
     "links": {"mac2": "rdma_en2", "mac3": "rdma_en3", "mac4": "rdma_en4"}},
    {"name": "mac2", "address": "10.1.0.2",
     "links": {"mac1": "rdma_en2", "mac3": "rdma_en3", "mac4": "rdma_en4"}},
    {"name": "mac3", "address": "10.1.0.3",
     "links": {"mac1": "rdma_en2", "mac2": "rdma_en3", "mac4": "rdma_en4"}},
    {"name": "mac4", "address": "10.1.0.4",
     "links": {"mac1": "rdma_en2", "mac2": "rdma_en3", "mac3": "rdma_en4"}}]})");
  DoctorOptions options = MacOptions();
  options.hostfile = &hostfile;
  options.host_name = "mac1";
  DoctorReport report = Check(MacHost(), options);
  EXPECT_EQ(Count(report, Severity::kError,
                  "lists 3 cables on mac1 but only 2 of its Thunderbolt ports"),
            1);
  EXPECT_EQ(Count(report, Severity::kError, "no RDMA device rdma_en4"), 1);
}

TEST(DoctorMeshTest, TheMeshCheckRunsOnLinuxHostsToo) {
  const Hostfile hostfile = Mesh(R"({"hosts": [
    {"name": "a", "address": "10.2.0.1", "links": {"b": "mlx5_1"}},
    {"name": "b", "address": "10.2.0.2", "links": {"a": "mlx5_0"}}]})");
  DoctorOptions options;
  options.hostfile = &hostfile;
  options.host_name = "a";
  HostFacts facts;  // no devices at all
  DoctorReport report = Check(facts, options);
  EXPECT_EQ(Count(report, Severity::kError, "host a has no RDMA device mlx5_1"),
            1);
}

// ---- Formatting -------------------------------------------------------------

TEST(DoctorMacFormatTest, TextShowsTheMacFactsInsteadOfTheKernel) {
  HostFacts facts = MacHost();
  DoctorReport report = Diagnose(facts, MacOptions());
  const std::string text = FormatText(facts, report, MacOptions());
  std::cout << text;
  EXPECT_TRUE(
      absl::StrContains(text, "macOS: rdma_ctl enabled; memory 128GiB"));
  EXPECT_TRUE(absl::StrContains(
      text,
      "Thunderbolt/USB4 Bus 0 receptacle 1: connected, 80 Gb/s, Mac "
      "Studio (Mac16,9), rdma"));
  EXPECT_TRUE(absl::StrContains(text, "en2 (Thunderbolt 1): up, 10.0.1.1"));
  EXPECT_FALSE(absl::StrContains(text, "kernel: "));
  EXPECT_FALSE(absl::StrContains(text, "memlock"));
}

TEST(DoctorMacFormatTest, JsonCarriesTheMacFacts) {
  HostFacts facts = MacHost();
  DoctorReport report = Diagnose(facts, MacOptions());
  const std::string json = FormatJson(facts, report, MacOptions());
  EXPECT_TRUE(absl::StrContains(json, "\"mac\": {\"rdma_ctl\": \"enabled\""));
  EXPECT_TRUE(
      absl::StrContains(json, "\"receptacle\": \"2\", \"connected\": true"));
  EXPECT_TRUE(absl::StrContains(json, "\"wired_limit_mb\": 0"));
  // launch reads the devices from this report.
  LaunchHost host;
  host.name = "mac1";
  host.links = {{"mac2", "rdma_en2"}, {"mac3", "rdma_en3"}};
  EXPECT_TRUE(CheckReportedDevices(host, json).ok());
}

// ---- The real binary, Apple's tools faked on PATH
// -----------------------------

class DoctorMacCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/meshpool-doctor-mac-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A fake command that prints a fixture (or `text`) and exits `code`.
  void Fake(const std::string& name, const std::string& fixture, int code = 0) {
    const std::string path = dir_ + "/" + name;
    std::ofstream out(path);
    out << "#!/bin/sh\n/bin/cat " << MESHPOOL_MAC_FIXTURES << "/" << fixture
        << "\nexit " << code << "\n";
    out.close();
    std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  }
  void FakeSysctl(const std::string& memsize, const std::string& wired_mb) {
    const std::string path = dir_ + "/sysctl";
    std::ofstream out(path);
    out << "#!/bin/sh\ncase \"$2\" in\n  hw.memsize) echo " << memsize
        << ";;\n  iogpu.wired_limit_mb) echo " << wired_mb
        << ";;\n  *) echo \"unknown oid $2\" >&2; exit 1;;\nesac\n";
    out.close();
    std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  }
  ::meshpool::testing::ShellResult Doctor(const std::string& args) {
    return ::meshpool::testing::Shell(
        absl::StrCat("PATH=", dir_, " ", MESHPOOL_BINARY,
                     " doctor --platform macos ", args));
  }

  std::string dir_;
};

TEST_F(DoctorMacCliTest, ReadsApplesToolsAndReportsTheMac) {
  Fake("rdma_ctl", "rdma_ctl_enabled.txt");
  Fake("system_profiler", "thunderbolt_tb5_two_cables.txt");
  Fake("networksetup", "hardware_ports.txt");
  Fake("ifconfig", "ifconfig_bridge_on.txt");
  FakeSysctl("137438953472", "0");
  auto run = Doctor("--json");
  std::cout << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "\"rdma_ctl\": \"enabled\""));
  EXPECT_TRUE(absl::StrContains(run.output, "\"memsize\": 137438953472"));
  EXPECT_TRUE(
      absl::StrContains(run.output, "Thunderbolt: 2 of 4 ports connected"));
  EXPECT_TRUE(
      absl::StrContains(run.output, "Thunderbolt Bridge (bridge0) is up"));
  EXPECT_FALSE(absl::StrContains(run.output, "memlock limit"));
}

TEST_F(DoctorMacCliTest, AMacWithoutRdmaCtlIsToldToUpdateMacos) {
  Fake("system_profiler", "thunderbolt_tb5_two_cables.txt");
  Fake("networksetup", "hardware_ports.txt");
  Fake("ifconfig", "ifconfig_bridge_off.txt");
  FakeSysctl("137438953472", "0");
  auto run = Doctor("");
  std::cout << run.output;
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(
      run.output,
      "error: rdma_ctl is not on this Mac: RDMA over Thunderbolt "
      "needs macOS 26.2 or later; fix: update macOS"));
  EXPECT_TRUE(
      absl::StrContains(run.output,
                        "doctor: this host cannot serve uc (thunderbolt "
                        "profile)"));
}

TEST_F(DoctorMacCliTest, AFailingToolIsReportedNotFatal) {
  Fake("rdma_ctl", "rdma_ctl_disabled.txt");
  Fake("system_profiler", "rdma_ctl_enabled.txt", /*code=*/3);
  Fake("networksetup", "hardware_ports.txt");
  Fake("ifconfig", "ifconfig_bridge_off.txt");
  FakeSysctl("137438953472", "0");
  auto run = Doctor("");
  std::cout << run.output;
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(run.output,
                                "thunderbolt: unknown (system_profiler "
                                "exited with status 3: enabled)"));
  EXPECT_TRUE(absl::StrContains(run.output, "`rdma_ctl status`: disabled"));
}

TEST_F(DoctorMacCliTest, HostfileNamesThisHostOrSaysWhichItHas) {
  Fake("rdma_ctl", "rdma_ctl_enabled.txt");
  Fake("system_profiler", "thunderbolt_tb5_two_cables.txt");
  Fake("networksetup", "hardware_ports.txt");
  Fake("ifconfig", "ifconfig_bridge_off.txt");
  FakeSysctl("137438953472", "0");
  const std::string hosts = dir_ + "/hosts.json";
  std::ofstream(hosts) << kThreeMacs;
  auto unknown =
      Doctor(absl::StrCat("--hostfile ", hosts, " --host-name mac9"));
  EXPECT_EQ(unknown.exit_code, 2) << unknown.output;
  EXPECT_TRUE(absl::StrContains(
      unknown.output,
      "the hostfile has no host 'mac9' (it has mac1, mac2, mac3)"));
  auto run = Doctor(absl::StrCat("--hostfile ", hosts, " --host-name mac2"));
  std::cout << run.output;
  // This machine has no rdma_en* devices: both of mac2's links are missing.
  EXPECT_TRUE(
      absl::StrContains(run.output,
                        "host mac2 has no RDMA device rdma_en2 (its link "
                        "to mac1"));
  EXPECT_TRUE(
      absl::StrContains(run.output,
                        "host mac2 has no RDMA device rdma_en3 (its link "
                        "to mac3"));
  EXPECT_EQ(Doctor("--host-name mac2").exit_code, 2);
  EXPECT_EQ(Doctor("--platform windows").exit_code, 2);
}

}  // namespace
}  // namespace meshpool::tools
