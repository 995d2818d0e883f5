#pragma once

// `identity`: returns each input as the output at the same position (INPUTi -> OUTPUTi), for any
// data type including BYTES and any shape the config allows. The yardstick for server overhead.
//
// Parameter `execute_delay_ms` (as in Triton's identity backend): each batch also takes this long
// (the executor thread sleeps), whatever its size, like a GPU kernel whose cost does not depend
// on the batch. It gives tests and benchmarks a model of known capacity (instances x
// max_batch_size / delay), for example to offer a multiple of it (overload tests). CPU executor
// only: the CUDA identity refuses it, so a model that sets it needs instance_group KIND_CPU on a
// machine with a GPU.

#include <memory>

#include "absl/status/statusor.h"
#include "engine/core/backend.h"

namespace sluice::engine::models {

inline constexpr char kExecuteDelayMsParam[] = "execute_delay_ms";

// InvalidArgument unless inputs and outputs pair up one to one with equal data types and dims,
// and unless the only parameter is execute_delay_ms, an integer in [0, 60000].
absl::StatusOr<std::unique_ptr<Model>> CreateIdentityModel(const ModelSpec& spec);

}  // namespace sluice::engine::models
