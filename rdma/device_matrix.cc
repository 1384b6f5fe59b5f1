// ParseDeviceMatrix: the N x N table saying which local RDMA device reaches
// which peer (see rdma.h). Pure text processing; no verbs.
#include "rdma/device_matrix.h"

#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "rdma/rdma.h"

namespace meshpool::rdma {
namespace {

// The entry meaning "no device": the diagonal, or hosts with no direct link.
constexpr absl::string_view kNoLink = "-";

// One meaningful line: its 1-based number in the text and its fields.
struct Row {
  int line = 0;
  std::vector<std::string> fields;
};

// Splits `text` into rows, dropping comments ('#' to the end of the line) and
// lines left blank.
std::vector<Row> Tokenize(absl::string_view text) {
  std::vector<Row> rows;
  int number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    if (size_t hash = line.find('#'); hash != absl::string_view::npos) {
      line = line.substr(0, hash);
    }
    Row row{number, {}};
    for (absl::string_view field : absl::StrSplit(
             line, absl::ByAnyChar(" \t\r\f\v"), absl::SkipEmpty())) {
      row.fields.emplace_back(field);
    }
    if (!row.fields.empty()) rows.push_back(std::move(row));
  }
  return rows;
}

absl::Status Malformed(int line, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("device matrix line ", line, ": ", what));
}

// The header: a label, then the host names (the columns). Returns the column
// index of every host.
absl::StatusOr<std::map<std::string, size_t>> ParseHeader(const Row& header) {
  if (header.fields.size() < 2) {
    return Malformed(header.line,
                     "the header names no hosts; write a label and then every "
                     "host, e.g. `hosts mac1 mac2 mac3`");
  }
  std::map<std::string, size_t> columns;
  for (size_t i = 1; i < header.fields.size(); ++i) {
    const std::string& host = header.fields[i];
    if (host == kNoLink) {
      return Malformed(header.line, "'-' is not a host name");
    }
    if (!columns.emplace(host, i - 1).second) {
      return Malformed(header.line,
                       absl::StrCat("host '", host,
                                    "' appears twice in the header; name "
                                    "each host once"));
    }
  }
  return columns;
}

}  // namespace

absl::StatusOr<std::map<std::string, std::string>> ParseDeviceMatrix(
    absl::string_view text, absl::string_view self) {
  std::vector<Row> rows = Tokenize(text);
  if (rows.empty()) {
    return absl::InvalidArgumentError(
        "device matrix is empty: it needs a header line naming the hosts and "
        "one line per host (see `ParseDeviceMatrix` in rdma/rdma.h)");
  }
  const Row& header = rows.front();
  absl::StatusOr<std::map<std::string, size_t>> columns = ParseHeader(header);
  if (!columns.ok()) return columns.status();
  const size_t hosts = header.fields.size() - 1;

  // host name -> index into `rows`, checking every row on the way.
  std::map<std::string, size_t> row_of;
  for (size_t r = 1; r < rows.size(); ++r) {
    const Row& row = rows[r];
    const std::string& host = row.fields.front();
    auto column = columns->find(host);
    if (column == columns->end()) {
      return Malformed(
          row.line, absl::StrCat("host '", host,
                                 "' is not in the header (line ", header.line,
                                 "); add it there or fix the "
                                 "name"));
    }
    if (row.fields.size() != hosts + 1) {
      return Malformed(
          row.line, absl::StrCat("row '", host, "' has ", row.fields.size() - 1,
                                 " entries but the header names ", hosts,
                                 " hosts; give one device or '-' per host"));
    }
    if (auto [it, added] = row_of.emplace(host, r); !added) {
      return Malformed(
          row.line, absl::StrCat("host '", host, "' already has a row (line ",
                                 rows[it->second].line, ")"));
    }
    if (row.fields[column->second + 1] != kNoLink) {
      return Malformed(
          row.line,
          absl::StrCat("the entry for '", host, "' itself must be '-', not '",
                       row.fields[column->second + 1], "'"));
    }
  }

  // A link must be usable from both ends: an RC queue pair needs a device on
  // each host.
  for (const auto& [host, r] : row_of) {
    for (const auto& [peer, column] : *columns) {
      auto peer_row = row_of.find(peer);
      if (peer == host || peer_row == row_of.end()) continue;
      const Row& peer_line = rows[peer_row->second];
      if (rows[r].fields[column + 1] != kNoLink &&
          peer_line.fields[columns->at(host) + 1] == kNoLink) {
        return Malformed(
            peer_line.line,
            absl::StrCat("'", peer, "' has no device for '", host, "' but '",
                         host, "' (line ", rows[r].line, ") has one for '",
                         peer, "'; a link needs a device on both ends"));
      }
    }
  }

  auto self_row = row_of.find(std::string(self));
  if (self_row == row_of.end()) {
    std::vector<std::string> names;
    for (const auto& entry : row_of) names.push_back(entry.first);
    return absl::NotFoundError(absl::StrCat(
        "device matrix has no row for this host '", self,
        "' (rows: ", names.empty() ? "none" : absl::StrJoin(names, ", "),
        "); add one or set the host's name to match"));
  }
  std::map<std::string, std::string> result;
  const Row& mine = rows[self_row->second];
  for (const auto& [peer, column] : *columns) {
    const std::string& device = mine.fields[column + 1];
    if (peer != self && device != kNoLink) result.emplace(peer, device);
  }
  return result;
}

}  // namespace meshpool::rdma
