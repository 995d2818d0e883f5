#pragma once

// Tokenization that gives the ids Hugging Face's `tokenizers` gives, from a `tokenizer.json`
// (the `tokenizers` serialization) as every Hugging Face model folder ships it: WordPiece (BERT,
// MiniLM, bge, e5), byte-level BPE (RoBERTa, ModernBERT, Qwen2/3, GPT-2), SentencePiece Unigram
// (XLM-R, multilingual-e5, bge-m3, T5) and SentencePiece BPE with byte fallback (Llama,
// Mistral): the normalizer, pre-tokenizer, model, post-processor, added tokens and truncation
// blocks, each component as `tokenizers` 0.22 defines it (text/README.md lists them). Any other
// component fails the load with InvalidArgument naming it and its path in the file, e.g.
// "tokenizer.json: pre_tokenizer.pretokenizers[1]: type 'Foo' is not supported".
//
// Or a BERT `vocab.txt` (+ `tokenizer_config.json`: do_lower_case, tokenize_chinese_chars,
// strip_accents, the special tokens), which gives the pipeline `BertTokenizerFast` builds from
// it. Padding is not applied: the engine packs sequences without it.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sluice::text {

// When an encoding is longer than the length limit (special tokens included).
enum class TruncationMode {
  kFromTokenizer,  // truncate if tokenizer.json has a truncation block, else reject
  kTruncate,       // truncate (tokenizer.json's strategy and direction, else LongestFirst, Right)
  kReject,         // fail with InvalidArgument naming the limit
};

struct TokenizerOptions {
  // The model's length limit in tokens, special tokens included (ReadMaxSequenceLength() picks it
  // from a Hugging Face folder). 0: tokenizer.json's truncation max_length if it has one, else no
  // limit. When both are present this one wins, as sentence-transformers' max_seq_length does.
  int max_length = 0;
  // What happens to encodings longer than the limit. Default: as tokenizer.json says.
  TruncationMode truncation = TruncationMode::kFromTokenizer;
};

// Which end of a sequence truncation removes tokens from.
enum class TruncationDirection { kRight, kLeft };

// Per-call choices for Encode() / EncodePair(). The defaults give what the Tokenizer was loaded
// for (TokenizerOptions), so `{}` is the plain call.
struct EncodeOptions {
  // Whether an encoding longer than max_length() is cut (true) or refused with InvalidArgument
  // (false). Unset: as loaded (truncates()).
  std::optional<bool> truncate;
  // The end a cut removes tokens from. Unset: tokenizer.json's truncation direction, else right.
  std::optional<TruncationDirection> direction;
  // EncodePair only: the second text keeps at most this many of its own tokens (special tokens
  // not counted), its first ones, before the length limit applies (Cohere's max_tokens_per_doc).
  // 0: no cap. Negative values are treated as 0.
  int max_second_tokens = 0;
  // false: no post-processing template (no [CLS]/[SEP]), as `tokenizers`' add_special_tokens.
  bool add_special_tokens = true;
  // true: the length limit does not apply (nothing cut, nothing refused), whatever `truncate`
  // says. For a caller that only shows tokens (TEI's /tokenize), never for a model's input.
  bool ignore_length_limit = false;
  // Fill Encoding::offsets and Encoding::special (they cost a little per character).
  bool with_offsets = false;
};

// Where a token came from in its input text: bytes [start, stop). Both -1 when it has none (a
// special token of the template) or when the pipeline cannot tell exactly (see
// Tokenizer::exact_offsets()).
struct TokenOffsets {
  int64_t start = -1;
  int64_t stop = -1;
  bool known() const { return start >= 0; }
};

// One encoded text (or pair), special tokens included, no padding.
struct Encoding {
  std::vector<int32_t> ids;
  // 0 for the first text and its special tokens, 1 for the second (as the template says).
  std::vector<int32_t> type_ids;
  // All ones (there is no padding); for models that take it as an input.
  std::vector<int32_t> attention_mask;
  // Only with EncodeOptions::with_offsets (else empty), one per token: its bytes in the text it
  // came from (for a pair, in its own text: type_ids tells which), as `tokenizers`' Rust
  // Encoding::get_offsets() gives them; and 1 for the template's special tokens, else 0
  // (`tokenizers`' special_tokens_mask).
  std::vector<TokenOffsets> offsets;
  std::vector<uint8_t> special;

  // The number of tokens (what a token budget counts).
  int num_tokens() const { return static_cast<int>(ids.size()); }
};

// A loaded tokenizer. Immutable after creation: Encode() and EncodePair() are const and keep no
// shared mutable state, so one Tokenizer may be used from any number of threads at once without
// locks. Owned by its creator (unique_ptr); share it by const reference or shared_ptr.
class Tokenizer {
 public:
  // Parses `json` (the contents of a tokenizer.json). InvalidArgument for malformed JSON, a
  // missing field, a malformed merge, a regex that does not compile, an id out of range or an
  // unsupported component, naming it: e.g. "tokenizer.json: model: type 'WordLevel' is not
  // supported". `source` names the file in messages.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(
      absl::string_view json, const TokenizerOptions& options = {},
      absl::string_view source = "tokenizer.json");
  // Reads and parses the tokenizer.json at `path`. NotFound if it does not exist.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> LoadJson(const std::string& path,
                                                             const TokenizerOptions& options = {});
  // The standard BERT pipeline from a vocab.txt (one token a line, its id the line number) and the
  // contents of a tokenizer_config.json (`config_json`, may be empty: uncased defaults).
  // InvalidArgument if the vocabulary lacks the unknown, [CLS] or [SEP] token.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromVocab(absl::string_view vocab_txt,
                                                              absl::string_view config_json,
                                                              const TokenizerOptions& options = {});
  // A Hugging Face model folder: its tokenizer.json if present, else vocab.txt (+
  // tokenizer_config.json if present). NotFound if it has neither.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> LoadFolder(
      const std::string& dir, const TokenizerOptions& options = {});

  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;
  ~Tokenizer();

  // Encodes one text. InvalidArgument if `text` is not valid UTF-8 ("invalid UTF-8 at byte 17:
  // ..."; the caller adds which batch item), or, with truncation off, if the encoding is longer
  // than the limit ("... 600 tokens, more than the limit of 512").
  // `options` changes truncation and asks for offsets for this call only.
  absl::StatusOr<Encoding> Encode(absl::string_view text, const EncodeOptions& options = {}) const;
  // Encodes a pair (cross-encoders): the template's pair form, truncated as tokenizer.json says
  // (LongestFirst by default). Errors as Encode(), naming "first text" or "second text".
  absl::StatusOr<Encoding> EncodePair(absl::string_view first, absl::string_view second,
                                      const EncodeOptions& options = {}) const;

  // The vocabulary size (the largest id + 1).
  int vocab_size() const;
  // The id of `token`, or -1.
  int32_t TokenToId(absl::string_view token) const;
  // The text of token `id` when it is an added token (the special tokens: "[CLS]", "<s>"), or,
  // for the BERT pipeline, a vocabulary entry; empty otherwise. A linear search: for showing
  // tokens (TEI's /tokenize), not for a hot path.
  std::string IdToToken(int32_t id) const;
  // Whether Encoding::offsets are exact for every token: true for the BERT pipeline (WordPiece
  // with BertNormalizer and BertPreTokenizer, or vocab.txt). The general pipeline
  // (tokenizer.json's other normalizers, pre-tokenizers and models) gives offsets only for the
  // added tokens it matches in the raw text, and -1 for the rest (never a wrong offset).
  bool exact_offsets() const;
  // The length limit in force (0: none) and whether over-long inputs are truncated.
  int max_length() const;
  bool truncates() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<const Impl> impl_;
};

// The model's sequence-length limit as a Hugging Face folder states it: sentence_bert_config.json
// max_seq_length, else tokenizer_config.json model_max_length (unless it is transformers' "no
// limit" placeholder), else tokenizer.json's truncation max_length, else config.json
// max_position_embeddings. NotFound if none of them states one; InvalidArgument for malformed
// JSON or a non-positive value.
absl::StatusOr<int> ReadMaxSequenceLength(const std::string& dir);

}  // namespace sluice::text
