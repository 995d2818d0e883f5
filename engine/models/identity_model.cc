#include "engine/models/identity_model.h"

#include <chrono>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace sluice::engine::models {
namespace {

class IdentityInstance final : public ModelInstance {
 public:
  IdentityInstance(const ModelConfig& config, std::chrono::milliseconds execute_delay)
      : config_(config), execute_delay_(execute_delay) {}

  absl::StatusOr<std::vector<Tensor>> Run(std::span<const TensorView> inputs) override {
    if (execute_delay_.count() > 0) std::this_thread::sleep_for(execute_delay_);
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
  const std::chrono::milliseconds execute_delay_;
};

class IdentityModel final : public Model {
 public:
  IdentityModel(ModelConfig config, std::chrono::milliseconds execute_delay)
      : config_(std::move(config)), execute_delay_(execute_delay) {}
  const ModelConfig& config() const override { return config_; }
  absl::StatusOr<std::unique_ptr<ModelInstance>> CreateInstance(int) override {
    return std::make_unique<IdentityInstance>(config_, execute_delay_);
  }

 private:
  const ModelConfig config_;
  const std::chrono::milliseconds execute_delay_;
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
  int64_t delay_ms = 0;
  for (const auto& [key, value] : config.parameters) {
    if (key != kExecuteDelayMsParam) {
      return absl::InvalidArgumentError(absl::StrCat("model '", config.name,
                                                     "' (backend identity): unknown parameter '",
                                                     key, "' (known: ", kExecuteDelayMsParam, ")"));
    }
    if (!absl::SimpleAtoi(value, &delay_ms) || delay_ms < 0 || delay_ms > 60000) {
      return absl::InvalidArgumentError(
          absl::StrCat("model '", config.name, "' (backend identity): parameter '",
                       kExecuteDelayMsParam, "' = '", value, "' must be an integer in [0, 60000]"));
    }
  }
  return std::make_unique<IdentityModel>(config, std::chrono::milliseconds(delay_ms));
}

}  // namespace sluice::engine::models
