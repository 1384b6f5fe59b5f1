#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/json.h"
#include "gtest/gtest.h"

namespace meshpool {
namespace {

// Asserts that `text` is rejected as InvalidArgument at byte `offset` with a
// message containing `expected`.
void ExpectRejected(absl::string_view text, size_t offset,
                    absl::string_view expected) {
  absl::StatusOr<JsonValue> v = ParseJson(text);
  ASSERT_FALSE(v.ok()) << "accepted: " << text;
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << text;
  const std::string msg(v.status().message());
  EXPECT_TRUE(absl::StrContains(msg, absl::StrCat("JSON byte ", offset, ":")))
      << text << " -> " << msg;
  EXPECT_TRUE(absl::StrContains(msg, expected)) << text << " -> " << msg;
}

std::string ParseString(absl::string_view text) {
  absl::StatusOr<JsonValue> v = ParseJson(text);
  EXPECT_TRUE(v.ok()) << text << ": " << v.status();
  if (!v.ok()) return "<error>";
  EXPECT_TRUE(v->is_string()) << text;
  return v->string_value();
}

TEST(JsonParse, ReadsEveryValueTypeAndKeepsObjectOrder) {
  absl::StatusOr<JsonValue> v = ParseJson(
      " {\"z\": null, \"a\": [true, false, -1.5e3, \"s\"], \"m\": {}}\r\n\t");
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_TRUE(v->is_object());
  ASSERT_EQ(v->members().size(), 3u);
  EXPECT_EQ(v->members()[0].first, "z");
  EXPECT_EQ(v->members()[1].first, "a");
  EXPECT_EQ(v->members()[2].first, "m");
  EXPECT_TRUE(v->Find("z")->is_null());
  EXPECT_EQ(v->Find("missing"), nullptr);
  const JsonValue& a = *v->Find("a");
  ASSERT_TRUE(a.is_array());
  ASSERT_EQ(a.elements().size(), 4u);
  EXPECT_TRUE(a.elements()[0].bool_value());
  EXPECT_TRUE(a.elements()[1].is_bool());
  EXPECT_FALSE(a.elements()[1].bool_value());
  EXPECT_EQ(a.elements()[2].number_text(), "-1.5e3");
  EXPECT_EQ(a.elements()[3].string_value(), "s");
  EXPECT_TRUE(v->Find("m")->is_object());
  EXPECT_TRUE(v->Find("m")->members().empty());
}

TEST(JsonParse, ScalarTopLevelValuesAreDocuments) {
  EXPECT_TRUE(ParseJson("null")->is_null());
  EXPECT_EQ(ParseJson(" 7 ")->AsUint64(), 7u);
  EXPECT_EQ(ParseString("\"x\""), "x");
}

TEST(JsonParse, DecodesEverySimpleEscape) {
  EXPECT_EQ(ParseString(R"("\"\\\/\b\f\n\r\t")"), "\"\\/\b\f\n\r\t");
}

TEST(JsonParse, DecodesUnicodeEscapesToUtf8) {
  EXPECT_EQ(ParseString(R"("\u0041\u00e9\u20AC")"), "A\xc3\xa9\xe2\x82\xac");
  EXPECT_EQ(ParseString(R"("\u0000")"), std::string(1, '\0'));
  // U+1F600 as a surrogate pair, upper and lower case hex.
  EXPECT_EQ(ParseString(R"("\uD83D\uDE00")"), "\xf0\x9f\x98\x80");
  EXPECT_EQ(ParseString(R"("\ud83d\ude00")"), "\xf0\x9f\x98\x80");
  // U+10FFFF, the last code point.
  EXPECT_EQ(ParseString(R"("\uDBFF\uDFFF")"), "\xf4\x8f\xbf\xbf");
}

TEST(JsonParse, RejectsLoneAndMismatchedSurrogates) {
  ExpectRejected(R"("\uDE00")", 1, "lone low surrogate");
  ExpectRejected(R"("\uD83D")", 7, "low surrogate");
  ExpectRejected(R"("\uD83Dx")", 7, "low surrogate");
  ExpectRejected(R"("\uD83D\u0041")", 7, "low surrogate");
  ExpectRejected(R"("\uD83D\uD83D")", 7, "low surrogate");
  ExpectRejected(R"("\u12G4")", 5, "4 hex digits");
  ExpectRejected(R"("\u12")", 5, "4 hex digits");
}

TEST(JsonParse, RejectsUnknownEscapesAndRawControlCharacters) {
  ExpectRejected(R"("\x41")", 2, "expected one of");
  ExpectRejected(R"("\')", 2, "expected one of");
  ExpectRejected("\"a\nb\"", 2, "control characters must be escaped");
  ExpectRejected(std::string("\"a\0b\"", 5), 2, "control characters");
  ExpectRejected("\"abc", 4, "closing the string opened at byte 0");
}

TEST(JsonParse, PassesValidUtf8AndRejectsInvalidUtf8) {
  EXPECT_EQ(ParseString("\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\""),
            "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
  ExpectRejected("\"\xc0\x80\"", 1, "UTF-8");          // overlong NUL
  ExpectRejected("\"\xe0\x80\xaf\"", 1, "overlong");   // overlong '/'
  ExpectRejected("\"\xed\xa0\x80\"", 1, "surrogate");  // encoded U+D800
  ExpectRejected("\"\xf4\x90\x80\x80\"", 1, "out-of-range");
  ExpectRejected("\"\xf5\x80\x80\x80\"", 1, "UTF-8");
  ExpectRejected("\"\xe2\x82\"", 1, "truncated");
  ExpectRejected("\"\x80\"", 1, "UTF-8");  // a lone continuation byte
  ExpectRejected("\xef\xbb\xbf{}", 0, "expected a value");  // BOM
}

TEST(JsonParse, NumbersFollowTheGrammarExactly) {
  for (const char* ok : {"0", "-0", "12", "-12", "0.5", "1e3", "1E+3", "1e-3",
                         "-1.25e-300", "1e400"}) {
    absl::StatusOr<JsonValue> v = ParseJson(ok);
    ASSERT_TRUE(v.ok()) << ok << ": " << v.status();
    EXPECT_EQ(v->number_text(), ok);
  }
  ExpectRejected("01", 1, "leading zeros");
  ExpectRejected("-", 1, "digit");
  ExpectRejected("1.", 2, "digit after '.'");
  ExpectRejected(".5", 0, "expected a value");
  ExpectRejected("+1", 0, "expected a value");
  ExpectRejected("1e", 2, "exponent");
  ExpectRejected("1e+", 3, "exponent");
  ExpectRejected("NaN", 0, "expected a value");
  ExpectRejected("Infinity", 0, "expected a value");
  ExpectRejected("-Infinity", 1, "digit");
}

TEST(JsonParse, AsUint64IsExactAndRefusesAnythingElse) {
  EXPECT_EQ(ParseJson("0")->AsUint64(), 0u);
  EXPECT_EQ(ParseJson("18446744073709551615")->AsUint64(), UINT64_MAX);
  EXPECT_EQ(ParseJson("9007199254740993")->AsUint64(),
            9007199254740993u);  // not representable as a double
  for (const char* no : {"18446744073709551616", "99999999999999999999999",
                         "-1", "-0", "1.0", "1e3", "\"5\"", "true", "null"}) {
    absl::StatusOr<JsonValue> v = ParseJson(no);
    ASSERT_TRUE(v.ok()) << no;
    EXPECT_FALSE(v->AsUint64().has_value()) << no;
  }
  // A huge literal is kept as text, not rounded.
  const std::string digits(1000, '7');
  EXPECT_EQ(ParseJson(digits)->number_text(), digits);
}

TEST(JsonParse, RejectsTrailingCommas) {
  ExpectRejected("[1,]", 3, "trailing commas");
  ExpectRejected("{\"a\":1,}", 7, "trailing commas");
  ExpectRejected("[,]", 1, "expected a value");
  ExpectRejected("{,}", 1, "object key");
}

TEST(JsonParse, RejectsTrailingGarbage) {
  ExpectRejected("{} x", 3, "trailing garbage");
  ExpectRejected("1 2", 2, "trailing garbage");
  ExpectRejected("[]]", 2, "trailing garbage");
  ExpectRejected(std::string("{}\0", 3), 2, "trailing garbage");
}

TEST(JsonParse, RejectsMalformedStructureWithOffsetAndExpectation) {
  ExpectRejected("", 0, "expected a value");
  ExpectRejected("   ", 3, "found the end of the input");
  ExpectRejected("{\"a\" 1}", 5, "expected ':' after an object key");
  ExpectRejected("{\"a\":1 \"b\":2}", 7, "expected ',' or '}'");
  ExpectRejected("[1 2]", 3, "expected ',' or ']'");
  ExpectRejected("{a:1}", 1, "object key");
  ExpectRejected("{'a':1}", 1, "object key");
  ExpectRejected("[1", 2, "end of the input");
  ExpectRejected("TRUE", 0, "expected a value");
  ExpectRejected("nul", 0, "expected 'null'");
  ExpectRejected("[tru]", 1, "expected 'true'");
  ExpectRejected("// c\n1", 0, "expected a value");
}

TEST(JsonParse, RejectsDuplicateKeysNamingBothOffsets) {
  ExpectRejected("{\"a\":1,\"b\":2,\"a\":3}", 13,
                 "duplicate object key \"a\" (first at byte 1)");
  // Nested objects are checked too; equal keys in different objects are
  // fine.
  EXPECT_TRUE(ParseJson("{\"a\":{\"a\":1},\"b\":{\"a\":2}}").ok());
  ExpectRejected("{\"o\":{\"k\":1,\"k\":1}}", 12, "duplicate object key \"k\"");
  // Escapes are resolved before comparing: "\u0061" is "a".
  ExpectRejected("{\"a\":1,\"\\u0061\":2}", 7, "duplicate object key \"a\"");
}

TEST(JsonParse, FindsDuplicateAmongManyKeys) {
  std::string text = "{";
  for (int i = 0; i < 5000; ++i)
    absl::StrAppend(&text, "\"k", i, "\":", i, ",");
  const size_t dup_at = text.size();
  text += "\"k4321\":0}";
  ExpectRejected(text, dup_at, "duplicate object key \"k4321\"");
  // The earliest duplicate in the document is the one reported.
  ExpectRejected("{\"b\":1,\"a\":1,\"a\":2,\"b\":2}", 13, "\"a\"");
}

TEST(JsonParse, AcceptsNestingUpToTheDepthLimit) {
  const std::string ok =
      std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  EXPECT_TRUE(ParseJson(ok).ok());
  std::string objects;
  for (int i = 0; i < kMaxJsonDepth; ++i) objects += "{\"a\":";
  objects += "1" + std::string(kMaxJsonDepth, '}');
  EXPECT_TRUE(ParseJson(objects).ok());
}

TEST(JsonParse, RejectsNestingPastTheDepthLimitWithoutRecursingFurther) {
  const std::string deep =
      std::string(kMaxJsonDepth + 1, '[') + std::string(kMaxJsonDepth + 1, ']');
  ExpectRejected(deep, kMaxJsonDepth, "nesting deeper than 64");
  // A million open brackets must fail fast, not overflow the stack.
  ExpectRejected(std::string(1 << 20, '['), kMaxJsonDepth, "nesting");
  ExpectRejected(std::string(1 << 20, '{'), 1, "object key");
}

TEST(JsonParse, RejectsDocumentsOverTheSizeLimit) {
  absl::StatusOr<JsonValue> v = ParseJson("[1, 2]", 5);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      absl::StrContains(v.status().message(), "6 bytes, over the limit of 5"))
      << v.status();
  EXPECT_TRUE(ParseJson("[1, 2]", 6).ok());
}

TEST(JsonQuote, RoundTripsThroughTheParser) {
  std::string all;
  for (int c = 0; c < 128; ++c) all.push_back(static_cast<char>(c));
  all += "\xc3\xa9\xf0\x9f\x98\x80";
  const std::string quoted = JsonQuote(all);
  EXPECT_EQ(ParseString(quoted), all);
  EXPECT_EQ(JsonQuote("a\"b\\c\n\x01"), R"("a\"b\\c\n\u0001")");
}

TEST(JsonQuote, InvalidUtf8BecomesReplacementCharactersThatParse) {
  // A stray continuation byte, a truncated sequence, an overlong one and a
  // lead byte that never starts UTF-8, around valid text.
  const std::string bytes =
      "a\x80"
      "b\xc3\xa9\xe2\x82"
      "z\xc0\xaf"
      "q\xff\xf0\x9f\x98\x80";
  const std::string quoted = JsonQuote(bytes);
  EXPECT_EQ(quoted, R"("a\ufffdb)"
                    "\xc3\xa9"
                    R"(\ufffd\ufffdz\ufffd\ufffdq\ufffd)"
                    "\xf0\x9f\x98\x80\"");
  EXPECT_EQ(ParseString(quoted),
            "a\xef\xbf\xbd"
            "b\xc3\xa9\xef\xbf\xbd\xef\xbf\xbdz"
            "\xef\xbf\xbd\xef\xbf\xbdq\xef\xbf\xbd\xf0\x9f\x98\x80");
}

TEST(JsonValue, WrongTypeAccessorsReturnEmptyValues) {
  JsonValue n = JsonValue::Number("3");
  EXPECT_EQ(n.string_value(), "");
  EXPECT_FALSE(n.bool_value());
  EXPECT_TRUE(n.elements().empty());
  EXPECT_EQ(n.Find("x"), nullptr);
  EXPECT_EQ(JsonValue::String("3").AsUint64(), std::nullopt);
  EXPECT_EQ(JsonValue::String("3").number_text(), "");
  EXPECT_EQ(n.type_name(), "number");
}

}  // namespace
}  // namespace meshpool
