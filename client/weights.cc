// WeightStore: reading a loaded model (layout in weights_manifest.h).
#include "meshpool/weights.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/weights_manifest.h"
#include "common/common.h"
#include "format/layout.h"
#include "meshpool/region.h"

namespace meshpool {

using client_internal::ChunkCount;

class WeightStore::Impl {
 public:
  Impl(std::unique_ptr<Region> region, proto::WeightManifest manifest)
      : region_(std::move(region)), manifest_(std::move(manifest)) {
    info_.name = manifest_.model();
    info_.region = region_->name();
    info_.tensors = manifest_.tensors_size();
    info_.tensor_bytes = manifest_.tensor_bytes();
    info_.files.assign(manifest_.files().begin(), manifest_.files().end());
    info_.loaded = absl::FromUnixMillis(manifest_.loaded_unix_ms());
    tensors_.reserve(manifest_.tensors_size());
    for (int i = 0; i < manifest_.tensors_size(); ++i) {
      tensors_.push_back(
          client_internal::ToTensorInfo(manifest_.tensors(i), region_->name()));
      by_name_[tensors_.back().name] = i;
    }
  }

  const ModelInfo& info() const { return info_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }

  absl::StatusOr<int> Index(absl::string_view name) const {
    auto it = by_name_.find(name);
    if (it == by_name_.end()) {
      return absl::NotFoundError(
          absl::StrCat("model ", info_.name, " has no tensor '", name,
                       "' (WeightStore::Tensors lists them)"));
    }
    return it->second;
  }

  // Reads [begin, end) bytes of tensor `index` into out[0, end - begin);
  // with verify, checks every chunk the range touches.
  absl::Status ReadRange(int index, uint64_t begin, uint64_t end,
                         absl::Span<char> out, bool verify) const {
    const TensorInfo& t = tensors_[index];
    if (end == begin) return absl::OkStatus();
    if (!verify) {
      return region_->Read(t.offset + begin, out.subspan(0, end - begin));
    }
    const uint64_t first = begin / kWeightChunkBytes;
    const uint64_t last = (end - 1) / kWeightChunkBytes;  // inclusive
    const uint64_t span_begin = first * kWeightChunkBytes;
    const uint64_t span_end =
        std::min(t.length, (last + 1) * kWeightChunkBytes);
    // Read whole chunks straight into `out` when the range is exactly
    // them; otherwise into scratch, then copy the range out.
    std::vector<char> scratch;
    absl::Span<char> chunks;
    if (span_begin == begin && span_end == end) {
      chunks = out.subspan(0, end - begin);
    } else {
      scratch.resize(span_end - span_begin);
      chunks = absl::MakeSpan(scratch);
    }
    MESHPOOL_RETURN_IF_ERROR(region_->Read(t.offset + span_begin, chunks));
    const proto::WeightTensor& entry = manifest_.tensors(index);
    for (uint64_t c = first; c <= last; ++c) {
      uint64_t at = c * kWeightChunkBytes - span_begin;
      uint64_t len =
          std::min(kWeightChunkBytes, t.length - c * kWeightChunkBytes);
      if (format::DigestBytes(absl::MakeConstSpan(chunks.data() + at, len)) !=
          entry.chunk_digests(c)) {
        return absl::DataLossError(absl::StrCat(
            "tensor '", t.name, "' of model ", info_.name, ": chunk ", c,
            " (bytes ", c * kWeightChunkBytes, "..",
            c * kWeightChunkBytes + len,
            ") does not match its digest; the model's memory was changed or "
            "reused: reload it (LoadOptions.replace)"));
      }
    }
    if (!scratch.empty()) {
      std::memcpy(out.data(), scratch.data() + (begin - span_begin),
                  end - begin);
    }
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<Region> region_;
  proto::WeightManifest manifest_;
  ModelInfo info_;
  std::vector<TensorInfo> tensors_;
  absl::flat_hash_map<std::string, int> by_name_;
};

namespace {

// Reads and checks the manifest of an open model region.
absl::StatusOr<proto::WeightManifest> ReadManifest(Region& region) {
  char sb_bytes[client_internal::kModelSuperblockEncodedBytes];
  if (region.size() < client_internal::kModelSuperblockBytes) {
    return absl::DataLossError(absl::StrCat(
        "region ", region.name(), " is too small to be a model; remove it"));
  }
  MESHPOOL_RETURN_IF_ERROR(region.Read(0, absl::MakeSpan(sb_bytes)));
  MESHPOOL_ASSIGN_OR_RETURN(client_internal::ModelSuperblock sb,
                            client_internal::DecodeSuperblock(
                                absl::string_view(sb_bytes, sizeof(sb_bytes)),
                                region.size(), region.name()));
  std::string bytes(sb.manifest_length, '\0');
  MESHPOOL_RETURN_IF_ERROR(
      region.Read(sb.manifest_offset, absl::MakeSpan(bytes)));
  return client_internal::DecodeManifest(bytes, sb, region.size(),
                                         region.name());
}

}  // namespace

WeightStore::WeightStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
WeightStore::~WeightStore() = default;

absl::StatusOr<std::unique_ptr<WeightStore>> WeightStore::Open(
    Client& client, absl::string_view model) {
  MESHPOOL_RETURN_IF_ERROR(client_internal::ValidateModelName(model));
  absl::StatusOr<std::unique_ptr<Region>> region =
      OpenRegion(client, client_internal::ModelRegionName(model));
  if (absl::IsNotFound(region.status())) {
    return absl::NotFoundError(
        absl::StrCat("no model named ", model,
                     " is loaded (meshpool weights ls lists "
                     "models; meshpool weights load loads one)"));
  }
  MESHPOOL_RETURN_IF_ERROR(region.status());
  MESHPOOL_ASSIGN_OR_RETURN(proto::WeightManifest manifest,
                            ReadManifest(**region));
  return std::unique_ptr<WeightStore>(new WeightStore(
      std::make_unique<Impl>(std::move(*region), std::move(manifest))));
}

const ModelInfo& WeightStore::info() const { return impl_->info(); }
const std::vector<TensorInfo>& WeightStore::Tensors() const {
  return impl_->tensors();
}

absl::StatusOr<const TensorInfo*> WeightStore::Find(
    absl::string_view tensor) const {
  MESHPOOL_ASSIGN_OR_RETURN(int i, impl_->Index(tensor));
  return &impl_->tensors()[i];
}

absl::StatusOr<size_t> WeightStore::ReadTensor(
    absl::string_view tensor, absl::Span<char> out,
    const ReadOptions& options) const {
  MESHPOOL_ASSIGN_OR_RETURN(int i, impl_->Index(tensor));
  const TensorInfo& t = impl_->tensors()[i];
  if (out.size() < t.length) {
    return absl::OutOfRangeError(
        absl::StrCat("tensor '", t.name, "' is ", t.length,
                     " bytes; the buffer holds ", out.size()));
  }
  MESHPOOL_RETURN_IF_ERROR(
      impl_->ReadRange(i, 0, t.length, out, options.verify));
  return static_cast<size_t>(t.length);
}

absl::StatusOr<size_t> WeightStore::ReadTensorSlice(
    absl::string_view tensor, uint64_t row_begin, uint64_t row_end,
    absl::Span<char> out, const ReadOptions& options) const {
  MESHPOOL_ASSIGN_OR_RETURN(int i, impl_->Index(tensor));
  const TensorInfo& t = impl_->tensors()[i];
  if (t.shape.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", t.name,
                     "' is a scalar: it has no rows to slice; use "
                     "ReadTensor"));
  }
  if (row_begin > row_end || row_end > t.rows()) {
    return absl::OutOfRangeError(
        absl::StrCat("rows [", row_begin, ", ", row_end, ") of tensor '",
                     t.name, "' which has ", t.rows(), " rows"));
  }
  const uint64_t begin = row_begin * t.row_bytes();
  const uint64_t end = row_end * t.row_bytes();
  if (out.size() < end - begin) {
    return absl::OutOfRangeError(absl::StrCat(
        "rows [", row_begin, ", ", row_end, ") of tensor '", t.name, "' are ",
        end - begin, " bytes; the buffer holds ", out.size()));
  }
  MESHPOOL_RETURN_IF_ERROR(
      impl_->ReadRange(i, begin, end, out, options.verify));
  return static_cast<size_t>(end - begin);
}

absl::StatusOr<std::vector<ModelInfo>> ListModels(Client& client) {
  MESHPOOL_ASSIGN_OR_RETURN(
      std::vector<RegionDescription> regions,
      ListRegions(client, client_internal::kModelRegionPrefix));
  std::vector<ModelInfo> models;
  for (const RegionDescription& r : regions) {
    absl::string_view model = absl::string_view(r.name).substr(
        client_internal::kModelRegionPrefix.size());
    // A region someone named "weights/..." that no loader could have made.
    if (!client_internal::ValidateModelName(model).ok()) continue;
    absl::StatusOr<std::unique_ptr<WeightStore>> store =
        WeightStore::Open(client, model);
    // A model removed since the listing is simply not listed.
    if (absl::IsNotFound(store.status())) continue;
    MESHPOOL_RETURN_IF_ERROR(store.status());
    models.push_back((*store)->info());
    models.back().health = r.health;
  }
  return models;
}

namespace {

// The heartbeat counter of a staging region (0 when it cannot be read: a
// region deleted meanwhile, or too small to be a staging region).
uint64_t Heartbeat(Region& region) {
  uint64_t beat = 0;
  if (region.size() < client_internal::kModelSuperblockBytes ||
      !region
           .Read(client_internal::kLoadHeartbeatOffset,
                 absl::MakeSpan(reinterpret_cast<char*>(&beat), 8))
           .ok()) {
    return 0;
  }
  return beat;
}

}  // namespace

absl::Status RemoveModel(Client& client, absl::string_view model) {
  MESHPOOL_RETURN_IF_ERROR(client_internal::ValidateModelName(model));
  bool removed = false;
  absl::Status s =
      DeleteRegion(client, client_internal::ModelRegionName(model));
  if (s.ok()) {
    removed = true;
  } else if (!absl::IsNotFound(s)) {
    return s;
  }
  MESHPOOL_ASSIGN_OR_RETURN(
      std::vector<RegionDescription> staging,
      ListRegions(client, client_internal::StagingRegionPrefix(model)));
  // Staging regions of loads still running are spared: their heartbeat
  // moves. One wait covers them all.
  std::vector<std::pair<std::unique_ptr<Region>, uint64_t>> candidates;
  for (const RegionDescription& r : staging) {
    absl::StatusOr<std::unique_ptr<Region>> region = OpenRegion(client, r.name);
    if (absl::IsNotFound(region.status())) continue;
    MESHPOOL_RETURN_IF_ERROR(region.status());
    uint64_t beat = Heartbeat(**region);
    candidates.emplace_back(*std::move(region), beat);
  }
  if (!candidates.empty()) absl::SleepFor(client_internal::kLoadLivenessWait);
  std::vector<std::string> running;
  for (auto& [region, beat] : candidates) {
    if (Heartbeat(*region) != beat) {
      running.push_back(region->name());
      continue;
    }
    absl::Status d = DeleteRegion(client, region->name());
    if (d.ok()) {
      removed = true;
    } else if (!absl::IsNotFound(d)) {
      return d;
    }
  }
  if (!removed && !running.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "a load of model ", model, " is still running (staging region ",
        running[0], "): let it finish, or stop it and run this again"));
  }
  if (!removed) {
    return absl::NotFoundError(absl::StrCat(
        "no model named ", model, " (meshpool weights ls lists models)"));
  }
  return absl::OkStatus();
}

}  // namespace meshpool
