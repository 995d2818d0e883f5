#include "engine/models/mlp_model.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "engine/models/dense.h"
#include "engine/models/safetensors.h"

namespace sluice::engine::models {
namespace {

using cpu::Activation;
using cpu::DenseLayer;

constexpr absl::string_view kWeightsFileParam = "weights_file";
constexpr absl::string_view kActivationParam = "activation";
constexpr absl::string_view kOutputActivationParam = "output_activation";
constexpr absl::string_view kActivationsParam = "activations";
constexpr absl::string_view kAllowTf32Param = "allow_tf32";
constexpr absl::string_view kDefaultWeightsFile = "model.safetensors";
constexpr absl::string_view kDefaultActivation = "relu";
constexpr absl::string_view kDefaultOutputActivation = "none";

class MlpInstance final : public ModelInstance {
 public:
  // Allocates all scratch up front, for max_batch_size rows: Run never allocates but its output.
  explicit MlpInstance(std::shared_ptr<const MlpNetwork> network)
      : network_(std::move(network)),
        input_copy_(static_cast<size_t>(network_->max_batch_size) * network_->in_features()) {
    int widest = 0;
    for (const DenseLayer& layer : network_->layers) widest = std::max(widest, layer.out_features);
    for (std::vector<float>& buffer : scratch_) {
      buffer.resize(static_cast<size_t>(network_->max_batch_size) * widest);
    }
  }

  absl::StatusOr<std::vector<Tensor>> Run(std::span<const TensorView> inputs) override {
    const MlpNetwork& net = *network_;
    // The engine validated the request against the config; anything else here is its bug.
    if (inputs.size() != 1 || inputs[0].dtype != DataType::kFp32 || inputs[0].shape.size() != 2 ||
        inputs[0].shape[1] != net.in_features() || inputs[0].shape[0] < 0 ||
        inputs[0].shape[0] > net.max_batch_size) {
      return absl::InternalError(
          absl::StrCat("mlp: expected one FP32 input of shape [<=", net.max_batch_size, ",",
                       net.in_features(), "], got ", inputs.size(), " inputs, the first ",
                       inputs.empty() ? "absent" : ShapeToString(inputs[0].shape)));
    }
    const TensorView& x = inputs[0];
    const int rows = static_cast<int>(x.shape[0]);
    const size_t input_bytes = static_cast<size_t>(rows) * net.in_features() * sizeof(float);
    if (x.data.size() != input_bytes) {
      return absl::InternalError(absl::StrCat("mlp: input '", x.name, "' holds ", x.data.size(),
                                              " bytes, expected ", input_bytes));
    }

    // Request bytes carry no alignment promise (a protobuf string, a gather buffer): read them in
    // place when they are float-aligned, as they nearly always are, else copy them once.
    const float* current;
    if (reinterpret_cast<uintptr_t>(x.data.data()) % alignof(float) == 0) {
      current = reinterpret_cast<const float*>(x.data.data());
    } else {
      if (input_bytes > 0) std::memcpy(input_copy_.data(), x.data.data(), input_bytes);
      current = input_copy_.data();
    }
    // Ping-pong between the two scratch buffers, one layer after the other.
    for (size_t i = 0; i < net.layers.size(); ++i) {
      float* output = scratch_[i % 2].data();
      cpu::DenseForward(net.layers[i], current, rows, output);
      current = output;
    }

    std::vector<Tensor> outputs(1);
    Tensor& y = outputs[0];
    y.name = net.output_name;
    y.dtype = DataType::kFp32;
    y.shape = {rows, net.out_features()};
    y.data.resize(static_cast<size_t>(rows) * net.out_features() * sizeof(float));
    if (!y.data.empty()) std::memcpy(y.data.data(), current, y.data.size());
    return outputs;
  }

 private:
  const std::shared_ptr<const MlpNetwork> network_;
  std::vector<float> input_copy_;
  std::vector<float> scratch_[2];
};

class MlpModel final : public Model {
 public:
  MlpModel(ModelConfig config, std::shared_ptr<const MlpNetwork> network)
      : config_(std::move(config)), network_(std::move(network)) {}
  const ModelConfig& config() const override { return config_; }
  absl::StatusOr<std::unique_ptr<ModelInstance>> CreateInstance(int) override {
    return std::make_unique<MlpInstance>(network_);
  }

 private:
  const ModelConfig config_;
  const std::shared_ptr<const MlpNetwork> network_;
};

// The weight and (optional) bias of one Linear layer, as found in the file.
struct LayerTensors {
  const TensorView* weight = nullptr;
  const TensorView* bias = nullptr;
};

std::string ParameterValue(const ModelConfig& config, absl::string_view key,
                           absl::string_view default_value) {
  auto it = config.parameters.find(std::string(key));
  return it == config.parameters.end() ? std::string(default_value) : it->second;
}

// Checks the parts of the config that do not depend on the weights.
absl::Status CheckConfig(const ModelConfig& config) {
  if (config.max_batch_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch_size must be > 0 (the mlp backend takes a batch of rows), not ",
                     config.max_batch_size));
  }
  if (config.inputs.size() != 1 || config.outputs.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("needs exactly 1 input and 1 output, not ",
                                                   config.inputs.size(), " and ",
                                                   config.outputs.size()));
  }
  for (const TensorSpec* tensor : {&config.inputs[0], &config.outputs[0]}) {
    const char* kind = tensor == &config.inputs[0] ? "input" : "output";
    if (tensor->dtype != DataType::kFp32) {
      return absl::InvalidArgumentError(absl::StrCat(
          kind, " '", tensor->name, "' must be TYPE_FP32, not ", DataTypeName(tensor->dtype)));
    }
    if (tensor->dims.size() != 1 || tensor->dims[0] <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(kind, " '", tensor->name, "' has dims ",
                                                     ShapeToString(tensor->dims),
                                                     "; the mlp backend needs one fixed size "
                                                     "[features]"));
    }
  }
  for (const auto& [key, value] : config.parameters) {
    if (key != kWeightsFileParam && key != kActivationParam && key != kOutputActivationParam &&
        key != kActivationsParam && key != kAllowTf32Param) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown parameter '", key, "' (known: ", kWeightsFileParam, ", ", kActivationParam, ", ",
          kOutputActivationParam, ", ", kActivationsParam, ", ", kAllowTf32Param, ")"));
    }
  }
  const std::string tf32 = ParameterValue(config, kAllowTf32Param, "false");
  if (tf32 != "true" && tf32 != "false") {
    return absl::InvalidArgumentError(absl::StrCat("parameter '", kAllowTf32Param, "' = '", tf32,
                                                   "' must be \"true\" or \"false\""));
  }
  const std::string weights_file = ParameterValue(config, kWeightsFileParam, kDefaultWeightsFile);
  if (weights_file.empty() || weights_file == "." || weights_file == ".." ||
      weights_file.find('/') != std::string::npos || weights_file.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parameter '", kWeightsFileParam, "' = '", weights_file,
        "' must be a plain file name inside the version folder (no '/', not '.' or '..')"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Activation> ParseParameterActivation(absl::string_view parameter,
                                                    absl::string_view name) {
  absl::StatusOr<Activation> activation = cpu::ParseActivation(name);
  if (!activation.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter '", parameter, "': ", activation.status().message()));
  }
  return activation;
}

// One activation per layer, from the parameters (the scheme is described in mlp_model.h).
absl::StatusOr<std::vector<Activation>> LayerActivations(const ModelConfig& config,
                                                         const std::vector<DenseLayer>& layers) {
  const size_t count = layers.size();
  std::vector<Activation> activations;
  const auto& params = config.parameters;
  if (params.count(std::string(kActivationsParam)) > 0) {
    for (absl::string_view other : {kActivationParam, kOutputActivationParam}) {
      if (params.count(std::string(other)) > 0) {
        return absl::InvalidArgumentError(absl::StrCat("parameters '", kActivationsParam, "' and '",
                                                       other,
                                                       "' are both set; give one or the other"));
      }
    }
    const std::string& list = params.at(std::string(kActivationsParam));
    for (absl::string_view name : absl::StrSplit(list, ',')) {
      ASSIGN_OR_RETURN(
          Activation activation,
          ParseParameterActivation(kActivationsParam, absl::StripAsciiWhitespace(name)));
      activations.push_back(activation);
    }
    if (activations.size() != count) {
      std::vector<std::string> names;
      for (const DenseLayer& layer : layers) names.push_back(layer.name);
      return absl::InvalidArgumentError(absl::StrCat("parameter '", kActivationsParam, "' = '",
                                                     list, "' lists ", activations.size(),
                                                     " activations but the weights have ", count,
                                                     " layers (", absl::StrJoin(names, ", "), ")"));
    }
    for (size_t i = 0; i + 1 < count; ++i) {
      if (activations[i] == Activation::kSoftmax) {
        return absl::InvalidArgumentError(absl::StrCat(
            "parameter '", kActivationsParam, "': softmax is only allowed on the last layer, not ",
            "on layer '", layers[i].name, "' (entry ", i + 1, " of ", count, ")"));
      }
    }
    return activations;
  }
  ASSIGN_OR_RETURN(Activation hidden, ParseParameterActivation(
                                          kActivationParam, ParameterValue(config, kActivationParam,
                                                                           kDefaultActivation)));
  if (hidden == Activation::kSoftmax) {
    return absl::InvalidArgumentError(absl::StrCat("parameter '", kActivationParam,
                                                   "': softmax is only allowed on the last layer "
                                                   "(set '",
                                                   kOutputActivationParam, "' instead)"));
  }
  ASSIGN_OR_RETURN(Activation output,
                   ParseParameterActivation(
                       kOutputActivationParam,
                       ParameterValue(config, kOutputActivationParam, kDefaultOutputActivation)));
  activations.assign(count, hidden);
  activations.back() = output;
  return activations;
}

// Groups the file's tensors by layer index: "<index>.weight" / "<index>.bias".
absl::StatusOr<std::map<int, LayerTensors>> GroupLayers(const SafetensorsFile& file) {
  std::map<int, LayerTensors> layers;
  for (const TensorView& tensor : file.tensors()) {
    const size_t dot = tensor.name.find('.');
    int index = -1;
    const std::string prefix = tensor.name.substr(0, dot);
    const std::string suffix = dot == std::string::npos ? "" : tensor.name.substr(dot + 1);
    // Canonical decimal only ("0", "12"; not "+1" or "01"), as PyTorch writes module indices.
    const bool numeric =
        absl::SimpleAtoi(prefix, &index) && index >= 0 && absl::StrCat(index) == prefix;
    if (!numeric || (suffix != "weight" && suffix != "bias")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "safetensors file '", file.path(), "': tensor '", tensor.name,
          "' is not a Linear layer parameter (expected '<index>.weight' or '<index>.bias', as "
          "nn.Sequential's state_dict() names them)"));
    }
    (suffix == "weight" ? layers[index].weight : layers[index].bias) = &tensor;
  }
  if (layers.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors file '", file.path(), "' holds no layers"));
  }
  return layers;
}

absl::StatusOr<DenseLayer> BuildLayer(const SafetensorsFile& file, int index,
                                      const LayerTensors& tensors) {
  auto fail = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("safetensors file '", file.path(), "': ", what));
  };
  DenseLayer layer;
  layer.name = absl::StrCat(index);
  if (tensors.weight == nullptr) {
    return fail(
        absl::StrCat("layer ", index, " has '", index, ".bias' but no '", index, ".weight'"));
  }
  const TensorView& weight = *tensors.weight;
  if (weight.shape.size() != 2 || weight.shape[0] <= 0 || weight.shape[1] <= 0 ||
      weight.shape[0] > INT_MAX || weight.shape[1] > INT_MAX) {
    return fail(absl::StrCat("tensor '", weight.name, "' has shape ", ShapeToString(weight.shape),
                             "; a Linear weight is [out_features, in_features], both in [1, ",
                             INT_MAX, "]"));
  }
  layer.out_features = static_cast<int>(weight.shape[0]);
  layer.in_features = static_cast<int>(weight.shape[1]);
  absl::StatusOr<std::vector<float>> values = ToFloat32(weight);
  if (!values.ok()) return fail(values.status().message());
  layer.weight = *std::move(values);
  if (tensors.bias != nullptr) {
    const TensorView& bias = *tensors.bias;
    if (bias.shape.size() != 1 || bias.shape[0] != layer.out_features) {
      return fail(absl::StrCat("tensor '", bias.name, "' has shape ", ShapeToString(bias.shape),
                               " but '", weight.name, "' ", ShapeToString(weight.shape),
                               " needs a bias of [", layer.out_features, "]"));
    }
    values = ToFloat32(bias);
    if (!values.ok()) return fail(values.status().message());
    layer.bias = *std::move(values);
  }
  return layer;
}

// Checks that the layers chain and that the ends match the config; messages name both sides.
absl::Status CheckChain(const ModelConfig& config, const std::vector<DenseLayer>& layers) {
  auto weight_text = [](const DenseLayer& layer) {
    return absl::StrCat("'", layer.name, ".weight' (shape [", layer.out_features, ",",
                        layer.in_features, "])");
  };
  const TensorSpec& input = config.inputs[0];
  const TensorSpec& output = config.outputs[0];
  if (input.dims[0] != layers.front().in_features) {
    return absl::InvalidArgumentError(
        absl::StrCat("config input '", input.name, "' has ", input.dims[0], " features but layer ",
                     weight_text(layers.front()), " expects ", layers.front().in_features));
  }
  for (size_t i = 1; i < layers.size(); ++i) {
    if (layers[i].in_features != layers[i - 1].out_features) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer ", weight_text(layers[i]), " expects ", layers[i].in_features,
                       " inputs but the layer before it, ", weight_text(layers[i - 1]), ", gives ",
                       layers[i - 1].out_features));
    }
  }
  if (output.dims[0] != layers.back().out_features) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config output '", output.name, "' has ", output.dims[0], " features but the last layer ",
        weight_text(layers.back()), " gives ", layers.back().out_features));
  }
  return absl::OkStatus();
}

// What the load will allocate, from the file's shapes, before any of it is: the FP32 weights
// (shared) and each instance's scratch (MlpInstance: an input copy and two ping-pong buffers of
// max_batch_size rows of the widest layer). A max_batch_size of 2^31-1 asked for terabytes here.
absl::Status CheckMemory(const ModelConfig& config, const LoadLimits& limits,
                         const std::map<int, LayerTensors>& layers) {
  int64_t widest = 0;
  int64_t weights = 0;
  for (const auto& [index, tensors] : layers) {
    for (const TensorView* tensor : {tensors.weight, tensors.bias}) {
      if (tensor == nullptr) continue;
      int64_t elements = 1;
      for (int64_t dim : tensor->shape)
        elements = SaturatingMul(elements, std::max<int64_t>(dim, 0));
      weights = SaturatingAdd(weights, SaturatingMul(elements, sizeof(float)));
    }
    if (tensors.weight != nullptr && !tensors.weight->shape.empty()) {
      widest = std::max(widest, tensors.weight->shape[0]);
    }
  }
  const int64_t rows = config.max_batch_size;
  const int64_t in_features = config.inputs[0].dims[0];
  const int64_t scratch = SaturatingMul(
      SaturatingAdd(SaturatingMul(rows, in_features), SaturatingMul(2 * rows, widest)),
      sizeof(float));
  return CheckLoadBytes(config, limits, scratch, weights,
                        absl::StrCat("FP32 weights and per instance scratch for ", rows,
                                     " rows of the widest layer, ", widest, " features"));
}

absl::StatusOr<std::shared_ptr<const MlpNetwork>> LoadNetworkUnprefixed(const ModelSpec& spec) {
  const ModelConfig& config = spec.config;
  RETURN_IF_ERROR(CheckConfig(config));
  const std::string path = absl::StrCat(
      spec.version_path, "/", ParameterValue(config, kWeightsFileParam, kDefaultWeightsFile));
  ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(path));
  ASSIGN_OR_RETURN(auto grouped, GroupLayers(file));
  RETURN_IF_ERROR(CheckMemory(config, spec.limits, grouped));

  auto network = std::make_shared<MlpNetwork>();
  network->input_name = config.inputs[0].name;
  network->output_name = config.outputs[0].name;
  network->max_batch_size = config.max_batch_size;
  network->allow_tf32 = ParameterValue(config, kAllowTf32Param, "false") == "true";
  // One 16-bit precision shared by every tensor is kept for the GPU; anything else computes in
  // FP32.
  const DataType first_dtype = file.tensors().front().dtype;
  bool one_dtype = true;
  for (const TensorView& tensor : file.tensors()) one_dtype &= tensor.dtype == first_dtype;
  if (one_dtype && (first_dtype == DataType::kFp16 || first_dtype == DataType::kBf16)) {
    network->stored_dtype = first_dtype;
  }
  for (const auto& [index, tensors] : grouped) {
    ASSIGN_OR_RETURN(DenseLayer layer, BuildLayer(file, index, tensors));
    network->layers.push_back(std::move(layer));
  }
  RETURN_IF_ERROR(CheckChain(config, network->layers));
  ASSIGN_OR_RETURN(std::vector<Activation> activations, LayerActivations(config, network->layers));
  for (size_t i = 0; i < activations.size(); ++i) network->layers[i].activation = activations[i];
  return network;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const MlpNetwork>> LoadMlpNetwork(const ModelSpec& spec) {
  absl::StatusOr<std::shared_ptr<const MlpNetwork>> network = LoadNetworkUnprefixed(spec);
  if (!network.ok()) {
    return absl::Status(network.status().code(),
                        absl::StrCat("model '", spec.config.name, "' version ", spec.version,
                                     " (backend mlp): ", network.status().message()));
  }
  return network;
}

absl::StatusOr<std::unique_ptr<Model>> CreateMlpModel(const ModelSpec& spec) {
  ASSIGN_OR_RETURN(std::shared_ptr<const MlpNetwork> network, LoadMlpNetwork(spec));
  cpu::UseSingleThreadedBlas();
  return std::make_unique<MlpModel>(spec.config, std::move(network));
}

}  // namespace sluice::engine::models
