// `meshpool launch`'s pure parts: the hostfile (every mistake named), the
// device matrix it derives (read back by the nodes' own parser), and the
// commands it plans (quoted so a real shell gets the words back).
#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rdma/device_matrix.h"
#include "tools/doctor.h"
#include "tools/hostfile.h"
#include "tools/launch.h"

namespace meshpool::tools {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr const char* kMesh = R"({
  "coordinator": {"host": "mac2", "port": 7171},
  "hosts": [
    {"name": "mac1", "ssh": "me@mac1.local", "address": "10.0.0.1",
     "links": {"mac2": "rdma_en2", "mac3": "rdma_en3"}},
    {"name": "mac2", "address": "10.0.0.2",
     "links": {"mac1": "rdma_en2", "mac3": "rdma_en4"}},
    {"name": "mac3", "address": "10.0.0.3",
     "links": {"mac1": "rdma_en3", "mac2": "rdma_en4"}}
  ]
})";

TEST(Hostfile, AFullMeshParsesWithDefaultsAndItsMatrixReadsBack) {
  auto hf = ParseHostfile(kMesh);
  ASSERT_TRUE(hf.ok()) << hf.status();
  ASSERT_EQ(hf->hosts.size(), 3u);
  EXPECT_EQ(hf->hosts[0].ssh, "me@mac1.local");
  EXPECT_EQ(hf->hosts[1].ssh, "mac2");  // defaults to the name
  EXPECT_EQ(hf->coordinator, 1u);
  EXPECT_EQ(hf->coordinator_port, 7171);
  EXPECT_TRUE(MissingLinks(*hf).empty());
  const std::string matrix = DeviceMatrixText(*hf);
  for (const LaunchHost& h : hf->hosts) {
    auto row = rdma::ParseDeviceMatrix(matrix, h.name);
    ASSERT_TRUE(row.ok()) << row.status() << "\n" << matrix;
    EXPECT_EQ(*row, h.links) << h.name;
  }
}

TEST(Hostfile, WithoutLinksThereIsNoMatrixAndTheFirstHostCoordinates) {
  auto hf = ParseHostfile(
      R"({"hosts": [{"name": "a", "address": "10.1.0.1"},
                    {"name": "b", "address": "10.1.0.2"}]})");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->coordinator, 0u);
  EXPECT_EQ(hf->coordinator_port, 7070);
  EXPECT_EQ(DeviceMatrixText(*hf), "");
  EXPECT_TRUE(MissingLinks(*hf).empty());
}

TEST(Hostfile, AMeshWithoutACableNamesTheMissingPair) {
  auto hf = ParseHostfile(R"({"hosts": [
      {"name": "a", "address": "1.1.1.1", "links": {"b": "en2"}},
      {"name": "b", "address": "1.1.1.2", "links": {"a": "en2", "c": "en3"}},
      {"name": "c", "address": "1.1.1.3", "links": {"b": "en3"}}]})");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_THAT(MissingLinks(*hf),
              ElementsAre(std::pair<std::string, std::string>("a", "c")));
  auto row = rdma::ParseDeviceMatrix(DeviceMatrixText(*hf), "a");
  ASSERT_TRUE(row.ok()) << row.status();
  EXPECT_EQ(row->size(), 1u);
}

TEST(Hostfile, EveryMistakeIsInvalidArgumentNamingWhere) {
  const std::pair<const char*, const char*> cases[] = {
      {"[]", "must be a JSON object"},
      {"{\"hosts\": []}", "non-empty array"},
      {"{\"hosts\": [{\"name\": \"a\"}]}", "\"address\" is missing"},
      {"{\"hosts\": [{\"address\": \"x\"}]}", "\"name\" is missing"},
      {"{\"hosts\": [{\"name\": \"a b\", \"address\": \"x\"}]}",
       "without spaces"},
      {"{\"hosts\": [{\"name\": \"a\", \"address\": \"x\"},"
       " {\"name\": \"a\", \"address\": \"y\"}]}",
       "used twice"},
      {"{\"hosts\": [{\"name\": \"a\", \"adress\": \"x\"}]}",
       "unknown key \"adress\""},
      {"{\"hosts\": [{\"name\": \"a\", \"address\": \"x\"}], \"nodes\": 3}",
       "unknown key \"nodes\""},
      {"{\"hosts\": [{\"name\": \"a\", \"address\": \"x\","
       " \"links\": {\"z\": \"en2\"}}]}",
       "not a host in this file"},
      {"{\"hosts\": [{\"name\": \"a\", \"address\": \"x\","
       " \"links\": {\"a\": \"en2\"}}]}",
       "links to itself"},
      {"{\"hosts\": [{\"name\": \"a\", \"address\": \"x\","
       " \"links\": {\"b\": \"en2\"}},"
       " {\"name\": \"b\", \"address\": \"y\", \"links\": {\"c\": \"en3\"}},"
       " {\"name\": \"c\", \"address\": \"z\", \"links\": {\"b\": \"en3\"}}]}",
       "lists no link back"},
      {"{\"hosts\": [{\"name\": \"a\", \"address\": \"x\","
       " \"links\": {\"b\": \"en2\"}}, {\"name\": \"b\", \"address\": \"y\"}]}",
       "has no \"links\" while other hosts do"},
      {"{\"hosts\": [{\"name\": \"a\", \"address\": \"x\","
       " \"links\": {\"b\": 2}}, {\"name\": \"b\", \"address\": \"y\"}]}",
       "must name a device"},
      {"{\"hosts\": [{\"name\": \"a\", \"address\": \"x\"}],"
       " \"coordinator\": {\"host\": \"q\"}}",
       "host q is not a host"},
      {"{\"hosts\": [{\"name\": \"a\", \"address\": \"x\"}],"
       " \"coordinator\": {\"port\": 70000}}",
       "1..65535"},
      {"{\"hosts\": [", "JSON"},
  };
  for (const auto& [text, what] : cases) {
    auto hf = ParseHostfile(text);
    ASSERT_FALSE(hf.ok()) << text;
    EXPECT_EQ(hf.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(std::string(hf.status().message()), HasSubstr(what)) << text;
    EXPECT_THAT(std::string(hf.status().message()), HasSubstr("hostfile"));
  }
}

// What `meshpool doctor --json` prints on a host with these devices (the
// doctor's own formatter), with a line of noise before it.
std::string DoctorReportWith(
    const std::vector<std::pair<std::string, bool>>& devices) {
  HostFacts facts;
  for (const auto& [name, active] : devices) {
    rdma::RdmaDeviceInfo d;
    d.name = name;
    rdma::RdmaPortInfo port;
    port.active = active;
    port.state = active ? "ACTIVE" : "DOWN";
    d.ports.push_back(port);
    facts.devices.push_back(d);
  }
  DoctorOptions options;
  options.json = true;
  return "Warning: Permanently added 'mac2' to the list of known hosts.\n" +
         FormatJson(facts, Diagnose(facts, options), options);
}

TEST(CheckReportedDevices, EveryLinkDeviceMustBeThereWithAnActivePort) {
  auto hf = ParseHostfile(kMesh);
  ASSERT_TRUE(hf.ok());
  const LaunchHost& mac2 = hf->hosts[1];  // rdma_en2 to mac1, rdma_en4 to mac3
  EXPECT_TRUE(
      CheckReportedDevices(mac2, DoctorReportWith({{"rdma_en2", true},
                                                   {"rdma_en4", true},
                                                   {"rdma_en5", false}}))
          .ok());
  absl::Status missing = CheckReportedDevices(
      mac2, DoctorReportWith({{"rdma_en2", true}, {"rdma_en5", true}}));
  EXPECT_EQ(missing.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(missing.message()),
              HasSubstr("mac2 has no RDMA device rdma_en4 (its link to mac3; "
                        "it has: rdma_en2, rdma_en5)"));
  absl::Status down = CheckReportedDevices(
      mac2, DoctorReportWith({{"rdma_en2", true}, {"rdma_en4", false}}));
  EXPECT_EQ(down.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(down.message()),
              HasSubstr("rdma_en4 (its link to mac3) has no active port"));
  absl::Status garbage =
      CheckReportedDevices(mac2, "sh: meshpool: not found\n");
  EXPECT_EQ(garbage.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(garbage.message()), HasSubstr("--skip-link-check"));
}

// What /bin/sh makes of `line`: its words, one per line.
std::vector<std::string> ShellWords(const std::string& line) {
  const std::string command =
      "for w in " + line + "; do printf '%s\\n' \"$w\"; done";
  std::vector<std::string> words;
  FILE* p = ::popen(("sh -c " + ShellQuote(command)).c_str(), "r");
  if (p == nullptr) return words;
  std::string out;
  char buf[256];
  while (size_t n = std::fread(buf, 1, sizeof(buf), p)) out.append(buf, n);
  ::pclose(p);
  size_t start = 0;
  for (size_t nl; (nl = out.find('\n', start)) != std::string::npos;
       start = nl + 1) {
    words.push_back(out.substr(start, nl - start));
  }
  return words;
}

TEST(ShellQuote, AShellGetsEveryWordBackUnchanged) {
  const std::vector<std::string> words = {
      "plain", "two words", "it's", "$HOME", "`id`", "a\"b", "*", "-", "@x"};
  std::string line;
  for (const std::string& w : words) line += ShellQuote(w) + " ";
  EXPECT_EQ(ShellWords(line), words);
  EXPECT_EQ(ShellQuote("/usr/bin/meshpool"), "/usr/bin/meshpool");
}

LaunchOptions Insecure() {
  LaunchOptions o;
  o.insecure = true;
  return o;
}

TEST(PlanLaunch, CommandsRunTheCoordinatorAndOneNodePerHostThroughExec) {
  auto hf = ParseHostfile(kMesh);
  ASSERT_TRUE(hf.ok());
  LaunchOptions o = Insecure();
  o.node_args = {"--transport", "uc", "--profile", "thunderbolt"};
  auto plan = PlanLaunch(*hf, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->coordinator_address, "10.0.0.2:7171");
  EXPECT_EQ(plan->coordinator.host, "mac2");
  ASSERT_EQ(plan->nodes.size(), 3u);
  ASSERT_EQ(plan->setup.size(), 3u);   // a device matrix on every host
  ASSERT_EQ(plan->checks.size(), 3u);  // and each host's devices asked for
  EXPECT_THAT(
      ShellWords(plan->checks[0].argv[5]),
      ElementsAre("meshpool", "doctor", "--json", "--pool-size", "16MiB"));
  const LaunchCommand& n1 = plan->nodes[0];
  ASSERT_EQ(n1.argv.size(), 6u);  // ssh -tt -o BatchMode=yes TARGET COMMAND
  EXPECT_EQ(n1.argv[4], "me@mac1.local");
  const std::vector<std::string> words = ShellWords(n1.argv[5]);
  EXPECT_THAT(words, Contains("node"));
  EXPECT_THAT(words, Contains("10.0.0.2:7171"));
  EXPECT_THAT(words, Contains("thunderbolt"));
  EXPECT_THAT(words, Contains("--insecure"));
  EXPECT_THAT(words, Contains("/tmp/meshpool-launch/device-matrix"));
  EXPECT_EQ(plan->setup[0].input, DeviceMatrixText(*hf));
  EXPECT_THAT(DescribePlan(*plan), HasSubstr("[mac3 node] ssh"));
}

TEST(PlanLaunch, BadOptionsAreInvalidArgumentSayingWhatToDo) {
  auto hf = ParseHostfile(kMesh);
  ASSERT_TRUE(hf.ok());
  LaunchOptions o = Insecure();
  o.exec = "ssh {ssh}";
  EXPECT_THAT(std::string(PlanLaunch(*hf, o).status().message()),
              HasSubstr("no {command}"));
  o.exec = "ssh {user} {command}";
  EXPECT_THAT(std::string(PlanLaunch(*hf, o).status().message()),
              HasSubstr("unknown placeholder"));
  o = LaunchOptions();  // neither TLS nor --insecure
  EXPECT_THAT(std::string(PlanLaunch(*hf, o).status().message()),
              HasSubstr("--tls-dir"));
  o = Insecure();
  o.node_args = {"--device-matrix", "m.txt"};
  EXPECT_EQ(PlanLaunch(*hf, o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace meshpool::tools
