#pragma once

// Reading a PEM file (certificates, keys) named on a command line, with errors that name it.

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sluice::common {

// The whole text of `path`. NotFound "<what>: cannot read '<path>'" if it cannot be read;
// InvalidArgument "<what>: '<path>' is not PEM (no -----BEGIN line)" if it holds no PEM block.
// `what` names where the path came from (a flag, an option).
absl::StatusOr<std::string> ReadPemFile(absl::string_view what, const std::string& path);

}  // namespace sluice::common
