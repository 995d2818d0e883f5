#include "text/sentence_prompts.h"

#include <cstdint>
#include <fstream>
#include <iterator>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/echo.h"
#include "nlohmann/json.hpp"

namespace sluice::text {
namespace {

namespace fs = std::filesystem;

// Bounds on what a model folder may ask of the loader (a prompt is a sentence or an instruction).
constexpr size_t kMaxPrompts = 1024;
constexpr std::uintmax_t kMaxFileBytes = std::uintmax_t{1} << 20;

}  // namespace

absl::StatusOr<absl::string_view> SentencePrompts::Resolve(
    const std::optional<std::string>& name) const {
  const std::string& chosen = name.has_value() && !name->empty() ? *name : default_name;
  if (chosen.empty()) return absl::string_view();
  auto it = prompts.find(chosen);
  if (it == prompts.end()) {
    std::vector<std::string> names;
    for (const auto& [known, text] : prompts) names.push_back(known);
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt_name '", common::EchoInput(chosen), "' is not one of the model's prompts (",
        names.empty() ? "it has none" : absl::StrJoin(names, ", "),
        "; config_sentence_transformers.json)"));
  }
  return absl::string_view(it->second);
}

absl::StatusOr<SentencePrompts> ReadSentencePrompts(const fs::path& folder) {
  SentencePrompts result;
  const fs::path path = folder / "config_sentence_transformers.json";
  std::error_code ec;
  if (!fs::exists(path, ec)) return result;
  const std::uintmax_t size = fs::file_size(path, ec);
  if (ec || size > kMaxFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path.string(), "': ", ec ? ec.message() : "larger than 1 MiB"));
  }
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const nlohmann::json config = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!in.good() && !in.eof()) {
    return absl::InvalidArgumentError(absl::StrCat("error reading '", path.string(), "'"));
  }
  if (config.is_discarded() || !config.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("'", path.string(), "' is not a JSON object"));
  }
  if (auto prompts = config.find("prompts"); prompts != config.end() && !prompts->is_null()) {
    if (!prompts->is_object() || prompts->size() > kMaxPrompts) {
      return absl::InvalidArgumentError(absl::StrCat("'", path.string(),
                                                     "': \"prompts\" must be an object of at most ",
                                                     kMaxPrompts, " name: text entries"));
    }
    for (const auto& [name, prompt] : prompts->items()) {
      if (!prompt.is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat("'", path.string(), "': prompt '", name, "' is not a string"));
      }
      result.prompts.emplace(name, prompt.get<std::string>());
    }
  }
  if (auto name = config.find("default_prompt_name"); name != config.end() && !name->is_null()) {
    if (!name->is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", path.string(), "': \"default_prompt_name\" is not a string"));
    }
    result.default_name = name->get<std::string>();
  }
  if (!result.default_name.empty() && !result.prompts.contains(result.default_name)) {
    return absl::InvalidArgumentError(absl::StrCat("'", path.string(), "': default_prompt_name '",
                                                   result.default_name,
                                                   "' is not one of its prompts"));
  }
  return result;
}

}  // namespace sluice::text
