#include "common/common.h"

#include <cerrno>

#include "gtest/gtest.h"

namespace meshpool {
namespace {

TEST(ParseSize, AcceptsBinaryUnits) {
  EXPECT_EQ(*ParseSize("4096"), 4096u);
  EXPECT_EQ(*ParseSize("64KiB"), 64u << 10);
  EXPECT_EQ(*ParseSize("64kb"), 64u << 10);
  EXPECT_EQ(*ParseSize("8GiB"), 8ull << 30);
  EXPECT_EQ(*ParseSize("1.5MiB"), 3u << 19);
  EXPECT_EQ(*ParseSize("2m"), 2u << 20);
}

TEST(ParseSize, RejectsGarbageWithAHint) {
  for (const char* bad : {"", "KiB", "12XB", "-1", "1.3B", "abc"}) {
    auto s = ParseSize(bad);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find("64KiB"), std::string::npos);
  }
}

TEST(FormatSize, RoundTripsCommonSizes) {
  EXPECT_EQ(FormatSize(512), "512B");
  EXPECT_EQ(FormatSize(1536), "1.5KiB");
  EXPECT_EQ(FormatSize(8ull << 30), "8GiB");
}

TEST(ErrnoToStatus, MapsRetryableErrorsToUnavailable) {
  EXPECT_EQ(ErrnoToStatus(ECONNREFUSED, "connect").code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(ErrnoToStatus(ENOMEM, "mmap").code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrnoToStatus(EINVAL, "x").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ErrnoToStatus(EPIPE, "send").message().find("send"),
            std::string::npos);
}

}  // namespace
}  // namespace meshpool
