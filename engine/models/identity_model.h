#pragma once

// `identity`: returns each input as the output at the same position (INPUTi -> OUTPUTi), for any
// data type including BYTES and any shape the config allows. The yardstick for server overhead.

#include <memory>

#include "absl/status/statusor.h"
#include "engine/backend.h"

namespace sluice::engine::models {

// InvalidArgument unless inputs and outputs pair up one to one with equal data types and dims.
absl::StatusOr<std::unique_ptr<Model>> CreateIdentityModel(const ModelSpec& spec);

}  // namespace sluice::engine::models
