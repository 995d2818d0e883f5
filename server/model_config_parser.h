#pragma once

// config.pbtxt -> engine::ModelConfig. The file is Triton's ModelConfig in protobuf text format
// (proto/model_config.proto), so existing config files work unchanged; every field sluice does not
// implement is reported by its name rather than silently ignored.

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "engine/core/load_limits.h"
#include "engine/core/model_config.h"
#include "proto/model_config.pb.h"

namespace sluice::server {

// Parses the text format. InvalidArgument with `source` (the file name), line and column, and the
// parser's message (which names an unknown field).
absl::StatusOr<inference::ModelConfig> ParseModelConfigText(const std::string& text,
                                                            const std::string& source);

// Checks that only supported fields are set, and converts. `model_dir_name` is the folder name:
// an empty config name takes it; a different one is an error. Names (model, tensors, parameter
// keys) are at most kMaxConfigNameBytes, parameter values at most kMaxConfigValueBytes, and the
// instance count at most `limits.max_instances` (checked before the per-GPU list is built; the
// engine checks the other limits at load). InvalidArgument names the field, and echoes config
// text only through common::EchoInput.
absl::StatusOr<engine::ModelConfig> ToEngineModelConfig(const inference::ModelConfig& proto,
                                                        const std::string& model_dir_name,
                                                        const engine::LoadLimits& limits = {});

// Longest name in a config: the model's, a tensor's, a parameter key.
inline constexpr size_t kMaxConfigNameBytes = 255;
// Longest parameter value in a config (mlp's activations list, a weights file name).
inline constexpr size_t kMaxConfigValueBytes = 4096;

// The config a client reads (ModelConfig, GET .../config): `proto` as the file says, with the
// inputs and outputs the backend completed from its files (the encoder's checkpoint) where the
// file declares none, the dims the backend resolved where it declares them, and the parameters
// the load resolved (`resolved_parameters`, Engine::ModelInfo's: the CPU encoder's `precision`)
// set to the values that serve. Backends that complete and resolve nothing leave `proto`
// unchanged.
void ApplyCompletedConfig(const engine::ModelConfig& completed,
                          const std::map<std::string, std::string>& resolved_parameters,
                          inference::ModelConfig& proto);

// engine data type <-> Triton's TYPE_* (TYPE_STRING is BYTES).
engine::DataType FromProtoDataType(inference::DataType type);
inference::DataType ToProtoDataType(engine::DataType type);

}  // namespace sluice::server
