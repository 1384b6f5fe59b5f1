// RegionLayout decoding and stripe placement (placement/region_layout.h).
#include "placement/region_layout.h"

#include <algorithm>
#include <queue>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace meshpool::placement {
namespace {

constexpr absl::string_view kNamePunctuation = "._-/:@+=#";

bool NameChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
         kNamePunctuation.find(c) != absl::string_view::npos;
}

// ceil(a / b) without overflow. REQUIRES: b > 0.
uint64_t CeilDiv(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

absl::Status BadInfo(const proto::RegionInfo& info, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("region '", info.name(),
                                                 "' has an inconsistent RegionInfo: ", what,
                                                 "; fetch it again from the coordinator"));
}

uint16_t ExtentAt(const std::string& entry, uint64_t stripe) {
  return static_cast<uint16_t>(static_cast<unsigned char>(entry[2 * stripe]) |
                               static_cast<unsigned char>(entry[2 * stripe + 1]) << 8);
}

}  // namespace

absl::Status ValidateRegionName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxRegionNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("region name is ", name.size(), " bytes; use 1 to ", kMaxRegionNameBytes));
  }
  for (size_t i = 0; i < name.size(); ++i) {
    if (!NameChar(name[i])) {
      const unsigned char c = static_cast<unsigned char>(name[i]);
      const std::string shown = absl::ascii_isgraph(c) ? absl::StrCat("'", name.substr(i, 1), "'")
                                                       : absl::StrCat("byte ", static_cast<int>(c));
      return absl::InvalidArgumentError(
          absl::StrCat("region name '", absl::CHexEscape(name), "' has ", shown, " at position ", i,
                       "; use letters, digits and any of \"", kNamePunctuation, "\""));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateAddressedRegionName(absl::string_view name) {
  if (name.empty() || name[0] != kTenantScopeMark) {
    return ValidateRegionName(name);
  }
  const size_t slash = name.find('/');
  if (slash == absl::string_view::npos || slash == 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "region name '", absl::CHexEscape(name),
        "' starts with '~' but names no tenant; a tenant's region is "
        "addressed as \"~TENANT/NAME\" (by an admin without a tenant)"));
  }
  return ValidateRegionName(name.substr(slash + 1));
}

absl::StatusOr<RegionLayout> RegionLayout::Create(const proto::RegionInfo& info) {
  if (info.size() == 0) return BadInfo(info, "size is 0");
  if (info.stripe_bytes() == 0 || info.stripe_bytes() % kStripeAlign != 0) {
    return BadInfo(info, absl::StrCat("stripe_bytes ", info.stripe_bytes(),
                                      " is not a positive multiple of ", kStripeAlign));
  }
  const uint64_t stripes = CeilDiv(info.size(), info.stripe_bytes());
  if (stripes > kMaxRegionStripes) {
    return BadInfo(info, absl::StrCat(stripes, " stripes, more than ", kMaxRegionStripes));
  }
  if (info.replicas() < 1 || info.replicas() > kMaxReplicas) {
    return BadInfo(info, absl::StrCat(info.replicas(), " replicas, not 1..", kMaxReplicas));
  }
  const int extents = info.extents_size();
  if (extents == 0 || static_cast<size_t>(extents) > kMaxRegionExtents) {
    return BadInfo(info, absl::StrCat(extents, " extents, not 1..", kMaxRegionExtents));
  }
  for (int e = 0; e < extents; ++e) {
    if (info.extents(e).slab_bytes() < info.stripe_bytes()) {
      return BadInfo(info,
                     absl::StrCat("extent ", e, " has slabs of ", info.extents(e).slab_bytes(),
                                  " bytes, smaller than a stripe"));
    }
  }
  if (static_cast<uint64_t>(info.stripe_extents_size()) != info.replicas()) {
    return BadInfo(info, absl::StrCat(info.stripe_extents_size(), " stripe_extents entries for ",
                                      info.replicas(), " replicas"));
  }
  for (uint32_t r = 0; r < info.replicas(); ++r) {
    if (info.stripe_extents(r).size() != 2 * stripes) {
      return BadInfo(info,
                     absl::StrCat("stripe_extents[", r, "] has ", info.stripe_extents(r).size(),
                                  " bytes, not ", 2 * stripes));
    }
  }
  RegionLayout layout;
  layout.size_ = info.size();
  layout.stripe_bytes_ = info.stripe_bytes();
  layout.stripes_ = stripes;
  layout.replicas_ = info.replicas();
  layout.copies_.resize(stripes * info.replicas());
  layout.copies_on_.assign(extents, 0);
  // Copies are numbered per extent in (stripe, replica) order.
  for (uint64_t s = 0; s < stripes; ++s) {
    for (uint32_t r = 0; r < info.replicas(); ++r) {
      const uint16_t e = ExtentAt(info.stripe_extents(r), s);
      if (e >= extents) {
        return BadInfo(
            info, absl::StrCat("stripe ", s, " replica ", r, " names extent ", e, " of ", extents));
      }
      for (uint32_t earlier = 0; earlier < r; ++earlier) {
        if (layout.copies_[s * info.replicas() + earlier].extent == e) {
          return BadInfo(info, absl::StrCat("stripe ", s, " has two copies on extent ", e));
        }
      }
      const proto::RegionExtent& extent = info.extents(e);
      const uint64_t per_slab = extent.slab_bytes() / info.stripe_bytes();
      const uint64_t k = layout.copies_on_[e]++;
      if (k / per_slab >= static_cast<uint64_t>(extent.slab_offsets_size())) {
        return BadInfo(info, absl::StrCat("extent ", e, " (node ", extent.node_id(), ") has ",
                                          extent.slab_offsets_size(),
                                          " slabs, too few for its stripe copies"));
      }
      layout.copies_[s * info.replicas() + r] =
          StripeCopy{e, extent.slab_offsets(k / per_slab) + (k % per_slab) * info.stripe_bytes()};
    }
  }
  return layout;
}

uint64_t RegionLayout::StripeLength(uint64_t stripe) const {
  if (stripe + 1 < stripes_) return stripe_bytes_;
  return size_ - stripe * stripe_bytes_;
}

namespace {

// Copies per candidate: proportional to free_stripes, each at most
// min(free, stripes) (one copy per stripe), summing to `total`.
// REQUIRES: sum of the caps >= total.
std::vector<uint64_t> Quotas(absl::Span<const PlacementCandidate> candidates, uint64_t stripes,
                             uint64_t total) {
  const size_t n = candidates.size();
  std::vector<uint64_t> quota(n, 0);
  std::vector<bool> open(n, false);
  for (size_t i = 0; i < n; ++i) open[i] = candidates[i].free_stripes > 0;
  uint64_t left = total;
  // Water-filling: a candidate whose proportional share reaches its cap is
  // fixed at the cap; the rest share what remains.
  while (true) {
    unsigned __int128 weight = 0;
    for (size_t i = 0; i < n; ++i) {
      if (open[i]) weight += candidates[i].free_stripes;
    }
    if (weight == 0) break;
    bool capped = false;
    for (size_t i = 0; i < n; ++i) {
      if (!open[i]) continue;
      const uint64_t cap = std::min(candidates[i].free_stripes, stripes);
      if (static_cast<unsigned __int128>(left) * candidates[i].free_stripes >=
          static_cast<unsigned __int128>(cap) * weight) {
        quota[i] = cap;
        open[i] = false;
        capped = true;
      }
    }
    if (capped) {
      left = total;
      for (size_t i = 0; i < n; ++i) {
        if (!open[i]) left -= quota[i];
      }
      continue;
    }
    // Nobody reaches its cap: floor of the share, then the remainder to
    // the largest fractions (ties to the lower index). floor + 1 stays
    // within the cap because the share is below it.
    std::vector<std::pair<unsigned __int128, size_t>> fractions;
    uint64_t given = 0;
    for (size_t i = 0; i < n; ++i) {
      if (!open[i]) continue;
      const unsigned __int128 share =
          static_cast<unsigned __int128>(left) * candidates[i].free_stripes;
      quota[i] = static_cast<uint64_t>(share / weight);
      given += quota[i];
      fractions.emplace_back(share % weight, i);
    }
    std::sort(fractions.begin(), fractions.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    for (size_t j = 0; given < left; ++j, ++given) ++quota[fractions[j].second];
    break;
  }
  return quota;
}

}  // namespace

absl::StatusOr<std::vector<std::vector<uint16_t>>> PlaceStripes(
    absl::Span<const PlacementCandidate> candidates, uint64_t stripes, uint32_t replicas) {
  if (stripes == 0 || stripes > kMaxRegionStripes) {
    return absl::InvalidArgumentError(absl::StrCat("a region needs 1 to ", kMaxRegionStripes,
                                                   " stripes, not ", stripes,
                                                   "; use larger stripes"));
  }
  if (replicas < 1 || replicas > kMaxReplicas) {
    return absl::InvalidArgumentError(
        absl::StrCat("replicas is ", replicas, "; use 1 to ", kMaxReplicas));
  }
  if (candidates.size() > kMaxRegionExtents) {
    return absl::InvalidArgumentError(absl::StrCat(
        candidates.size(), " placement candidates; at most ", kMaxRegionExtents, " are supported"));
  }
  uint64_t with_room = 0;
  unsigned __int128 free_total = 0;
  uint64_t usable = 0;  // copies the candidates can take, one per stripe each
  for (const PlacementCandidate& c : candidates) {
    with_room += c.free_stripes > 0;
    free_total += c.free_stripes;
    usable += std::min(c.free_stripes, stripes);
  }
  if (with_room < replicas) {
    return absl::FailedPreconditionError(
        absl::StrCat(replicas, " replicas need as many nodes with free memory; ", with_room,
                     " have any: add nodes, free memory or use fewer replicas"));
  }
  const uint64_t total = stripes * replicas;
  if (free_total < total) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the region needs ", total, " stripe copies and the nodes have room for ",
                     static_cast<uint64_t>(std::min<unsigned __int128>(free_total, UINT64_MAX)),
                     ": free memory or add nodes"));
  }
  if (usable < total) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the region needs ", total, " stripe copies, ", replicas,
        " per stripe on distinct nodes, and the nodes can take only ", usable,
        " that way (most free memory is on too few nodes): add nodes or use fewer replicas"));
  }
  const std::vector<uint64_t> quota = Quotas(candidates, stripes, total);
  const size_t n = candidates.size();
  std::vector<uint64_t> assigned(n, 0);

  // Next due: the candidate whose (assigned + 1) / quota is least (a stride
  // schedule: each candidate's copies spread evenly along the region).
  // Entries are lazy: stale once `assigned` moved on.
  using Due = std::pair<uint64_t, size_t>;  // (assigned at push, candidate)
  auto later = [&quota](const Due& a, const Due& b) {
    const unsigned __int128 ka = static_cast<unsigned __int128>(a.first + 1) * quota[b.second];
    const unsigned __int128 kb = static_cast<unsigned __int128>(b.first + 1) * quota[a.second];
    return ka != kb ? ka > kb : a.second > b.second;
  };
  std::priority_queue<Due, std::vector<Due>, decltype(later)> due(later);
  // Most copies left first: a candidate with as many copies left as stripes
  // remain must take every one of them. Also lazy.
  using Left = std::pair<uint64_t, size_t>;  // (left at push, candidate)
  auto fewer = [](const Left& a, const Left& b) {
    return a.first != b.first ? a.first < b.first : a.second > b.second;
  };
  std::priority_queue<Left, std::vector<Left>, decltype(fewer)> most_left(fewer);
  for (size_t i = 0; i < n; ++i) {
    if (quota[i] == 0) continue;
    due.push({0, i});
    most_left.push({quota[i], i});
  }

  std::vector<std::vector<uint16_t>> placement(replicas, std::vector<uint16_t>(stripes));
  std::vector<size_t> chosen;
  std::vector<Due> set_aside;
  for (uint64_t s = 0; s < stripes; ++s) {
    const uint64_t remaining = stripes - s;
    chosen.clear();
    // Forced: a candidate with as many copies left as stripes remain. There
    // are never more than `replicas` of them while the quotas are feasible,
    // and taking them keeps the quotas feasible (each at most one copy per
    // remaining stripe, summing to replicas per stripe), so placement never
    // runs dry. The stride order alone has met every quota in millions of
    // random tight inputs; this makes it a guarantee rather than luck.
    while (!most_left.empty()) {
      const Left top = most_left.top();
      const uint64_t left = quota[top.second] - assigned[top.second];
      if (top.first != left) {
        most_left.pop();
        continue;
      }
      if (left < remaining) break;
      most_left.pop();
      chosen.push_back(top.second);
    }
    set_aside.clear();
    while (chosen.size() < replicas) {
      if (due.empty()) {
        return absl::InternalError(absl::StrCat("stripe placement ran dry at stripe ", s,
                                                "; this is a bug, please report it"));
      }
      const Due top = due.top();
      due.pop();
      if (top.first != assigned[top.second]) continue;
      if (std::find(chosen.begin(), chosen.end(), top.second) != chosen.end()) {
        set_aside.push_back(top);
        continue;
      }
      chosen.push_back(top.second);
    }
    for (const Due& d : set_aside) due.push(d);
    // Replica order: the most due first.
    std::sort(chosen.begin(), chosen.end(), [&](size_t a, size_t b) {
      return later(Due{assigned[b], b}, Due{assigned[a], a});
    });
    for (uint32_t r = 0; r < replicas; ++r) {
      const size_t i = chosen[r];
      placement[r][s] = static_cast<uint16_t>(i);
      ++assigned[i];
      if (assigned[i] < quota[i]) {
        due.push({assigned[i], i});
        most_left.push({quota[i] - assigned[i], i});
      }
    }
  }
  return placement;
}

}  // namespace meshpool::placement
