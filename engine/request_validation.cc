#include "engine/request_validation.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/core/tensor.h"

namespace sluice::engine {
namespace {

// The config index of the input called `name`; InvalidArgument if the config has none.
absl::StatusOr<size_t> InputIndex(const ModelConfig& config, const std::string& name) {
  for (size_t i = 0; i < config.inputs.size(); ++i) {
    if (config.inputs[i].name == name) return i;
  }
  std::string names;
  for (const TensorSpec& input : config.inputs) {
    absl::StrAppend(&names, names.empty() ? "" : ", ", input.name);
  }
  return absl::InvalidArgumentError(absl::StrCat("model '", config.name, "' has no input named '",
                                                 name, "' (inputs: ", names, ")"));
}

absl::Status GivenTwice(const ModelConfig& config, const std::string& name) {
  return absl::InvalidArgumentError(
      absl::StrCat("model '", config.name, "': input '", name, "' given twice"));
}

// ValidateAndBindRequest after CheckRequestNames passed: inputs are known and unique.
absl::Status BindRequest(const ModelConfig& config, InferenceRequest& request) {
  const std::string& model = config.name;
  if (request.inputs.size() != config.inputs.size()) {
    // Name the first missing input: that is what the client has to fix.
    for (const TensorSpec& spec : config.inputs) {
      const bool present = std::any_of(request.inputs.begin(), request.inputs.end(),
                                       [&](const TensorView& t) { return t.name == spec.name; });
      if (!present) {
        return absl::InvalidArgumentError(
            absl::StrCat("model '", model, "': missing input '", spec.name, "' (expected ",
                         config.inputs.size(), " inputs, got ", request.inputs.size(), ")"));
      }
    }
    // Unreachable after CheckRequestNames (known, unique names and none missing), kept as the
    // answer should the rules above ever change.
    return absl::InvalidArgumentError(absl::StrCat("model '", model, "' expects ",
                                                   config.inputs.size(), " inputs, got ",
                                                   request.inputs.size()));
  }

  std::vector<TensorView> ordered(config.inputs.size());
  int batch_size = -1;
  // Inputs move into `ordered` as they pass, so repeats are found by index, not by name.
  std::vector<bool> seen(config.inputs.size(), false);
  for (TensorView& input : request.inputs) {
    ASSIGN_OR_RETURN(const size_t index, InputIndex(config, input.name));
    if (seen[index]) return GivenTwice(config, input.name);
    seen[index] = true;
    const TensorSpec& spec = config.inputs[index];
    if (input.dtype != spec.dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model '", model, "': input '", input.name, "' has data type ", DataTypeName(input.dtype),
          ", the model expects ", DataTypeName(spec.dtype)));
    }
    const size_t batch_dims = config.max_batch_size > 0 ? 1 : 0;
    bool shape_ok = input.shape.size() == spec.dims.size() + batch_dims;
    for (size_t d = 0; shape_ok && d < spec.dims.size(); ++d) {
      const int64_t got = input.shape[d + batch_dims];
      shape_ok = (spec.dims[d] == -1 && got >= 0) || spec.dims[d] == got;
    }
    if (!shape_ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("model '", model, "': input '", input.name, "' has shape ",
                       ShapeToString(input.shape), ", the model expects ",
                       batch_dims ? absl::StrCat("[batch<=", config.max_batch_size, "]+") : "",
                       ShapeToString(spec.dims)));
    }
    if (batch_dims == 1) {
      const int64_t b = input.shape[0];
      if (b < 1 || b > config.max_batch_size) {
        return absl::InvalidArgumentError(absl::StrCat("model '", model, "': input '", input.name,
                                                       "' has batch size ", b, ", allowed 1..",
                                                       config.max_batch_size, " (max_batch_size)"));
      }
      if (batch_size >= 0 && b != batch_size) {
        return absl::InvalidArgumentError(absl::StrCat("model '", model, "': input '", input.name,
                                                       "' has batch size ", b,
                                                       " but another input has ", batch_size));
      }
      batch_size = static_cast<int>(b);
    }
    ASSIGN_OR_RETURN(int64_t elements, ElementCount(input.shape));
    if (input.on_device()) {
      if (input.dtype == DataType::kBytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            "model '", model, "': input '", input.name,
            "' is BYTES in device memory (a CUDA shared-memory region); BYTES elements are "
            "checked on the host when a request arrives: send it inline or in system shared "
            "memory"));
      }
      if (!input.data.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("model '", model, "': input '", input.name,
                                                       "' has both host and device bytes"));
      }
      if (absl::Status valid = ValidateDeviceBytes(input.name, *input.device); !valid.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("model '", model, "': ", valid.message()));
      }
    }
    if (input.dtype == DataType::kBytes) {
      RETURN_IF_ERROR(ValidateBytesElements(input.name, input.data, elements));
    } else {
      ASSIGN_OR_RETURN(size_t expected, FixedByteSize(input.dtype, elements));
      if (expected != input.byte_size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("model '", model, "': input '", input.name, "' holds ", input.byte_size(),
                         " bytes, shape ", ShapeToString(input.shape), " of ",
                         DataTypeName(input.dtype), " needs ", expected));
      }
    }
    ordered[index] = std::move(input);
  }
  request.inputs = std::move(ordered);
  request.batch_size = batch_size > 0 ? batch_size : 1;
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckRequestNames(const ModelConfig& config, const InferenceRequest& request) {
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    const std::string& name = request.inputs[i].name;
    RETURN_IF_ERROR(InputIndex(config, name).status());
    for (size_t j = 0; j < i; ++j) {
      if (request.inputs[j].name == name) return GivenTwice(config, name);
    }
  }
  for (size_t i = 0; i < request.requested_outputs.size(); ++i) {
    const std::string& name = request.requested_outputs[i];
    if (config.FindOutput(name) == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("model '", config.name, "' has no output named '", name, "'"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (request.requested_outputs[j] == name) {
        return absl::InvalidArgumentError(
            absl::StrCat("model '", config.name, "': output '", name, "' requested twice"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateRequest(const Model& model, InferenceRequest& request) {
  RETURN_IF_ERROR(CheckRequestNames(model.config(), request));
  if (!model.validates_requests()) return BindRequest(model.config(), request);
  RETURN_IF_ERROR(RefuseDeviceInputs(model.config(), request));
  return model.ValidateAndBindRequest(request);
}

absl::Status ValidateAndBindRequest(const ModelConfig& config, InferenceRequest& request) {
  RETURN_IF_ERROR(CheckRequestNames(config, request));
  return BindRequest(config, request);
}

absl::Status RefuseDeviceInputs(const ModelConfig& config, const InferenceRequest& request) {
  for (const TensorView& input : request.inputs) {
    if (input.on_device()) {
      return absl::InvalidArgumentError(
          absl::StrCat("model '", config.name,
                       "' checks its input values on the host when a request arrives, "
                       "but input '",
                       input.name,
                       "' is in device memory (a CUDA shared-memory region): send "
                       "it inline or in system shared memory"));
    }
  }
  return absl::OkStatus();
}

}  // namespace sluice::engine
