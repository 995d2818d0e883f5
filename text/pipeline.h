#pragma once

// The general tokenizer.json pipeline, as `tokenizers` runs it for one sequence:
//   1. added tokens with normalized: false are found in the raw text (leftmost-longest, with
//      single_word / lstrip / rstrip); the text between them goes on piece by piece;
//   2. each piece is normalized, then the added tokens with normalized: true are found in it
//      (their content normalized the same way);
//   3. each remaining piece is pre-tokenized and each of its pieces goes through the model.
// Post-processing and truncation are the Tokenizer's (tokenizer.cc). The BERT pipeline that
// tokenizer.cc runs fused in one pass gives the same ids; this one runs anything else.
//
// Thread safety: immutable after Parse(); EncodeSequence() may run on any number of threads.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "text/json_util.h"
#include "text/models.h"
#include "text/normalizers.h"
#include "text/pre_tokenizers.h"
#include "text/tokenizer.h"

namespace sluice::text {

class Pipeline {
 public:
  // Builds the pipeline from a parsed tokenizer.json (model, normalizer, pre_tokenizer,
  // added_tokens). Errors name the component's path in `source`.
  // `tables`: the model's vocabulary and merges as ParseTokenizerJson collected them (moved
  // from).
  static absl::StatusOr<std::unique_ptr<Pipeline>> Parse(const Json& json, absl::string_view source,
                                                         ModelTables& tables);

  // Appends the ids of `text` (valid UTF-8). InvalidArgument if the model fails (e.g. a BPE
  // unk_token missing from its vocabulary, as `tokenizers` fails).
  // `offsets` (nullable): one per id appended: the bytes of an added token matched in the raw
  // text exactly as its content; -1 for every other token (alignments through the normalizers,
  // pre-tokenizers and models are not tracked).
  absl::Status EncodeSequence(absl::string_view text, std::vector<int32_t>* ids,
                              std::vector<TokenOffsets>* offsets = nullptr) const;

  int32_t TokenToId(absl::string_view token) const;
  // The content of the added token `id`, or empty.
  std::string AddedTokenContent(int32_t id) const;
  int32_t vocab_size() const { return vocab_size_; }

 private:
  struct AddedToken {
    std::string content;
    std::string pattern;  // what is matched: the content, normalized if `normalized`
    int32_t id = 0;
    bool single_word = false;
    bool lstrip = false;
    bool rstrip = false;
    bool normalized = false;
  };
  // One set of added tokens matched together (longest first), with a first-byte filter.
  struct MatchingSet {
    std::vector<const AddedToken*> tokens;
    bool first_byte[256] = {};
  };
  // A stretch of text and the added token it is (-1: none).
  struct Split {
    size_t start;
    size_t end;
    int32_t id;
  };

  void FindAddedTokens(absl::string_view text, const MatchingSet& set,
                       std::vector<Split>* splits) const;
  absl::Status EncodeSplit(absl::string_view text, const Split& split,
                           std::vector<Split>* normalized_splits, std::vector<int32_t>* ids) const;
  absl::Status EncodePiece(std::string text, bool first, std::vector<int32_t>* ids) const;

  std::unique_ptr<Model> model_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::vector<AddedToken> added_;
  MatchingSet raw_set_;
  MatchingSet normalized_set_;
  int32_t vocab_size_ = 0;
};

}  // namespace sluice::text
