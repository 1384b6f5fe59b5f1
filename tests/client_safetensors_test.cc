#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/safetensors.h"
#include "gtest/gtest.h"
#include "tests/safetensors_writer.h"

namespace meshpool::client_internal {
namespace {

using ::meshpool::testing::Metadata;
using ::meshpool::testing::ScopedTempDir;
using ::meshpool::testing::TensorBytes;
using ::meshpool::testing::WriteFileBytes;
using ::meshpool::testing::WriteSafetensorsFile;
using ::meshpool::testing::WriteSafetensorsIndex;
using ::meshpool::testing::WriteShardedModel;

constexpr uint64_t kSeed = 20240611;
constexpr absl::string_view kPath = "shard-7.safetensors";

// Asserts InvalidArgument with every one of `parts` in the message.
void ExpectInvalid(const absl::Status& status,
                   std::initializer_list<absl::string_view> parts) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  for (absl::string_view part : parts) {
    EXPECT_TRUE(absl::StrContains(status.message(), part))
        << "missing '" << part << "' in: " << status.message();
  }
}

// A header entry for a hand-written header.
std::string Entry(absl::string_view name, absl::string_view dtype,
                  absl::string_view shape, uint64_t begin, uint64_t end) {
  return absl::StrCat("\"", name, "\":{\"dtype\":\"", dtype,
                      "\",\"shape\":", shape, ",\"data_offsets\":[", begin, ",",
                      end, "]}");
}

// Parses `header` as the header of a file whose data buffer has
// `data_bytes` bytes.
absl::Status ParseWithData(absl::string_view header, uint64_t data_bytes) {
  return ParseSafetensorsHeader(kPath, header, 8 + header.size() + data_bytes)
      .status();
}

std::string ReadRange(const std::string& path, uint64_t offset,
                      uint64_t length) {
  std::string out(length, '\0');
  const int fd = ::open(path.c_str(), O_RDONLY);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(::pread(fd, out.data(), length, static_cast<off_t>(offset)),
            static_cast<ssize_t>(length));
  ::close(fd);
  return out;
}

TEST(SafetensorsDType, NamesSizesAndParsingAgree) {
  const std::vector<std::pair<const char*, uint64_t>> expected = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"I64", 8}, {"U64", 8},     {"F64", 8}};
  ASSERT_EQ(expected.size(), static_cast<size_t>(kNumDTypes));
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType d = static_cast<DType>(i);
    EXPECT_EQ(DTypeName(d), expected[i].first);
    EXPECT_EQ(DTypeBytes(d), expected[i].second) << expected[i].first;
    EXPECT_EQ(*ParseSafetensorsDType(expected[i].first), d);
  }
}

TEST(SafetensorsDType, UnknownNameListsTheKnownOnes) {
  absl::StatusOr<DType> d = ParseSafetensorsDType("f32");
  ExpectInvalid(d.status(), {"unknown dtype 'f32'", "BOOL", "F8_E4M3", "F64"});
}

TEST(SafetensorsFile, RoundTripsSeveralDtypesScalarZeroSizeAndMetadata) {
  ScopedTempDir dir;
  const std::string path = dir.path() + "/model.safetensors";
  std::vector<SafetensorsTensor> tensors = {
      {"embed.weight", DType::kF32, {2, 3}},
      {"norm.bias", DType::kBF16, {5}},
      {"step", DType::kI64, {}},  // a scalar: 1 element
      {"empty", DType::kU8, {0, 5}},
      {"mask", DType::kBool, {3}},
      {"fp8", DType::kF8E4M3, {7}},
      {"wide", DType::kF64, {1, 2, 1}},
  };
  const Metadata metadata = {{"format", "pt"}, {"note", "a \"quoted\"\n"}};
  absl::StatusOr<testing::WrittenSafetensors> written =
      WriteSafetensorsFile(path, tensors, kSeed, metadata);
  ASSERT_TRUE(written.ok()) << written.status();

  absl::StatusOr<SafetensorsFile> f = ReadSafetensorsFile(path);
  ASSERT_TRUE(f.ok()) << f.status();
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(f->path, path);
  EXPECT_EQ(f->file_bytes, static_cast<uint64_t>(st.st_size));
  EXPECT_EQ(f->data_offset, written->data_offset);
  EXPECT_EQ(f->data_offset % 8, 0u) << "the header is padded to 8 bytes";
  EXPECT_EQ(f->data_bytes, 24u + 10 + 8 + 0 + 3 + 7 + 16);
  EXPECT_EQ(f->metadata, metadata);
  ASSERT_EQ(f->tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const SafetensorsTensor& want = written->tensors[i];
    const SafetensorsTensor& got = f->tensors[i];  // sorted by begin
    EXPECT_EQ(got.name, want.name);
    EXPECT_EQ(got.dtype, want.dtype) << want.name;
    EXPECT_EQ(got.shape, want.shape) << want.name;
    EXPECT_EQ(got.begin, want.begin) << want.name;
    EXPECT_EQ(got.end, want.end) << want.name;
    EXPECT_EQ(ReadRange(path, f->data_offset + got.begin, got.bytes()),
              TensorBytes(kSeed, got.name, 0, got.bytes()))
        << want.name << " (seed " << kSeed << ")";
  }
  EXPECT_EQ(f->tensors[2].bytes(), 8u) << "a scalar I64 is 8 bytes";
  EXPECT_EQ(f->tensors[3].begin, f->tensors[3].end) << "zero-size tensor";
}

TEST(SafetensorsFile, TensorsComeBackSortedByOffsetWhateverTheHeaderOrder) {
  const std::string header =
      absl::StrCat("{", Entry("b", "F32", "[2]", 8, 16), ",",
                   Entry("z", "U8", "[0]", 16, 16), ",",
                   Entry("a", "F32", "[2]", 0, 8), "}");
  absl::StatusOr<SafetensorsFile> f =
      ParseSafetensorsHeader(kPath, header, 8 + header.size() + 16);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->tensors.size(), 3u);
  EXPECT_EQ(f->tensors[0].name, "a");
  EXPECT_EQ(f->tensors[1].name, "b");
  EXPECT_EQ(f->tensors[2].name, "z");
  EXPECT_TRUE(f->metadata.empty());
}

TEST(SafetensorsFile, EmptyHeaderWithNoDataIsValid) {
  absl::StatusOr<SafetensorsFile> f = ParseSafetensorsHeader(kPath, "{}", 10);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(f->tensors.empty());
  EXPECT_EQ(f->data_offset, 10u);
  EXPECT_EQ(f->data_bytes, 0u);
}

TEST(SafetensorsFile, ZeroSizeTensorsMayShareTheBoundaries) {
  const std::string header = absl::StrCat(
      "{", Entry("e0", "F16", "[0]", 0, 0), ",", Entry("a", "U8", "[4]", 0, 4),
      ",", Entry("e1", "F16", "[3, 0]", 4, 4), "}");
  EXPECT_TRUE(ParseWithData(header, 4).ok()) << ParseWithData(header, 4);
}

TEST(SafetensorsFile, HeaderLengthPastTheEndOfTheFileIsRejected) {
  ExpectInvalid(ParseSafetensorsHeader(kPath, "{}  ", 8 + 3).status(),
                {kPath, "header length 4 runs past the end of the file"});
  ScopedTempDir dir;
  const std::string path = dir.path() + "/cut.safetensors";
  std::string bytes = std::string("\x40\0\0\0\0\0\0\0", 8) + "{}";
  ASSERT_TRUE(WriteFileBytes(path, bytes).ok());
  ExpectInvalid(ReadSafetensorsFile(path).status(),
                {path, "header length 64 runs past the end", "truncated"});
}

TEST(SafetensorsFile, HeaderLengthOverTheLimitIsRejectedBeforeReading) {
  ScopedTempDir dir;
  const std::string path = dir.path() + "/huge.safetensors";
  for (uint64_t n : {kMaxSafetensorsHeaderBytes + 1, UINT64_MAX}) {
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(n >> (8 * i));
    ASSERT_TRUE(WriteFileBytes(path, bytes + "{}").ok());
    ExpectInvalid(ReadSafetensorsFile(path).status(),
                  {path, absl::StrCat("header length ", n),
                   "over the limit of 104857600"});
  }
}

TEST(SafetensorsFile, FileShorterThanTheLengthPrefixIsRejected) {
  ScopedTempDir dir;
  const std::string path = dir.path() + "/tiny.safetensors";
  ASSERT_TRUE(WriteFileBytes(path, "abc").ok());
  ExpectInvalid(ReadSafetensorsFile(path).status(),
                {path, "file is 3 bytes", "too short"});
}

TEST(SafetensorsFile, MissingFileIsNotFoundAndDirectoryIsInvalid) {
  ScopedTempDir dir;
  const std::string missing = dir.path() + "/missing.safetensors";
  absl::Status s = ReadSafetensorsFile(missing).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), missing)) << s;
  ExpectInvalid(ReadSafetensorsFile(dir.path()).status(),
                {dir.path(), "not a regular file"});
}

TEST(SafetensorsFile, UnreadableFileIsPermissionDenied) {
  if (::geteuid() == 0) GTEST_SKIP() << "root ignores file permissions";
  ScopedTempDir dir;
  const std::string locked = dir.path() + "/locked.safetensors";
  ASSERT_TRUE(WriteFileBytes(locked, "").ok());
  ASSERT_EQ(::chmod(locked.c_str(), 0), 0);
  absl::Status s = ReadSafetensorsFile(locked).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), locked)) << s;
}

TEST(SafetensorsFile, TruncatedDataNamesTheTensorPastTheEnd) {
  ScopedTempDir dir;
  const std::string path = dir.path() + "/t.safetensors";
  absl::StatusOr<testing::WrittenSafetensors> w = WriteSafetensorsFile(
      path, {{"a", DType::kF32, {4}}, {"last", DType::kF32, {4}}}, kSeed);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(w->file_bytes - 1)), 0);
  ExpectInvalid(ReadSafetensorsFile(path).status(),
                {path, "tensor 'last'", "data_offsets [16, 32]",
                 "end past the data buffer of 31 bytes"});
}

TEST(SafetensorsHeader, MalformedJsonNamesTheByteOffset) {
  ExpectInvalid(
      ParseWithData("{\"a\":}", 0),
      {kPath, "header is not valid JSON", "JSON byte 5", "expected a value"});
  ExpectInvalid(ParseWithData("{}x", 0), {kPath, "trailing garbage"});
  ExpectInvalid(ParseWithData("", 0), {kPath, "JSON byte 0"});
}

TEST(SafetensorsHeader, TopLevelMustBeAnObject) {
  ExpectInvalid(ParseWithData("[]", 0),
                {kPath, "header must be a JSON object, found array"});
}

TEST(SafetensorsHeader, DuplicateTensorNamesAreRejected) {
  const std::string header =
      absl::StrCat("{", Entry("w", "U8", "[1]", 0, 1), ",",
                   Entry("w", "U8", "[1]", 1, 2), "}");
  ExpectInvalid(ParseWithData(header, 2),
                {kPath, "duplicate object key \"w\""});
}

TEST(SafetensorsHeader, EmptyTensorNameIsRejected) {
  ExpectInvalid(
      ParseWithData(absl::StrCat("{", Entry("", "U8", "[1]", 0, 1), "}"), 1),
      {kPath, "a tensor has an empty name"});
}

TEST(SafetensorsHeader, MissingExtraAndMistypedFieldsNameTheTensor) {
  struct Case {
    const char* entry;
    const char* reason;
  };
  const Case cases[] = {
      {R"({"shape":[1],"data_offsets":[0,1]})", "missing field 'dtype'"},
      {R"({"dtype":"U8","data_offsets":[0,1]})", "missing field 'shape'"},
      {R"({"dtype":"U8","shape":[1]})", "missing field 'data_offsets'"},
      {R"({"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":1})",
       "unknown field 'x'"},
      {R"({"dtype":4,"shape":[1],"data_offsets":[0,1]})",
       "field 'dtype' must be a string such as \"F32\", found number 4"},
      {R"({"dtype":"U8","shape":1,"data_offsets":[0,1]})",
       "field 'shape' must be an array of integers, found number 1"},
      {R"({"dtype":"U8","shape":[-1],"data_offsets":[0,1]})",
       "shape[0] must be an integer in [0, 2^64), found number -1"},
      {R"({"dtype":"U8","shape":[1, 1.0],"data_offsets":[0,1]})",
       "shape[1] must be an integer in [0, 2^64), found number 1.0"},
      {R"({"dtype":"U8","shape":["1"],"data_offsets":[0,1]})",
       "shape[0] must be an integer in [0, 2^64), found string"},
      {R"({"dtype":"U8","shape":[18446744073709551616],"data_offsets":[0,1]})",
       "shape[0] must be an integer"},
      {R"({"dtype":"U8","shape":[1],"data_offsets":[0,1,2]})",
       "field 'data_offsets' must be an array [begin, end], found an array "
       "of 3"},
      {R"({"dtype":"U8","shape":[1],"data_offsets":{}})",
       "field 'data_offsets' must be an array [begin, end], found object"},
      {R"({"dtype":"U8","shape":[1],"data_offsets":[0,"1"]})",
       "data_offsets[1] must be an integer"},
      {R"({"dtype":"U8","shape":[1],"data_offsets":[-0,1]})",
       "data_offsets[0] must be an integer"},
      {R"([0, 1])", "entry must be an object"},
      {R"({"dtype":"F33","shape":[1],"data_offsets":[0,1]})",
       "unknown dtype 'F33'; known dtypes are BOOL, U8"},
  };
  for (const Case& c : cases) {
    const std::string header = absl::StrCat("{\"layer.0\":", c.entry, "}");
    ExpectInvalid(ParseWithData(header, 1),
                  {kPath, "tensor 'layer.0'", c.reason});
  }
}

TEST(SafetensorsHeader, ShapeWhoseSizeOverflowsIsRejected) {
  ExpectInvalid(ParseWithData(absl::StrCat("{",
                                           Entry("big", "U8",
                                                 "[4294967296, "
                                                 "4294967296]",
                                                 0, 0),
                                           "}"),
                              0),
                {kPath, "tensor 'big'", "shape [4294967296, 4294967296]",
                 "more elements than fit in 64 bits"});
  ExpectInvalid(
      ParseWithData(
          absl::StrCat("{", Entry("big", "F32", "[4611686018427387904]", 0, 0),
                       "}"),
          0),
      {kPath, "tensor 'big'", "of F32 needs more bytes than fit in 64 bits"});
  // The check does not depend on where a 0 sits in the shape.
  ExpectInvalid(ParseWithData(absl::StrCat("{",
                                           Entry("z", "U8",
                                                 "[4294967296, 0, "
                                                 "4294967296]",
                                                 0, 0),
                                           "}"),
                              0),
                {kPath, "tensor 'z'", "more elements than fit in 64 bits"});
}

TEST(SafetensorsHeader, ReversedOffsetsAreRejected) {
  ExpectInvalid(
      ParseWithData(absl::StrCat("{", Entry("r", "U8", "[4]", 8, 4), "}"), 8),
      {kPath, "tensor 'r'", "data_offsets [8, 4] are reversed"});
}

TEST(SafetensorsHeader, OffsetsPastTheBufferAreRejected) {
  ExpectInvalid(
      ParseWithData(absl::StrCat("{", Entry("o", "U8", "[4]", 6, 10), "}"), 8),
      {kPath, "tensor 'o'",
       "data_offsets [6, 10] end past the data buffer of "
       "8 bytes"});
}

TEST(SafetensorsHeader, SizeMismatchNamesBothSizes) {
  ExpectInvalid(
      ParseWithData(absl::StrCat("{", Entry("m", "F32", "[2, 3]", 0, 20), "}"),
                    20),
      {kPath, "tensor 'm'",
       "data_offsets [0, 20] span 20 bytes but shape [2, 3] of F32 needs 24"});
  // A scalar is one element, not zero.
  ExpectInvalid(
      ParseWithData(absl::StrCat("{", Entry("s", "F64", "[]", 0, 0), "}"), 0),
      {kPath, "tensor 's'", "span 0 bytes but shape [] of F64 needs 8"});
}

TEST(SafetensorsHeader, OverlappingTensorsNameBoth) {
  const std::string header =
      absl::StrCat("{", Entry("first", "U8", "[8]", 0, 8), ",",
                   Entry("second", "U8", "[8]", 4, 12), "}");
  ExpectInvalid(ParseWithData(header, 12),
                {kPath, "tensors 'first' [0, 8) and 'second' [4, 12) overlap"});
  // A zero-size tensor strictly inside another one overlaps it too.
  const std::string inside =
      absl::StrCat("{", Entry("host", "U8", "[8]", 0, 8), ",",
                   Entry("empty", "U8", "[0]", 3, 3), "}");
  ExpectInvalid(ParseWithData(inside, 8),
                {kPath, "'host' [0, 8) and 'empty' [3, 3) overlap"});
  // Two tensors at the same offsets.
  const std::string twins =
      absl::StrCat("{", Entry("t1", "U8", "[4]", 0, 4), ",",
                   Entry("t2", "U8", "[4]", 0, 4), "}");
  ExpectInvalid(ParseWithData(twins, 4), {kPath, "'t1'", "'t2'", "overlap"});
}

TEST(SafetensorsHeader, HolesInTheBufferAreRejected) {
  ExpectInvalid(
      ParseWithData(absl::StrCat("{", Entry("late", "U8", "[4]", 4, 8), "}"),
                    8),
      {kPath, "data bytes [0, 4) belong to no tensor", "at the start",
       "before 'late'"});
  ExpectInvalid(
      ParseWithData(absl::StrCat("{", Entry("a", "U8", "[4]", 0, 4), ",",
                                 Entry("b", "U8", "[4]", 6, 10), "}"),
                    10),
      {kPath, "data bytes [4, 6) belong to no tensor", "after 'a'",
       "before 'b'"});
  ExpectInvalid(
      ParseWithData(absl::StrCat("{", Entry("a", "U8", "[4]", 0, 4), "}"), 9),
      {kPath, "data bytes [4, 9) at the end of the buffer belong to no tensor",
       "after 'a'"});
  ExpectInvalid(ParseWithData("{}", 3),
                {kPath, "data bytes [0, 3)", "the header lists none"});
}

TEST(SafetensorsHeader, MetadataMustMapStringsToStrings) {
  ExpectInvalid(ParseWithData(R"({"__metadata__":[]})", 0),
                {kPath,
                 "__metadata__ must be an object of strings, found "
                 "array"});
  ExpectInvalid(ParseWithData(R"({"__metadata__":{"ok":"x","n":1}})", 0),
                {kPath, "__metadata__ 'n' must be a string, found number 1"});
}

TEST(SafetensorsHeader, OversizedHeaderIsRejected) {
  const std::string header(kMaxSafetensorsHeaderBytes + 1, ' ');
  ExpectInvalid(ParseSafetensorsHeader(kPath, header, UINT64_MAX).status(),
                {kPath, "over the limit of 104857600 bytes"});
}

TEST(SafetensorsHeader, EncodedHeaderIsPaddedAndParsesBack) {
  for (int name_len = 1; name_len <= 9; ++name_len) {
    std::vector<SafetensorsTensor> tensors = {
        {std::string(name_len, 'n'), DType::kU16, {3}},
        {"x\"y", DType::kU8, {1}}};
    const std::string encoded = EncodeSafetensorsHeader(tensors, {{"k", "v"}});
    ASSERT_EQ(encoded.size() % 8, 0u);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(encoded[i]);
    ASSERT_EQ(n, encoded.size() - 8);
    EXPECT_EQ(tensors[1].begin, 6u);
    EXPECT_EQ(tensors[1].end, 7u);
    absl::StatusOr<SafetensorsFile> f = ParseSafetensorsHeader(
        kPath, absl::string_view(encoded).substr(8), encoded.size() + 7);
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ(f->tensors[1].name, "x\"y");
    EXPECT_EQ(f->metadata, (Metadata{{"k", "v"}}));
  }
}

TEST(SafetensorsIndex, ReadsShardsRelativeToTheIndexDirectory) {
  ScopedTempDir dir;
  absl::StatusOr<testing::WrittenModel> model =
      WriteShardedModel(dir.path(),
                        {{{"a", DType::kF32, {2}}, {"b", DType::kF16, {4}}},
                         {{"c", DType::kI8, {3}}}},
                        kSeed);
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<SafetensorsIndex> index =
      ReadSafetensorsIndex(model->index_path);
  ASSERT_TRUE(index.ok()) << index.status();
  const std::string s1 = dir.path() + "/model-00001-of-00002.safetensors";
  const std::string s2 = dir.path() + "/model-00002-of-00002.safetensors";
  EXPECT_EQ(index->path, model->index_path);
  EXPECT_EQ(index->files, (std::vector<std::string>{s1, s2}));
  EXPECT_EQ(index->weight_map,
            (std::vector<std::pair<std::string, std::string>>{
                {"a", s1}, {"b", s1}, {"c", s2}}));
  for (const std::string& shard : index->files) {
    absl::StatusOr<SafetensorsFile> f = ReadSafetensorsFile(shard);
    EXPECT_TRUE(f.ok()) << f.status();
  }
}

TEST(SafetensorsIndex, FilesAreDistinctInFirstSeenOrder) {
  ScopedTempDir dir;
  const std::string path = dir.path() + "/sub/index.json";
  ASSERT_EQ(::mkdir((dir.path() + "/sub").c_str(), 0755), 0);
  ASSERT_TRUE(WriteSafetensorsIndex(path, {{"x", "b.safetensors"},
                                           {"y", "a.safetensors"},
                                           {"z", "b.safetensors"},
                                           {"w", "deep/c.safetensors"}})
                  .ok());
  absl::StatusOr<SafetensorsIndex> index = ReadSafetensorsIndex(path);
  ASSERT_TRUE(index.ok()) << index.status();
  const std::string base = dir.path() + "/sub/";
  EXPECT_EQ(index->files, (std::vector<std::string>{
                              base + "b.safetensors", base + "a.safetensors",
                              base + "deep/c.safetensors"}));
}

TEST(SafetensorsIndex, MalformedIndexesNameTheFileAndReason) {
  struct Case {
    const char* text;
    const char* reason;
  };
  const Case cases[] = {
      {"{\"weight_map\": {\"a\": \"x\"},}", "index is not valid JSON"},
      {"[]", "index must be a JSON object, found array"},
      {"{\"metadata\": {}}", "missing key 'weight_map'"},
      {"{\"weight_map\": []}", "'weight_map' must be an object"},
      {"{\"weight_map\": {}}", "'weight_map' lists no tensors"},
      {"{\"weight_map\": {\"a\": 1}}",
       "weight_map 'a': file name must be a string, found number 1"},
      {"{\"weight_map\": {\"\": \"x\"}}", "a tensor with an empty name"},
      {"{\"weight_map\": {\"a\": \"\"}}", "shard file name '' is empty"},
      {"{\"weight_map\": {\"a\": \"/etc/x\"}}", "'/etc/x' is absolute"},
      {"{\"weight_map\": {\"a\": \"../x\"}}", "contains a '..' component"},
      {"{\"weight_map\": {\"a\": \"s/../../x\"}}", "contains a '..'"},
      {"{\"weight_map\": {\"a\": \"x\\u0000y\"}}", "contains a NUL byte"},
      {"{\"weight_map\": {\"a\": \"x\"}, \"extra\": 1}", "unknown key 'extra'"},
      {"{\"metadata\": 3, \"weight_map\": {\"a\": \"x\"}}",
       "'metadata' must be an object, found number 3"},
      {"{\"weight_map\": {\"a\": \"x\", \"a\": \"y\"}}",
       "duplicate object key \"a\""},
  };
  ScopedTempDir dir;
  const std::string path = dir.path() + "/model.safetensors.index.json";
  for (const Case& c : cases) {
    ASSERT_TRUE(WriteFileBytes(path, c.text).ok());
    ExpectInvalid(ReadSafetensorsIndex(path).status(), {path, c.reason});
  }
  absl::Status missing =
      ReadSafetensorsIndex(dir.path() + "/none.json").status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound) << missing;
}

}  // namespace
}  // namespace meshpool::client_internal
