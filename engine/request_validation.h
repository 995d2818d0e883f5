#pragma once

// Request validation: the checks a request passes before it is queued for a model version. A new
// validation rule goes here (and in request_validation_test.cc). Pure: no engine state, safe from
// any thread.

#include "absl/status/status.h"
#include "engine/inference_request.h"
#include "engine/model_config.h"

namespace sluice::engine {

// Checks `request` against `config` and binds it for the scheduler: on OK its inputs are in
// config order and batch_size is set (the shared first dimension when max_batch_size > 0, else
// 1). InvalidArgument naming the model, the tensor and what was expected otherwise: a missing,
// unknown or repeated input; a data type or shape the config does not allow; a batch size over
// max_batch_size or differing between inputs; data whose size does not match its shape (BYTES:
// malformed framing); an unknown or repeated requested output; an input in device memory
// (TensorView::device) that is BYTES, also has host bytes, or fails ValidateDeviceBytes. On error
// `request` may have been partly reordered; it is answered, never queued.
absl::Status ValidateAndBindRequest(const ModelConfig& config, InferenceRequest& request);

// For models that validate requests themselves (Model::validates_requests: they read input values
// on the submitting thread, e.g. the encoder's token ids): InvalidArgument naming the model and
// the input if any input of `request` is in device memory, which that thread must not read.
absl::Status RefuseDeviceInputs(const ModelConfig& config, const InferenceRequest& request);

}  // namespace sluice::engine
