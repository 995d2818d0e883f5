#include "server/http/tokenizer_cache.h"

#include <utility>

namespace sluice::server::http {

absl::StatusOr<std::shared_ptr<const ModelText>> TokenizerCache::Get(
    const std::string& name, const std::shared_ptr<const engine::ModelConfig>& config,
    const std::string& folder) {
  {
    absl::MutexLock lock(&mu_);
    auto it = loaded_.find(name);
    if (it != loaded_.end() && it->second.config.lock() == config) return it->second.text;
  }
  // A load reads and parses a file (milliseconds to tens of them): not under the lock.
  absl::StatusOr<std::unique_ptr<text::Tokenizer>> loaded = text::Tokenizer::LoadFolder(folder);
  if (!loaded.ok()) return loaded.status();
  absl::StatusOr<text::SentencePrompts> prompts = text::ReadSentencePrompts(folder);
  if (!prompts.ok()) return prompts.status();
  auto text = std::make_shared<ModelText>(ModelText{*std::move(loaded), *std::move(prompts)});
  absl::MutexLock lock(&mu_);
  loaded_[name] = Entry{config, text};
  return text;
}

}  // namespace sluice::server::http
