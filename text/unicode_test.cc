#include "text/unicode.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::text::unicode {
namespace {

using ::testing::ElementsAre;

std::u32string Lower(char32_t c) {
  char32_t out[kMaxLowercase];
  return std::u32string(out, ToLower(c, out));
}

std::u32string Nfd(char32_t c) {
  char32_t out[kMaxDecomposition];
  return std::u32string(out, Decompose(c, out));
}

TEST(UnicodeTest, DecodesAndRejectsUtf8) {
  char32_t c = 0;
  auto decode = [&](const std::string& s) {
    return DecodeUtf8(reinterpret_cast<const unsigned char*>(s.data()), s.size(), &c);
  };
  EXPECT_EQ(decode("A"), 1);
  EXPECT_EQ(c, U'A');
  EXPECT_EQ(decode("\xC3\xA9"), 2);
  EXPECT_EQ(c, U'\u00E9');
  EXPECT_EQ(decode("\xE2\x82\xAC"), 3);
  EXPECT_EQ(c, U'\u20AC');
  EXPECT_EQ(decode("\xF4\x8F\xBF\xBF"), 4);
  EXPECT_EQ(c, U'\U0010FFFF');
  for (const char* bad : {"\xC1\xBF", "\xE0\x9F\xBF", "\xED\xA0\x80", "\xF0\x8F\xBF\xBF",
                          "\xF4\x90\x80\x80", "\xF5\x80\x80\x80", "\xC3", "\xE2\x82", "\xBF"}) {
    EXPECT_EQ(decode(bad), 0) << bad;
  }
  EXPECT_EQ(FindInvalidUtf8("caf\xC3\xA9"), absl::string_view::npos);
  EXPECT_EQ(FindInvalidUtf8("caf\xC3"), 3u);
}

TEST(UnicodeTest, ClassesAsBertDefinesThem) {
  EXPECT_TRUE(CharFlags(U'\u0000') & kRemovedByCleanText);
  EXPECT_TRUE(CharFlags(U'\u200D') & kRemovedByCleanText);  // ZWJ is Cf
  EXPECT_TRUE(CharFlags(U'\uE000') & kRemovedByCleanText);  // private use
  EXPECT_FALSE(CharFlags(U'\t') & kRemovedByCleanText);
  EXPECT_TRUE(CharFlags(U'\t') & kWhitespace);
  EXPECT_TRUE(CharFlags(U'\u3000') & kWhitespace);
  EXPECT_FALSE(CharFlags(U'\u200B') & kWhitespace);  // not White_Space
  EXPECT_FALSE(CharFlags(U'\u001F') & kWhitespace);  // Python's isspace says yes; Rust no
  EXPECT_TRUE(CharFlags(U'$') & kPunctuation);       // ASCII: BERT counts symbols too
  EXPECT_TRUE(CharFlags(U'\u3002') & kPunctuation);
  EXPECT_FALSE(CharFlags(U'\u20AC') & kPunctuation);
  EXPECT_TRUE(CharFlags(U'\u4E2D') & kChinese);
  EXPECT_FALSE(CharFlags(U'\u3042') & kChinese);      // hiragana
  EXPECT_FALSE(CharFlags(U'\U0002B820') & kChinese);  // tokenizers' gap in the ranges
  EXPECT_TRUE(CharFlags(U'\u0301') & kNonspacingMark);
  EXPECT_TRUE(CharFlags(U'\u00E9') & kDecomposes);
  EXPECT_TRUE(CharFlags(U'\u0301') & kCombining);
  EXPECT_TRUE(CharFlags(U'\u00C9') & kChangesWhenLowercased);
  // Unicode 8.0's categories, as tokenizers' tables have them.
  EXPECT_TRUE(CharFlags(U'\u166D') & kPunctuation);
}

TEST(UnicodeTest, LowercaseAndDecomposition) {
  EXPECT_EQ(Lower(U'\u0130'), U"i\u0307");
  EXPECT_EQ(Lower(U'\u03A3'), U"\u03C3");  // no final-sigma context for a lone character
  EXPECT_EQ(Lower(U'\u212A'), U"k");
  EXPECT_EQ(Lower(U'\u1E9E'), U"\u00DF");
  EXPECT_EQ(Nfd(U'\u00E9'), U"e\u0301");
  EXPECT_EQ(Nfd(U'\u1E69'), U"s\u0323\u0307");
  EXPECT_EQ(Nfd(U'\uAC01'), U"\u1100\u1161\u11A8");
  EXPECT_EQ(Nfd(U'a'), U"a");
  EXPECT_EQ(CombiningClass(U'\u0323'), 220);
}

}  // namespace
}  // namespace sluice::text::unicode
