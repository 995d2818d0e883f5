#pragma once

// tokenizer.json's pre-tokenizers, each as `tokenizers` defines it: Sequence, ByteLevel (GPT-2's
// regex, add_prefix_space, use_regex), Split (String or Regex pattern, every behavior, invert),
// Metaspace (replacement, prepend_scheme first/always/never, split), Whitespace,
// WhitespaceSplit, Punctuation, Digits and BertPreTokenizer. They cut pieces of text into smaller
// pieces (empty pieces are dropped, as `tokenizers` drops them) and may rewrite them (ByteLevel
// maps bytes to characters; Metaspace replaces spaces).
//
// Thread safety: immutable after parsing; PreTokenize() may run on any number of threads.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "text/json_util.h"

namespace sluice::text {

// A piece of one sequence on its way to the model.
struct Piece {
  std::string text;
  // It starts where the sequence starts (offset 0 of the original text): Metaspace's
  // prepend_scheme "first" prepends only to such a piece.
  bool first = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` by their pre-tokenized pieces, in order.
  virtual void PreTokenize(std::vector<Piece>& pieces) const = 0;
};

// The pre-tokenizer `json` describes (at `at`), or nullptr for JSON null. InvalidArgument naming
// the path for an unknown type or behavior, a missing field, or a regex that does not compile.
absl::StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const Json& json,
                                                                const JsonPath& at);

}  // namespace sluice::text
