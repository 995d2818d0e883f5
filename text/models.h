#pragma once

// tokenizer.json's models, each as `tokenizers` defines it: WordPiece (greedy longest match),
// BPE (ranked merges, applied lowest rank first with a priority queue over a linked list of
// symbols, so a long word costs O(n log n), not O(n^2); byte_fallback, fuse_unk,
// continuing_subword_prefix, end_of_word_suffix, ignore_merges; dropout null or 0 only) and
// Unigram (Viterbi over the scored vocabulary; unk_id, byte_fallback, unknown runs fused).
//
// Thread safety: immutable after parsing; Tokenize() may run on any number of threads at once.

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "text/json_load.h"
#include "text/json_util.h"

namespace sluice::text {

class Model {
 public:
  virtual ~Model() = default;
  // Appends the ids of one pre-tokenized piece (valid UTF-8, not empty). InvalidArgument when the
  // model needs an unknown token it does not have (as `tokenizers` fails then).
  virtual absl::Status Tokenize(absl::string_view word, std::vector<int32_t>* ids) const = 0;
  // The id of `token` in the vocabulary, or -1.
  virtual int32_t TokenToId(absl::string_view token) const = 0;
  // The number of vocabulary entries (`tokenizers`' get_vocab_size: where added tokens start).
  virtual int32_t size() const = 0;
  // The largest id + 1.
  virtual int32_t id_limit() const = 0;
};

// The model `json` describes (at `at`). InvalidArgument naming the path for an unknown type, a
// malformed vocabulary or merge, a merge whose parts or result are not in the vocabulary, an
// unk_id out of range, or dropout other than null / 0.
// `tables` holds the model's vocabulary and merges as the parse collected them
// (json_load.h; their DOM members are null); they are moved from.
absl::StatusOr<std::unique_ptr<Model>> ParseModel(const Json& json, const JsonPath& at,
                                                  ModelTables& tables);

}  // namespace sluice::text
