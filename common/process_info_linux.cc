// process_info.h on Linux: /proc/<pid>/stat and /proc/self/task.
#include <dirent.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/process_info.h"

namespace meshpool {
namespace {

// The fields of /proc/<pid>/stat after the command's closing parenthesis
// (the command may hold spaces and parentheses); empty when it is gone.
std::vector<std::string> StatFields(pid_t pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(stat, line)) return {};
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return {};
  return absl::StrSplit(line.substr(paren + 2), ' ');
}

}  // namespace

absl::StatusOr<double> ProcessCpuSeconds(pid_t pid) {
  const std::vector<std::string> fields = StatFields(pid);
  if (fields.empty()) {
    return absl::NotFoundError(absl::StrCat("no process ", pid));
  }
  // state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
  // utime stime: utime and stime are the 12th and 13th after ")".
  uint64_t utime = 0, stime = 0;
  if (fields.size() < 13 || !absl::SimpleAtoi(fields[11], &utime) ||
      !absl::SimpleAtoi(fields[12], &stime)) {
    return absl::InternalError(
        absl::StrCat("cannot read the CPU times of process ", pid));
  }
  return static_cast<double>(utime + stime) /
         static_cast<double>(::sysconf(_SC_CLK_TCK));
}

bool ProcessHasExited(pid_t pid) {
  const std::vector<std::string> fields = StatFields(pid);
  return fields.empty() || fields[0] == "Z" || fields[0] == "X";
}

absl::StatusOr<size_t> SelfThreadCount() {
  DIR* dir = ::opendir("/proc/self/task");
  if (dir == nullptr) {
    return absl::InternalError("cannot list /proc/self/task");
  }
  size_t n = 0;
  while (dirent* e = ::readdir(dir)) n += e->d_name[0] != '.';
  ::closedir(dir);
  return n;
}

}  // namespace meshpool
