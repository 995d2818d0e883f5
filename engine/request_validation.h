#pragma once

// Request validation: the checks a request passes before it is queued for a model version. One
// entry point, ValidateRequest, which Engine::Submit calls for every model: the generic rules
// always run, then the model's own hook where it has one. A new generic rule goes in
// CheckRequestNames or ValidateAndBindRequest (and in request_validation_test.cc), and so reaches
// every backend. Pure: no engine state, safe from any thread.

#include "absl/status/status.h"
#include "engine/core/backend.h"
#include "engine/core/inference_request.h"
#include "engine/core/model_config.h"

namespace sluice::engine {

// The one entry point. Runs CheckRequestNames (every model), then:
// - for a model that binds its own requests (Model::validates_requests(): optional inputs, a
//   choice of data types, checks of the values, e.g. the encoder's token ids and texts):
//   RefuseDeviceInputs (such models read values here, on the submitting thread) and
//   Model::ValidateAndBindRequest;
// - for every other model: the generic binding of ValidateAndBindRequest.
// On OK the request is bound (inputs in config order for the generic path, batch_size set, and
// token_count for sequence models). Errors: InvalidArgument naming the model, the tensor and what
// was expected; `request` is then answered, never queued.
absl::Status ValidateRequest(const Model& model, InferenceRequest& request);

// The rules every model's requests obey, whatever its inputs: each input is one the config
// declares (InvalidArgument "has no input named", listing the inputs) and appears once ("given
// twice"); each requested output is one the config declares ("has no output named") and is
// requested once ("requested twice").
absl::Status CheckRequestNames(const ModelConfig& config, const InferenceRequest& request);

// The generic path: CheckRequestNames, then checks `request` against `config` and binds it for the
// scheduler: on OK its inputs are in
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
