#pragma once

// The tokenizers of the served text models and their sentence-transformers prompts, for the
// routes that show tokens without running a model (TEI's POST /tokenize, which tokenizes the
// prompted text as TEI does). Each is loaded from its version folder on first use, as the encoder
// loads its own (text::Tokenizer::LoadFolder, text::ReadSentencePrompts), and replaced when the
// model is reloaded (a new config object), so the cache holds one per model name at most.
//
// Thread safety: Get() may be called from any number of threads; a load runs outside the lock
// (two threads may both load on a first use; one result is kept).

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/core/model_config.h"
#include "text/sentence_prompts.h"
#include "text/tokenizer.h"

namespace sluice::server::http {

// A text model's tokenizer and prompts, as its load read them.
struct ModelText {
  std::unique_ptr<const text::Tokenizer> tokenizer;
  text::SentencePrompts prompts;
};

class TokenizerCache {
 public:
  // The tokenizer and prompts of model `name` as `config` (the loaded version's config) describes
  // it, read from `folder` (that version's folder) on first use. NotFound when the folder has no
  // tokenizer; InvalidArgument for one that does not parse (LoadFolder's errors) or broken
  // prompts (ReadSentencePrompts').
  absl::StatusOr<std::shared_ptr<const ModelText>> Get(
      const std::string& name, const std::shared_ptr<const engine::ModelConfig>& config,
      const std::string& folder);

 private:
  struct Entry {
    std::weak_ptr<const engine::ModelConfig> config;  // the load it belongs to
    std::shared_ptr<const ModelText> text;
  };
  absl::Mutex mu_;
  std::map<std::string, Entry> loaded_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice::server::http
