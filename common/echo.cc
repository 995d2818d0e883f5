#include "common/echo.h"

#include "absl/strings/str_cat.h"

namespace sluice::common {

std::string EchoInput(absl::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  size_t keep = max_bytes;
  // Do not cut a multi-byte UTF-8 character: back off over continuation bytes (10xxxxxx) to the
  // start of the character that would be cut.
  while (keep > 0 && (static_cast<unsigned char>(text[keep]) & 0xC0) == 0x80) --keep;
  return absl::StrCat(text.substr(0, keep), "...[truncated: ", text.size(), " bytes]");
}

}  // namespace sluice::common
