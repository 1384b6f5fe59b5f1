#include "coordinator/state_log.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/common.h"

namespace meshpool::coordinator {
namespace {

constexpr char kFileMagic[8] = {'M', 'P', 'S', 'T', 'A', 'T', 'E', '1'};
constexpr uint32_t kRecordMarker = 0x4352504d;  // "MPRC"
static_assert(kStateFrameBytes == 4 + 4 + 8);
static_assert(kMaxStateRecordBytes < (uint64_t{1} << 32));

std::string SnapshotPath(const std::string& dir) {
  return dir + "/state.snapshot";
}
std::string LogPath(const std::string& dir, uint64_t generation) {
  return absl::StrCat(dir, "/state.log.", generation);
}

uint32_t Load32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t Load64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

absl::StatusOr<std::string> ReadWhole(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("open ", path));
  std::string out;
  char buf[1 << 16];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      absl::Status s = ErrnoToStatus(errno, absl::StrCat("read ", path));
      ::close(fd);
      return s;
    }
    if (n == 0) break;
    out.append(buf, n);
  }
  ::close(fd);
  return out;
}

absl::Status WriteAll(int fd, absl::string_view data, const std::string& path) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoToStatus(errno, absl::StrCat("write ", path));
    data.remove_prefix(n);
  }
  return absl::OkStatus();
}

absl::Status SyncPath(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(),
                  (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("open ", path));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  return rc == 0 ? absl::OkStatus()
                 : ErrnoToStatus(err, absl::StrCat("fsync ", path));
}

// Writes `contents` to `path` (created or replaced) and fsyncs it.
absl::Status WriteFileSynced(const std::string& path,
                             absl::string_view contents) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("create ", path));
  absl::Status s = WriteAll(fd, contents, path);
  if (s.ok() && ::fdatasync(fd) != 0) {
    s = ErrnoToStatus(errno, absl::StrCat("fdatasync ", path));
  }
  ::close(fd);
  return s;
}

// Whether a valid frame starts at `at`.
bool FrameAt(absl::string_view bytes, size_t at, uint32_t* length) {
  if (bytes.size() - at < kStateFrameBytes) return false;
  const char* p = bytes.data() + at;
  uint32_t len = Load32(p + 4);
  if (Load32(p) != kRecordMarker || len > kMaxStateRecordBytes ||
      len > bytes.size() - at - kStateFrameBytes) {
    return false;
  }
  if (XXH3_64bits(p + kStateFrameBytes, len) != Load64(p + 8)) return false;
  *length = len;
  return true;
}

// Whether a valid frame starts anywhere after `from` (found by its marker).
bool AnyFrameAfter(absl::string_view bytes, size_t from) {
  for (size_t at = from + 1; at + kStateFrameBytes <= bytes.size(); ++at) {
    uint32_t len;
    if (Load32(bytes.data() + at) == kRecordMarker &&
        FrameAt(bytes, at, &len)) {
      return true;
    }
  }
  return false;
}

struct Parsed {
  std::vector<std::string> records;
  size_t good_end = 0;  // where the valid records end
};

// The records of a state file (after its magic). A bad record with a valid
// one after it is DataLoss; one without is a torn tail, ending the records.
absl::StatusOr<Parsed> ParseRecords(const std::string& path,
                                    absl::string_view bytes) {
  Parsed out;
  if (bytes.size() < sizeof(kFileMagic)) {
    // A crash while the file was being created: at most part of the magic.
    if (absl::string_view(kFileMagic, bytes.size()) == bytes) return out;
    return absl::DataLossError(absl::StrCat(
        path, " is not a meshpool state file (", bytes.size(),
        " bytes); restore the state directory from a backup, or move it "
        "aside to start empty"));
  }
  if (std::memcmp(bytes.data(), kFileMagic, sizeof(kFileMagic)) != 0) {
    return absl::DataLossError(absl::StrCat(
        path,
        " is not a meshpool state file (bad magic at offset 0); "
        "restore the state directory from a backup, or move it aside "
        "to start empty"));
  }
  size_t at = sizeof(kFileMagic);
  while (at < bytes.size()) {
    uint32_t len;
    if (!FrameAt(bytes, at, &len)) {
      if (AnyFrameAfter(bytes, at)) {
        return absl::DataLossError(absl::StrCat(
            path, ": the record at offset ", at,
            " is damaged and valid records follow it (corruption, not a torn "
            "write); restore the state directory from a backup, or move it "
            "aside to start empty"));
      }
      break;  // torn tail
    }
    out.records.emplace_back(bytes.substr(at + kStateFrameBytes, len));
    at += kStateFrameBytes + len;
  }
  out.good_end = at;
  return out;
}

}  // namespace

std::string FrameStateRecord(absl::string_view payload) {
  std::string out(kStateFrameBytes, '\0');
  uint32_t marker = kRecordMarker;
  uint32_t len = static_cast<uint32_t>(payload.size());
  uint64_t sum = XXH3_64bits(payload.data(), payload.size());
  std::memcpy(out.data(), &marker, 4);
  std::memcpy(out.data() + 4, &len, 4);
  std::memcpy(out.data() + 8, &sum, 8);
  out.append(payload.data(), payload.size());
  return out;
}

absl::StatusOr<std::string> StateLog::ReadSnapshot(const std::string& dir) {
  const std::string path = SnapshotPath(dir);
  absl::StatusOr<std::string> bytes = ReadWhole(path);
  if (absl::IsNotFound(bytes.status())) return std::string();
  if (!bytes.ok()) return bytes.status();
  MESHPOOL_ASSIGN_OR_RETURN(Parsed parsed, ParseRecords(path, *bytes));
  // The snapshot is renamed into place only once complete: anything but
  // exactly one whole record is damage.
  if (parsed.records.size() != 1 || parsed.good_end != bytes->size()) {
    return absl::DataLossError(absl::StrCat(
        path, " is damaged (", parsed.records.size(),
        " whole records, the last ending at offset ", parsed.good_end, " of ",
        bytes->size(), "); restore the state directory from a backup"));
  }
  return std::move(parsed.records.front());
}

absl::StatusOr<StateLog> StateLog::Open(const std::string& dir,
                                        uint64_t generation, Contents* out) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return ErrnoToStatus(errno, absl::StrCat("create state directory ", dir));
  }
  const std::string path = LogPath(dir, generation);
  absl::StatusOr<std::string> bytes = ReadWhole(path);
  Parsed parsed;
  if (absl::IsNotFound(bytes.status())) {
    bytes = std::string();
  } else if (!bytes.ok()) {
    return bytes.status();
  } else {
    MESHPOOL_ASSIGN_OR_RETURN(parsed, ParseRecords(path, *bytes));
  }
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("open ", path));
  StateLog log(dir, generation, fd, 0, parsed.records.size());
  uint64_t keep = parsed.good_end;
  if (keep < sizeof(kFileMagic)) {
    // New (or torn while being created): start it with the magic.
    if (::ftruncate(fd, 0) != 0) {
      return ErrnoToStatus(errno, absl::StrCat("truncate ", path));
    }
    MESHPOOL_RETURN_IF_ERROR(
        WriteAll(fd, absl::string_view(kFileMagic, sizeof(kFileMagic)), path));
    keep = sizeof(kFileMagic);
  } else if (keep < bytes->size() && ::ftruncate(fd, keep) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("truncate ", path));
  }
  if (::lseek(fd, static_cast<off_t>(keep), SEEK_SET) < 0 ||
      ::fdatasync(fd) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("sync ", path));
  }
  MESHPOOL_RETURN_IF_ERROR(SyncPath(dir, /*directory=*/true));
  // Logs of other generations: older ones were compacted away; a newer one
  // is left by a compaction that crashed before its commit point.
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      absl::string_view name(e->d_name);
      uint64_t g;
      if (absl::ConsumePrefix(&name, "state.log.") &&
          absl::SimpleAtoi(name, &g) && g != generation) {
        ::unlink(LogPath(dir, g).c_str());
      }
    }
    ::closedir(d);
  }
  log.log_bytes_ = keep;
  out->records = std::move(parsed.records);
  out->dropped_tail_bytes =
      bytes->size() > keep && !bytes->empty() ? bytes->size() - keep : 0;
  return log;
}

StateLog::StateLog(StateLog&& o) noexcept
    : dir_(std::move(o.dir_)),
      generation_(o.generation_),
      fd_(std::exchange(o.fd_, -1)),
      log_bytes_(o.log_bytes_),
      log_records_(o.log_records_),
      failed_(std::move(o.failed_)) {}

StateLog& StateLog::operator=(StateLog&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    dir_ = std::move(o.dir_);
    generation_ = o.generation_;
    fd_ = std::exchange(o.fd_, -1);
    log_bytes_ = o.log_bytes_;
    log_records_ = o.log_records_;
    failed_ = std::move(o.failed_);
  }
  return *this;
}

StateLog::~StateLog() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status StateLog::Broken() const {
  return absl::FailedPreconditionError(absl::StrCat(
      "the state directory ", dir_, " could not be written earlier (",
      failed_.message(),
      "); fix the disk and restart the coordinator: it reloads what was "
      "acknowledged"));
}

absl::Status StateLog::Append(absl::string_view record) {
  if (!failed_.ok()) return Broken();
  const std::string path = LogPath(dir_, generation_);
  std::string frame = FrameStateRecord(record);
  absl::Status s = WriteAll(fd_, frame, path);
  if (s.ok() && ::fdatasync(fd_) != 0) {
    s = ErrnoToStatus(errno, absl::StrCat("fdatasync ", path));
  }
  if (!s.ok()) {
    failed_ = s;
    return s;
  }
  log_bytes_ += frame.size();
  ++log_records_;
  return absl::OkStatus();
}

absl::Status StateLog::Compact(absl::string_view snapshot) {
  if (!failed_.ok()) return Broken();
  const uint64_t next = generation_ + 1;
  const std::string tmp = SnapshotPath(dir_) + ".tmp";
  std::string file(kFileMagic, sizeof(kFileMagic));
  file += FrameStateRecord(snapshot);
  std::string empty_log(kFileMagic, sizeof(kFileMagic));
  absl::Status s = WriteFileSynced(tmp, file);
  if (s.ok()) s = WriteFileSynced(LogPath(dir_, next), empty_log);
  if (s.ok() && ::rename(tmp.c_str(), SnapshotPath(dir_).c_str()) != 0) {
    s = ErrnoToStatus(errno, absl::StrCat("rename ", tmp));
  }
  if (!s.ok()) {
    // Before the commit point: the old snapshot and log stay in charge.
    ::unlink(tmp.c_str());
    ::unlink(LogPath(dir_, next).c_str());
    return s;
  }
  // Past it, the new generation is the state: failing to switch to it
  // leaves this log unusable.
  s = SyncPath(dir_, /*directory=*/true);
  int fd = -1;
  if (s.ok()) {
    fd = ::open(LogPath(dir_, next).c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd < 0) s = ErrnoToStatus(errno, "open the new state log");
  }
  if (!s.ok()) {
    failed_ = s;
    return s;
  }
  ::close(fd_);
  ::unlink(LogPath(dir_, generation_).c_str());
  fd_ = fd;
  generation_ = next;
  log_bytes_ = sizeof(kFileMagic);
  log_records_ = 0;
  return absl::OkStatus();
}

}  // namespace meshpool::coordinator
