#include "engine/models/identity_model.h"

#include "absl/strings/str_cat.h"

namespace sluice::engine::models {
namespace {

class IdentityInstance final : public ModelInstance {
 public:
  explicit IdentityInstance(const ModelConfig& config) : config_(config) {}

  absl::StatusOr<std::vector<Tensor>> Run(std::span<const TensorView> inputs) override {
    std::vector<Tensor> outputs(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      outputs[i].name = config_.outputs[i].name;
      outputs[i].dtype = inputs[i].dtype;
      outputs[i].shape = inputs[i].shape;
      outputs[i].data.assign(inputs[i].data.begin(), inputs[i].data.end());
    }
    return outputs;
  }

 private:
  const ModelConfig& config_;
};

class IdentityModel final : public Model {
 public:
  explicit IdentityModel(ModelConfig config) : config_(std::move(config)) {}
  const ModelConfig& config() const override { return config_; }
  absl::StatusOr<std::unique_ptr<ModelInstance>> CreateInstance(int) override {
    return std::make_unique<IdentityInstance>(config_);
  }

 private:
  const ModelConfig config_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> CreateIdentityModel(const ModelSpec& spec) {
  const ModelConfig& config = spec.config;
  if (config.inputs.size() != config.outputs.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", config.name, "' (backend identity): ", config.inputs.size(),
                     " inputs but ", config.outputs.size(), " outputs; they pair up one to one"));
  }
  for (size_t i = 0; i < config.inputs.size(); ++i) {
    const TensorSpec& in = config.inputs[i];
    const TensorSpec& out = config.outputs[i];
    if (in.dtype != out.dtype || in.dims != out.dims) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model '", config.name, "' (backend identity): output '", out.name, "' (",
          DataTypeName(out.dtype), " ", ShapeToString(out.dims), ") must match input '", in.name,
          "' (", DataTypeName(in.dtype), " ", ShapeToString(in.dims), ")"));
    }
  }
  return std::make_unique<IdentityModel>(config);
}

}  // namespace sluice::engine::models
