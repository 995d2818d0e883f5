#pragma once

// `simple`: Triton's classic example model. INPUT0, INPUT1 (INT32, dims [16]) ->
// OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1, so Triton's example clients run unchanged.

#include <memory>

#include "absl/status/statusor.h"
#include "engine/core/backend.h"

namespace sluice::engine::models {

// InvalidArgument (naming the field) unless the config has exactly two INT32 inputs and two INT32
// outputs of one and the same fixed shape.
absl::StatusOr<std::unique_ptr<Model>> CreateSimpleModel(const ModelSpec& spec);

}  // namespace sluice::engine::models
