// process_info.h on macOS: libproc's task and BSD info. Written against
// Apple's documented <libproc.h>; no Mac has compiled it yet.
#include <libproc.h>
#include <mach/mach_time.h>
#include <sys/proc_info.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "common/process_info.h"

namespace meshpool {

absl::StatusOr<double> ProcessCpuSeconds(pid_t pid) {
  proc_taskinfo info{};
  const int got = ::proc_pidinfo(pid, PROC_PIDTASKINFO, 0, &info, sizeof(info));
  if (got <= 0) return absl::NotFoundError(absl::StrCat("no process ", pid));
  if (got != static_cast<int>(sizeof(info))) {
    return absl::InternalError(
        absl::StrCat("cannot read the CPU times of process ", pid));
  }
  // In Mach absolute time units (not nanoseconds on Apple silicon).
  mach_timebase_info_data_t timebase{};
  if (::mach_timebase_info(&timebase) != KERN_SUCCESS || timebase.denom == 0) {
    return absl::InternalError("mach_timebase_info failed");
  }
  const double ticks =
      static_cast<double>(info.pti_total_user + info.pti_total_system);
  return ticks * timebase.numer / timebase.denom / 1e9;
}

bool ProcessHasExited(pid_t pid) {
  proc_bsdinfo info{};
  const int got = ::proc_pidinfo(pid, PROC_PIDTBSDINFO, 0, &info, sizeof(info));
  return got != static_cast<int>(sizeof(info)) || info.pbi_status == SZOMB;
}

absl::StatusOr<size_t> SelfThreadCount() {
  proc_taskinfo info{};
  if (::proc_pidinfo(::getpid(), PROC_PIDTASKINFO, 0, &info, sizeof(info)) !=
      static_cast<int>(sizeof(info))) {
    return absl::InternalError("cannot read this process's task info");
  }
  return static_cast<size_t>(info.pti_threadnum);
}

}  // namespace meshpool
