#include "rdma/tokens.h"

#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace meshpool::rdma::internal {

absl::StatusOr<std::string> TokenBook::Issue(absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (expiry_.size() >= kMaxTokens) DropExpiredLocked(now);
  if (expiry_.size() >= kMaxTokens) {
    return absl::ResourceExhaustedError(absl::StrCat(
        kMaxTokens,
        " tcp connection tokens are outstanding, issued and not yet used; "
        "retry in a few seconds"));
  }
  std::string token(kTokenBytes, '\0');
  while (true) {
    for (size_t i = 0; i < kTokenBytes; i += 8) {
      const uint64_t word = absl::Uniform<uint64_t>(gen_);
      std::memcpy(token.data() + i, &word, 8);
    }
    if (expiry_.emplace(token, now + kTokenTtl).second) return token;
  }
}

bool TokenBook::Redeem(absl::string_view token, absl::Time now) {
  absl::MutexLock lock(&mu_);
  auto it = expiry_.find(token);
  if (it == expiry_.end()) return false;
  const bool live = now < it->second;
  expiry_.erase(it);
  return live;
}

size_t TokenBook::outstanding() const {
  absl::MutexLock lock(&mu_);
  return expiry_.size();
}

void TokenBook::DropExpiredLocked(absl::Time now) {
  absl::erase_if(expiry_,
                 [now](const auto& entry) { return entry.second <= now; });
}

}  // namespace meshpool::rdma::internal
