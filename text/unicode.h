#pragma once

// The Unicode facts BERT tokenization needs, as Hugging Face's `tokenizers` sees them, from ICU
// (see README.md for why ICU): character classes in one table built once per process, canonical
// decomposition, combining classes and full lowercase mappings, and strict UTF-8 decoding.
// Everything here is thread-safe (the table is built under a function-local static's guard and
// read-only afterwards).

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace sluice::text::unicode {

// Bits of CharFlags().
enum : uint8_t {
  // BertNormalizer's clean_text removes it: NUL, U+FFFD, and control, format or private-use
  // characters (categories Cc, Cf, Co) other than \t, \n, \r.
  kRemovedByCleanText = 1 << 0,
  // White_Space (Rust's char::is_whitespace), which includes \t, \n, \r.
  kWhitespace = 1 << 1,
  // BertPreTokenizer's punctuation: ASCII punctuation, or a P* category.
  kPunctuation = 1 << 2,
  // BERT's "Chinese character" ranges (CJK Unified Ideographs and their extensions, CJK
  // Compatibility Ideographs and their supplement), which handle_chinese_chars isolates.
  kChinese = 1 << 3,
  // Category Mn (nonspacing mark): strip_accents drops it after NFD.
  kNonspacingMark = 1 << 4,
  // Has a canonical decomposition (NFD changes it).
  kDecomposes = 1 << 5,
  // Canonical combining class is not 0 (NFD's reordering moves it).
  kCombining = 1 << 6,
  // Lowercasing changes it.
  kChangesWhenLowercased = 1 << 7,
};

// The flags of code point `c` (REQUIRES: c <= 0x10FFFF). The first call builds the table
// (about 1.1 MB, tens of milliseconds); later calls are one load.
uint8_t CharFlags(char32_t c);
// The whole table (0x110000 entries, index = code point), for loops that look up every character:
// CharFlagTable()[c] == CharFlags(c). The pointer stays valid for the life of the process.
const uint8_t* CharFlagTable();

// The full canonical decomposition of `c` into out[0..n), n returned (at most kMaxDecomposition);
// `c` itself (n = 1) when it has none.
inline constexpr int kMaxDecomposition = 18;
int Decompose(char32_t c, char32_t* out);

// The canonical combining class of `c` (0 for starters).
int CombiningClass(char32_t c);

// The full lowercase mapping of `c` on its own, without context (Rust's char::to_lowercase: "İ"
// gives "i̇", a lone "Σ" gives "σ"), into out[0..n), n returned (at most kMaxLowercase).
inline constexpr int kMaxLowercase = 3;
int ToLower(char32_t c, char32_t* out);

// Decodes the UTF-8 sequence at s[0..n) (n >= 1) into *c. Returns its length (1 to 4), or 0 if
// the bytes there are not a well-formed sequence (Unicode's Table 3-7: no overlong forms, no
// surrogates, nothing above U+10FFFF, no truncated sequence).
int DecodeUtf8(const unsigned char* s, size_t n, char32_t* c);

// The offset of the first byte of `text` that does not start a well-formed UTF-8 sequence, or
// npos if `text` is valid UTF-8 throughout.
size_t FindInvalidUtf8(absl::string_view text);

// Appends the UTF-8 encoding of `c` to `out`.
void AppendUtf8(char32_t c, std::string* out);

// GPT-2's byte-to-character map (`tokenizers`' ByteLevel): the printable bytes ! to ~, U+00A1 to
// U+00AC and U+00AE to U+00FF stand for themselves; the other 68 bytes map to U+0100 upwards in
// byte order.
char32_t ByteToChar(unsigned char b);

}  // namespace sluice::text::unicode
