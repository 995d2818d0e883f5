#include "engine/core/model_config.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace sluice::engine {
namespace {

const TensorSpec* FindSpec(const std::vector<TensorSpec>& specs, absl::string_view name) {
  for (const TensorSpec& spec : specs) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

absl::Status ValidateTensors(const ModelConfig& config, const std::vector<TensorSpec>& specs,
                             absl::string_view kind, std::set<std::string>& names) {
  if (specs.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", config.name, "': config declares no ", kind, "s"));
  }
  for (const TensorSpec& spec : specs) {
    if (spec.name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("model '", config.name, "': an ", kind, " has an empty name"));
    }
    if (!names.insert(spec.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("model '", config.name, "': tensor name '",
                                                     spec.name, "' is declared twice"));
    }
    if (spec.dtype == DataType::kInvalid) {
      return absl::InvalidArgumentError(absl::StrCat("model '", config.name, "': ", kind, " '",
                                                     spec.name, "' has no valid data_type"));
    }
    if (spec.dims.empty() && config.max_batch_size == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("model '", config.name, "': ", kind, " '", spec.name, "' has no dims"));
    }
    for (int64_t dim : spec.dims) {
      if (dim < -1 || dim == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("model '", config.name, "': ", kind, " '", spec.name, "' has dims ",
                         ShapeToString(spec.dims), " (each must be positive or -1)"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateQueuePolicy(const ModelConfig& config, const QueuePolicyConfig& policy,
                                 absl::string_view where) {
  if (policy.max_queue_size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", config.name, "': ", where, ".max_queue_size is negative"));
  }
  if (policy.default_timeout.count() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("model '", config.name, "': ", where,
                                                   ".default_timeout_microseconds is negative"));
  }
  return absl::OkStatus();
}

}  // namespace

const TensorSpec* ModelConfig::FindInput(absl::string_view input_name) const {
  return FindSpec(inputs, input_name);
}

const TensorSpec* ModelConfig::FindOutput(absl::string_view output_name) const {
  return FindSpec(outputs, output_name);
}

absl::Status ValidateModelConfig(const ModelConfig& config) {
  if (config.name.empty()) return absl::InvalidArgumentError("model config has no name");
  if (config.max_batch_size < 0) {
    return absl::InvalidArgumentError(absl::StrCat("model '", config.name, "': max_batch_size ",
                                                   config.max_batch_size, " is negative"));
  }
  std::set<std::string> names;
  RETURN_IF_ERROR(ValidateTensors(config, config.inputs, "input", names));
  std::set<std::string> output_names;
  RETURN_IF_ERROR(ValidateTensors(config, config.outputs, "output", output_names));
  if (config.dynamic_batching.has_value()) {
    for (int size : config.dynamic_batching->preferred_batch_sizes) {
      if (size < 1 || size > config.max_batch_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("model '", config.name, "': preferred_batch_size ", size,
                         " is outside [1, max_batch_size=", config.max_batch_size, "]"));
      }
    }
    if (config.dynamic_batching->max_queue_delay.count() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("model '", config.name, "': max_queue_delay_microseconds is negative"));
    }
  }
  if (config.ragged_batching.has_value() && config.ragged_batching->max_batch_tokens < 1) {
    return absl::InvalidArgumentError(absl::StrCat("model '", config.name, "': max_batch_tokens ",
                                                   config.ragged_batching->max_batch_tokens,
                                                   " is < 1"));
  }
  RETURN_IF_ERROR(ValidateQueuePolicy(config, config.queue_policy, "default_queue_policy"));
  if (config.priority_levels < 0 || config.priority_levels > kMaxPriorityLevels) {
    return absl::InvalidArgumentError(absl::StrCat("model '", config.name, "': priority_levels ",
                                                   config.priority_levels, " is outside [0, ",
                                                   kMaxPriorityLevels, "]"));
  }
  if (config.priority_levels == 0) {
    if (config.default_priority_level != 0 || !config.priority_queue_policy.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model '", config.name,
          "': default_priority_level and priority_queue_policy need priority_levels > 0"));
    }
  } else if (config.default_priority_level < 1 ||
             config.default_priority_level > config.priority_levels) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model '", config.name, "': default_priority_level ", config.default_priority_level,
        " is outside [1, priority_levels=", config.priority_levels, "]"));
  }
  for (const auto& [level, policy] : config.priority_queue_policy) {
    if (level < 1 || level > config.priority_levels) {
      return absl::InvalidArgumentError(
          absl::StrCat("model '", config.name, "': priority_queue_policy names level ", level,
                       ", outside [1, priority_levels=", config.priority_levels, "]"));
    }
    RETURN_IF_ERROR(
        ValidateQueuePolicy(config, policy, absl::StrCat("priority_queue_policy[", level, "]")));
  }
  if (config.instance_count < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model '", config.name, "': instance_group count ", config.instance_count, " is < 1"));
  }
  if (!config.instance_gpus.empty() &&
      static_cast<int>(config.instance_gpus.size()) != config.instance_count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model '", config.name, "': instance_group places ", config.instance_gpus.size(),
        " instances on GPUs but the model has ", config.instance_count));
  }
  for (int gpu : config.instance_gpus) {
    if (gpu < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("model '", config.name, "': instance_group gpus lists ", gpu));
    }
  }
  return absl::OkStatus();
}

}  // namespace sluice::engine
