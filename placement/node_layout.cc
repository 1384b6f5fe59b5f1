// NodeLayout and ValidateNodeLayout (placement/placement.h).
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "format/layout.h"
#include "placement/placement.h"

namespace meshpool::placement {

format::PoolLayout NodeLayout(const proto::NodeInfo& info) {
  const proto::PoolLayout& l = info.layout();
  return format::PoolLayout{l.pool_bytes(),       l.index_offset(),
                            l.bucket_count(),     l.slab_area_offset(),
                            l.slab_bytes(),       l.slab_count(),
                            l.slab_meta_offset(), l.pin_area_offset(),
                            l.pin_sessions(),     l.pins_per_session()};
}

absl::Status ValidateNodeLayout(const proto::NodeInfo& info) {
  const format::PoolLayout layout = NodeLayout(info);
  if (absl::Status valid = format::ValidateLayout(layout, info.pool().length());
      !valid.ok()) {
    return valid;
  }
  // Placement gives a node keys in proportion to its capacity: a claim
  // beyond its own pool would draw other nodes' keys to it.
  if (info.capacity_bytes() > layout.pool_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "capacity_bytes ", info.capacity_bytes(),
        " exceeds the pool layout's pool_bytes ", layout.pool_bytes,
        " (placement weighs a node by its capacity); report the pool's "
        "size"));
  }
  return absl::OkStatus();
}

}  // namespace meshpool::placement
