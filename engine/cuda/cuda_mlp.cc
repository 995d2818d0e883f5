// `mlp` on the GPU: the weights engine/models/mlp_model.cc loads and checks, uploaded once per
// instance; one cuBLASLt GEMM per layer with the bias + activation fused into its epilogue where
// cuBLASLt has that epilogue (RELU_BIAS, GELU_BIAS for the tanh form, BIAS), else a default
// epilogue followed by one fused bias + activation kernel (dense_epilogue.cu). The same fallback
// when cuBLASLt offers no algorithm for a fused epilogue at some batch bucket (it depends on the
// GPU, types and shapes), or refuses the combination outright (CUBLAS_STATUS_NOT_SUPPORTED): the
// load goes on with the plain GEMM and our kernel (cublaslt_algo.h FallBackToPlainGemm, the rule
// the encoder follows too). DescribeCudaMlpInstance (cuda_mlp.h) says which path each layer took.
//
// Precision: weights stored as F16/BF16 compute in that type on tensor cores with FP32
// accumulation (activations between layers in the same 16-bit type, the last layer's output in
// FP32); anything else in FP32, on TF32 tensor cores when the config allows it.
//
// Layout: PyTorch's row-major x [rows, in] and W [out, in] are, to column-major cuBLASLt, x^T
// (in x rows) and W^T (in x out). y^T = W x^T is then D (out x rows) = op(A) B with A = W^T
// transposed, so y comes out row-major [rows, out] and the bias runs along D's rows, as cuBLASLt's
// bias epilogue broadcasts it.

#include "engine/cuda/cuda_mlp.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/cuda/cublaslt_algo.h"
#include "engine/cuda/cublaslt_handles.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/cuda_handles.h"
#include "engine/cuda/cuda_model.h"
#include "engine/cuda/element_upload.h"
#include "engine/cuda/kernels/dense_epilogue.cuh"
#include "engine/models/mlp_model.h"

namespace sluice::engine::cuda {
namespace {

using cpu::Activation;

// cuBLASLt's recommended workspace for Hopper; allocated once per instance.
constexpr size_t kWorkspaceBytes = 32u << 20;

DeviceActivation ToDevice(Activation activation) {
  switch (activation) {
    case Activation::kRelu:
      return DeviceActivation::kRelu;
    case Activation::kGelu:
      return DeviceActivation::kGelu;
    case Activation::kGeluTanh:
      return DeviceActivation::kGeluTanh;
    case Activation::kSilu:
      return DeviceActivation::kSilu;
    case Activation::kSigmoid:
      return DeviceActivation::kSigmoid;
    case Activation::kTanh:
      return DeviceActivation::kTanh;
    case Activation::kNone:
    case Activation::kSoftmax:
      break;
  }
  return DeviceActivation::kNone;
}

// One layer, on the device, with what its GEMM needs for every bucket.
struct GpuLayer {
  int in = 0;
  int out = 0;
  ElementType output_type = ElementType::kFp32;
  DeviceBuffer weight;               // [out, in] in the compute type
  std::optional<DeviceBuffer> bias;  // [out] in output_type
  MatmulDesc desc;
  MatrixLayout a;  // W^T as stored: in x out, ld in
  // Per bucket (same order as buckets_): B = x^T (in x rows) and D = y^T (out x rows).
  std::vector<MatrixLayout> b = {};
  std::vector<MatrixLayout> d = {};
  std::vector<cublasLtMatmulAlgo_t> algo = {};
  // Set when the epilogue could not fuse the activation: applied by LaunchBiasActivation (with
  // the bias when the epilogue did not add it either).
  bool separate_epilogue = false;
  // The fused epilogue had no cuBLASLt algorithm, so separate_epilogue was set instead.
  bool epilogue_fallback = false;
  DeviceActivation activation = DeviceActivation::kNone;
  bool softmax = false;
  // How the layer is computed, for DescribeCudaMlpInstance.
  std::string path = {};
};

const char* EpilogueName(cublasLtEpilogue_t epilogue) {
  switch (epilogue) {
    case CUBLASLT_EPILOGUE_BIAS:
      return "BIAS";
    case CUBLASLT_EPILOGUE_RELU:
      return "RELU";
    case CUBLASLT_EPILOGUE_RELU_BIAS:
      return "RELU_BIAS";
    case CUBLASLT_EPILOGUE_GELU:
      return "GELU (tanh form)";
    case CUBLASLT_EPILOGUE_GELU_BIAS:
      return "GELU_BIAS (tanh form)";
    default:
      break;
  }
  return "DEFAULT";
}

class CudaMlpInstance final : public CudaModelInstance {
 public:
  static absl::StatusOr<std::unique_ptr<CudaMlpInstance>> Create(const models::MlpNetwork& network,
                                                                 int device,
                                                                 std::span<const int> buckets);

  absl::Status Enqueue(cudaStream_t stream, std::span<const void* const> inputs,
                       std::span<void* const> outputs, int rows) override {
    const int bucket = BucketIndex(rows);
    if (bucket < 0) {
      return absl::InternalError(absl::StrCat("mlp on the GPU: ", rows, " rows is not a bucket"));
    }
    const float* input = static_cast<const float*>(inputs[0]);
    const void* current = input;
    if (compute_type_ != ElementType::kFp32) {
      RETURN_IF_ERROR(LaunchConvertFromFloat(input, converted_input_->get(), compute_type_,
                                             static_cast<int64_t>(rows) * layers_.front().in,
                                             stream));
      current = converted_input_->get();
    }
    const float alpha = 1.f;
    const float beta = 0.f;
    for (size_t l = 0; l < layers_.size(); ++l) {
      GpuLayer& layer = layers_[l];
      const bool last = l + 1 == layers_.size();
      void* output = last ? outputs[0] : scratch_[l % 2].get();
      CUBLAS_RETURN_IF_ERROR(handle_.Matmul(
          layer.desc.get(), &alpha, layer.weight.get(), layer.a.get(), current,
          layer.b[bucket].get(), &beta, output, layer.d[bucket].get(), output,
          layer.d[bucket].get(), &layer.algo[bucket], workspace_.get(), kWorkspaceBytes, stream));
      if (layer.separate_epilogue) {
        RETURN_IF_ERROR(LaunchBiasActivation(output, layer.bias ? layer.bias->get() : nullptr,
                                             layer.output_type, rows, layer.out, layer.activation,
                                             stream));
      }
      if (layer.softmax) {
        RETURN_IF_ERROR(LaunchSoftmaxRows(static_cast<float*>(output), rows, layer.out, stream));
      }
      current = output;
    }
    return absl::OkStatus();
  }

  bool counts_non_finite() const override { return true; }

  std::string Describe() const {
    std::string text =
        absl::StrCat("mlp on cuda:", device_, ", ", ElementTypeName(compute_type_), " GEMMs");
    for (size_t l = 0; l < layers_.size(); ++l) {
      absl::StrAppend(&text, "; layer ", l, " (", layers_[l].out, "x", layers_[l].in,
                      "): ", layers_[l].path);
    }
    return text;
  }

 private:
  CudaMlpInstance(int device, CublasLtHandle handle, DeviceBuffer workspace,
                  std::vector<int> buckets, ElementType compute_type)
      : device_(device),
        handle_(std::move(handle)),
        workspace_(std::move(workspace)),
        buckets_(std::move(buckets)),
        compute_type_(compute_type) {}

  int BucketIndex(int rows) const {
    for (size_t i = 0; i < buckets_.size(); ++i) {
      if (buckets_[i] == rows) return static_cast<int>(i);
    }
    return -1;
  }

  absl::Status AddLayer(const cpu::DenseLayer& dense, bool last, bool allow_tf32);

  const int device_;
  CublasLtHandle handle_;
  DeviceBuffer workspace_;
  const std::vector<int> buckets_;
  const ElementType compute_type_;
  std::vector<GpuLayer> layers_;
  // The FP32 input converted to the compute type (16-bit weights only).
  std::optional<DeviceBuffer> converted_input_;
  // Ping-pong activations between layers, max_batch_size x widest layer.
  std::vector<DeviceBuffer> scratch_;
};

absl::Status CudaMlpInstance::AddLayer(const cpu::DenseLayer& dense, bool last, bool allow_tf32) {
  const ElementType output_type = last ? ElementType::kFp32 : compute_type_;
  const cublasComputeType_t compute = compute_type_ == ElementType::kFp32 && allow_tf32
                                          ? CUBLAS_COMPUTE_32F_FAST_TF32
                                          : CUBLAS_COMPUTE_32F;
  ASSIGN_OR_RETURN(MatmulDesc desc, MatmulDesc::Create(compute, CUDA_R_32F));
  const cublasOperation_t transpose = CUBLAS_OP_T;
  const cublasOperation_t no_transpose = CUBLAS_OP_N;
  RETURN_IF_ERROR(desc.Set(CUBLASLT_MATMUL_DESC_TRANSA, transpose));
  RETURN_IF_ERROR(desc.Set(CUBLASLT_MATMUL_DESC_TRANSB, no_transpose));
  ASSIGN_OR_RETURN(MatrixLayout a, MatrixLayout::Create(CudaType(compute_type_), dense.in_features,
                                                        dense.out_features, dense.in_features));
  ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create(device_));
  ASSIGN_OR_RETURN(DeviceBuffer weight,
                   UploadAs(device_, dense.weight, compute_type_, stream.get()));
  GpuLayer layer{.in = dense.in_features,
                 .out = dense.out_features,
                 .output_type = output_type,
                 .weight = std::move(weight),
                 .bias = std::nullopt,
                 .desc = std::move(desc),
                 .a = std::move(a)};
  const bool has_bias = !dense.bias.empty();
  if (has_bias) {
    ASSIGN_OR_RETURN(DeviceBuffer bias, UploadAs(device_, dense.bias, output_type, stream.get()));
    layer.bias = std::move(bias);
  }
  // The fused epilogue where cuBLASLt has one; its GELU is the tanh approximation.
  cublasLtEpilogue_t epilogue = has_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  switch (dense.activation) {
    case Activation::kNone:
      break;
    case Activation::kRelu:
      epilogue = has_bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
      break;
    case Activation::kGeluTanh:
      epilogue = has_bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
      break;
    case Activation::kSoftmax:
      layer.softmax = true;  // bias in the epilogue, softmax after it
      break;
    default:
      // Exact GELU, SiLU, sigmoid, tanh: no epilogue; one kernel adds the bias and activates.
      epilogue = CUBLASLT_EPILOGUE_DEFAULT;
      layer.separate_epilogue = true;
      layer.activation = ToDevice(dense.activation);
      break;
  }
  // One algorithm per bucket for the layer's descriptor as it stands; NotFound if cuBLASLt has
  // none for some bucket (then nothing is kept).
  auto pick_algorithms = [&]() -> absl::Status {
    std::vector<MatrixLayout> bs;
    std::vector<MatrixLayout> ds;
    std::vector<cublasLtMatmulAlgo_t> algos;
    for (int rows : buckets_) {
      ASSIGN_OR_RETURN(MatrixLayout b,
                       MatrixLayout::Create(CudaType(compute_type_), layer.in, rows, layer.in));
      ASSIGN_OR_RETURN(MatrixLayout d,
                       MatrixLayout::Create(CudaType(output_type), layer.out, rows, layer.out));
      absl::StatusOr<cublasLtMatmulAlgo_t> algo =
          PickMatmulAlgo(handle_.get(), layer.desc, layer.a, b, d, kWorkspaceBytes);
      if (!algo.ok()) {
        return absl::Status(algo.status().code(),
                            absl::StrCat("layer ", dense.name, " (", layer.out, "x", layer.in,
                                         ") at ", rows, " rows: ", algo.status().message()));
      }
      bs.push_back(std::move(b));
      ds.push_back(std::move(d));
      algos.push_back(*algo);
    }
    layer.b = std::move(bs);
    layer.d = std::move(ds);
    layer.algo = std::move(algos);
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(layer.desc.Set(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue));
  if (has_bias && !layer.separate_epilogue) {
    const void* bias_pointer = layer.bias->get();
    RETURN_IF_ERROR(layer.desc.Set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias_pointer));
  }
  const cublasLtEpilogue_t asked = epilogue;
  absl::Status picked = pick_algorithms();
  if (FallBackToPlainGemm(picked, epilogue)) {
    // No algorithm for the fused epilogue at some bucket (it depends on the GPU, the types and
    // the shapes): a plain GEMM, then our own bias + activation kernel, computes the same layer,
    // so the load goes on instead of failing. Softmax, if any, still runs after it.
    const std::string fallback_reason(picked.message());
    epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    layer.separate_epilogue = true;
    layer.activation = dense.activation == Activation::kSoftmax ? DeviceActivation::kNone
                                                                : ToDevice(dense.activation);
    layer.epilogue_fallback = true;
    RETURN_IF_ERROR(layer.desc.Set(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue));
    const void* no_bias = nullptr;
    RETURN_IF_ERROR(layer.desc.Set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, no_bias));
    picked = pick_algorithms();
    layer.path = absl::StrCat("plain GEMM + our bias/activation kernel (cuBLASLt had nothing for ",
                              EpilogueName(asked), ": ", fallback_reason, ")");
  } else if (layer.separate_epilogue) {
    layer.path = "plain GEMM + our bias/activation kernel";
  } else {
    layer.path = absl::StrCat("cuBLASLt ", EpilogueName(epilogue), " epilogue");
  }
  if (layer.softmax) absl::StrAppend(&layer.path, " + softmax kernel");
  RETURN_IF_ERROR(picked);
  layers_.push_back(std::move(layer));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CudaMlpInstance>> CudaMlpInstance::Create(
    const models::MlpNetwork& network, int device, std::span<const int> buckets) {
  ScopedDevice scoped(device);
  const ElementType compute_type = network.stored_dtype == DataType::kFp16   ? ElementType::kFp16
                                   : network.stored_dtype == DataType::kBf16 ? ElementType::kBf16
                                                                             : ElementType::kFp32;
  ASSIGN_OR_RETURN(CublasLtHandle handle, CublasLtHandle::Create());
  ASSIGN_OR_RETURN(DeviceBuffer workspace, DeviceBuffer::Create(device, kWorkspaceBytes));
  std::unique_ptr<CudaMlpInstance> instance(
      new CudaMlpInstance(device, std::move(handle), std::move(workspace),
                          std::vector<int>(buckets.begin(), buckets.end()), compute_type));
  const size_t max_rows = static_cast<size_t>(network.max_batch_size);
  int widest = 0;
  for (size_t l = 0; l < network.layers.size(); ++l) {
    RETURN_IF_ERROR(
        instance->AddLayer(network.layers[l], l + 1 == network.layers.size(), network.allow_tf32));
    widest = std::max(widest, network.layers[l].out_features);
  }
  for (int i = 0; i < 2; ++i) {
    ASSIGN_OR_RETURN(DeviceBuffer buffer,
                     DeviceBuffer::Create(device, max_rows * widest * ElementBytes(compute_type)));
    instance->scratch_.push_back(std::move(buffer));
  }
  if (compute_type != ElementType::kFp32) {
    ASSIGN_OR_RETURN(DeviceBuffer converted,
                     DeviceBuffer::Create(
                         device, max_rows * network.in_features() * ElementBytes(compute_type)));
    instance->converted_input_ = std::move(converted);
  }
  return instance;
}

}  // namespace

std::string DescribeCudaMlpInstance(const CudaModelInstance& instance) {
  const auto* mlp = dynamic_cast<const CudaMlpInstance*>(&instance);
  return mlp == nullptr ? std::string() : mlp->Describe();
}

absl::StatusOr<std::unique_ptr<CudaModelInstance>> CreateCudaMlpInstance(
    const ModelSpec& spec, int device, std::span<const int> buckets) {
  ASSIGN_OR_RETURN(std::shared_ptr<const models::MlpNetwork> network, models::LoadMlpNetwork(spec));
  absl::StatusOr<std::unique_ptr<CudaMlpInstance>> instance =
      CudaMlpInstance::Create(*network, device, buckets);
  if (!instance.ok()) {
    return absl::Status(instance.status().code(),
                        absl::StrCat("model '", spec.config.name, "' version ", spec.version,
                                     " (mlp on cuda:", device, "): ", instance.status().message()));
  }
  return std::unique_ptr<CudaModelInstance>(*std::move(instance));
}

}  // namespace sluice::engine::cuda
