#include "text/unicode.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#include <unicode/utf16.h>

#include <memory>

#include "common/check.h"

namespace sluice::text::unicode {
namespace {

constexpr char32_t kCodePoints = 0x110000;

// The general category that `tokenizers` sees for `c`. Its punctuation, control and mark tests
// come from the `unicode_categories` crate, whose tables are Unicode 8.0, while ICU 72 is Unicode
// 15.0. Characters assigned after 8.0 are therefore unassigned (Cn) to it, which ICU's character
// age recovers exactly. Six characters that 8.0 already had were recategorised later in a way
// that changes a BERT class; they keep their category of Unicode 8.0's UnicodeData.txt here.
// With these the classes agree with `tokenizers` 0.22 on all 1,112,064 code points
// (text_reference_test puts every one of them through both).
int8_t CategoryAsOfUnicode8(UChar32 c) {
  switch (c) {
    case 0x166D:   // CANADIAN SYLLABICS CHI SIGN: Po, So since 12.0
    case 0x111C9:  // SHARADA SANDHI MARK: Po, Mn since 11.0
      return U_OTHER_PUNCTUATION;
    case 0x1734:  // HANUNOO SIGN PAMUDPOD: Mn, Mc since 14.0
      return U_NON_SPACING_MARK;
    case 0x1885:  // MONGOLIAN LETTER ALI GALI BALUDA: Lo, Mn since 9.0
    case 0x1886:  // MONGOLIAN LETTER ALI GALI THREE BALUDA: Lo, Mn since 9.0
      return U_OTHER_LETTER;
    case 0xA9BD:  // JAVANESE CONSONANT SIGN KERET: Mc, Mn since 12.0
      return U_COMBINING_SPACING_MARK;
    default:
      break;
  }
  UVersionInfo age;
  u_charAge(c, age);
  if (age[0] > 8 || (age[0] == 8 && age[1] > 0)) {
    return U_UNASSIGNED;
  }
  return u_charType(c);
}

// BERT's ranges (google-research/bert tokenization.py _is_chinese_char, as `tokenizers` writes
// them: its fifth range starts at U+2B920, BERT's at U+2B820; ids follow `tokenizers`).
bool IsChinese(UChar32 c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

const UNormalizer2* Nfd() {
  static const UNormalizer2* nfd = [] {
    UErrorCode error = U_ZERO_ERROR;
    const UNormalizer2* n = unorm2_getNFDInstance(&error);
    CHECK(U_SUCCESS(error) && n != nullptr);
    return n;
  }();
  return nfd;
}

uint8_t ComputeFlags(UChar32 c) {
  uint8_t flags = 0;
  const int8_t category = CategoryAsOfUnicode8(c);
  const bool tab_newline = c == '\t' || c == '\n' || c == '\r';
  if (c == 0 || c == 0xFFFD ||
      (!tab_newline && (category == U_CONTROL_CHAR || category == U_FORMAT_CHAR ||
                        category == U_PRIVATE_USE_CHAR))) {
    flags |= kRemovedByCleanText;
  }
  // Rust's char::is_whitespace is the current White_Space property (no Unicode 8.0 tables).
  if (tab_newline || u_hasBinaryProperty(c, UCHAR_WHITE_SPACE)) {
    flags |= kWhitespace;
  }
  const bool ascii_punctuation =
      c < 0x80 && ((c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) ||
                   (c >= 0x5B && c <= 0x60) || (c >= 0x7B && c <= 0x7E));
  if (ascii_punctuation || category == U_CONNECTOR_PUNCTUATION || category == U_DASH_PUNCTUATION ||
      category == U_START_PUNCTUATION || category == U_END_PUNCTUATION ||
      category == U_INITIAL_PUNCTUATION || category == U_FINAL_PUNCTUATION ||
      category == U_OTHER_PUNCTUATION) {
    flags |= kPunctuation;
  }
  if (IsChinese(c)) {
    flags |= kChinese;
  }
  if (category == U_NON_SPACING_MARK) {
    flags |= kNonspacingMark;
  }
  if (u_getCombiningClass(c) != 0) {
    flags |= kCombining;
  }
  if (u_getIntPropertyValue(c, UCHAR_NFD_QUICK_CHECK) == UNORM_NO) {
    flags |= kDecomposes;
  }
  // Rust's char::to_lowercase uses the current tables too.
  if (u_hasBinaryProperty(c, UCHAR_CHANGES_WHEN_LOWERCASED)) {
    flags |= kChangesWhenLowercased;
  }
  return flags;
}

const uint8_t* FlagTable() {
  static const uint8_t* table = [] {
    auto* t = new uint8_t[kCodePoints];  // never freed: lives as long as the process
    for (UChar32 c = 0; c < static_cast<UChar32>(kCodePoints); ++c) {
      t[c] = (c >= 0xD800 && c <= 0xDFFF) ? 0 : ComputeFlags(c);
    }
    return t;
  }();
  return table;
}

// UTF-16 -> code points.
int ToCodePoints(const UChar* units, int32_t length, char32_t* out, int capacity) {
  int n = 0;
  for (int32_t i = 0; i < length && n < capacity;) {
    UChar32 c;
    U16_NEXT(units, i, length, c);
    out[n++] = static_cast<char32_t>(c);
  }
  return n;
}

}  // namespace

uint8_t CharFlags(char32_t c) { return FlagTable()[c]; }
const uint8_t* CharFlagTable() { return FlagTable(); }

int Decompose(char32_t c, char32_t* out) {
  UChar buffer[2 * kMaxDecomposition];
  UErrorCode error = U_ZERO_ERROR;
  const int32_t length = unorm2_getDecomposition(Nfd(), static_cast<UChar32>(c), buffer,
                                                 2 * kMaxDecomposition, &error);
  if (U_FAILURE(error) || length < 0) {
    out[0] = c;
    return 1;
  }
  return ToCodePoints(buffer, length, out, kMaxDecomposition);
}

int CombiningClass(char32_t c) { return u_getCombiningClass(static_cast<UChar32>(c)); }

int ToLower(char32_t c, char32_t* out) {
  UChar source[2];
  int32_t source_length = 0;
  U16_APPEND_UNSAFE(source, source_length, static_cast<UChar32>(c));
  UChar lower[8];
  UErrorCode error = U_ZERO_ERROR;
  // The root locale ("") applies no language rules (Turkish, Lithuanian); a lone character has
  // no context, so Final_Sigma does not apply: exactly Rust's char::to_lowercase.
  const int32_t length = u_strToLower(lower, 8, source, source_length, "", &error);
  if (U_FAILURE(error) || length <= 0) {
    out[0] = c;
    return 1;
  }
  return ToCodePoints(lower, length, out, kMaxLowercase);
}

int DecodeUtf8(const unsigned char* s, size_t n, char32_t* c) {
  const unsigned char b0 = s[0];
  if (b0 < 0x80) {
    *c = b0;
    return 1;
  }
  auto continuation = [&](size_t i) { return i < n && (s[i] & 0xC0) == 0x80; };
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    if (!continuation(1)) {
      return 0;
    }
    *c = (char32_t{b0} & 0x1F) << 6 | (s[1] & 0x3F);
    return 2;
  }
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    if (n < 2) {
      return 0;
    }
    const unsigned char b1 = s[1];
    // E0: no overlong forms (A0..BF); ED: no surrogates (80..9F).
    const unsigned char low = b0 == 0xE0 ? 0xA0 : 0x80;
    const unsigned char high = b0 == 0xED ? 0x9F : 0xBF;
    if (b1 < low || b1 > high || !continuation(2)) {
      return 0;
    }
    *c = (char32_t{b0} & 0x0F) << 12 | (char32_t{b1} & 0x3F) << 6 | (s[2] & 0x3F);
    return 3;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    if (n < 2) {
      return 0;
    }
    const unsigned char b1 = s[1];
    // F0: no overlong forms (90..BF); F4: nothing above U+10FFFF (80..8F).
    const unsigned char low = b0 == 0xF0 ? 0x90 : 0x80;
    const unsigned char high = b0 == 0xF4 ? 0x8F : 0xBF;
    if (b1 < low || b1 > high || !continuation(2) || !continuation(3)) {
      return 0;
    }
    *c = (char32_t{b0} & 0x07) << 18 | (char32_t{b1} & 0x3F) << 12 | (char32_t{s[2]} & 0x3F) << 6 |
         (s[3] & 0x3F);
    return 4;
  }
  return 0;
}

size_t FindInvalidUtf8(absl::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    if (s[i] < 0x80) {
      ++i;
      continue;
    }
    char32_t c;
    const int length = DecodeUtf8(s + i, n - i, &c);
    if (length == 0) {
      return i;
    }
    i += length;
  }
  return absl::string_view::npos;
}

void AppendUtf8(char32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

char32_t ByteToChar(unsigned char b) {
  static const auto* table = [] {
    auto* t = new char32_t[256];
    char32_t next = 0x100;
    for (int i = 0; i < 256; ++i) {
      const bool printable = (i >= '!' && i <= '~') || (i >= 0xA1 && i <= 0xAC) || i >= 0xAE;
      t[i] = printable ? static_cast<char32_t>(i) : next++;
    }
    return t;
  }();
  return table[b];
}

}  // namespace sluice::text::unicode
