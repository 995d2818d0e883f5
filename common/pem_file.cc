#include "common/pem_file.h"

#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"

namespace sluice::common {

absl::StatusOr<std::string> ReadPemFile(absl::string_view what, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(what, ": cannot read '", path, "'"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.find("-----BEGIN") == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": '", path, "' is not PEM (no -----BEGIN line)"));
  }
  return text;
}

}  // namespace sluice::common
