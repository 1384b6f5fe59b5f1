// Writes the binary seed inputs of the fuzz targets (tests/fuzz/corpus/*),
// built with the project's own encoders so that they start the fuzzers
// from valid messages: `fuzz_make_seeds tests/fuzz/corpus` (the text seeds,
// JSON, device matrices and command lines, are written by hand). Re-run
// when a wire format changes, and commit what it writes.
#include <xxhash.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/safetensors.h"
#include "client/weights_manifest.h"
#include "format/layout.h"
#include "proto/meshpool.pb.h"
#include "rdma/rdma.h"
#include "rdma/shm_wire.h"
#include "rdma/tcp_wire.h"
#include "rdma/uc_channel.h"
#include "rdma/verbs_handshake.h"

namespace meshpool {
namespace {

std::filesystem::path root;

void Write(const std::string& target, const std::string& name,
           const std::string& bytes) {
  const std::filesystem::path dir = root / target;
  std::filesystem::create_directories(dir);
  std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", (dir / name).c_str());
    std::exit(1);
  }
}

template <typename T>
std::string Bytes(const T& value) {
  return std::string(reinterpret_cast<const char*>(&value), sizeof(value));
}

std::string U64(uint64_t v) { return Bytes(v); }

void Safetensors() {
  using client_internal::SafetensorsTensor;
  std::vector<SafetensorsTensor> tensors(2);
  tensors[0].name = "embed.weight";
  tensors[0].dtype = DType::kBF16;
  tensors[0].shape = {4, 8};
  tensors[1].name = "norm.bias";
  tensors[1].dtype = DType::kF32;
  tensors[1].shape = {8};
  std::string file =
      client_internal::EncodeSafetensorsHeader(tensors, {{"format", "pt"}});
  const uint64_t data_bytes = tensors.back().end;
  Write("safetensors", "two_tensors", U64(data_bytes) + file.substr(8));
  std::vector<SafetensorsTensor> scalar(1);
  scalar[0].name = "scale";
  scalar[0].dtype = DType::kF64;
  file = client_internal::EncodeSafetensorsHeader(scalar);
  Write("safetensors", "scalar", U64(scalar[0].end) + file.substr(8));
}

void WeightsManifest() {
  proto::WeightManifest m;
  m.set_model("org/model");
  m.add_files("model.safetensors");
  m.set_chunk_bytes(kWeightChunkBytes);
  const uint64_t lengths[] = {64, 0, 4096};
  uint64_t offset = client_internal::kModelSuperblockBytes;
  uint64_t total = 0;
  int i = 0;
  for (uint64_t length : lengths) {
    proto::WeightTensor* t = m.add_tensors();
    t->set_name(absl::StrCat("layer.", i++, ".weight"));
    t->set_dtype("U8");
    t->add_shape(length);
    t->set_offset(offset);
    t->set_length(length);
    for (uint64_t c = 0; c < client_internal::ChunkCount(length); ++c) {
      t->add_chunk_digests(c + 1);
    }
    t->set_digest(
        XXH3_64bits(t->chunk_digests().data(), 8 * t->chunk_digests_size()));
    offset += length;
    total += length;
  }
  m.set_tensor_bytes(total);
  const std::string manifest = m.SerializeAsString();
  const uint64_t region = offset + manifest.size();
  Write("weights_manifest", "three_tensors", U64(region) + manifest);
  client_internal::ModelSuperblock sb;
  sb.manifest_offset = offset;
  sb.manifest_length = manifest.size();
  sb.manifest_digest = XXH3_64bits(manifest.data(), manifest.size());
  Write("weights_manifest", "superblock_first",
        U64(region) +
            client_internal::EncodeSuperblock(sb).substr(
                0, client_internal::kModelSuperblockEncodedBytes) +
            manifest);
}

void NodeInfo() {
  for (uint64_t pool : {uint64_t{64} << 20, uint64_t{1} << 30}) {
    auto l = format::ComputeLayout(pool);
    if (!l.ok()) std::exit(1);
    proto::NodeInfo info;
    info.set_node_id("node-1");
    info.set_control_address("127.0.0.1:7100");
    info.add_transport_addresses("tcp://127.0.0.1:7101");
    info.set_capacity_bytes(pool);
    info.mutable_pool()->set_addr(0x7f0000000000);
    info.mutable_pool()->set_rkey(7);
    info.mutable_pool()->set_length(pool);
    proto::PoolLayout* p = info.mutable_layout();
    p->set_pool_bytes(l->pool_bytes);
    p->set_index_offset(l->index_offset);
    p->set_bucket_count(l->bucket_count);
    p->set_slab_area_offset(l->slab_area_offset);
    p->set_slab_bytes(l->slab_bytes);
    p->set_slab_count(l->slab_count);
    p->set_slab_meta_offset(l->slab_meta_offset);
    p->set_pin_area_offset(l->pin_area_offset);
    p->set_pin_sessions(l->pin_sessions);
    p->set_pins_per_session(l->pins_per_session);
    Write("node_info", absl::StrCat("pool_", pool >> 20, "MiB"),
          info.SerializeAsString());
  }
}

void VerbsHandshake() {
  using namespace rdma::internal;
  HandshakeRequest request;
  request.client_name = "client-1";
  request.qp.gid[10] = 0xff;
  request.qp.gid[11] = 0xff;
  request.qp.qpn = 17;
  request.qp.psn = 0x1234;
  request.qp.mtu_bytes = 1024;
  request.qp.rd_atomic = 16;
  Write("verbs_handshake", "request",
        std::string(1, '\0') + EncodeHandshakeRequest(request));
  HandshakeReply reply;
  reply.qp = request.qp;
  reply.qp.qpn = 18;
  HandshakeRegion region;
  region.handle = 5;
  region.addr = 0x10000;
  region.length = 8192;
  region.chunks = {{0x10000, 4096, 11}, {0x11000, 4096, 12}};
  reply.regions.push_back(region);
  Write("verbs_handshake", "reply",
        std::string(1, '\1') + EncodeHandshakeReply(reply));
}

void ShmHello() {
  using namespace rdma::internal;
  ShmHelloHeader h{};
  h.magic = kShmHelloMagic;
  h.version = kShmWireVersion;
  h.export_count = 2;
  h.region_count = 2;
  ShmWireRegion a{0x7f0000000000, 1 << 20, 0, 3, 0, 0};
  ShmWireRegion b{0x7f1000000000, 4096, 8192, 4, 1, 1};
  Write("shm_hello", "two_regions",
        std::string(1, '\0') + Bytes(h) + Bytes(a) + Bytes(b));
}

void TcpResponder() {
  using namespace rdma::internal;
  auto header = [](rdma::Opcode op, uint32_t length, uint64_t offset) {
    RequestHeader h{};
    h.magic = kRequestMagic;
    h.opcode = static_cast<uint8_t>(op);
    h.length = length;
    h.wr_id = 1;
    h.remote_addr = offset;  // the fuzz target rebases it
    return Bytes(h);
  };
  Write("tcp_responder", "read", header(rdma::Opcode::kRead, 64, 0));
  Write("tcp_responder", "write_then_read",
        header(rdma::Opcode::kWrite, 16, 128) + std::string(16, 'w') +
            header(rdma::Opcode::kRead, 16, 128));
  Write("tcp_responder", "atomics",
        header(rdma::Opcode::kCompareSwap, 8, 64) +
            header(rdma::Opcode::kFetchAdd, 8, 72));
}

// Frames a real channel sends, as records the uc_channel target replays
// raw (op 1), so its first inputs are a peer's valid traffic.
void UcChannel() {
  using namespace rdma::internal;
  std::string records;
  auto record = [&](uint8_t op, absl::Span<const uint8_t> a,
                    absl::Span<const uint8_t> b) {
    const uint16_t length = static_cast<uint16_t>(a.size() + b.size());
    records += static_cast<char>(op);
    records += Bytes(length);
    records.append(reinterpret_cast<const char*>(a.data()), a.size());
    records.append(reinterpret_cast<const char*>(b.data()), b.size());
  };
  UcChannel::Options options;
  options.session = 0x5eed;  // as uc_channel_fuzz.cc
  options.frame_bytes = 256;
  options.window_frames = 16;
  options.max_message_bytes = 4096;
  auto peer = UcChannel::Create(
      options, [&](absl::Span<const uint8_t> h, absl::Span<const uint8_t> p) {
        record(1, h, p);
        return true;
      });
  if (!peer.ok()) std::exit(1);
  const std::string message(600, 'm');  // three frames
  const absl::Span<const uint8_t> part(
      reinterpret_cast<const uint8_t*>(message.data()), message.size());
  (void)peer->Send({&part, 1});
  (void)peer->Pump(absl::FromUnixSeconds(1'000'000));
  const std::string outgoing = "reply";
  record(
      2,
      absl::Span<const uint8_t>(
          reinterpret_cast<const uint8_t*>(outgoing.data()), outgoing.size()),
      {});
  record(3 + 4 * 50, {}, {});
  Write("uc_channel", "peer_message", records);
}

}  // namespace
}  // namespace meshpool

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s tests/fuzz/corpus\n", argv[0]);
    return 2;
  }
  meshpool::root = argv[1];
  meshpool::Safetensors();
  meshpool::WeightsManifest();
  meshpool::NodeInfo();
  meshpool::VerbsHandshake();
  meshpool::ShmHello();
  meshpool::TcpResponder();
  meshpool::UcChannel();
  return 0;
}
