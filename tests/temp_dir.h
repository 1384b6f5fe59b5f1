// tests/: ScopedTempDir, a fresh directory for one test, removed with it.
//
// Thread-compatible.
#ifndef MESHPOOL_TESTS_TEMP_DIR_H_
#define MESHPOOL_TESTS_TEMP_DIR_H_

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

#include "gtest/gtest.h"

namespace meshpool::testing {

// A fresh directory under gtest's temp dir, removed (recursively) when this
// goes away. path() is empty when mkdtemp failed (the test then fails on
// its first file write).
class ScopedTempDir {
 public:
  ScopedTempDir() {
    std::string pattern = ::testing::TempDir();
    if (pattern.empty() || pattern.back() != '/') pattern += '/';
    pattern += "meshpool_st_XXXXXX";
    if (::mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;
  ~ScopedTempDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace meshpool::testing

#endif  // MESHPOOL_TESTS_TEMP_DIR_H_
