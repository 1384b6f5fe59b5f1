#include "client/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <tuple>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/common.h"
#include "common/json.h"

namespace meshpool::client_internal {
namespace {

static_assert(kMaxSafetensorsHeaderBytes <= kMaxJsonBytes,
              "the JSON reader must accept every header we accept");
static_assert(kMaxSafetensorsIndexBytes <= kMaxJsonBytes,
              "the JSON reader must accept every index we accept");

struct DTypeInfo {
  DType dtype;
  absl::string_view name;
  uint64_t bytes;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::kBool, "BOOL", 1},      {DType::kU8, "U8", 1},
    {DType::kI8, "I8", 1},          {DType::kF8E4M3, "F8_E4M3", 1},
    {DType::kF8E5M2, "F8_E5M2", 1}, {DType::kI16, "I16", 2},
    {DType::kU16, "U16", 2},        {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2},      {DType::kI32, "I32", 4},
    {DType::kU32, "U32", 4},        {DType::kF32, "F32", 4},
    {DType::kI64, "I64", 8},        {DType::kU64, "U64", 8},
    {DType::kF64, "F64", 8},
};
static_assert(sizeof(kDTypes) / sizeof(kDTypes[0]) == kNumDTypes,
              "one table row per DType");
constexpr bool TableIsInEnumOrder() {
  for (int i = 0; i < kNumDTypes; ++i) {
    if (static_cast<int>(kDTypes[i].dtype) != i) return false;
  }
  return true;
}
static_assert(TableIsInEnumOrder(), "kDTypes is indexed by DType");

constexpr absl::string_view kMetadataKey = "__metadata__";

// A name as it appears in messages: C escapes keep messages on one line.
std::string Quoted(absl::string_view name) {
  return absl::StrCat("'", absl::CHexEscape(name), "'");
}

absl::Status FileError(absl::string_view path, absl::string_view reason) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", reason));
}

absl::Status TensorError(absl::string_view path, absl::string_view name,
                         absl::string_view reason) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": tensor ", Quoted(name), ": ", reason));
}

std::string ShapeString(const std::vector<uint64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

std::string RangeString(uint64_t begin, uint64_t end) {
  return absl::StrCat("[", begin, ", ", end, ")");
}

// What a JSON value is, for "found ..." in messages.
std::string Describe(const JsonValue& v) {
  if (v.is_number()) return absl::StrCat("number ", v.number_text());
  return std::string(v.type_name());
}

// Reads a non-negative 64-bit integer; `what` names it for the message.
absl::Status GetUint64(absl::string_view path, absl::string_view name,
                       const JsonValue& v, absl::string_view what,
                       uint64_t* out) {
  std::optional<uint64_t> value = v.AsUint64();
  if (!value) {
    return TensorError(path, name,
                       absl::StrCat(what,
                                    " must be an integer in [0, 2^64), "
                                    "found ",
                                    Describe(v)));
  }
  *out = *value;
  return absl::OkStatus();
}

// The byte size of `shape` elements of `dtype`, or InvalidArgument when it
// does not fit 64 bits. Order independent: the non-zero dimensions must
// multiply within range even when another dimension is 0.
absl::StatusOr<uint64_t> TensorBytes(absl::string_view path,
                                     const SafetensorsTensor& t) {
  uint64_t elements = 1;
  bool empty = false;
  for (uint64_t d : t.shape) {
    if (d == 0) {
      empty = true;
    } else if (elements > UINT64_MAX / d) {
      return TensorError(path, t.name,
                         absl::StrCat("shape ", ShapeString(t.shape),
                                      " has more elements than fit in 64 "
                                      "bits"));
    } else {
      elements *= d;
    }
  }
  const uint64_t width = DTypeBytes(t.dtype);
  if (elements > UINT64_MAX / width) {
    return TensorError(
        path, t.name,
        absl::StrCat("shape ", ShapeString(t.shape), " of ", DTypeName(t.dtype),
                     " needs more bytes than fit in 64 bits"));
  }
  return empty ? 0 : elements * width;
}

// Fills `out` (name already set) from one header entry and checks its
// offsets against its size and the data buffer.
absl::Status ParseTensorEntry(absl::string_view path, const JsonValue& entry,
                              uint64_t data_bytes, SafetensorsTensor* out) {
  const std::string& name = out->name;
  if (!entry.is_object()) {
    return TensorError(path, name,
                       absl::StrCat("entry must be an object with dtype, "
                                    "shape and data_offsets, found ",
                                    Describe(entry)));
  }
  for (const JsonValue::Member& m : entry.members()) {
    if (m.first != "dtype" && m.first != "shape" && m.first != "data_offsets") {
      return TensorError(path, name,
                         absl::StrCat("unknown field ", Quoted(m.first),
                                      " (an entry has exactly dtype, shape "
                                      "and data_offsets)"));
    }
  }
  const JsonValue* dtype = entry.Find("dtype");
  const JsonValue* shape = entry.Find("shape");
  const JsonValue* offsets = entry.Find("data_offsets");
  if (dtype == nullptr) return TensorError(path, name, "missing field 'dtype'");
  if (shape == nullptr) return TensorError(path, name, "missing field 'shape'");
  if (offsets == nullptr) {
    return TensorError(path, name, "missing field 'data_offsets'");
  }
  if (!dtype->is_string()) {
    return TensorError(path, name,
                       absl::StrCat("field 'dtype' must be a string such as "
                                    "\"F32\", found ",
                                    Describe(*dtype)));
  }
  absl::StatusOr<DType> parsed = ParseSafetensorsDType(dtype->string_value());
  if (!parsed.ok()) return TensorError(path, name, parsed.status().message());
  out->dtype = *parsed;
  if (!shape->is_array()) {
    return TensorError(path, name,
                       absl::StrCat("field 'shape' must be an array of "
                                    "integers, found ",
                                    Describe(*shape)));
  }
  out->shape.resize(shape->elements().size());
  for (size_t i = 0; i < out->shape.size(); ++i) {
    MESHPOOL_RETURN_IF_ERROR(GetUint64(path, name, shape->elements()[i],
                                       absl::StrCat("shape[", i, "]"),
                                       &out->shape[i]));
  }
  if (!offsets->is_array() || offsets->elements().size() != 2) {
    return TensorError(
        path, name,
        absl::StrCat(
            "field 'data_offsets' must be an array "
            "[begin, end], found ",
            offsets->is_array()
                ? absl::StrCat("an array of ", offsets->elements().size())
                : Describe(*offsets)));
  }
  MESHPOOL_RETURN_IF_ERROR(GetUint64(path, name, offsets->elements()[0],
                                     "data_offsets[0]", &out->begin));
  MESHPOOL_RETURN_IF_ERROR(GetUint64(path, name, offsets->elements()[1],
                                     "data_offsets[1]", &out->end));
  MESHPOOL_ASSIGN_OR_RETURN(const uint64_t bytes, TensorBytes(path, *out));
  const std::string offsets_text =
      absl::StrCat("data_offsets [", out->begin, ", ", out->end, "]");
  if (out->begin > out->end) {
    return TensorError(
        path, name,
        absl::StrCat(offsets_text, " are reversed (begin must be <= end)"));
  }
  if (out->end > data_bytes) {
    return TensorError(path, name,
                       absl::StrCat(offsets_text,
                                    " end past the data buffer "
                                    "of ",
                                    data_bytes, " bytes (truncated file?)"));
  }
  if (out->end - out->begin != bytes) {
    return TensorError(
        path, name,
        absl::StrCat(offsets_text, " span ", out->end - out->begin,
                     " bytes but shape ", ShapeString(out->shape), " of ",
                     DTypeName(out->dtype), " needs ", bytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status ParseMetadata(
    absl::string_view path, const JsonValue& value,
    std::vector<std::pair<std::string, std::string>>* out) {
  if (!value.is_object()) {
    return FileError(path, absl::StrCat("__metadata__ must be an object of "
                                        "strings, found ",
                                        Describe(value)));
  }
  for (const JsonValue::Member& m : value.members()) {
    if (!m.second.is_string()) {
      return FileError(
          path, absl::StrCat("__metadata__ ", Quoted(m.first),
                             " must be a string, found ", Describe(m.second)));
    }
    out->emplace_back(m.first, m.second.string_value());
  }
  return absl::OkStatus();
}

// Sorts `tensors` by (begin, end, name) and checks that they cover
// [0, data_bytes) exactly once.
absl::Status CheckLayout(absl::string_view path, uint64_t data_bytes,
                         std::vector<SafetensorsTensor>& tensors) {
  std::sort(tensors.begin(), tensors.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
              return std::tie(a.begin, a.end, a.name) <
                     std::tie(b.begin, b.end, b.name);
            });
  uint64_t covered = 0;
  const SafetensorsTensor* prev = nullptr;
  for (const SafetensorsTensor& t : tensors) {
    if (t.begin < covered) {
      return FileError(
          path, absl::StrCat("tensors ", Quoted(prev->name), " ",
                             RangeString(prev->begin, prev->end), " and ",
                             Quoted(t.name), " ", RangeString(t.begin, t.end),
                             " overlap in the data buffer"));
    }
    if (t.begin > covered) {
      return FileError(
          path, absl::StrCat("data bytes ", RangeString(covered, t.begin),
                             " belong to no tensor (a hole ",
                             prev == nullptr
                                 ? std::string("at the start")
                                 : absl::StrCat("after ", Quoted(prev->name)),
                             ", before ", Quoted(t.name), ")"));
    }
    covered = t.end;
    prev = &t;
  }
  if (covered != data_bytes) {
    return FileError(
        path,
        absl::StrCat("data bytes ", RangeString(covered, data_bytes),
                     " at the end of the buffer belong to no tensor",
                     prev == nullptr
                         ? std::string(" (the header lists none)")
                         : absl::StrCat(" (after ", Quoted(prev->name), ")")));
  }
  return absl::OkStatus();
}

// The one owner of a read-only file descriptor, with the file's size.
class ReadOnlyFile {
 public:
  // NotFound / PermissionDenied / ... from open(2) or fstat(2);
  // InvalidArgument when `path` is not a regular file.
  static absl::StatusOr<ReadOnlyFile> Create(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("open ", path));
    ReadOnlyFile file(path, fd);
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      return ErrnoToStatus(errno, absl::StrCat("stat ", path));
    }
    if (!S_ISREG(st.st_mode)) {
      return FileError(path, "not a regular file");
    }
    file.size_ = static_cast<uint64_t>(st.st_size);
    return file;
  }
  ReadOnlyFile(ReadOnlyFile&& other) noexcept
      : path_(std::move(other.path_)),
        fd_(std::exchange(other.fd_, -1)),
        size_(other.size_) {}
  ReadOnlyFile& operator=(ReadOnlyFile&&) = delete;
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;
  ~ReadOnlyFile() {
    if (fd_ >= 0) ::close(fd_);
  }

  uint64_t size() const { return size_; }

  // Reads exactly [offset, offset + out.size()). Errors from pread(2), or
  // InvalidArgument when the file ends early (it shrank since Create).
  absl::Status ReadAt(uint64_t offset, std::string& out) const {
    size_t done = 0;
    while (done < out.size()) {
      const ssize_t n = ::pread(fd_, out.data() + done, out.size() - done,
                                static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoToStatus(errno, absl::StrCat("read ", path_));
      if (n == 0) {
        return FileError(path_, absl::StrCat("file ended at byte ",
                                             offset + done, " while reading ",
                                             out.size(), " bytes at offset ",
                                             offset, " (changed while read?)"));
      }
      done += static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }

 private:
  ReadOnlyFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}

  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// Shard names must stay inside the index's directory tree.
absl::Status CheckShardName(absl::string_view path, absl::string_view tensor,
                            absl::string_view shard) {
  absl::string_view problem;
  if (shard.empty()) {
    problem = "is empty";
  } else if (shard.front() == '/') {
    problem = "is absolute";
  } else if (shard.find('\0') != absl::string_view::npos) {
    problem = "contains a NUL byte";
  } else {
    for (absl::string_view part : absl::StrSplit(shard, '/')) {
      if (part == "..") problem = "contains a '..' component";
    }
  }
  if (problem.empty()) return absl::OkStatus();
  return FileError(
      path, absl::StrCat("weight_map ", Quoted(tensor), ": shard file name ",
                         Quoted(shard), " ", problem,
                         "; it must be relative to the index's "
                         "directory"));
}

}  // namespace

absl::StatusOr<DType> ParseSafetensorsDType(absl::string_view name) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.name == name) return info.dtype;
  }
  std::vector<absl::string_view> known;
  for (const DTypeInfo& info : kDTypes) known.push_back(info.name);
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype ", Quoted(name),
                                                 "; known dtypes are ",
                                                 absl::StrJoin(known, ", ")));
}

absl::StatusOr<SafetensorsFile> ParseSafetensorsHeader(
    absl::string_view path_for_messages, absl::string_view header_json,
    uint64_t file_bytes) {
  const absl::string_view path = path_for_messages;
  if (header_json.size() > kMaxSafetensorsHeaderBytes) {
    return FileError(path, absl::StrCat("header of ", header_json.size(),
                                        " bytes is over the limit of ",
                                        kMaxSafetensorsHeaderBytes, " bytes"));
  }
  if (file_bytes < kSafetensorsPrefixBytes ||
      header_json.size() > file_bytes - kSafetensorsPrefixBytes) {
    return FileError(path, absl::StrCat("header length ", header_json.size(),
                                        " runs past the end of the file (",
                                        file_bytes, " bytes; truncated?)"));
  }
  SafetensorsFile file;
  file.path = std::string(path);
  file.file_bytes = file_bytes;
  file.data_offset = kSafetensorsPrefixBytes + header_json.size();
  file.data_bytes = file_bytes - file.data_offset;

  absl::StatusOr<JsonValue> json =
      ParseJson(header_json, kMaxSafetensorsHeaderBytes);
  if (!json.ok()) {
    return FileError(path, absl::StrCat("header is not valid JSON: ",
                                        json.status().message(),
                                        " (header bytes; the file offset is "
                                        "8 more)"));
  }
  if (!json->is_object()) {
    return FileError(path, absl::StrCat("header must be a JSON object, found ",
                                        Describe(*json)));
  }
  file.tensors.reserve(json->members().size());
  for (const JsonValue::Member& m : json->members()) {
    if (m.first == kMetadataKey) {
      MESHPOOL_RETURN_IF_ERROR(ParseMetadata(path, m.second, &file.metadata));
      continue;
    }
    if (m.first.empty()) {
      return FileError(path, "a tensor has an empty name");
    }
    SafetensorsTensor& t = file.tensors.emplace_back();
    t.name = m.first;
    MESHPOOL_RETURN_IF_ERROR(
        ParseTensorEntry(path, m.second, file.data_bytes, &t));
  }
  MESHPOOL_RETURN_IF_ERROR(CheckLayout(path, file.data_bytes, file.tensors));
  return file;
}

absl::StatusOr<SafetensorsFile> ReadSafetensorsFile(const std::string& path) {
  MESHPOOL_ASSIGN_OR_RETURN(ReadOnlyFile file, ReadOnlyFile::Create(path));
  if (file.size() < kSafetensorsPrefixBytes) {
    return FileError(path, absl::StrCat("file is ", file.size(),
                                        " bytes, too short for the 8-byte "
                                        "header length (not safetensors?)"));
  }
  std::string prefix(kSafetensorsPrefixBytes, '\0');
  MESHPOOL_RETURN_IF_ERROR(file.ReadAt(0, prefix));
  uint64_t header_bytes = 0;
  for (int i = static_cast<int>(kSafetensorsPrefixBytes) - 1; i >= 0; --i) {
    header_bytes = (header_bytes << 8) | static_cast<unsigned char>(prefix[i]);
  }
  if (header_bytes > kMaxSafetensorsHeaderBytes) {
    return FileError(
        path, absl::StrCat("header length ", header_bytes,
                           " is over the limit of ", kMaxSafetensorsHeaderBytes,
                           " bytes (not safetensors, or "
                           "corrupt)"));
  }
  if (header_bytes > file.size() - kSafetensorsPrefixBytes) {
    return FileError(path, absl::StrCat("header length ", header_bytes,
                                        " runs past the end of the file (",
                                        file.size(), " bytes; truncated?)"));
  }
  std::string header(header_bytes, '\0');
  MESHPOOL_RETURN_IF_ERROR(file.ReadAt(kSafetensorsPrefixBytes, header));
  return ParseSafetensorsHeader(path, header, file.size());
}

absl::StatusOr<SafetensorsIndex> ReadSafetensorsIndex(const std::string& path) {
  MESHPOOL_ASSIGN_OR_RETURN(ReadOnlyFile file, ReadOnlyFile::Create(path));
  if (file.size() > kMaxSafetensorsIndexBytes) {
    return FileError(path, absl::StrCat("index file of ", file.size(),
                                        " bytes is over the limit of ",
                                        kMaxSafetensorsIndexBytes, " bytes"));
  }
  std::string text(file.size(), '\0');
  MESHPOOL_RETURN_IF_ERROR(file.ReadAt(0, text));
  absl::StatusOr<JsonValue> json = ParseJson(text, kMaxSafetensorsIndexBytes);
  if (!json.ok()) {
    return FileError(path, absl::StrCat("index is not valid JSON: ",
                                        json.status().message()));
  }
  if (!json->is_object()) {
    return FileError(path, absl::StrCat("index must be a JSON object, found ",
                                        Describe(*json)));
  }
  for (const JsonValue::Member& m : json->members()) {
    if (m.first != "metadata" && m.first != "weight_map") {
      return FileError(path, absl::StrCat("unknown key ", Quoted(m.first),
                                          " (an index has metadata and "
                                          "weight_map)"));
    }
  }
  const JsonValue* metadata = json->Find("metadata");
  if (metadata != nullptr && !metadata->is_object()) {
    return FileError(path, absl::StrCat("'metadata' must be an object, found ",
                                        Describe(*metadata)));
  }
  const JsonValue* map = json->Find("weight_map");
  if (map == nullptr) return FileError(path, "missing key 'weight_map'");
  if (!map->is_object()) {
    return FileError(path, absl::StrCat("'weight_map' must be an object of "
                                        "tensor name -> file name, found ",
                                        Describe(*map)));
  }
  if (map->members().empty()) {
    return FileError(path, "'weight_map' lists no tensors");
  }
  const size_t slash = path.rfind('/');
  const std::string dir =
      slash == std::string::npos ? "" : path.substr(0, slash + 1);
  SafetensorsIndex index;
  index.path = path;
  for (const JsonValue::Member& m : map->members()) {
    if (m.first.empty()) {
      return FileError(path, "weight_map has a tensor with an empty name");
    }
    if (!m.second.is_string()) {
      return FileError(path, absl::StrCat("weight_map ", Quoted(m.first),
                                          ": file name must be a string, "
                                          "found ",
                                          Describe(m.second)));
    }
    MESHPOOL_RETURN_IF_ERROR(
        CheckShardName(path, m.first, m.second.string_value()));
    std::string shard = absl::StrCat(dir, m.second.string_value());
    if (std::find(index.files.begin(), index.files.end(), shard) ==
        index.files.end()) {
      index.files.push_back(shard);
    }
    index.weight_map.emplace_back(m.first, std::move(shard));
  }
  return index;
}

std::string EncodeSafetensorsHeader(
    std::vector<SafetensorsTensor>& tensors,
    const std::vector<std::pair<std::string, std::string>>& metadata) {
  std::vector<std::string> entries;
  if (!metadata.empty()) {
    std::vector<std::string> pairs;
    for (const auto& [key, value] : metadata) {
      pairs.push_back(absl::StrCat(JsonQuote(key), ":", JsonQuote(value)));
    }
    entries.push_back(absl::StrCat(JsonQuote(kMetadataKey), ":{",
                                   absl::StrJoin(pairs, ","), "}"));
  }
  uint64_t offset = 0;
  for (SafetensorsTensor& t : tensors) {
    uint64_t bytes = DTypeBytes(t.dtype);
    for (uint64_t d : t.shape) bytes *= d;
    t.begin = offset;
    t.end = offset + bytes;
    offset = t.end;
    entries.push_back(absl::StrCat(
        JsonQuote(t.name), ":{\"dtype\":", JsonQuote(DTypeName(t.dtype)),
        ",\"shape\":[", absl::StrJoin(t.shape, ","), "],\"data_offsets\":[",
        t.begin, ",", t.end, "]}"));
  }
  std::string header = absl::StrCat("{", absl::StrJoin(entries, ","), "}");
  header.resize((header.size() + 7) / 8 * 8, ' ');
  std::string out(kSafetensorsPrefixBytes, '\0');
  for (size_t i = 0; i < kSafetensorsPrefixBytes; ++i) {
    out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  }
  return out + header;
}

}  // namespace meshpool::client_internal

namespace meshpool {

absl::string_view DTypeName(DType dtype) {
  const int i = static_cast<int>(dtype);
  return i >= 0 && i < client_internal::kNumDTypes
             ? client_internal::kDTypes[i].name
             : "UNKNOWN";
}

size_t DTypeBytes(DType dtype) {
  const int i = static_cast<int>(dtype);
  return i >= 0 && i < client_internal::kNumDTypes
             ? client_internal::kDTypes[i].bytes
             : 1;
}

}  // namespace meshpool
