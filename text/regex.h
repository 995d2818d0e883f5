#pragma once

// The regular expressions tokenizer.json writes (Split, Replace, ByteLevel's GPT-2 pattern), run
// with ICU's regex engine over UTF-8. `tokenizers` compiles them with Oniguruma, whose `\s`/`\S`
// mean Unicode White_Space; ICU's `\s` is [\t\n\f\r\p{Z}] (no U+000B, U+0085), so Compile()
// rewrites `\s` to `\p{White_Space}` and `\S` to `\P{White_Space}` first, and Oniguruma's `\w`
// (Alphabetic, marks, decimal digits, connector punctuation; no Join_Control) to that class.
// Everything else (`\p{L}`, lookahead, `(?i:...)`) means the same in both.
//
// Thread safety: a Regex is immutable after Compile(); FindAll() may run on any number of
// threads at once (each call uses a matcher of its own).

#include <unicode/regex.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "text/json_util.h"

namespace sluice::text {

class Regex {
 public:
  // `pattern` as tokenizer.json writes a regex; `literal`: match the string as it is (a
  // "String" pattern). InvalidArgument with ICU's reason when it does not compile.
  // Whose syntax `pattern` follows: Oniguruma's (Split, Replace, ByteLevel: `\w` is
  // [\p{L}\p{M}\p{N}\p{Pc}]) or Rust's regex crate (Whitespace: `\w` also has Join_Control).
  enum class Flavor { kOniguruma, kRust };
  static absl::StatusOr<std::unique_ptr<Regex>> Compile(absl::string_view pattern, bool literal,
                                                        Flavor flavor = Flavor::kOniguruma);
  ~Regex();

  // Calls on_match(start, end) (byte offsets) for each successive non-overlapping match in
  // `text` (valid UTF-8), leftmost first, as Oniguruma's find_iter does (an empty match moves on
  // by one character).
  void FindAll(absl::string_view text, const std::function<void(size_t, size_t)>& on_match) const;

 private:
  explicit Regex(std::unique_ptr<icu::RegexPattern> pattern);
  std::unique_ptr<icu::RegexPattern> pattern_;
};

// A tokenizer.json pattern object, {"String": "..."} or {"Regex": "..."}, compiled; errors name
// `at`.
absl::StatusOr<std::unique_ptr<Regex>> ParsePattern(const Json& pattern, const JsonPath& at);

}  // namespace sluice::text
