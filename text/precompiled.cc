#include "text/precompiled.h"

#include <unicode/brkiter.h>
#include <unicode/utext.h>

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"

namespace sluice::text {
namespace {

// darts-clone's unit layout.
bool HasLeaf(uint32_t unit) { return (unit >> 8) & 1; }
uint32_t Value(uint32_t unit) { return unit & ((1u << 31) - 1); }
uint32_t Label(uint32_t unit) { return unit & ((1u << 31) | 0xFF); }
uint32_t Offset(uint32_t unit) { return (unit >> 10) << ((unit & (1u << 9)) >> 6); }

// An extended-grapheme iterator per thread (creating one costs far more than a text).
icu::BreakIterator* GraphemeIterator() {
  thread_local std::unique_ptr<icu::BreakIterator> iterator = [] {
    UErrorCode status = U_ZERO_ERROR;
    return std::unique_ptr<icu::BreakIterator>(
        icu::BreakIterator::createCharacterInstance(icu::Locale::getRoot(), status));
  }();
  return iterator.get();
}

}  // namespace

absl::StatusOr<std::unique_ptr<PrecompiledCharsmap>> PrecompiledCharsmap::FromBase64(
    absl::string_view text) {
  std::string bytes;
  if (!absl::Base64Unescape(text, &bytes)) {
    return absl::InvalidArgumentError("precompiled_charsmap is not base64");
  }
  if (bytes.size() < 4) {
    return absl::InvalidArgumentError("precompiled_charsmap is truncated");
  }
  uint32_t trie_bytes;
  std::memcpy(&trie_bytes, bytes.data(), 4);  // little-endian, as this machine
  if (trie_bytes % 4 != 0 || trie_bytes > bytes.size() - 4 || trie_bytes == 0) {
    return absl::InvalidArgumentError("precompiled_charsmap: its trie size is out of range");
  }
  std::unique_ptr<PrecompiledCharsmap> map(new PrecompiledCharsmap());
  map->trie_.resize(trie_bytes / 4);
  std::memcpy(map->trie_.data(), bytes.data() + 4, trie_bytes);
  map->strings_ = bytes.substr(4 + trie_bytes);
  for (int c = 0; c < 128; ++c) {
    const char chunk[1] = {static_cast<char>(c)};
    absl::string_view replacement;
    map->ascii_[c] = -1;
    if (c != 0 && map->Transform(absl::string_view(chunk, 1), &replacement)) {
      map->ascii_[c] = static_cast<int32_t>(replacement.data() - map->strings_.data());
    }
  }
  return map;
}

bool PrecompiledCharsmap::Transform(absl::string_view chunk, absl::string_view* replacement) const {
  const size_t units = trie_.size();
  size_t node = Offset(trie_[0]);
  for (unsigned char c : chunk) {
    if (c == 0) {
      break;
    }
    node ^= c;
    if (node >= units) {
      return false;
    }
    const uint32_t unit = trie_[node];
    if (Label(unit) != c) {
      return false;
    }
    node ^= Offset(unit);
    if (node >= units) {
      return false;
    }
    if (HasLeaf(unit)) {
      const size_t start = Value(trie_[node]);
      if (start > strings_.size()) {
        return false;
      }
      size_t end = strings_.find('\0', start);
      if (end == std::string::npos) {
        end = strings_.size();
      }
      *replacement = absl::string_view(strings_).substr(start, end - start);
      return true;  // the first (shortest) key wins, as spm_precompiled's results[0]
    }
  }
  return false;
}

void PrecompiledCharsmap::Normalize(std::string& text) const {
  std::string out;
  out.reserve(text.size() + 8);
  // Appends one character's (or cluster's) text, replaced if the map has it.
  auto emit_chars = [&](absl::string_view grapheme) {
    for (size_t i = 0; i < grapheme.size();) {
      const unsigned char lead = static_cast<unsigned char>(grapheme[i]);
      const size_t n = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
      const absl::string_view part = grapheme.substr(i, n);
      absl::string_view replacement;
      if (Transform(part, &replacement)) {
        out.append(replacement.data(), replacement.size());
      } else {
        out.append(part.data(), part.size());
      }
      i += n;
    }
  };
  UErrorCode status = U_ZERO_ERROR;
  UText* utext = utext_openUTF8(nullptr, text.data(), static_cast<int64_t>(text.size()), &status);
  icu::BreakIterator* graphemes = GraphemeIterator();
  graphemes->setText(utext, status);
  int32_t start = graphemes->first();
  for (int32_t end = graphemes->next(); end != icu::BreakIterator::DONE;
       start = end, end = graphemes->next()) {
    const absl::string_view grapheme(text.data() + start, static_cast<size_t>(end - start));
    if (grapheme.size() == 1) {
      const unsigned char c = static_cast<unsigned char>(grapheme[0]);
      if (ascii_[c] >= 0) {
        out.append(strings_.c_str() + ascii_[c]);
      } else {
        out += grapheme[0];
      }
      continue;
    }
    absl::string_view replacement;
    if (grapheme.size() < 6 && Transform(grapheme, &replacement)) {
      out.append(replacement.data(), replacement.size());
      continue;
    }
    emit_chars(grapheme);
  }
  utext_close(utext);
  text = std::move(out);
}

}  // namespace sluice::text
