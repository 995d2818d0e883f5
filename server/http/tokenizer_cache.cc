#include "server/http/tokenizer_cache.h"

#include <utility>

namespace sluice::server::http {

absl::StatusOr<std::shared_ptr<const text::Tokenizer>> TokenizerCache::Get(
    const std::string& name, const std::shared_ptr<const engine::ModelConfig>& config,
    const std::string& folder) {
  {
    absl::MutexLock lock(&mu_);
    auto it = loaded_.find(name);
    if (it != loaded_.end() && it->second.config.lock() == config) return it->second.tokenizer;
  }
  // A load reads and parses a file (milliseconds to tens of them): not under the lock.
  absl::StatusOr<std::unique_ptr<text::Tokenizer>> loaded = text::Tokenizer::LoadFolder(folder);
  if (!loaded.ok()) return loaded.status();
  std::shared_ptr<const text::Tokenizer> tokenizer = *std::move(loaded);
  absl::MutexLock lock(&mu_);
  loaded_[name] = Entry{config, tokenizer};
  return tokenizer;
}

}  // namespace sluice::server::http
