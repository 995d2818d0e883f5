#pragma once

// tokenizer.json's normalizers, each as `tokenizers` defines it, over UTF-8 strings: Sequence,
// NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents, Replace (String or Regex), Prepend,
// Precompiled (SentencePiece's charsmap), Nmt, ByteLevel and BertNormalizer. Offsets are not
// tracked through them (nor through pre_tokenizers.h and models.h): the general pipeline gives
// offsets only for added tokens found in the raw text (Pipeline::EncodeSequence); the fused BERT
// pipeline (fused_bert.cc) tracks its own exactly.
//
// Thread safety: immutable after parsing; Normalize() may run on any number of threads at once.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "text/json_util.h"

namespace sluice::text {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Rewrites `text` (valid UTF-8; stays valid UTF-8).
  virtual void Normalize(std::string& text) const = 0;
};

// The normalizer `json` describes (at `at`), or nullptr for JSON null. InvalidArgument naming
// the path for an unknown type, a missing or mistyped field, or a regex that does not compile.
absl::StatusOr<std::unique_ptr<Normalizer>> ParseNormalizer(const Json& json, const JsonPath& at);

}  // namespace sluice::text
