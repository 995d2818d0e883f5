#pragma once

// SentencePiece's precompiled charsmap (the `Precompiled` normalizer XLM-R, T5 and other
// SentencePiece conversions ship): a little-endian u32 byte length, a darts-clone double-array
// trie of that many bytes whose values are offsets into the rest, and the rest: NUL-terminated
// replacement strings. Normalization follows `tokenizers` (spm_precompiled): for each extended
// grapheme cluster shorter than 6 bytes, the replacement of the SHORTEST trie key that prefixes
// it replaces the whole cluster; otherwise (no key, or a longer cluster) each character is
// replaced the same way or kept.
//
// Thread safety: immutable after loading; Normalize() may run on any number of threads at once.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sluice::text {

class PrecompiledCharsmap {
 public:
  // From the base64 text tokenizer.json holds. InvalidArgument if it is not base64, is truncated,
  // its trie points outside itself, or its strings are not UTF-8.
  static absl::StatusOr<std::unique_ptr<PrecompiledCharsmap>> FromBase64(absl::string_view text);

  // Rewrites valid UTF-8 `text`.
  void Normalize(std::string& text) const;

  // The replacement for `chunk` (the shortest key that prefixes it), or false if none.
  bool Transform(absl::string_view chunk, absl::string_view* replacement) const;

 private:
  PrecompiledCharsmap() = default;
  std::vector<uint32_t> trie_;
  std::string strings_;
  // Single ASCII characters' replacements (-1: none), looked up without the trie.
  int32_t ascii_[128];
};

}  // namespace sluice::text
