#include "rdma/tokens.h"

#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace meshpool::rdma::internal {

absl::StatusOr<std::string> TokenBook::Issue(absl::Time now,
                                             DataAccess access) {
  absl::MutexLock lock(&mu_);
  if (issued_.size() >= kMaxTokens) DropExpiredLocked(now);
  if (issued_.size() >= kMaxTokens) {
    return absl::ResourceExhaustedError(absl::StrCat(
        kMaxTokens,
        " connection tokens are outstanding, issued and not yet used; "
        "retry in a few seconds"));
  }
  std::string token(kTokenBytes, '\0');
  while (true) {
    for (size_t i = 0; i < kTokenBytes; i += 8) {
      const uint64_t word = absl::Uniform<uint64_t>(gen_);
      std::memcpy(token.data() + i, &word, 8);
    }
    if (issued_.try_emplace(token, Issued{now + kTokenTtl, access}).second) {
      return token;
    }
  }
}

std::optional<DataAccess> TokenBook::Redeem(absl::string_view token,
                                            absl::Time now) {
  absl::MutexLock lock(&mu_);
  auto it = issued_.find(token);
  if (it == issued_.end()) return std::nullopt;
  std::optional<DataAccess> access;
  if (now < it->second.expiry) access = std::move(it->second.access);
  issued_.erase(it);
  return access;
}

size_t TokenBook::outstanding() const {
  absl::MutexLock lock(&mu_);
  return issued_.size();
}

void TokenBook::DropExpiredLocked(absl::Time now) {
  absl::erase_if(
      issued_, [now](const auto& entry) { return entry.second.expiry <= now; });
}

}  // namespace meshpool::rdma::internal
