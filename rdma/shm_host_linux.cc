// HostIdentity on Linux: the kernel's boot id and this process's mount
// namespace. Its macOS counterpart is shm_host_darwin.cc.
#include <unistd.h>

#include <climits>
#include <fstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "rdma/shm.h"

namespace meshpool::rdma {
namespace {

std::string ReadFirstLine(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return std::string(absl::StripAsciiWhitespace(line));
}

}  // namespace

std::string HostIdentity() {
  const std::string boot_id = ReadFirstLine("/proc/sys/kernel/random/boot_id");
  char link[PATH_MAX] = {};
  const ssize_t n = ::readlink("/proc/self/ns/mnt", link, sizeof(link) - 1);
  if (boot_id.empty() || n <= 0) return "";
  // "mnt:[4026531841]" -> the namespace's inode number.
  std::string mnt_ns;
  for (char c : absl::string_view(link, static_cast<size_t>(n))) {
    if (absl::ascii_isdigit(static_cast<unsigned char>(c))) mnt_ns.push_back(c);
  }
  if (mnt_ns.empty()) return "";
  return absl::StrCat(boot_id, ".", mnt_ns);
}

}  // namespace meshpool::rdma
