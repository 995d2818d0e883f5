#pragma once

// The prompts of a sentence-transformers folder (config_sentence_transformers.json): a text
// prepended to every input before tokenization (e.g. "query: " for e5, Qwen3-Embedding's
// instruction), as SentenceTransformer.encode(prompt_name=...) does, and the default one when a
// request names none. Here, beside the tokenizers, because both the encoder (which embeds the
// prompted text) and the server's TEI /tokenize (which shows the prompted text's tokens, as TEI
// does) read them. Immutable after ReadSentencePrompts; thread-safe.

#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sluice::text {

struct SentencePrompts {
  std::map<std::string, std::string> prompts;
  std::string default_name;  // empty: no default (no prompt unless a request names one)

  // The text a request that names `name` (nullopt or empty: none) gets prepended: the named
  // prompt, else the default one, else "". InvalidArgument naming the unknown name and the names
  // the model has.
  absl::StatusOr<absl::string_view> Resolve(const std::optional<std::string>& name) const;
};

// The prompts of `folder`'s config_sentence_transformers.json (none without the file).
// InvalidArgument for a malformed or oversized file (over 1 MiB), more than 1,024 prompts, or a
// default_prompt_name that is not one of the prompts (sentence-transformers refuses that too).
absl::StatusOr<SentencePrompts> ReadSentencePrompts(const std::filesystem::path& folder);

}  // namespace sluice::text
