// Model weights (<meshpool/weights.h>) against a coordinator and three
// memory nodes in this process, with the data path on the simulated
// fabric: safetensors files written by the tests are loaded, listed, read
// whole and by rows, replaced, removed, and rejected when malformed.
#include <xxhash.h>

#include <atomic>
#include <cstring>
#include <iostream>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/weights_manifest.h"
#include "gtest/gtest.h"
#include "meshpool/client.h"
#include "meshpool/region.h"
#include "meshpool/weights.h"
#include "rdma/rdma.h"
#include "rdma/sim.h"
#include "store/store.h"
#include "tests/safetensors_writer.h"
#include "tests/sim_cluster.h"
#include "tests/test_seed.h"

namespace meshpool {
namespace {

using client_internal::SafetensorsTensor;
using testing::ScopedTempDir;
using testing::TensorBytes;
using testing::WriteSafetensorsFile;

constexpr int kNodes = 3;
constexpr uint64_t kStripe = 64 << 10;  // small, so tensors span stripes

SafetensorsTensor T(std::string name, DType dtype, std::vector<uint64_t> shape) {
  SafetensorsTensor t;
  t.name = std::move(name);
  t.dtype = dtype;
  t.shape = std::move(shape);
  return t;
}

class WeightsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = testing::TestSeed();
    auto cluster = testing::SimCluster::Start(seed_);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    fabric_ = &cluster_->fabric();
    for (int i = 0; i < kNodes; ++i) {
      store::NodeOptions options;
      options.capacity_bytes = 24 << 20;
      options.slab_bytes = 1 << 20;
      auto node = cluster_->AddNode(options);  // endpoint node-<i>
      ASSERT_TRUE(node.ok()) << node.status();
    }
    auto client = cluster_->Connect("client");
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
    ASSERT_FALSE(dir_.path().empty());
  }

  LoadOptions Striped() {
    LoadOptions options;
    options.region.stripe_bytes = kStripe;
    return options;
  }

  std::string Path(absl::string_view name) {
    return absl::StrCat(dir_.path(), "/", name);
  }

  // Writes one file of `tensors` with `seed`; returns its path.
  std::string Write(absl::string_view name, std::vector<SafetensorsTensor> tensors,
                    uint64_t seed) {
    auto written = WriteSafetensorsFile(Path(name), std::move(tensors), seed);
    EXPECT_TRUE(written.ok()) << written.status();
    return Path(name);
  }

  // Every tensor of `model` reads back as TensorBytes(seed, ...).
  void ExpectModelIs(absl::string_view model, uint64_t seed, bool verify) {
    auto store = WeightStore::Open(*client_, model);
    ASSERT_TRUE(store.ok()) << store.status();
    for (const TensorInfo& t : (*store)->Tensors()) {
      std::vector<char> buf(t.length + 3);
      ReadOptions options;
      options.verify = verify;
      auto n = (*store)->ReadTensor(t.name, absl::MakeSpan(buf), options);
      ASSERT_TRUE(n.ok()) << t.name << ": " << n.status();
      ASSERT_EQ(*n, t.length);
      ASSERT_EQ(std::string(buf.data(), t.length),
                TensorBytes(seed, t.name, 0, t.length))
          << t.name;
    }
  }

  std::vector<std::string> RegionNames() {
    auto regions = ListRegions(*client_);
    EXPECT_TRUE(regions.ok()) << regions.status();
    std::vector<std::string> names;
    if (regions.ok()) {
      for (const auto& r : *regions) names.push_back(r.name);
    }
    return names;
  }

  uint64_t seed_;
  ScopedTempDir dir_;
  std::unique_ptr<testing::SimCluster> cluster_;  // before the client
  rdma::SimFabric* fabric_ = nullptr;
  std::unique_ptr<Client> client_;
};

std::vector<SafetensorsTensor> MixedTensors() {
  return {
      T("embed.weight", DType::kBF16, {128, 1024}),  // 256 KiB: 4 stripes
      T("layer.0.bias", DType::kF32, {33}),
      T("layer.0.weight", DType::kF32, {64, 33}),
      T("big.u8", DType::kU8, {(5u << 20) / 2 + 5}),  // 2.5 MiB: 3 chunks
      T("scale", DType::kF64, {}),                     // a scalar
      T("empty", DType::kF16, {0, 4}),                 // zero bytes
      T("mask", DType::kBool, {7}),
      T("ids", DType::kI64, {3, 5}),
  };
}

TEST_F(WeightsTest, LoadedModelRoundTripsEveryTensorOfSeveralDtypes) {
  std::string file = Write("model.safetensors", MixedTensors(), seed_);
  auto info = LoadSafetensors(*client_, "mixed", {file}, Striped());
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->tensors, 8u);
  ExpectModelIs("mixed", seed_, /*verify=*/true);
  ExpectModelIs("mixed", seed_, /*verify=*/false);

  auto store = WeightStore::Open(*client_, "mixed");
  ASSERT_TRUE(store.ok()) << store.status();
  auto embed = (*store)->Find("embed.weight");
  ASSERT_TRUE(embed.ok());
  EXPECT_EQ((*embed)->dtype, DType::kBF16);
  EXPECT_EQ((*embed)->shape, (std::vector<uint64_t>{128, 1024}));
  EXPECT_EQ((*embed)->length, 128u * 1024 * 2);
  EXPECT_EQ((*embed)->row_bytes(), 2048u);
  auto scale = (*store)->Find("scale");
  ASSERT_TRUE(scale.ok());
  EXPECT_TRUE((*scale)->shape.empty());
  EXPECT_EQ((*scale)->length, 8u);
  EXPECT_EQ((*store)->Find("nope").status().code(), absl::StatusCode::kNotFound);

  auto models = ListModels(*client_);
  ASSERT_TRUE(models.ok()) << models.status();
  ASSERT_EQ(models->size(), 1u);
  EXPECT_EQ((*models)[0].name, "mixed");
  EXPECT_EQ((*models)[0].files, std::vector<std::string>{"model.safetensors"});
  // Only the model's region remains: the staging region was renamed.
  EXPECT_EQ(RegionNames(), std::vector<std::string>{"weights/mixed"});
}

TEST_F(WeightsTest, ShardedModelLoadsThroughItsIndex) {
  std::vector<std::vector<SafetensorsTensor>> shards = {
      {T("a.weight", DType::kF16, {300, 70}), T("a.bias", DType::kF16, {70})},
      {T("b.weight", DType::kF32, {1000, 100})},  // 400 KB, several stripes
      {T("c.weight", DType::kI32, {17, 3}), T("d", DType::kU16, {0})},
  };
  auto model = testing::WriteShardedModel(dir_.path(), shards, seed_);
  ASSERT_TRUE(model.ok()) << model.status();
  auto info = LoadSafetensors(*client_, "org/sharded-1", {model->index_path},
                              Striped());
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->tensors, 5u);
  EXPECT_EQ(info->files.size(), 3u);
  ExpectModelIs("org/sharded-1", seed_, /*verify=*/true);
}

TEST_F(WeightsTest, SlicesAtStripeBoundariesMatchTheFile) {
  // 1000 rows of 256 bytes: a 64 KiB stripe holds exactly 256 rows, and
  // the 1 MiB digest chunk 4096 rows.
  std::string file = Write("rows.safetensors",
                           {T("head", DType::kU8, {100}),
                            T("w", DType::kF32, {1000, 64})},
                           seed_);
  ASSERT_TRUE(LoadSafetensors(*client_, "rows", {file}, Striped()).ok());
  auto store = WeightStore::Open(*client_, "rows");
  ASSERT_TRUE(store.ok()) << store.status();
  const uint64_t row = 256;
  std::vector<std::pair<uint64_t, uint64_t>> slices = {
      {255, 257}, {0, 256}, {256, 512}, {999, 1000}, {0, 1000}, {7, 7},
      {250, 771}};
  for (bool verify : {false, true}) {
    for (auto [b, e] : slices) {
      std::vector<char> buf((e - b) * row);
      ReadOptions options;
      options.verify = verify;
      auto n = (*store)->ReadTensorSlice("w", b, e, absl::MakeSpan(buf), options);
      ASSERT_TRUE(n.ok()) << b << ".." << e << ": " << n.status();
      ASSERT_EQ(*n, (e - b) * row);
      EXPECT_EQ(std::string(buf.data(), buf.size()),
                TensorBytes(seed_, "w", b * row, (e - b) * row))
          << "rows " << b << ".." << e << " verify=" << verify;
    }
  }
  std::vector<char> small(10);
  EXPECT_EQ((*store)->ReadTensorSlice("w", 0, 1, absl::MakeSpan(small)).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*store)->ReadTensorSlice("w", 5, 1001, absl::MakeSpan(small)).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*store)->ReadTensorSlice("w", 6, 5, absl::MakeSpan(small)).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*store)->ReadTensor("w", absl::MakeSpan(small)).status().code(),
            absl::StatusCode::kOutOfRange);
}

TEST_F(WeightsTest, MalformedFilesAreRejectedBeforeAnythingIsAllocated) {
  std::string good = Write("good.safetensors",
                           {T("x", DType::kF32, {16, 16})}, seed_);
  std::string header_json =
      R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  // A file of an 8-byte header length (`claimed`, default: the JSON's),
  // the JSON, and `data_bytes` bytes of data.
  auto with_header = [&](absl::string_view name, absl::string_view json,
                         uint64_t data_bytes, uint64_t claimed = 0) {
    if (claimed == 0) claimed = json.size();
    std::string bytes(8, '\0');
    std::memcpy(bytes.data(), &claimed, 8);
    bytes += std::string(json);
    bytes += std::string(data_bytes, 'd');
    EXPECT_TRUE(testing::WriteFileBytes(Path(name), bytes).ok());
    return Path(name);
  };
  struct Case {
    std::string path;
    std::string reason;  // a piece of the message
  };
  std::vector<Case> cases = {
      {with_header("past_end.safetensors", header_json, 16, 1 << 20), "header"},
      {with_header("truncated.safetensors", header_json, 10), "'x'"},
      {with_header("bad_json.safetensors", R"({"x":{"dtype":"F32",)", 16),
       "JSON"},
      {with_header("overlap.safetensors",
                   R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                   R"("b":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}})",
                   12),
       "'b'"},
      {with_header("dtype.safetensors",
                   R"({"x":{"dtype":"F33","shape":[4],"data_offsets":[0,16]}})",
                   16),
       "F33"},
      {with_header("range.safetensors",
                   R"({"x":{"dtype":"U8","shape":[40],"data_offsets":[0,40]}})",
                   16),
       "'x'"},
  };
  for (Case& c : cases) {
    // A good file first: nothing of it may be loaded either.
    auto info = LoadSafetensors(*client_, "bad", {good, c.path}, Striped());
    EXPECT_EQ(info.status().code(), absl::StatusCode::kInvalidArgument)
        << c.path << ": " << info.status();
    EXPECT_TRUE(absl::StrContains(info.status().message(), c.path))
        << info.status();
    EXPECT_TRUE(absl::StrContains(info.status().message(), c.reason))
        << info.status();
  }
  EXPECT_TRUE(RegionNames().empty());
  auto missing = LoadSafetensors(*client_, "bad", {Path("nope.safetensors")});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  // The cluster is unharmed: a good load still works.
  ASSERT_TRUE(LoadSafetensors(*client_, "good", {good}, Striped()).ok());
  ExpectModelIs("good", seed_, true);
}

TEST_F(WeightsTest, TensorNameInTwoFilesIsRejectedNamingBoth) {
  std::string a = Write("a.safetensors", {T("w", DType::kU8, {10})}, seed_);
  std::string b = Write("b.safetensors", {T("w", DType::kU8, {12})}, seed_);
  auto info = LoadSafetensors(*client_, "dup", {a, b});
  EXPECT_EQ(info.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(info.status().message(), a)) << info.status();
  EXPECT_TRUE(absl::StrContains(info.status().message(), b)) << info.status();
  EXPECT_TRUE(RegionNames().empty());
}

TEST_F(WeightsTest, ExistingModelNeedsReplaceAndReplaceSwapsTheWholeModel) {
  std::string v1 = Write("v1.safetensors", MixedTensors(), seed_);
  std::string v2 = Write("v2.safetensors", MixedTensors(), seed_ + 1);
  ASSERT_TRUE(LoadSafetensors(*client_, "m", {v1}, Striped()).ok());
  auto again = LoadSafetensors(*client_, "m", {v2}, Striped());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(
      absl::StrContains(again.status().message(), "LoadOptions.replace"));
  ExpectModelIs("m", seed_, true);
  LoadOptions replace = Striped();
  replace.replace = true;
  ASSERT_TRUE(LoadSafetensors(*client_, "m", {v2}, replace).ok());
  ExpectModelIs("m", seed_ + 1, true);
  EXPECT_EQ(RegionNames(), std::vector<std::string>{"weights/m"});
}

TEST_F(WeightsTest, ConcurrentReadersSeeNoModelOrTheWholeModel) {
  std::string file = Write("m.safetensors", MixedTensors(), seed_);
  std::atomic<bool> loaded{false};
  std::atomic<int> absent{0}, whole{0}, wrong{0};
  std::thread reader([&] {
    // Keep looking until a full model has been seen after the load ended.
    while (true) {
      bool was_loaded = loaded.load();
      auto store = WeightStore::Open(*client_, "live");
      if (absl::IsNotFound(store.status())) {
        ++absent;
        if (was_loaded) ++wrong;  // the load had finished: it must be there
        continue;
      }
      if (!store.ok()) {
        std::cerr << "open: " << store.status() << "\n";
        ++wrong;
        break;
      }
      if ((*store)->Tensors().size() != 8) ++wrong;
      for (const TensorInfo& t : (*store)->Tensors()) {
        std::vector<char> buf(t.length);
        ReadOptions verify;
        verify.verify = true;
        auto n = (*store)->ReadTensor(t.name, absl::MakeSpan(buf), verify);
        if (!n.ok() || std::string(buf.data(), buf.size()) !=
                           TensorBytes(seed_, t.name, 0, t.length)) {
          ++wrong;
        }
      }
      ++whole;
      if (was_loaded) break;
    }
  });
  auto info = LoadSafetensors(*client_, "live", {file}, Striped());
  loaded = true;
  reader.join();
  ASSERT_TRUE(info.ok()) << info.status();
  std::cout << "reader saw no model " << absent << " times, the whole model "
            << whole << " times" << std::endl;
  EXPECT_EQ(wrong, 0);
  EXPECT_GT(whole, 0);
}

TEST_F(WeightsTest, VerifiedReadCatchesBytesChangedAfterTheLoad) {
  std::string file = Write("m.safetensors", MixedTensors(), seed_);
  ASSERT_TRUE(LoadSafetensors(*client_, "m", {file}, Striped()).ok());
  auto store = WeightStore::Open(*client_, "m");
  ASSERT_TRUE(store.ok());
  const TensorInfo* big = *(*store)->Find("big.u8");
  auto region = OpenRegion(*client_, "weights/m");
  ASSERT_TRUE(region.ok()) << region.status();
  // One byte in the second digest chunk.
  const uint64_t at = big->offset + kWeightChunkBytes + 12345;
  char original;
  ASSERT_TRUE((*region)->Read(at, absl::MakeSpan(&original, 1)).ok());
  char flipped = static_cast<char>(original ^ 0x40);
  ASSERT_TRUE((*region)->Write(at, absl::MakeConstSpan(&flipped, 1)).ok());

  std::vector<char> buf(big->length);
  ReadOptions verify;
  verify.verify = true;
  EXPECT_EQ((*store)->ReadTensor("big.u8", absl::MakeSpan(buf), verify).status().code(),
            absl::StatusCode::kDataLoss);
  // A verified slice outside the damaged chunk still reads.
  const uint64_t rows = 1000;  // bytes, since U8 rows are 1 byte
  EXPECT_TRUE((*store)->ReadTensorSlice("big.u8", 0, rows, absl::MakeSpan(buf), verify).ok());
  EXPECT_EQ((*store)
                ->ReadTensorSlice("big.u8", kWeightChunkBytes + 12000,
                                  kWeightChunkBytes + 13000, absl::MakeSpan(buf),
                                  verify)
                .status()
                .code(),
            absl::StatusCode::kDataLoss);
  // Unverified reads return what is there.
  ASSERT_TRUE((*store)->ReadTensor("big.u8", absl::MakeSpan(buf)).ok());
  EXPECT_EQ(buf[kWeightChunkBytes + 12345], flipped);
}

TEST_F(WeightsTest, LoadThatFailsMidwayLeavesNoModelAndNoStagingRegion) {
  std::string file =
      Write("m.safetensors", {T("w", DType::kU8, {3 << 20})}, seed_);
  // A node dies during the copy: the load fails and cleans up after itself.
  std::atomic<int> writes{0};
  fabric_->SetBeforeExecute([&](absl::string_view, const rdma::WorkRequest& wr) {
    if (wr.opcode == rdma::Opcode::kWrite && ++writes == 3) {
      fabric_->KillNode("node-1");
    }
  });
  auto info = LoadSafetensors(*client_, "m", {file}, Striped());
  fabric_->SetBeforeExecute(nullptr);
  EXPECT_GE(writes, 3);
  EXPECT_FALSE(info.ok());
  std::cout << "load failed: " << info.status() << std::endl;
  auto models = ListModels(*client_);
  ASSERT_TRUE(models.ok()) << models.status();
  EXPECT_TRUE(models->empty());
  EXPECT_EQ(WeightStore::Open(*client_, "m").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(RegionNames().empty());
}

TEST_F(WeightsTest, RemoveModelAlsoRemovesADeadLoadersStagingRegion) {
  std::string file = Write("m.safetensors", {T("w", DType::kU8, {1000})}, seed_);
  ASSERT_TRUE(LoadSafetensors(*client_, "m", {file}, Striped()).ok());
  // What a loader killed mid-copy leaves behind.
  ASSERT_TRUE(
      CreateRegion(*client_, "weights-loading/m#0123456789abcdef", 4096).ok());
  // Another model's staging region is not touched.
  ASSERT_TRUE(
      CreateRegion(*client_, "weights-loading/m2#0123456789abcdef", 4096).ok());
  ASSERT_TRUE(RemoveModel(*client_, "m").ok());
  EXPECT_EQ(RegionNames(),
            std::vector<std::string>{"weights-loading/m2#0123456789abcdef"});
  EXPECT_EQ(RemoveModel(*client_, "m").code(), absl::StatusCode::kNotFound);
}

TEST_F(WeightsTest, RemoveModelSparesTheStagingRegionOfALoadStillRunning) {
  // A live loader bumps the heartbeat word of its staging region.
  auto staging =
      CreateRegion(*client_, "weights-loading/busy#00000000000000aa", 8192);
  ASSERT_TRUE(staging.ok()) << staging.status();
  std::atomic<bool> stop{false};
  std::thread loader([&] {
    for (uint64_t beat = 1; !stop.load(); ++beat) {
      (void)(*staging)->Write(2048, absl::MakeConstSpan(
                                        reinterpret_cast<const char*>(&beat), 8));
      absl::SleepFor(absl::Milliseconds(100));
    }
  });
  absl::Status busy = RemoveModel(*client_, "busy");
  stop = true;
  loader.join();
  EXPECT_EQ(busy.code(), absl::StatusCode::kFailedPrecondition) << busy;
  EXPECT_EQ(RegionNames(),
            std::vector<std::string>{"weights-loading/busy#00000000000000aa"});
  // Once the loader stopped, its staging region is an interrupted load's.
  ASSERT_TRUE(RemoveModel(*client_, "busy").ok());
  EXPECT_TRUE(RegionNames().empty());
}

TEST_F(WeightsTest, BadModelNamesAreInvalidArgument) {
  std::string file = Write("m.safetensors", {T("w", DType::kU8, {10})}, seed_);
  for (std::string name : {std::string(""), std::string("a b"), std::string("x#y"),
                           std::string(kMaxModelNameBytes + 1, 'n')}) {
    EXPECT_EQ(LoadSafetensors(*client_, name, {file}).status().code(),
              absl::StatusCode::kInvalidArgument)
        << name;
    EXPECT_EQ(WeightStore::Open(*client_, name).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(LoadSafetensors(*client_, "ok", {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The superblock's failures: damage is DataLoss; an intact superblock of
// another format version is FailedPrecondition that says what to do (a
// libFuzzer run found the second case, which this contract now states).
TEST(ModelSuperblockTest,
     AnotherFormatVersionIsFailedPreconditionDamageIsDataLoss) {
  using client_internal::DecodeSuperblock;
  using client_internal::EncodeSuperblock;
  using client_internal::ModelSuperblock;
  constexpr uint64_t kRegion = uint64_t{1} << 20;
  ModelSuperblock sb;
  sb.manifest_offset = kRegion - 100;
  sb.manifest_length = 100;
  sb.manifest_digest = 42;
  const std::string good = EncodeSuperblock(sb);
  ASSERT_TRUE(DecodeSuperblock(good, kRegion, "weights/m").ok());

  std::string newer = good;
  const uint64_t version = client_internal::kModelFormatVersion + 1;
  std::memcpy(newer.data() + 8, &version, 8);
  const uint64_t sum = XXH3_64bits(newer.data(), 40);
  std::memcpy(newer.data() + 40, &sum, 8);
  absl::Status s = DecodeSuperblock(newer, kRegion, "weights/m").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "upgrade the client")) << s;

  std::string damaged = good;
  damaged[20] ^= 1;  // manifest offset, checksum left as it was
  s = DecodeSuperblock(damaged, kRegion, "weights/m").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "weights/m")) << s;
}

}  // namespace
}  // namespace meshpool
