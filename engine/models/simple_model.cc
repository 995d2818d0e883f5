#include "engine/models/simple_model.h"

#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace sluice::engine::models {
namespace {

class SimpleInstance final : public ModelInstance {
 public:
  explicit SimpleInstance(const ModelConfig& config) : config_(config) {}

  absl::StatusOr<std::vector<Tensor>> Run(std::span<const TensorView> inputs) override {
    const TensorView& a = inputs[0];
    const TensorView& b = inputs[1];
    const size_t n = a.data.size() / sizeof(int32_t);
    std::vector<Tensor> outputs(2);
    for (int i = 0; i < 2; ++i) {
      outputs[i].name = config_.outputs[i].name;
      outputs[i].dtype = DataType::kInt32;
      outputs[i].shape = a.shape;
      outputs[i].data.resize(a.data.size());
    }
    // memcpy in and out: the request bytes carry no alignment promise.
    for (size_t i = 0; i < n; ++i) {
      int32_t x, y;
      std::memcpy(&x, a.data.data() + i * 4, 4);
      std::memcpy(&y, b.data.data() + i * 4, 4);
      // Wrap on overflow, as int32 arithmetic on every device does (unsigned math avoids UB).
      const int32_t sum = static_cast<int32_t>(static_cast<uint32_t>(x) + static_cast<uint32_t>(y));
      const int32_t diff =
          static_cast<int32_t>(static_cast<uint32_t>(x) - static_cast<uint32_t>(y));
      std::memcpy(outputs[0].data.data() + i * 4, &sum, 4);
      std::memcpy(outputs[1].data.data() + i * 4, &diff, 4);
    }
    return outputs;
  }

 private:
  const ModelConfig& config_;
};

class SimpleModel final : public Model {
 public:
  explicit SimpleModel(ModelConfig config) : config_(std::move(config)) {}
  const ModelConfig& config() const override { return config_; }
  absl::StatusOr<std::unique_ptr<ModelInstance>> CreateInstance(int) override {
    return std::make_unique<SimpleInstance>(config_);
  }

 private:
  const ModelConfig config_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> CreateSimpleModel(const ModelSpec& spec) {
  const ModelConfig& config = spec.config;
  auto fail = [&](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", config.name, "' (backend simple): ", what));
  };
  if (config.inputs.size() != 2 || config.outputs.size() != 2) {
    return fail("needs exactly 2 inputs and 2 outputs (sum and difference)");
  }
  const Shape& dims = config.inputs[0].dims;
  for (const auto* list : {&config.inputs, &config.outputs}) {
    for (const TensorSpec& spec_tensor : *list) {
      if (spec_tensor.dtype != DataType::kInt32) {
        return fail(absl::StrCat("tensor '", spec_tensor.name, "' must be TYPE_INT32, not ",
                                 DataTypeName(spec_tensor.dtype)));
      }
      if (spec_tensor.dims != dims) {
        return fail(absl::StrCat("tensor '", spec_tensor.name, "' has dims ",
                                 ShapeToString(spec_tensor.dims), ", expected ",
                                 ShapeToString(dims), " like '", config.inputs[0].name, "'"));
      }
    }
  }
  for (int64_t dim : dims) {
    if (dim < 0) return fail("dims must be fixed (no -1)");
  }
  return std::make_unique<SimpleModel>(config);
}

}  // namespace sluice::engine::models
