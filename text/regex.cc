#include "text/regex.h"

#include <unicode/regex.h>
#include <unicode/utext.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace sluice::text {
namespace {

// Oniguruma's `\s` / `\S` (White_Space) in ICU's syntax; other escapes are copied as they are.
std::string TranslatePattern(absl::string_view pattern, Regex::Flavor flavor) {
  std::string out;
  out.reserve(pattern.size() + 32);
  int class_depth = 0;  // inside [...]: a class is written without its own brackets
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '[') {
      ++class_depth;
    } else if (pattern[i] == ']' && class_depth > 0) {
      --class_depth;
    }
    if (pattern[i] == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[i + 1];
      const bool onig = flavor == Regex::Flavor::kOniguruma;
      if (next == 's') {
        out += "\\p{White_Space}";
      } else if (next == 'S') {
        out += "\\P{White_Space}";
      } else if (onig && next == 'w') {
        out += class_depth > 0 ? "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}"
                               : "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}]";
      } else if (onig && next == 'W') {
        out += "[^\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}]";
      } else {
        out.append(pattern.data() + i, 2);
      }
      ++i;
      continue;
    }
    out += pattern[i];
  }
  return out;
}

}  // namespace

Regex::Regex(std::unique_ptr<icu::RegexPattern> pattern) : pattern_(std::move(pattern)) {}
Regex::~Regex() = default;

absl::StatusOr<std::unique_ptr<Regex>> Regex::Compile(absl::string_view pattern, bool literal,
                                                      Flavor flavor) {
  const std::string translated = literal ? std::string(pattern) : TranslatePattern(pattern, flavor);
  UErrorCode status = U_ZERO_ERROR;
  UParseError parse_error;
  UText* text = utext_openUTF8(nullptr, translated.data(), translated.size(), &status);
  std::unique_ptr<icu::RegexPattern> compiled(
      icu::RegexPattern::compile(text, literal ? UREGEX_LITERAL : 0, parse_error, status));
  utext_close(text);
  if (U_FAILURE(status) || compiled == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("regex '", pattern, "' does not compile (",
                                                   u_errorName(status), " at offset ",
                                                   parse_error.offset, ")"));
  }
  return std::unique_ptr<Regex>(new Regex(std::move(compiled)));
}

void Regex::FindAll(absl::string_view text,
                    const std::function<void(size_t, size_t)>& on_match) const {
  if (text.empty()) {
    return;
  }
  UErrorCode status = U_ZERO_ERROR;
  UText* utext = utext_openUTF8(nullptr, text.data(), static_cast<int64_t>(text.size()), &status);
  std::unique_ptr<icu::RegexMatcher> matcher(pattern_->matcher(status));
  if (U_FAILURE(status)) {
    utext_close(utext);
    return;
  }
  matcher->reset(utext);
  while (matcher->find(status) && U_SUCCESS(status)) {
    const int64_t start = matcher->start64(status);
    const int64_t end = matcher->end64(status);
    on_match(static_cast<size_t>(start), static_cast<size_t>(end));
  }
  matcher.reset();
  utext_close(utext);
}

absl::StatusOr<std::unique_ptr<Regex>> ParsePattern(const Json& pattern, const JsonPath& at) {
  if (pattern.is_object() && pattern.size() == 1) {
    for (const char* kind : {"String", "Regex"}) {
      auto it = pattern.find(kind);
      if (it != pattern.end() && it->is_string()) {
        auto regex = Regex::Compile(it->get<std::string>(), kind[0] == 'S');
        if (!regex.ok()) {
          return at.Error(regex.status().message());
        }
        return regex;
      }
    }
  }
  return at.Error("is not {\"String\": ...} or {\"Regex\": ...}");
}

}  // namespace sluice::text
