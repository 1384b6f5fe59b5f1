// The uc backend's channel options.
#include "rdma/uc_wire.h"

namespace meshpool::rdma::internal {

UcChannel::Options ChannelOptions(const UcOptions& options, uint64_t session) {
  UcChannel::Options o;
  o.session = session;
  o.frame_bytes = options.frame_bytes;
  o.window_frames = options.window_frames;
  o.max_message_bytes = kUcMaxMessageBytes;
  o.dead_after = options.dead_after;
  return o;
}

}  // namespace meshpool::rdma::internal
