// The README's ten-line example, built against an installed meshpool.
#include <meshpool/client.h>

#include <iostream>

int main(int argc, char** argv) {
  auto client = meshpool::Client::Connect(
      {.coordinator = argc > 1 ? argv[1] : "127.0.0.1:7070"});
  if (!client.ok()) { std::cerr << client.status() << "\n"; return 1; }
  absl::Status put = (*client)->Put("user:42", "hello, pooled memory");
  absl::StatusOr<std::string> value = (*client)->Get("user:42");
  std::cout << (value.ok() ? *value : value.status().ToString()) << "\n";
  return put.ok() && value.ok() ? 0 : 1;
}
