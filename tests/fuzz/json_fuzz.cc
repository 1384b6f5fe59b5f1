// Fuzzes the JSON reader (common/json.h), which parses safetensors headers
// and index files, hostfiles and other text from outside. Checks: a parse
// fails only with InvalidArgument, and a parsed value written back out
// parses to the same value.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/json.h"
#include "tests/fuzz/fuzz_check.h"

namespace meshpool {
namespace {

void Write(const JsonValue& v, std::string* out) {
  switch (v.type()) {
    case JsonValue::Type::kNull:
      *out += "null";
      return;
    case JsonValue::Type::kBool:
      *out += v.bool_value() ? "true" : "false";
      return;
    case JsonValue::Type::kNumber:
      *out += v.number_text();
      return;
    case JsonValue::Type::kString:
      *out += JsonQuote(v.string_value());
      return;
    case JsonValue::Type::kArray: {
      *out += '[';
      bool first = true;
      for (const JsonValue& e : v.elements()) {
        if (!first) *out += ',';
        first = false;
        Write(e, out);
      }
      *out += ']';
      return;
    }
    case JsonValue::Type::kObject: {
      *out += '{';
      bool first = true;
      for (const auto& [key, value] : v.members()) {
        if (!first) *out += ',';
        first = false;
        *out += JsonQuote(key);
        *out += ':';
        Write(value, out);
      }
      *out += '}';
      return;
    }
  }
}

}  // namespace
}  // namespace meshpool

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using meshpool::JsonValue;
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<JsonValue> value = meshpool::ParseJson(text, 1 << 20);
  if (!value.ok()) {
    MESHPOOL_FUZZ_CHECK(absl::IsInvalidArgument(value.status()),
                        value.status().ToString());
    return 0;
  }
  std::string written;
  meshpool::Write(*value, &written);
  absl::StatusOr<JsonValue> again = meshpool::ParseJson(written);
  MESHPOOL_FUZZ_CHECK(again.ok(),
                      absl::StrCat(written, ": ", again.status().ToString()));
  std::string rewritten;
  meshpool::Write(*again, &rewritten);
  MESHPOOL_FUZZ_CHECK(rewritten == written, rewritten);
  meshpool::testing::FuzzAccepted();
  return 0;
}
