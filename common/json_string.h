#pragma once

// JSON string literals, written by hand where a JSON library would cost more than the text it
// writes: the logger's JSON records and the HTTP front end's responses.

#include <string>

#include "absl/strings/string_view.h"

namespace sluice::common {

// Appends `s` to `out` as a JSON string literal (RFC 8259): quotes, the quote and backslash
// escaped, \n \r \t by name, other control characters as \u00XX; every other byte verbatim
// (UTF-8 passes through unchanged, as Triton writes BYTES elements). Thread-compatible.
void AppendJsonString(std::string& out, absl::string_view s);

}  // namespace sluice::common
