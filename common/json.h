// meshpool/common: a small strict JSON reader (RFC 8259) and the one writer
// helper the project needs (quoting a string).
//
//  * ParseJson: text -> JsonValue DOM. Strict: exactly one value with
//    optional surrounding whitespace (space, tab, CR, LF); no comments,
//    trailing commas, NaN/Infinity, leading zeros, single quotes, BOM, raw
//    control characters in strings, lone UTF-16 surrogates, or invalid UTF-8;
//    duplicate object keys are an error. Nesting deeper than kMaxJsonDepth
//    and documents over a byte limit are rejected before they cost memory or
//    stack. Every error is InvalidArgument "JSON byte N: <what was expected,
//    what was found>", N counting from 0 at the start of the text.
//  * JsonValue keeps a number as its literal text (no precision is lost);
//    AsUint64 parses non-negative integer literals exactly.
//  * JsonQuote: a string as a JSON string literal (for writers of test files
//    and headers).
//
// Everything here is stateless and thread-safe; a JsonValue is a plain value
// (copyable, movable), safe to read from many threads when none writes it.
#ifndef MESHPOOL_COMMON_JSON_H_
#define MESHPOOL_COMMON_JSON_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace meshpool {

// Arrays and objects nested deeper than this are rejected (the parser
// recurses once per level, so this also bounds its stack use).
inline constexpr int kMaxJsonDepth = 64;
// ParseJson's default and largest size limit. Callers pass a smaller one
// for their format (e.g. the safetensors header limit).
inline constexpr size_t kMaxJsonBytes = size_t{256} << 20;
static_assert(kMaxJsonDepth >= 8 && kMaxJsonDepth <= 1024,
              "depth limit must allow real documents and bound recursion");

class JsonValue {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  using Member = std::pair<std::string, JsonValue>;

  // A null value.
  JsonValue() = default;
  static JsonValue Bool(bool value);
  // REQUIRES: `text` is a valid JSON number literal (ParseJson guarantees
  // it for parsed values).
  static JsonValue Number(std::string text);
  static JsonValue String(std::string value);
  static JsonValue Array(std::vector<JsonValue> elements);
  // REQUIRES: keys are distinct.
  static JsonValue Object(std::vector<Member> members);

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_number() const { return type_ == Type::kNumber; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }

  // Accessors of the wrong type return false / "" / an empty list; check
  // type() first.
  bool bool_value() const { return type_ == Type::kBool && bool_; }
  // The decoded string (escapes resolved, UTF-8).
  const std::string& string_value() const;
  // The number exactly as written, e.g. "-1.5e3".
  const std::string& number_text() const;
  const std::vector<JsonValue>& elements() const { return elements_; }
  // Object members in document order.
  const std::vector<Member>& members() const { return members_; }

  // The value of a number written as a non-negative integer without
  // fraction or exponent ("0", "18446744073709551615") that fits in 64 bits;
  // nullopt for anything else ("-1", "1.0", "1e3", "18446744073709551616",
  // non-numbers).
  std::optional<uint64_t> AsUint64() const;
  // The member named `key`, or nullptr (also for non-objects). Linear in
  // the number of members.
  const JsonValue* Find(absl::string_view key) const;

  // "null", "bool", "number", "string", "array", "object": for messages.
  static absl::string_view TypeName(Type type);
  absl::string_view type_name() const { return TypeName(type_); }

 private:
  Type type_ = Type::kNull;
  bool bool_ = false;
  std::string text_;  // string value, or number literal
  std::vector<JsonValue> elements_;
  std::vector<Member> members_;
};

// Parses exactly one JSON value from `text`. InvalidArgument with the byte
// offset and what was expected on any deviation from RFC 8259 (see the top
// of this file), on duplicate object keys, on nesting deeper than
// kMaxJsonDepth, and when text is longer than min(max_bytes, kMaxJsonBytes).
absl::StatusOr<JsonValue> ParseJson(absl::string_view text,
                                    size_t max_bytes = kMaxJsonBytes);

// `value` as a JSON string literal with quotes: '"', '\' and control
// characters escaped, valid UTF-8 copied as is, and each byte that starts
// no valid UTF-8 sequence written as \ufffd (the replacement character),
// so that the literal always parses (ParseJson refuses invalid UTF-8).
std::string JsonQuote(absl::string_view value);

}  // namespace meshpool

#endif  // MESHPOOL_COMMON_JSON_H_
