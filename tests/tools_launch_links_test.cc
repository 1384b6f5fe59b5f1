// `meshpool launch --discover-links`: which cable joins which hosts, found
// from the reports `meshpool doctor --json` prints on each host (made here
// by the doctor's own formatter from facts like a Mac's: one device per
// Thunderbolt cable, its IPv4-mapped GID, the interface's address and
// prefix), and the planning around it.
#include <arpa/inet.h>

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/doctor.h"
#include "tools/hostfile.h"
#include "tools/launch.h"

namespace meshpool::tools {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// One cable end: device rdma_<interface>, its port's state and address.
struct CableEnd {
  std::string interface;  // "en2"
  std::string address;    // "10.0.12.1"
  int prefix = 30;
  bool active = true;
};

// What `meshpool doctor --json` prints on a Mac with these cable ends and
// a normal network on en0 (no RDMA device there), after a line of ssh noise.
std::string MacReport(const std::vector<CableEnd>& ends) {
  HostFacts facts;
  facts.addresses.push_back({"lo0", "127.0.0.1", 8});
  facts.addresses.push_back({"en0", "192.168.1.20", 24});
  for (const CableEnd& e : ends) {
    rdma::RdmaDeviceInfo d;
    d.name = "rdma_" + e.interface;
    rdma::RdmaPortInfo port;
    port.active = e.active;
    port.state = e.active ? "ACTIVE" : "DOWN";
    port.link_layer = "Ethernet";
    port.gids.push_back({0, "fe80::1", "RoCE v2", ""});
    if (!e.address.empty()) {
      port.gids.push_back({1, "::ffff:" + e.address, "RoCE v2", ""});
      facts.addresses.push_back({e.interface, e.address, e.prefix});
    }
    d.ports.push_back(port);
    facts.devices.push_back(d);
  }
  DoctorOptions options;
  options.json = true;
  return "Warning: Permanently added 'mac' to the list of known hosts.\n" +
         FormatJson(facts, Diagnose(facts, options), options);
}

Hostfile Hosts(int n) {
  std::string json = "{\"hosts\": [";
  for (int i = 1; i <= n; ++i) {
    json += absl::StrCat(i > 1 ? ", " : "", "{\"name\": \"mac", i,
                         "\", \"address\": \"192.168.1.", 10 + i, "\"}");
  }
  auto hf = ParseHostfile(json + "]}");
  EXPECT_TRUE(hf.ok()) << hf.status();
  return *hf;
}

// Four Macs, a full mesh, a /30 per cable: 10.0.<ij>.1 on mac<i>'s end.
std::map<std::string, std::string> FourMacMesh() {
  return {
      {"mac1",
       MacReport(
           {{"en2", "10.0.12.1"}, {"en3", "10.0.13.1"}, {"en4", "10.0.14.1"}})},
      {"mac2",
       MacReport(
           {{"en2", "10.0.12.2"}, {"en3", "10.0.23.1"}, {"en4", "10.0.24.1"}})},
      {"mac3",
       MacReport(
           {{"en4", "10.0.13.2"}, {"en2", "10.0.23.2"}, {"en3", "10.0.34.1"}})},
      {"mac4",
       MacReport(
           {{"en3", "10.0.14.2"}, {"en4", "10.0.24.2"}, {"en2", "10.0.34.2"}})},
  };
}

TEST(DiscoverLinks, AFullMeshOfFourMacsGivesTheirDeviceMatrix) {
  const Hostfile hf = Hosts(4);
  auto links = DiscoverLinks(hf, FourMacMesh());
  ASSERT_TRUE(links.ok()) << links.status();
  EXPECT_EQ(DeviceMatrixText(links->hostfile),
            "# written by meshpool launch from its hostfile\n"
            "hosts mac1 mac2 mac3 mac4\n"
            "mac1 - rdma_en2 rdma_en3 rdma_en4\n"
            "mac2 rdma_en2 - rdma_en3 rdma_en4\n"
            "mac3 rdma_en4 rdma_en2 - rdma_en3\n"
            "mac4 rdma_en3 rdma_en4 rdma_en2 -\n");
  EXPECT_TRUE(MissingLinks(links->hostfile).empty());
  ASSERT_EQ(links->found.size(), 6u);
  EXPECT_EQ(links->found[0], "mac1 rdma_en2 <-> mac2 rdma_en2 (10.0.12.0/30)");
  EXPECT_TRUE(links->notes.empty());
  // The hostfile's other fields are kept.
  EXPECT_EQ(links->hostfile.hosts[2].address, "192.168.1.13");
}

TEST(DiscoverLinks, AMissingCableLeavesThePairOutAndTheLoneEndIsNoted) {
  std::map<std::string, std::string> reports = FourMacMesh();
  // The mac2-mac4 cable is unplugged: mac2's en4 is down, and mac4's en4
  // has no address any more.
  reports["mac2"] = MacReport({{"en2", "10.0.12.2"},
                               {"en3", "10.0.23.1"},
                               {"en4", "10.0.24.1", 30, false}});
  reports["mac4"] =
      MacReport({{"en3", "10.0.14.2"}, {"en4", ""}, {"en2", "10.0.34.2"}});
  auto links = DiscoverLinks(Hosts(4), reports);
  ASSERT_TRUE(links.ok()) << links.status();
  EXPECT_THAT(
      MissingLinks(links->hostfile),
      ElementsAre(std::make_pair(std::string("mac2"), std::string("mac4"))));
  EXPECT_EQ(links->found.size(), 5u);
  EXPECT_TRUE(links->notes.empty());

  // mac4's end keeps its address but mac2's is down: the live end is noted.
  reports["mac4"] = FourMacMesh()["mac4"];
  links = DiscoverLinks(Hosts(4), reports);
  ASSERT_TRUE(links.ok()) << links.status();
  ASSERT_EQ(links->notes.size(), 1u);
  EXPECT_THAT(links->notes[0],
              HasSubstr("mac4 rdma_en4 (10.0.24.2/30) reaches no other host"));
}

TEST(DiscoverLinks, SelfAssignedAddressesCannotTellCablesApart) {
  std::map<std::string, std::string> reports;
  for (int i = 1; i <= 3; ++i) {
    reports[absl::StrCat("mac", i)] =
        MacReport({{"en2", absl::StrCat("169.254.", i, ".2"), 16},
                   {"en3", absl::StrCat("169.254.", i, ".3"), 16}});
  }
  auto links = DiscoverLinks(Hosts(3), reports);
  EXPECT_EQ(links.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(links.status().message()),
              HasSubstr("share the subnet 169.254.0.0/16"));
  EXPECT_THAT(std::string(links.status().message()),
              HasSubstr("self-assigned"));
}

TEST(DiscoverLinks, ThreeHostsOnOneSubnetAreASwitchNotACable) {
  std::map<std::string, std::string> reports;
  for (int i = 1; i <= 3; ++i) {
    reports[absl::StrCat("mac", i)] =
        MacReport({{"en2", absl::StrCat("10.0.0.", i), 24}});
  }
  auto links = DiscoverLinks(Hosts(3), reports);
  EXPECT_EQ(links.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(links.status().message()),
              HasSubstr("RDMA devices mac1 rdma_en2, mac2 rdma_en2, mac3 "
                        "rdma_en2 share the subnet 10.0.0.0/24"));
  EXPECT_THAT(std::string(links.status().message()),
              Not(HasSubstr("self-assigned")));
}

TEST(DiscoverLinks, TwoDevicesOfOneHostOnOneSubnetAreRefused) {
  std::map<std::string, std::string> reports = {
      {"mac1", MacReport({{"en2", "10.0.12.1", 29}, {"en3", "10.0.12.3", 29}})},
      {"mac2", MacReport({{"en2", "10.0.12.2", 29}})}};
  auto links = DiscoverLinks(Hosts(2), reports);
  EXPECT_EQ(links.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(links.status().message()),
              HasSubstr("mac1 rdma_en2, mac1 rdma_en3, mac2 rdma_en2"));
}

TEST(DiscoverLinks, ASecondCableBetweenTwoHostsIsNotedAndTheFirstUsed) {
  std::map<std::string, std::string> reports = {
      {"mac1", MacReport({{"en2", "10.0.12.1"}, {"en3", "10.0.21.1"}})},
      {"mac2", MacReport({{"en2", "10.0.12.2"}, {"en3", "10.0.21.2"}})}};
  auto links = DiscoverLinks(Hosts(2), reports);
  ASSERT_TRUE(links.ok()) << links.status();
  EXPECT_EQ(links->hostfile.hosts[0].links.at("mac2"), "rdma_en2");
  ASSERT_EQ(links->notes.size(), 1u);
  EXPECT_THAT(links->notes[0], HasSubstr("a second cable joins mac1 and mac2"));
}

TEST(DiscoverLinks, ADeviceWithAddressesOnTwoHostsSubnetsIsRefused) {
  // mac1's en2 holds addresses on its cable's subnet and on mac3's.
  std::map<std::string, std::string> reports = {
      {"mac1", MacReport({{"en2", "10.0.12.1"}, {"en2", "10.0.13.1"}})},
      {"mac2", MacReport({{"en2", "10.0.12.2"}})},
      {"mac3", MacReport({{"en2", "10.0.13.2"}})}};
  auto links = DiscoverLinks(Hosts(3), reports);
  EXPECT_EQ(links.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(links.status().message()),
              HasSubstr("rdma_en2 on mac1 has addresses on the subnets of "
                        "mac2 and of mac3"));
}

TEST(DiscoverLinks, NoCableAtAllSaysWhatToDo) {
  std::map<std::string, std::string> reports = {{"mac1", MacReport({})},
                                                {"mac2", MacReport({})}};
  auto links = DiscoverLinks(Hosts(2), reports);
  EXPECT_EQ(links.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(links.status().message()),
              HasSubstr("no cable found"));
  EXPECT_THAT(std::string(links.status().message()),
              HasSubstr("mac1 reported no RDMA device with an active port"));
}

TEST(DiscoverLinks, AnUnreadableOrOldReportNamesTheHost) {
  std::map<std::string, std::string> reports = FourMacMesh();
  reports["mac3"] = "sh: meshpool: not found\n";
  auto links = DiscoverLinks(Hosts(4), reports);
  EXPECT_EQ(links.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(links.status().message()),
              HasSubstr("host mac3: `meshpool doctor --json` there printed no "
                        "usable report"));
  reports["mac3"] = "{\"devices\": []}";  // before "addresses" existed
  links = DiscoverLinks(Hosts(4), reports);
  EXPECT_EQ(links.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(links.status().message()),
              HasSubstr("host mac3: its `meshpool doctor --json` reports no "
                        "\"addresses\""));
  reports.erase("mac3");
  EXPECT_EQ(DiscoverLinks(Hosts(4), reports).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(ReportedDeviceSubnets, OnlyActivePortsWithAnAddressedGidCount) {
  Hostfile hf = Hosts(1);
  auto subnets = ReportedDeviceSubnets(
      hf.hosts[0], MacReport({{"en2", "10.0.12.1"},
                              {"en3", "10.0.13.1", 30, false},
                              {"en4", ""}}));
  ASSERT_TRUE(subnets.ok()) << subnets.status();
  ASSERT_EQ(subnets->size(), 1u);
  EXPECT_EQ((*subnets)[0].device, "rdma_en2");
  EXPECT_EQ((*subnets)[0].interface, "en2");
  EXPECT_EQ((*subnets)[0].address, "10.0.12.1");
  EXPECT_EQ((*subnets)[0].prefix, 30);
}

TEST(DoctorAddresses, GidsAndNetmasksConvert) {
  EXPECT_EQ(Ipv4OfGid("::ffff:10.0.12.1"), "10.0.12.1");
  EXPECT_EQ(Ipv4OfGid("0000:0000:0000:0000:0000:ffff:0a00:0c01"), "10.0.12.1");
  EXPECT_EQ(Ipv4OfGid("fe80::1"), "");
  EXPECT_EQ(Ipv4OfGid("garbage"), "");
  EXPECT_EQ(Ipv4PrefixLength(htonl(0xfffffffc)), 30);
  EXPECT_EQ(Ipv4PrefixLength(htonl(0xffffff00)), 24);
  EXPECT_EQ(Ipv4PrefixLength(0), 0);
  EXPECT_EQ(Ipv4PrefixLength(0xffffffff), 32);
  EXPECT_EQ(Ipv4PrefixLength(htonl(0xff00ff00)), -1);
}

TEST(PlanLaunch, DiscoveringLinksAsksEveryHostAndPlansNoMatrixYet) {
  LaunchOptions o;
  o.insecure = true;
  o.discover_links = true;
  auto plan = PlanLaunch(Hosts(3), o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->checks.size(), 3u);
  EXPECT_TRUE(plan->setup.empty());
  EXPECT_THAT(DescribePlan(*plan), Not(HasSubstr("device-matrix")));

  o.skip_link_check = true;
  EXPECT_EQ(PlanLaunch(Hosts(3), o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.skip_link_check = false;
  auto meshed = DiscoverLinks(Hosts(4), FourMacMesh());
  ASSERT_TRUE(meshed.ok());
  auto twice = PlanLaunch(meshed->hostfile, o);
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(twice.status().message()),
              HasSubstr("remove the links or leave out --discover-links"));
}

}  // namespace
}  // namespace meshpool::tools
