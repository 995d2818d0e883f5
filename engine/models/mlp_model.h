#pragma once

// `mlp`: a stack of dense layers, y = act(x W^T + b) per layer, whose weights are a safetensors
// file named as PyTorch's state_dict() names an nn.Sequential of Linear layers and activations:
// "0.weight" [out, in], "0.bias" [out] (optional), "2.weight", ... Layers run in the numeric order
// of their prefix; every tensor in the file must be such a weight or bias.
//
// Config:
//   - max_batch_size > 0; exactly one FP32 input of dims [in_features] and one FP32 output of
//     dims [out_features] (fixed sizes), matching the first and last layer.
//   - parameters (all optional; any other key is refused by name):
//       weights_file       file name inside the version folder (default "model.safetensors");
//                          a plain name: no '/', not "." or "..".
//       activation         applied after every layer but the last (default "relu").
//       output_activation  applied after the last layer (default "none"); "softmax" allowed.
//       activations        comma-separated, one per layer, e.g. "relu,gelu,softmax"; replaces the
//                          two above (giving it with either of them is an error).
//       allow_tf32         "true" or "false" (default): whether the CUDA backend may run FP32
//                          GEMMs on TF32 tensor cores (~1e-3 relative error). The CPU ignores it.
//     Activations: none, relu, gelu (exact, erf form), gelu_tanh, silu, sigmoid, tanh; softmax
//     (over each output row) only on the last layer.
//
// Weights stored as F32, F16, BF16 (or F64) are converted to FP32 at load; the CPU backend
// computes in FP32 with OpenBLAS, one BLAS thread per instance. The CUDA backend computes in the
// stored precision (F16/BF16 on tensor cores with FP32 accumulation, else FP32). Instances share
// the weights read-only and each has its own scratch buffers.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/backend.h"
#include "engine/core/data_type.h"
#include "engine/models/dense.h"

namespace sluice::engine::models {

// The network an `mlp` model computes, loaded and checked against its config: everything a backend
// on any device needs (the CPU one computes with it directly; a GPU one would upload the weights).
// Immutable once loaded; shared read-only by every instance of the model.
struct MlpNetwork {
  std::string input_name;
  std::string output_name;
  int max_batch_size = 0;
  // In execution order (numeric order of the weights' prefixes), each with its activation; FP32.
  std::vector<cpu::DenseLayer> layers;
  // The precision the file stores the weights in when every weight and bias shares it: kFp16 or
  // kBf16 (the values in `layers` are exactly those, widened); kFp32 otherwise. A GPU backend
  // computes in this precision.
  DataType stored_dtype = DataType::kFp32;
  // Parameter allow_tf32: FP32 GEMMs may use TF32 tensor cores (GPU only).
  bool allow_tf32 = false;

  int in_features() const { return layers.front().in_features; }
  int out_features() const { return layers.back().out_features; }
};

// Reads `<spec.version_path>/<weights_file>`, converts the weights to FP32 and checks config,
// parameters and weights against each other. Errors as CreateMlpModel.
absl::StatusOr<std::shared_ptr<const MlpNetwork>> LoadMlpNetwork(const ModelSpec& spec);

// Loads `<spec.version_path>/<weights_file>` and checks config and weights against each other.
// NotFound if the weights file does not exist; InvalidArgument for a bad config or parameter, a
// broken file, or a mismatch, the message naming the model, version and both sides, e.g.
// "config input 'INPUT0' has 785 features but layer '0.weight' expects 784 (shape [512,784])".
absl::StatusOr<std::unique_ptr<Model>> CreateMlpModel(const ModelSpec& spec);

}  // namespace sluice::engine::models
