// ParseDeviceMatrix: which local device reaches which peer.
#include <map>
#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "rdma/device_matrix.h"
#include "rdma/rdma.h"

namespace meshpool::rdma {
namespace {

using Row = std::map<std::string, std::string>;

// Four Macs cabled as a Thunderbolt full mesh: each has three ports, one
// per peer, each its own RDMA device.
constexpr const char* kThunderboltMesh = R"(
# Thunderbolt full mesh, 4 hosts
hosts  mac1      mac2      mac3      mac4
mac1   -         rdma_en2  rdma_en3  rdma_en4
mac2   rdma_en1  -         rdma_en3  rdma_en4
mac3   rdma_en1  rdma_en2  -         rdma_en4
mac4   rdma_en1  rdma_en2  rdma_en3  -
)";

TEST(DeviceMatrixTest, FourHostThunderboltMeshGivesEachHostItsRow) {
  EXPECT_EQ(
      *ParseDeviceMatrix(kThunderboltMesh, "mac1"),
      (Row{{"mac2", "rdma_en2"}, {"mac3", "rdma_en3"}, {"mac4", "rdma_en4"}}));
  EXPECT_EQ(
      *ParseDeviceMatrix(kThunderboltMesh, "mac3"),
      (Row{{"mac1", "rdma_en1"}, {"mac2", "rdma_en2"}, {"mac4", "rdma_en4"}}));
  EXPECT_EQ(
      *ParseDeviceMatrix(kThunderboltMesh, "mac4"),
      (Row{{"mac1", "rdma_en1"}, {"mac2", "rdma_en2"}, {"mac3", "rdma_en3"}}));
}

TEST(DeviceMatrixTest, CommentsBlankLinesTabsAndCrlfAreIgnored) {
  const char* text =
      "\r\n"
      "   # leading comment\n"
      "hosts\ta\tb   # trailing comment\r\n"
      "\n"
      "\t\n"
      "a  -  dev_ab  # a reaches b through dev_ab\r\n"
      "# b's row follows\n"
      "b  dev_ba  -\n";
  EXPECT_EQ(*ParseDeviceMatrix(text, "a"), (Row{{"b", "dev_ab"}}));
  EXPECT_EQ(*ParseDeviceMatrix(text, "b"), (Row{{"a", "dev_ba"}}));
}

TEST(DeviceMatrixTest, DashEntriesAreOmittedFromTheRow) {
  // A chain a - b - c: a and c have no direct link.
  const char* text =
      "hosts a b c\n"
      "a - eth1 -\n"
      "b eth0 - eth2\n"
      "c - eth1 -\n";
  EXPECT_EQ(*ParseDeviceMatrix(text, "a"), (Row{{"b", "eth1"}}));
  EXPECT_EQ(*ParseDeviceMatrix(text, "b"), (Row{{"a", "eth0"}, {"c", "eth2"}}));
  EXPECT_EQ(*ParseDeviceMatrix(text, "c"), (Row{{"b", "eth1"}}));
}

TEST(DeviceMatrixTest, SameDeviceForEveryPeerIsFine) {
  const char* text =
      "hosts n1 n2 n3\n"
      "n1 - mlx5_0 mlx5_0\n"
      "n2 mlx5_0 - mlx5_0\n"
      "n3 mlx5_0 mlx5_0 -\n";
  EXPECT_EQ(*ParseDeviceMatrix(text, "n2"),
            (Row{{"n1", "mlx5_0"}, {"n3", "mlx5_0"}}));
}

TEST(DeviceMatrixTest, OnlyTheSelfRowIsRequired) {
  const char* text =
      "hosts a b c\n"
      "b dev_a - dev_c\n";
  EXPECT_EQ(*ParseDeviceMatrix(text, "b"),
            (Row{{"a", "dev_a"}, {"c", "dev_c"}}));
}

TEST(DeviceMatrixTest, SingleHostHasAnEmptyRow) {
  EXPECT_EQ(*ParseDeviceMatrix("hosts solo\nsolo -\n", "solo"), Row{});
}

TEST(DeviceMatrixTest, MissingSelfIsNotFound) {
  absl::StatusOr<Row> row = ParseDeviceMatrix(kThunderboltMesh, "mac9");
  EXPECT_EQ(row.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(row.status().message().find("mac9"), std::string::npos)
      << row.status();
}

TEST(DeviceMatrixTest, SelfInHeaderButWithoutRowIsNotFound) {
  absl::StatusOr<Row> row = ParseDeviceMatrix("hosts a b\na - d\n", "b");
  EXPECT_EQ(row.status().code(), absl::StatusCode::kNotFound) << row.status();
}

// Asserts that `text` is rejected as InvalidArgument naming `line`.
void ExpectMalformedAt(const char* text, int line) {
  absl::StatusOr<Row> row = ParseDeviceMatrix(text, "a");
  ASSERT_EQ(row.status().code(), absl::StatusCode::kInvalidArgument)
      << row.status();
  std::string want = "line " + std::to_string(line) + ":";
  EXPECT_NE(row.status().message().find(want), std::string::npos)
      << "wanted '" << want << "' in: " << row.status();
}

TEST(DeviceMatrixTest, EmptyTextIsInvalid) {
  EXPECT_EQ(ParseDeviceMatrix("", "a").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseDeviceMatrix("# only a comment\n\n", "a").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DeviceMatrixTest, HeaderWithoutHostsNamesItsLine) {
  ExpectMalformedAt("# comment\n\nhosts\n", 3);
}

TEST(DeviceMatrixTest, RaggedRowNamesItsLine) {
  ExpectMalformedAt("hosts a b c\na - x y\nb x - y z\nc x y -\n", 3);
  ExpectMalformedAt("hosts a b c\na - x\n", 2);
}

TEST(DeviceMatrixTest, DuplicateHostInHeaderNamesItsLine) {
  ExpectMalformedAt("\n# mesh\nhosts a b a\n", 3);
}

TEST(DeviceMatrixTest, DuplicateRowNamesItsLine) {
  ExpectMalformedAt("hosts a b\na - x\nb x -\n# again\na - y\n", 5);
}

TEST(DeviceMatrixTest, RowForHostNotInHeaderNamesItsLine) {
  ExpectMalformedAt("hosts a b\na - x\nc x -\n", 3);
}

TEST(DeviceMatrixTest, DashAsHostNameIsInvalid) {
  ExpectMalformedAt("hosts a -\n", 1);
}

TEST(DeviceMatrixTest, DeviceOnTheDiagonalNamesItsLine) {
  ExpectMalformedAt("hosts a b\na - x\nb x y\n", 3);
}

TEST(DeviceMatrixTest, OneSidedLinkNamesTheLineMissingIt) {
  // a reaches b, but b has no device for a: no RC QP can be made.
  ExpectMalformedAt("hosts a b\na - x\nb - -\n", 3);
  ExpectMalformedAt("hosts a b\na - -\nb x -\n", 2);
}

TEST(DeviceMatrixTest, ErrorMentionsTheOffendingName) {
  absl::StatusOr<Row> row =
      ParseDeviceMatrix("hosts a b\na - x\nzed x -\n", "a");
  ASSERT_EQ(row.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(row.status().message().find("'zed'"), std::string::npos)
      << row.status();
}

}  // namespace
}  // namespace meshpool::rdma
