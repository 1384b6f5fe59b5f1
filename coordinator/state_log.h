// meshpool/coordinator: StateLog, the files of a durable state directory.
//
// A directory holds a snapshot and the log that continues it:
//
//   state.snapshot         magic, then one record: the snapshot's bytes
//   state.log.<gen>        magic, then records appended one by one
//
// A record is a 16-byte frame (u32 marker, u32 length, u64 XXH3-64 of the
// payload, little-endian) and its payload. The snapshot names its generation;
// only state.log.<that generation> continues it. Compaction writes the next
// generation's snapshot beside the old one, creates its empty log, renames
// the snapshot into place (the commit point), then deletes the old log: a
// crash at any step leaves one consistent pair.
//
// Reading: an append is one write of a whole frame, so a crash leaves at
// most a prefix of the last one (or zeros). A bad record with no valid
// record after it — cut short, failing its checksum, or zeros — is such a
// torn tail: it is dropped (the file is truncated there). A bad record with
// a valid one after it is corruption: Open fails DataLoss naming the file
// and offset, and loads nothing.
//
// Thread-compatible: the caller (FileCoordinatorState) serialises calls.
#ifndef MESHPOOL_COORDINATOR_STATE_LOG_H_
#define MESHPOOL_COORDINATOR_STATE_LOG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace meshpool::coordinator {

// No record is larger (a snapshot of many thousands of regions fits).
inline constexpr uint32_t kMaxStateRecordBytes = 256u << 20;
inline constexpr size_t kStateFrameBytes = 16;

class StateLog {
 public:
  // What Open found.
  struct Contents {
    std::string snapshot;              // empty when there was none
    std::vector<std::string> records;  // the log after it, in order
    uint64_t dropped_tail_bytes = 0;   // a torn tail that was cut off
  };

  // Opens (creating it if needed) the state in `dir`, for generation
  // `generation` as read from the snapshot by the caller — see
  // ReadSnapshot. Returns the log's records. DataLoss naming the file and
  // offset for corruption; the errno mapping (PermissionDenied, NotFound for
  // a missing parent...) for an unusable directory.
  static absl::StatusOr<StateLog> Open(const std::string& dir,
                                       uint64_t generation, Contents* out);

  // The snapshot's bytes (empty string when the directory has none).
  // DataLoss naming the file for a damaged snapshot.
  static absl::StatusOr<std::string> ReadSnapshot(const std::string& dir);

  StateLog(StateLog&& other) noexcept;
  StateLog& operator=(StateLog&& other) noexcept;
  ~StateLog();

  // Appends one record and makes it durable (fdatasync) before returning.
  // After a failure the log is unusable (FailedPrecondition from then on):
  // the caller must stop acknowledging changes.
  // REQUIRES: record.size() <= kMaxStateRecordBytes.
  absl::Status Append(absl::string_view record);

  // Starts generation generation()+1 from `snapshot` (which must name that
  // generation) and drops the old log. A failure before the new snapshot
  // is in place leaves this log in charge and usable; one after makes it
  // unusable, as for Append.
  absl::Status Compact(absl::string_view snapshot);

  uint64_t generation() const { return generation_; }
  uint64_t log_bytes() const { return log_bytes_; }
  size_t log_records() const { return log_records_; }

 private:
  StateLog(std::string dir, uint64_t generation, int fd, uint64_t bytes,
           size_t records)
      : dir_(std::move(dir)),
        generation_(generation),
        fd_(fd),
        log_bytes_(bytes),
        log_records_(records) {}
  absl::Status Broken() const;

  std::string dir_;
  uint64_t generation_ = 0;
  int fd_ = -1;  // the current log, opened for appending
  uint64_t log_bytes_ = 0;
  size_t log_records_ = 0;
  absl::Status failed_;  // set once an append or compaction failed
};

// Frames `payload` as a record (exposed for tests that damage files).
std::string FrameStateRecord(absl::string_view payload);

}  // namespace meshpool::coordinator

#endif  // MESHPOOL_COORDINATOR_STATE_LOG_H_
