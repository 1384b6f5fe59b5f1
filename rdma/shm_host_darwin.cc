// HostIdentity on macOS: the kernel's boot session UUID (the counterpart of
// Linux's boot id; macOS has no mount namespaces, so one boot is one view
// of the socket paths). Not yet compiled or run on a Mac (README,
// Platforms).
#include <sys/sysctl.h>

#include <string>

#include "rdma/shm.h"

namespace meshpool::rdma {

std::string HostIdentity() {
  char uuid[64] = {};
  size_t size = sizeof(uuid) - 1;
  if (::sysctlbyname("kern.bootsessionuuid", uuid, &size, nullptr, 0) != 0 ||
      size == 0) {
    return "";
  }
  return std::string(uuid);  // NUL-terminated by the kernel
}

}  // namespace meshpool::rdma
