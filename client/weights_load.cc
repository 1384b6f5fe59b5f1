// LoadSafetensors: safetensors files -> a model region (layout in
// weights_manifest.h).
//
// Plan first, then copy: every header is parsed and checked, the region's
// layout and manifest are fixed, and only then is a staging region created.
// The copy is cut into work items of whole digest chunks (a tensor, several
// small ones, or a kLoadItemBytes piece of a big one), so workers never
// share a chunk digest; each worker reads its items from the file in pieces
// of at most kLoadIoBytes that end on chunk boundaries, into a registered
// buffer, writes them to the region, hashes each chunk once for the
// manifest, and has the nodes digest what landed on every copy, compared
// with those same chunk digests (VerifyWithDigests in client/region.h).
// The superblock is written last and the region renamed to the model's
// name: until then no reader can find the model.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "client/region.h"
#include "client/safetensors.h"
#include "client/weights_manifest.h"
#include "common/common.h"
#include "format/layout.h"
#include "meshpool/region.h"
#include "meshpool/weights.h"
#include "xxhash.h"

namespace meshpool {

namespace {

using client_internal::ChunkCount;
using client_internal::kModelFileAlign;
using client_internal::kModelSuperblockBytes;
using client_internal::SafetensorsFile;

// One file read, region write and verify at a time per worker.
constexpr uint64_t kLoadIoBytes = uint64_t{8} << 20;
// Work items are about this big (big tensors are cut at this size).
constexpr uint64_t kLoadItemBytes = uint64_t{64} << 20;
constexpr int kMaxLoadWorkers = 64;
constexpr absl::Duration kProgressEvery = absl::Milliseconds(100);
static_assert(kLoadItemBytes % kWeightChunkBytes == 0,
              "items must end on chunk boundaries");
static_assert(kLoadIoBytes <= kLoadItemBytes);

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

std::string BaseName(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The source files: paths as given, except that an index file
// (*.json) stands for the shards it names. The shards' tensors must be
// exactly those the index maps to them.
absl::StatusOr<std::vector<SafetensorsFile>> ParseInputs(
    absl::Span<const std::string> paths) {
  if (paths.empty()) {
    return absl::InvalidArgumentError(
        "no files to load: give .safetensors files or one "
        "model.safetensors.index.json");
  }
  std::vector<SafetensorsFile> files;
  for (const std::string& path : paths) {
    if (path.size() >= 5 && path.substr(path.size() - 5) == ".json") {
      MESHPOOL_ASSIGN_OR_RETURN(client_internal::SafetensorsIndex index,
                                client_internal::ReadSafetensorsIndex(path));
      absl::flat_hash_map<std::string, std::string> expected(
          index.weight_map.begin(), index.weight_map.end());
      for (const std::string& shard : index.files) {
        MESHPOOL_ASSIGN_OR_RETURN(SafetensorsFile f,
                                  client_internal::ReadSafetensorsFile(shard));
        for (const auto& t : f.tensors) {
          auto it = expected.find(t.name);
          if (it == expected.end() || it->second != shard) {
            return absl::InvalidArgumentError(
                absl::StrCat(shard, ": tensor '", t.name,
                             "' is not mapped to this file by ", path));
          }
          expected.erase(it);
        }
        files.push_back(std::move(f));
      }
      if (!expected.empty()) {
        const auto& [tensor, shard] = *expected.begin();
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": tensor '", tensor, "' is mapped to ", shard,
                         ", which does not contain it"));
      }
      continue;
    }
    MESHPOOL_ASSIGN_OR_RETURN(SafetensorsFile f,
                              client_internal::ReadSafetensorsFile(path));
    files.push_back(std::move(f));
  }
  absl::flat_hash_map<std::string, const std::string*> owner;
  for (const SafetensorsFile& f : files) {
    for (const auto& t : f.tensors) {
      auto [it, inserted] = owner.emplace(t.name, &f.path);
      if (!inserted) {
        return absl::InvalidArgumentError(absl::StrCat(
            f.path, ": tensor '", t.name, "' is also in ", *it->second,
            ": a model's tensor names must be unique"));
      }
    }
  }
  return files;
}

// A contiguous piece of one file's data buffer, starting at a chunk
// boundary of tensor `first_tensor` and ending at a chunk boundary.
struct WorkItem {
  size_t file = 0;
  uint64_t begin = 0;  // in the file's data buffer
  uint64_t end = 0;
  size_t first_tensor = 0;  // index into the file's tensors
};

struct Plan {
  std::vector<SafetensorsFile> files;
  std::vector<uint64_t> file_base;     // region offset of each data buffer
  std::vector<size_t> first_manifest;  // manifest index of each file's 1st
  proto::WeightManifest manifest;
  uint64_t manifest_offset = 0;
  uint64_t region_size = 0;
  uint64_t copy_bytes = 0;
  std::vector<WorkItem> items;
};

void AddItems(const SafetensorsFile& f, size_t file,
              std::vector<WorkItem>& out) {
  WorkItem cur{file, 0, 0, 0};
  for (size_t t = 0; t < f.tensors.size(); ++t) {
    const auto& tensor = f.tensors[t];
    if (tensor.end - tensor.begin > kLoadItemBytes) {
      if (cur.end > cur.begin) out.push_back(cur);
      for (uint64_t at = tensor.begin; at < tensor.end; at += kLoadItemBytes) {
        out.push_back({file, at, std::min(tensor.end, at + kLoadItemBytes), t});
      }
      cur = {file, tensor.end, tensor.end, t + 1};
      continue;
    }
    if (cur.end - cur.begin + (tensor.end - tensor.begin) > kLoadItemBytes) {
      out.push_back(cur);
      cur = {file, tensor.begin, tensor.begin, t};
    }
    cur.end = tensor.end;
  }
  if (cur.end > cur.begin) out.push_back(cur);
}

absl::StatusOr<Plan> MakePlan(absl::string_view model,
                              std::vector<SafetensorsFile> files) {
  Plan plan;
  plan.files = std::move(files);
  plan.manifest.set_model(std::string(model));
  plan.manifest.set_chunk_bytes(kWeightChunkBytes);
  plan.manifest.set_loaded_unix_ms(absl::ToUnixMillis(absl::Now()));
  uint64_t at = kModelSuperblockBytes;
  uint64_t total = 0;
  for (size_t i = 0; i < plan.files.size(); ++i) {
    const SafetensorsFile& f = plan.files[i];
    at = AlignUp(at, kModelFileAlign);
    plan.file_base.push_back(at);
    plan.first_manifest.push_back(plan.manifest.tensors_size());
    plan.manifest.add_files(BaseName(f.path));
    for (const auto& t : f.tensors) {
      proto::WeightTensor* e = plan.manifest.add_tensors();
      e->set_name(t.name);
      e->set_dtype(std::string(DTypeName(t.dtype)));
      for (uint64_t d : t.shape) e->add_shape(d);
      e->set_offset(at + t.begin);
      e->set_length(t.end - t.begin);
      e->set_digest(0);  // fixed64: filled in later without changing size
      e->mutable_chunk_digests()->Resize(
          static_cast<int>(ChunkCount(t.end - t.begin)), 0);
      e->set_file(static_cast<uint32_t>(i));
      total += t.end - t.begin;
    }
    at += f.data_bytes;
    plan.copy_bytes += f.data_bytes;
    AddItems(f, i, plan.items);
  }
  plan.manifest.set_tensor_bytes(total);
  plan.manifest_offset = AlignUp(at, 8);
  plan.region_size = plan.manifest_offset + plan.manifest.ByteSizeLong();
  return plan;
}

class FileDescriptor {
 public:
  static absl::StatusOr<FileDescriptor> Open(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("open ", path));
    return FileDescriptor(fd);
  }
  FileDescriptor(FileDescriptor&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  FileDescriptor& operator=(FileDescriptor&&) = delete;
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  // Reads exactly out.size() bytes at `offset`; OutOfRange when the file
  // ends first (it shrank since its header was checked).
  absl::Status ReadAt(uint64_t offset, absl::Span<char> out,
                      const std::string& path) const {
    size_t done = 0;
    while (done < out.size()) {
      ssize_t n = ::pread(fd_, out.data() + done, out.size() - done,
                          static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoToStatus(errno, absl::StrCat("read ", path));
      if (n == 0) {
        return absl::OutOfRangeError(
            absl::StrCat(path, " ended at byte ", offset + done,
                         ": it was truncated while loading"));
      }
      done += static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }

 private:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  int fd_;
};

// Copies work items into the staging region; shared by the workers.
class Copier {
 public:
  Copier(Client& client, Region& region, Plan& plan, const LoadOptions& options)
      : client_(client), region_(region), plan_(plan), options_(options) {}

  absl::Status Run() {
    int workers = std::clamp(options_.parallel_files, 1, kMaxLoadWorkers);
    workers = std::min<int>(workers, std::max<size_t>(plan_.items.size(), 1));
    std::vector<std::thread> threads;
    for (int w = 0; w < workers; ++w) {
      threads.emplace_back([this] { Worker(); });
    }
    for (auto& t : threads) t.join();
    absl::MutexLock l(&mu_);
    return status_;
  }

  void Report(bool final) {
    if (!options_.progress) return;
    absl::MutexLock l(&progress_mu_);
    absl::Time now = absl::Now();
    if (!final && now - last_report_ < kProgressEvery) return;
    last_report_ = now;
    LoadProgress p;
    p.bytes_done = bytes_done_.load();
    p.bytes_total = plan_.copy_bytes;
    p.files_total = plan_.files.size();
    for (size_t f = 0; f < plan_.files.size(); ++f) {
      if (file_bytes_done_[f].load() == plan_.files[f].data_bytes)
        ++p.files_done;
    }
    options_.progress(p);
  }

 private:
  void Fail(absl::Status s) {
    absl::MutexLock l(&mu_);
    if (status_.ok()) status_ = std::move(s);
    stop_ = true;
  }

  void Worker() {
    auto buffer = std::make_unique<char[]>(kLoadIoBytes);
    // Registered, the bytes move without a staging copy; unregistered
    // (a transport that cannot) they are staged, which is only slower.
    auto registration = client_.RegisterBuffer(buffer.get(), kLoadIoBytes);
    while (!stop_.load()) {
      size_t i = next_item_.fetch_add(1);
      if (i >= plan_.items.size()) return;
      absl::Status s =
          CopyItem(plan_.items[i], absl::MakeSpan(buffer.get(), kLoadIoBytes));
      if (!s.ok()) return Fail(std::move(s));
    }
  }

  absl::Status CopyItem(const WorkItem& item, absl::Span<char> buffer) {
    const SafetensorsFile& f = plan_.files[item.file];
    MESHPOOL_ASSIGN_OR_RETURN(FileDescriptor fd, FileDescriptor::Open(f.path));
    ChunkDigester digester(f, plan_, item);
    std::vector<client_internal::KnownDigest> chunks;
    for (uint64_t at = item.begin; at < item.end && !stop_.load();) {
      // Each piece ends on a chunk boundary, so every chunk's bytes are in
      // one piece: hashed once, for the manifest and for Verify alike.
      const uint64_t end = digester.ChunkBoundaryAtOrBefore(
          std::min(item.end, at + kLoadIoBytes));
      if (end <= at) {
        return absl::InternalError(absl::StrCat(
            f.path, ": no chunk boundary within ", kLoadIoBytes,
            " bytes of byte ", at, " (chunks are ", kWeightChunkBytes, ")"));
      }
      const uint64_t n = end - at;
      auto src = buffer.subspan(0, n);
      MESHPOOL_RETURN_IF_ERROR(fd.ReadAt(f.data_offset + at, src, f.path));
      const uint64_t region_at = plan_.file_base[item.file] + at;
      MESHPOOL_RETURN_IF_ERROR(region_.Write(region_at, src));
      chunks.clear();
      digester.Feed(src, &chunks);
      // Every copy's nodes hash what landed and the region compares with
      // the chunk digests: nothing is read back over the network.
      absl::Status verified =
          client_internal::VerifyWithDigests(region_, region_at, src, chunks);
      if (!verified.ok()) {
        return absl::Status(verified.code(),
                            absl::StrCat(f.path, ": bytes ", at, "..", at + n,
                                         ": ", verified.message()));
      }
      at += n;
      bytes_done_ += n;
      file_bytes_done_[item.file] += n;
      Report(false);
    }
    return absl::OkStatus();
  }

  // Walks the bytes of one work item in order, chunk by chunk (a tensor's
  // kWeightChunkBytes pieces from its start), and records each chunk's
  // digest in the manifest (workers own disjoint chunks).
  class ChunkDigester {
   public:
    ChunkDigester(const SafetensorsFile& f, Plan& plan, const WorkItem& item)
        : f_(f),
          plan_(plan),
          file_(item.file),
          tensor_(item.first_tensor),
          pos_(item.begin) {}

    // The last chunk boundary in (pos, limit], or pos when there is none.
    uint64_t ChunkBoundaryAtOrBefore(uint64_t limit) const {
      uint64_t best = pos_;
      for (size_t t = tensor_; t < f_.tensors.size(); ++t) {
        const auto& tensor = f_.tensors[t];
        if (tensor.end <= best) continue;  // empty, or before
        if (tensor.end <= limit) {
          best = tensor.end;
          continue;
        }
        if (limit > tensor.begin) {
          const uint64_t whole =
              (limit - tensor.begin) / kWeightChunkBytes * kWeightChunkBytes;
          best = std::max(best, tensor.begin + whole);
        }
        break;
      }
      return best;
    }

    // Hashes the whole chunks of `bytes`, which start at the digester's
    // position and end on a chunk boundary, records them in the manifest
    // and appends them to `out` (offsets from bytes' start).
    void Feed(absl::Span<const char> bytes,
              std::vector<client_internal::KnownDigest>* out) {
      const uint64_t start = pos_;
      const uint64_t end = pos_ + bytes.size();
      while (pos_ < end) {
        while (f_.tensors[tensor_].end <= pos_) ++tensor_;  // skips empties
        const auto& t = f_.tensors[tensor_];
        const uint64_t chunk = (pos_ - t.begin) / kWeightChunkBytes;
        const uint64_t chunk_end =
            std::min(t.end, t.begin + (chunk + 1) * kWeightChunkBytes);
        const uint64_t length = chunk_end - pos_;
        const uint64_t digest =
            format::DigestBytes(bytes.subspan(pos_ - start, length));
        proto::WeightTensor* e = plan_.manifest.mutable_tensors(
            static_cast<int>(plan_.first_manifest[file_] + tensor_));
        e->set_chunk_digests(static_cast<int>(chunk), digest);
        out->push_back({pos_ - start, length, digest});
        pos_ = chunk_end;
      }
    }

   private:
    const SafetensorsFile& f_;
    Plan& plan_;
    const size_t file_;
    size_t tensor_;
    uint64_t pos_;
  };

  Client& client_;
  Region& region_;
  Plan& plan_;
  const LoadOptions& options_;
  std::atomic<size_t> next_item_{0};
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> bytes_done_{0};
  std::unique_ptr<std::atomic<uint64_t>[]> file_bytes_done_ {
    new std::atomic<uint64_t>[ plan_.files.size() ]()
  };
  absl::Mutex progress_mu_;
  absl::Time last_report_ ABSL_GUARDED_BY(progress_mu_) = absl::InfinitePast();
  absl::Mutex mu_;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

// Writes `bytes` at `offset` and checks them by reading them back.
absl::Status WriteVerified(Region& region, uint64_t offset,
                           const std::string& bytes) {
  MESHPOOL_RETURN_IF_ERROR(region.Write(offset, bytes));
  std::string back(bytes.size(), '\0');
  MESHPOOL_RETURN_IF_ERROR(region.Read(offset, absl::MakeSpan(back)));
  if (back != bytes) {
    return absl::DataLossError(
        absl::StrCat("region ", region.name(), ": bytes at ", offset,
                     " read back differ from what was written"));
  }
  return absl::OkStatus();
}

// Fills tensor digests, then writes the manifest and the superblock.
absl::Status Finish(Region& region, Plan& plan) {
  for (proto::WeightTensor& t : *plan.manifest.mutable_tensors()) {
    t.set_digest(XXH3_64bits(t.chunk_digests().data(),
                             t.chunk_digests_size() * sizeof(uint64_t)));
  }
  std::string manifest = plan.manifest.SerializeAsString();
  if (plan.manifest_offset + manifest.size() != plan.region_size) {
    return absl::InternalError("manifest size changed after planning");
  }
  MESHPOOL_RETURN_IF_ERROR(
      WriteVerified(region, plan.manifest_offset, manifest));
  client_internal::ModelSuperblock sb;
  sb.manifest_offset = plan.manifest_offset;
  sb.manifest_length = manifest.size();
  sb.manifest_digest = XXH3_64bits(manifest.data(), manifest.size());
  return WriteVerified(region, 0, client_internal::EncodeSuperblock(sb));
}

// Bumps the staging region's heartbeat counter until destroyed, so that
// RemoveModel can tell this load is alive.
class LoadHeartbeat {
 public:
  explicit LoadHeartbeat(Region& region)
      : thread_([this, &region] {
          uint64_t beat = 0;
          absl::MutexLock l(&mu_);
          while (!stop_) {
            ++beat;
            (void)region.Write(
                client_internal::kLoadHeartbeatOffset,
                absl::MakeConstSpan(reinterpret_cast<const char*>(&beat), 8));
            mu_.AwaitWithTimeout(absl::Condition(&stop_),
                                 client_internal::kLoadHeartbeatInterval);
          }
        }) {}
  ~LoadHeartbeat() {
    {
      absl::MutexLock l(&mu_);
      stop_ = true;
    }
    thread_.join();
  }

 private:
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once mu_ and stop_ exist
};

std::string StagingName(absl::string_view model) {
  std::random_device rd;
  uint64_t id = (uint64_t{rd()} << 32) ^ rd();
  return absl::StrCat(client_internal::StagingRegionPrefix(model),
                      absl::StrFormat("%016x", id));
}

}  // namespace

absl::StatusOr<ModelInfo> LoadSafetensors(Client& client,
                                          absl::string_view model,
                                          absl::Span<const std::string> paths,
                                          const LoadOptions& options) {
  MESHPOOL_RETURN_IF_ERROR(client_internal::ValidateModelName(model));
  MESHPOOL_ASSIGN_OR_RETURN(std::vector<SafetensorsFile> files,
                            ParseInputs(paths));
  const std::string target = client_internal::ModelRegionName(model);
  if (!options.replace) {
    absl::StatusOr<std::unique_ptr<Region>> existing =
        OpenRegion(client, target);
    if (existing.ok()) {
      return absl::AlreadyExistsError(absl::StrCat(
          "model ", model,
          " is already loaded: set LoadOptions.replace to replace it, or "
          "remove it first (RemoveModel)"));
    }
    if (!absl::IsNotFound(existing.status())) return existing.status();
  }
  MESHPOOL_ASSIGN_OR_RETURN(Plan plan, MakePlan(model, std::move(files)));
  MESHPOOL_ASSIGN_OR_RETURN(std::unique_ptr<Region> region,
                            CreateRegion(client, StagingName(model),
                                         plan.region_size, options.region));
  Copier copier(client, *region, plan, options);
  absl::Status s;
  {
    LoadHeartbeat heartbeat(*region);
    s = copier.Run();
    if (s.ok()) s = Finish(*region, plan);
  }
  if (s.ok()) s = RenameRegion(client, region->name(), target, options.replace);
  if (!s.ok()) {
    // Best effort: a staging region left behind is removed by RemoveModel.
    (void)DeleteRegion(client, region->name());
    if (absl::IsAlreadyExists(s)) {
      return absl::AlreadyExistsError(
          absl::StrCat("model ", model,
                       " was loaded by someone else meanwhile: set "
                       "LoadOptions.replace to replace it"));
    }
    return s;
  }
  copier.Report(true);
  ModelInfo info;
  info.name = std::string(model);
  info.region = target;
  info.tensors = plan.manifest.tensors_size();
  info.tensor_bytes = plan.manifest.tensor_bytes();
  info.files.assign(plan.manifest.files().begin(), plan.manifest.files().end());
  info.loaded = absl::FromUnixMillis(plan.manifest.loaded_unix_ms());
  return info;
}

}  // namespace meshpool
