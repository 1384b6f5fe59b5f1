// The README's ten-line example, built against an installed meshpool, plus
// one call from each concern header (they must be installed and link).
#include <meshpool/client.h>
#include <meshpool/kv_cache.h>
#include <meshpool/region.h>

#include <iostream>

int main(int argc, char** argv) {
  auto keys = meshpool::BlockKeys({.model = "m", .block_tokens = 2}, {1, 2, 3});
  if (!keys.ok() || keys->size() != 1) {
    std::cerr << "BlockKeys: " << keys.status() << "\n";
    return 2;
  }
  auto row = meshpool::DeviceMatrixRow("hosts a b\na - d0\nb d0 -\n", "a");
  if (!row.ok() || row->at("b") != "d0") {
    std::cerr << "DeviceMatrixRow: " << row.status() << "\n";
    return 2;
  }
  auto client = meshpool::Client::Connect(
      {.coordinator = argc > 1 ? argv[1] : "127.0.0.1:7070"});
  if (!client.ok()) { std::cerr << client.status() << "\n"; return 1; }
  absl::Status put = (*client)->Put("user:42", "hello, pooled memory");
  absl::StatusOr<std::string> value = (*client)->Get("user:42");
  std::cout << (value.ok() ? *value : value.status().ToString()) << "\n";
  auto regions = meshpool::ListRegions(**client);
  return put.ok() && value.ok() && regions.ok() ? 0 : 1;
}
