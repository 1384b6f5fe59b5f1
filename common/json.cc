#include "common/json.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/common.h"

namespace meshpool {

JsonValue JsonValue::Bool(bool value) {
  JsonValue v;
  v.type_ = Type::kBool;
  v.bool_ = value;
  return v;
}

JsonValue JsonValue::Number(std::string text) {
  JsonValue v;
  v.type_ = Type::kNumber;
  v.text_ = std::move(text);
  return v;
}

JsonValue JsonValue::String(std::string value) {
  JsonValue v;
  v.type_ = Type::kString;
  v.text_ = std::move(value);
  return v;
}

JsonValue JsonValue::Array(std::vector<JsonValue> elements) {
  JsonValue v;
  v.type_ = Type::kArray;
  v.elements_ = std::move(elements);
  return v;
}

JsonValue JsonValue::Object(std::vector<Member> members) {
  JsonValue v;
  v.type_ = Type::kObject;
  v.members_ = std::move(members);
  return v;
}

const std::string& JsonValue::string_value() const {
  static const std::string* const kEmpty = new std::string();
  return type_ == Type::kString ? text_ : *kEmpty;
}

const std::string& JsonValue::number_text() const {
  static const std::string* const kEmpty = new std::string();
  return type_ == Type::kNumber ? text_ : *kEmpty;
}

std::optional<uint64_t> JsonValue::AsUint64() const {
  if (type_ != Type::kNumber || text_.empty()) return std::nullopt;
  uint64_t value = 0;
  for (char c : text_) {
    if (c < '0' || c > '9') return std::nullopt;  // '-', '.', 'e', 'E'
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (value > (UINT64_MAX - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
  }
  return value;
}

const JsonValue* JsonValue::Find(absl::string_view key) const {
  for (const Member& m : members_) {
    if (m.first == key) return &m.second;
  }
  return nullptr;
}

absl::string_view JsonValue::TypeName(Type type) {
  switch (type) {
    case Type::kNull:
      return "null";
    case Type::kBool:
      return "bool";
    case Type::kNumber:
      return "number";
    case Type::kString:
      return "string";
    case Type::kArray:
      return "array";
    case Type::kObject:
      return "object";
  }
  return "unknown";
}

namespace {

// One UTF-8 sequence at text[start] (a byte >= 0x80): its length when it is
// valid, else why not.
enum class Utf8Error { kNone, kBadLead, kTruncated, kBadValue };
struct Utf8Sequence {
  Utf8Error error = Utf8Error::kNone;
  int length = 0;
};

Utf8Sequence DecodeUtf8(absl::string_view text, size_t start) {
  const unsigned char lead = static_cast<unsigned char>(text[start]);
  int extra;
  uint32_t cp = 0;
  if (lead >= 0xc2 && lead <= 0xdf)
    extra = 1, cp = lead & 0x1f;
  else if (lead >= 0xe0 && lead <= 0xef)
    extra = 2, cp = lead & 0x0f;
  else if (lead >= 0xf0 && lead <= 0xf4)
    extra = 3, cp = lead & 0x07;
  else
    return {Utf8Error::kBadLead, 0};
  for (int i = 1; i <= extra; ++i) {
    if (start + i >= text.size() ||
        (static_cast<unsigned char>(text[start + i]) & 0xc0) != 0x80) {
      return {Utf8Error::kTruncated, 0};
    }
    cp = (cp << 6) | (static_cast<unsigned char>(text[start + i]) & 0x3f);
  }
  static constexpr uint32_t kMinForLength[] = {0, 0x80, 0x800, 0x10000};
  if (cp < kMinForLength[extra] || cp > 0x10ffff ||
      (cp >= 0xd800 && cp <= 0xdfff)) {
    return {Utf8Error::kBadValue, 0};
  }
  return {Utf8Error::kNone, extra + 1};
}

// A recursive-descent parser over one text. Depth is bounded by
// kMaxJsonDepth, so recursion is too.
class Parser {
 public:
  explicit Parser(absl::string_view text) : text_(text) {}

  absl::StatusOr<JsonValue> ParseDocument() {
    SkipWhitespace();
    JsonValue value;
    MESHPOOL_RETURN_IF_ERROR(ParseValue(0, &value));
    SkipWhitespace();
    if (pos_ != text_.size()) {
      return Error(
          "expected the end of the document after the top-level "
          "value (trailing garbage)");
    }
    return value;
  }

 private:
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return text_[pos_]; }

  // "'x'", "byte 0x01", or "the end of the input": what sits at pos_.
  std::string Found() const {
    if (AtEnd()) return "the end of the input";
    const unsigned char c = static_cast<unsigned char>(Peek());
    if (c >= 0x20 && c < 0x7f) return absl::StrCat("'", std::string(1, c), "'");
    return absl::StrFormat("byte 0x%02x", c);
  }

  absl::Status ErrorAt(size_t offset, absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("JSON byte ", offset, ": ", what));
  }
  // "expected X, found Y" at the current position.
  absl::Status Error(absl::string_view expected) const {
    return ErrorAt(pos_, absl::StrCat(expected, ", found ", Found()));
  }

  void SkipWhitespace() {
    while (!AtEnd()) {
      const char c = Peek();
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return;
      ++pos_;
    }
  }

  absl::Status ParseValue(int depth, JsonValue* out) {
    if (AtEnd()) return Error("expected a value");
    switch (Peek()) {
      case '{':
        return ParseObject(depth + 1, out);
      case '[':
        return ParseArray(depth + 1, out);
      case '"': {
        std::string s;
        MESHPOOL_RETURN_IF_ERROR(ParseString(&s));
        *out = JsonValue::String(std::move(s));
        return absl::OkStatus();
      }
      case 't':
        return ParseLiteral("true", JsonValue::Bool(true), out);
      case 'f':
        return ParseLiteral("false", JsonValue::Bool(false), out);
      case 'n':
        return ParseLiteral("null", JsonValue(), out);
      default:
        if (Peek() == '-' || (Peek() >= '0' && Peek() <= '9')) {
          return ParseNumber(out);
        }
        return Error(
            "expected a value (object, array, string, number, true, false "
            "or null)");
    }
  }

  absl::Status ParseLiteral(absl::string_view word, JsonValue value,
                            JsonValue* out) {
    if (text_.substr(pos_, word.size()) != word) {
      return ErrorAt(pos_, absl::StrCat("expected '", word,
                                        "' (literals are lower case)"));
    }
    pos_ += word.size();
    *out = std::move(value);
    return absl::OkStatus();
  }

  bool IsDigit() const { return !AtEnd() && Peek() >= '0' && Peek() <= '9'; }
  void SkipDigits() {
    while (IsDigit()) ++pos_;
  }

  absl::Status ParseNumber(JsonValue* out) {
    const size_t start = pos_;
    if (Peek() == '-') ++pos_;
    if (!IsDigit()) return Error("expected a digit in the number");
    if (Peek() == '0') {
      ++pos_;
      if (IsDigit()) {
        return Error(
            "expected '.', 'e' or the end of the number after a "
            "leading 0 (leading zeros are not allowed)");
      }
    } else {
      SkipDigits();
    }
    if (!AtEnd() && Peek() == '.') {
      ++pos_;
      if (!IsDigit()) return Error("expected a digit after '.'");
      SkipDigits();
    }
    if (!AtEnd() && (Peek() == 'e' || Peek() == 'E')) {
      ++pos_;
      if (!AtEnd() && (Peek() == '+' || Peek() == '-')) ++pos_;
      if (!IsDigit()) return Error("expected a digit in the exponent");
      SkipDigits();
    }
    *out = JsonValue::Number(std::string(text_.substr(start, pos_ - start)));
    return absl::OkStatus();
  }

  absl::Status ParseHex4(uint32_t* out) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      if (AtEnd()) return Error("expected 4 hex digits after \\u");
      const char c = Peek();
      uint32_t d;
      if (c >= '0' && c <= '9')
        d = c - '0';
      else if (c >= 'a' && c <= 'f')
        d = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F')
        d = c - 'A' + 10;
      else
        return Error("expected 4 hex digits after \\u");
      v = v * 16 + d;
      ++pos_;
    }
    *out = v;
    return absl::OkStatus();
  }

  static void AppendUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xc0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xe0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else {
      out->push_back(static_cast<char>(0xf0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    }
  }

  // At pos_ just after "\u": one code point, combining a surrogate pair.
  absl::Status ParseUnicodeEscape(std::string* out) {
    const size_t escape_start = pos_ - 2;
    uint32_t cp = 0;
    MESHPOOL_RETURN_IF_ERROR(ParseHex4(&cp));
    if (cp >= 0xdc00 && cp <= 0xdfff) {
      return ErrorAt(escape_start,
                     "expected a high surrogate (\\uD800-\\uDBFF) before a "
                     "low surrogate escape; a lone low surrogate is not a "
                     "character");
    }
    if (cp >= 0xd800 && cp <= 0xdbff) {
      if (text_.substr(pos_, 2) != "\\u") {
        return Error(
            "expected a \\u low surrogate escape after a high "
            "surrogate");
      }
      pos_ += 2;
      uint32_t low = 0;
      MESHPOOL_RETURN_IF_ERROR(ParseHex4(&low));
      if (low < 0xdc00 || low > 0xdfff) {
        return ErrorAt(pos_ - 6,
                       "expected a low surrogate (\\uDC00-\\uDFFF) "
                       "after a high surrogate");
      }
      cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
    }
    AppendUtf8(cp, out);
    return absl::OkStatus();
  }

  // One raw UTF-8 sequence starting at pos_ (a byte >= 0x80), copied to out.
  absl::Status CopyUtf8Sequence(std::string* out) {
    const size_t start = pos_;
    const Utf8Sequence seq = DecodeUtf8(text_, start);
    switch (seq.error) {
      case Utf8Error::kNone:
        break;
      case Utf8Error::kBadLead:
        return Error("expected valid UTF-8 in the string");
      case Utf8Error::kTruncated:
        return ErrorAt(start,
                       "expected valid UTF-8 in the string, found a "
                       "truncated multi-byte sequence");
      case Utf8Error::kBadValue:
        return ErrorAt(start,
                       "expected valid UTF-8 in the string, found an "
                       "overlong, surrogate or out-of-range sequence");
    }
    out->append(text_.data() + start, seq.length);
    pos_ = start + seq.length;
    return absl::OkStatus();
  }

  absl::Status ParseString(std::string* out) {
    const size_t open = pos_;
    ++pos_;  // '"'
    while (true) {
      if (AtEnd()) {
        return ErrorAt(pos_,
                       absl::StrCat("expected '\"' closing the string "
                                    "opened at byte ",
                                    open, ", found the end of the input"));
      }
      const unsigned char c = static_cast<unsigned char>(Peek());
      if (c == '"') {
        ++pos_;
        return absl::OkStatus();
      }
      if (c < 0x20) {
        return Error(
            "expected a printable character in the string (control "
            "characters must be escaped, e.g. \\n)");
      }
      if (c >= 0x80) {
        MESHPOOL_RETURN_IF_ERROR(CopyUtf8Sequence(out));
        continue;
      }
      ++pos_;
      if (c != '\\') {
        out->push_back(static_cast<char>(c));
        continue;
      }
      if (AtEnd()) return Error("expected an escape character after '\\'");
      const char e = Peek();
      ++pos_;
      switch (e) {
        case '"':
          out->push_back('"');
          break;
        case '\\':
          out->push_back('\\');
          break;
        case '/':
          out->push_back('/');
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'u':
          MESHPOOL_RETURN_IF_ERROR(ParseUnicodeEscape(out));
          break;
        default:
          --pos_;
          return Error(
              "expected one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t "
              "\\uXXXX");
      }
    }
  }

  absl::Status CheckDepth(int depth) const {
    if (depth > kMaxJsonDepth) {
      return ErrorAt(pos_, absl::StrCat("nesting deeper than ", kMaxJsonDepth,
                                        " arrays/objects is not accepted"));
    }
    return absl::OkStatus();
  }

  absl::Status ParseArray(int depth, JsonValue* out) {
    MESHPOOL_RETURN_IF_ERROR(CheckDepth(depth));
    ++pos_;  // '['
    std::vector<JsonValue> elements;
    SkipWhitespace();
    if (!AtEnd() && Peek() == ']') {
      ++pos_;
      *out = JsonValue::Array(std::move(elements));
      return absl::OkStatus();
    }
    while (true) {
      SkipWhitespace();
      if (!AtEnd() && Peek() == ']') {
        return Error(
            "expected a value after ',' (trailing commas are not "
            "allowed)");
      }
      elements.emplace_back();
      MESHPOOL_RETURN_IF_ERROR(ParseValue(depth, &elements.back()));
      SkipWhitespace();
      if (AtEnd() || (Peek() != ',' && Peek() != ']')) {
        return Error("expected ',' or ']' after an array element");
      }
      if (text_[pos_++] == ']') break;
    }
    *out = JsonValue::Array(std::move(elements));
    return absl::OkStatus();
  }

  absl::Status ParseObject(int depth, JsonValue* out) {
    MESHPOOL_RETURN_IF_ERROR(CheckDepth(depth));
    ++pos_;  // '{'
    std::vector<JsonValue::Member> members;
    std::vector<size_t> key_offsets;
    SkipWhitespace();
    if (!AtEnd() && Peek() == '}') {
      ++pos_;
      *out = JsonValue::Object(std::move(members));
      return absl::OkStatus();
    }
    while (true) {
      SkipWhitespace();
      if (AtEnd() || Peek() != '"') {
        return Error(members.empty()
                         ? "expected '\"' starting an object key or '}'"
                         : "expected '\"' starting an object key after ',' "
                           "(trailing commas are not allowed)");
      }
      key_offsets.push_back(pos_);
      members.emplace_back();
      MESHPOOL_RETURN_IF_ERROR(ParseString(&members.back().first));
      SkipWhitespace();
      if (AtEnd() || Peek() != ':') {
        return Error("expected ':' after an object key");
      }
      ++pos_;
      SkipWhitespace();
      MESHPOOL_RETURN_IF_ERROR(ParseValue(depth, &members.back().second));
      SkipWhitespace();
      if (AtEnd() || (Peek() != ',' && Peek() != '}')) {
        return Error("expected ',' or '}' after an object member");
      }
      if (text_[pos_++] == '}') break;
    }
    MESHPOOL_RETURN_IF_ERROR(CheckDuplicateKeys(members, key_offsets));
    *out = JsonValue::Object(std::move(members));
    return absl::OkStatus();
  }

  // O(n log n) in the member count, so a header with 100k tensors is fine.
  absl::Status CheckDuplicateKeys(const std::vector<JsonValue::Member>& members,
                                  const std::vector<size_t>& key_offsets) {
    if (members.size() < 2) return absl::OkStatus();
    std::vector<size_t> order(members.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return members[a].first < members[b].first;
    });
    // Equal keys are adjacent and in document order (stable sort): the
    // second of each run is a duplicate of the first. Report the duplicate
    // that comes first in the document.
    size_t worst = members.size();
    size_t first_of_worst = 0;
    for (size_t i = 1; i < order.size(); ++i) {
      const size_t a = order[i - 1], b = order[i];
      if (members[a].first == members[b].first && a < b && b < worst &&
          (i < 2 || members[order[i - 2]].first != members[a].first)) {
        worst = b;
        first_of_worst = a;
      }
    }
    if (worst == members.size()) return absl::OkStatus();
    return ErrorAt(
        key_offsets[worst],
        absl::StrCat("duplicate object key ", JsonQuote(members[worst].first),
                     " (first at byte ", key_offsets[first_of_worst],
                     "); keys must be unique"));
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

absl::StatusOr<JsonValue> ParseJson(absl::string_view text, size_t max_bytes) {
  const size_t limit = std::min(max_bytes, kMaxJsonBytes);
  if (text.size() > limit) {
    return absl::InvalidArgumentError(
        absl::StrCat("JSON document is ", text.size(),
                     " bytes, over the limit of ", limit, " bytes"));
  }
  return Parser(text).ParseDocument();
}

std::string JsonQuote(absl::string_view value) {
  std::string out;
  out.reserve(value.size() + 2);
  out.push_back('"');
  for (size_t i = 0; i < value.size(); ++i) {
    const char ch = value[i];
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c >= 0x80) {
      const Utf8Sequence seq = DecodeUtf8(value, i);
      if (seq.error == Utf8Error::kNone) {
        out.append(value.data() + i, seq.length);
        i += seq.length - 1;
      } else {
        out += "\\ufffd";  // a byte that starts no valid UTF-8 sequence
      }
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out.push_back(ch);
        }
    }
  }
  out.push_back('"');
  return out;
}

}  // namespace meshpool
