#pragma once

// The encoder's text inputs: a request's BYTES `text` (and `text_pair`) turned into the token
// tensors the network reads (input_ids, attention_mask and, for models with token types,
// token_type_ids), with the model's sentence-transformers prompt prepended to every text as
// SentenceTransformer.encode(prompt_name=...) does (and counted in the length limit and the token
// budget, as there), and stripped of surrounding whitespace in a sentence-transformers folder. Runs
// on the preparation pool (Model::PrepareRequest), never on the request path's threads.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/core/inference_request.h"
#include "text/sentence_prompts.h"
#include "text/tokenizer.h"

namespace sluice::engine::models::encoder {

class EncoderTextInputs {
 public:
  // The tokenizer of `folder` (tokenizer.json; its length limit sentence_bert_config.json's
  // max_seq_length, else the tokenizer's, never beyond `max_sequence_length`, the position
  // table's) and its prompts (config_sentence_transformers.json). InvalidArgument for a broken
  // file or a vocabulary larger than `vocab_size`.
  static absl::StatusOr<std::unique_ptr<const EncoderTextInputs>> Load(const std::string& folder,
                                                                       int max_sequence_length,
                                                                       int vocab_size);

  // Replaces the request's text inputs with its token tensors (owned by request.keepalive) and
  // sets its token_count. `model` names the model in errors; `token_types`: whether the config
  // takes token_type_ids. InvalidArgument naming the batch item for text that cannot be encoded,
  // gives no tokens or is longer than the limit when the request asks for no truncation, and for
  // an unknown prompt_name.
  absl::Status Prepare(const std::string& model, bool token_types, InferenceRequest& request) const;

  const text::Tokenizer& tokenizer() const { return *tokenizer_; }
  const text::SentencePrompts& prompts() const { return prompts_; }

 private:
  EncoderTextInputs(std::unique_ptr<text::Tokenizer> tokenizer, text::SentencePrompts prompts,
                    int max_sequence_length, bool strip)
      : tokenizer_(std::move(tokenizer)),
        prompts_(std::move(prompts)),
        max_sequence_length_(max_sequence_length),
        strip_(strip) {}

  const std::unique_ptr<text::Tokenizer> tokenizer_;
  const text::SentencePrompts prompts_;
  const int max_sequence_length_;
  // A sentence-transformers folder (modules.json): every text, the prompt included, and every
  // second text is stripped of leading and trailing whitespace first, as its Transformer module
  // does (str.strip()); it matters to byte-level BPE and Unigram tokenizers, whose tokens carry
  // spaces. A plain transformers folder (a CrossEncoder's, too) keeps the text as sent.
  const bool strip_;
};

}  // namespace sluice::engine::models::encoder
