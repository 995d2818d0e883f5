#pragma once

// Internal to text/: the Tokenizer's state (tokenizer.cc loads it, fused_bert.cc runs the fused
// BERT pipeline over it, post_processing.cc truncates and applies the template) and the helpers
// those files share. Not part of the public API.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "text/json_load.h"
#include "text/json_util.h"
#include "text/pipeline.h"
#include "text/tokenizer.h"

namespace sluice::text {

enum class Strategy { kLongestFirst, kOnlyFirst, kOnlySecond };
enum class Direction { kRight, kLeft };

struct NormalizerConfig {
  bool clean_text = false;
  bool handle_chinese_chars = false;
  bool strip_accents = false;
  bool lowercase = false;
};

// One item of a post-processing template: a special token's ids, or sequence A (0) / B (1).
struct TemplateItem {
  int sequence = -1;  // -1: special token
  std::vector<int32_t> ids;
  int32_t type_id = 0;
};

struct TruncationConfig {
  int max_length = 0;
  Strategy strategy = Strategy::kLongestFirst;
  Direction direction = Direction::kRight;
};

// An added token matched in the raw text (normalized: false, no stripping).
struct AddedToken {
  std::string content;
  int32_t id = 0;
};

// InvalidArgument "<source>: <what>".
absl::Status Invalid(absl::string_view source, absl::string_view what);
// The string / bool / integer member `key` of `object`, or `fallback` when absent or null.
absl::StatusOr<std::string> OptionalString(const Json& object, const char* key,
                                           std::string fallback, absl::string_view source);
absl::StatusOr<bool> OptionalBool(const Json& object, const char* key, bool fallback,
                                  absl::string_view source);
absl::StatusOr<int64_t> OptionalInt(const Json& object, const char* key, int64_t fallback,
                                    absl::string_view source);

// post_processing.cc: the post-processor as the template it amounts to (empty: none), the
// special tokens a template adds, and the truncation block.
absl::Status ParsePostProcessor(const Json& json, const JsonPath& at,
                                std::vector<TemplateItem>* single, std::vector<TemplateItem>* pair);
int CountSpecial(const std::vector<TemplateItem>& items);
void SetBertTemplates(std::vector<int32_t> cls, std::vector<int32_t> sep,
                      std::vector<TemplateItem>* single, std::vector<TemplateItem>* pair);
absl::Status ParseTruncation(const Json& json, std::optional<TruncationConfig>* out,
                             absl::string_view source);

struct Tokenizer::Impl {
  // The vocabulary: keys are views into vocab_storage, which is never modified after loading.
  std::string vocab_storage;
  absl::flat_hash_map<absl::string_view, int32_t> vocab;
  int vocab_size = 0;
  // The longest vocabulary entry in bytes: WordPiece never looks up anything longer (same result
  // as trying and failing, without the hashing).
  size_t max_token_bytes = 0;

  // unicode::CharFlagTable(), looked up once per character.
  // Only the fused path reads it: the general one builds the table on first use instead, so
  // loading a BPE does not pay for it.
  const uint8_t* char_flags = nullptr;
  NormalizerConfig normalizer;
  bool bert_pre_tokenizer = false;  // false: no pre-tokenizer (the whole text is one word)
  int32_t unk_id = 0;
  std::string continuing_prefix = "##";
  size_t max_input_chars_per_word = 100;

  // Longest first, so the first match at a position is the longest (leftmost-longest).
  std::vector<AddedToken> added_tokens;
  bool added_first_byte[256] = {};

  std::vector<TemplateItem> single_template;
  std::vector<TemplateItem> pair_template;
  int added_single = 0;  // special tokens the templates add
  int added_pair = 0;

  // Anything but the fused BERT pipeline: the general one (pipeline.h); null for the BERT one.
  std::unique_ptr<Pipeline> pipeline;

  std::optional<TruncationConfig> json_truncation;
  int max_length = 0;  // 0: no limit
  bool truncate = false;
  Strategy strategy = Strategy::kLongestFirst;
  Direction direction = Direction::kRight;

  // A normalized character and the bytes of the input character it came from (offsets).
  struct Source {
    uint32_t start;
    uint32_t end;
  };
  // A combining mark waiting for canonical reordering, with its source and whether it stands
  // for an input character (`tokenizers`' NFD change 0) or was added by a decomposition (1).
  struct Mark {
    char32_t c;
    Source source;
    bool consumes;
  };
  // Per-call working memory (a local of Encode, never shared between threads).
  struct Scratch {
    std::string word;            // the current word's UTF-8 bytes
    std::vector<uint32_t> ends;  // byte offset just past each of its characters
    std::string piece;           // continuing prefix + the rest of the word
    std::vector<Mark> pending;   // combining marks waiting for canonical reordering
    // Offsets (null: not asked for): one per id appended, and what they need: the source of
    // each character of `word`, and of the character being normalized.
    std::vector<TokenOffsets>* offsets = nullptr;
    std::vector<Source> sources;
    Source current{0, 0};
    Source last_consumed{0, 0};       // the last input character NFD's output stood for
    std::vector<Source> run_sources;  // FlushPending's: the run's input characters, in order
  };

  absl::Status AddVocab(std::vector<std::pair<std::string, int32_t>> entries,
                        absl::string_view source);
  absl::Status SetAddedTokens(const Json& list, absl::string_view source);
  absl::Status LoadFusedBert(const Json& json, ModelTables& tables, absl::string_view source);
  void ApplyOptions(const TokenizerOptions& options);
  int32_t Lookup(absl::string_view token) const;

  // `offsets` (nullable): one per id appended, into `text`.
  absl::Status EncodeSequence(absl::string_view text, absl::string_view name,
                              std::vector<int32_t>* ids, std::vector<TokenOffsets>* offsets) const;
  // `base`: where `segment` starts in the text (for offsets).
  void EncodeSegment(absl::string_view segment, size_t base, Scratch& scratch,
                     std::vector<int32_t>* ids) const;
  void EmitNormalized(char32_t c, Scratch& scratch, std::vector<int32_t>* ids) const;
  void EmitCased(char32_t c, Scratch& scratch, std::vector<int32_t>* ids) const;
  void FlushPending(Scratch& scratch, std::vector<int32_t>* ids) const;
  void PreTokenize(char32_t c, Scratch& scratch, std::vector<int32_t>* ids) const;
  void EndWord(Scratch& scratch, std::vector<int32_t>* ids) const;
  void WordPiece(Scratch& scratch, std::vector<int32_t>* ids) const;
  // Truncation and the template. `offsets_a` / `offsets_b`: null unless options.with_offsets.
  absl::StatusOr<Encoding> Finish(std::vector<int32_t> a, std::vector<int32_t>* b,
                                  const EncodeOptions& options,
                                  std::vector<TokenOffsets>* offsets_a,
                                  std::vector<TokenOffsets>* offsets_b) const;
};

}  // namespace sluice::text
