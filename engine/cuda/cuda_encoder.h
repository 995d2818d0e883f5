#pragma once

// The `encoder` on the GPU, shared by its two files (not an interface: engine/cuda only):
// cuda_encoder.cc (weights, GEMMs, the forward pass, load summary) and cuda_encoder_batch.cc
// (packing a batch into a slot's input block, the output ranges, scattering the answers). The
// contract is CudaRaggedModel's (cuda_model.h); CreateCudaRaggedModel builds one.

#include <cublasLt.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/cuda/cublaslt_handles.h"
#include "engine/cuda/cuda_handles.h"
#include "engine/cuda/cuda_model.h"
#include "engine/cuda/element_upload.h"
#include "engine/cuda/kernels/encoder_kernels.cuh"
#include "engine/models/encoder/encoder_batch.h"
#include "engine/models/encoder/encoder_network.h"

namespace sluice::engine::cuda::gpu_encoder {

namespace enc = models::encoder;

// Where a packed batch lies in a slot's input block (all int32, each array 256-byte aligned).
struct InputLayout {
  size_t counts = 0;  // [2] sequences, tokens: first, as CudaRaggedModel requires
  size_t cu_seqlens = 0;
  size_t token_ids = 0;
  size_t token_types = 0;
  size_t positions = 0;
  size_t attend = 0;
  size_t bytes = 0;
};

// Where the outputs lie in a slot's output block (FP32); kAbsent where the network has none.
inline constexpr size_t kAbsent = ~size_t{0};
struct OutputLayout {
  size_t hidden = 0;     // [tokens, H]
  size_t embedding = 0;  // [sequences, E]
  size_t pooler = kAbsent;
  size_t logits = kAbsent;
  size_t bytes = 0;
};

class EncoderBatchState final : public RaggedBatchState {
 public:
  enc::PackedBatch packed;
  std::vector<enc::RequestTokens> request_tokens;
  std::vector<enc::RequestShape> shapes;
  std::vector<std::vector<bool>> wanted;
  bool want_hidden = false;
  bool want_embedding = false;
  bool want_pooler = false;
  bool want_logits = false;
};

// One linear layer's GEMM (y = x W^T) with an algorithm per bucket.
struct Gemm {
  MatmulDesc desc;
  MatrixLayout a;  // W^T as stored: in x out, ld in
  std::vector<MatrixLayout> b = {};
  std::vector<MatrixLayout> d = {};
  std::vector<cublasLtMatmulAlgo_t> algo = {};
  // The epilogue adds the bias (and activates); false: a plain GEMM, the caller's kernel does.
  bool fused = false;
  // Head GEMMs only: cuBLASLt offered no algorithm even without an epilogue, so our own small
  // linear kernel runs it (in, out as below).
  bool own_kernel = false;
  int in = 0;
  int out = 0;
};

struct Layer {
  DeviceBuffer qkv_weight;   // [3H, H], compute type
  DeviceBuffer qkv_bias;     // [3H], compute type (epilogue / LaunchBiasActivation)
  DeviceBuffer out_weight;   // [H, H]
  DeviceBuffer out_bias;     // [H] FP32 (residual LayerNorm kernel)
  DeviceBuffer norm1_gamma;  // FP32
  DeviceBuffer norm1_beta;   // FP32
  DeviceBuffer up_weight;    // [I, H]
  DeviceBuffer up_bias;      // [I], compute type
  DeviceBuffer down_weight;  // [H, I]
  DeviceBuffer down_bias;    // [H] FP32
  DeviceBuffer norm2_gamma;  // FP32
  DeviceBuffer norm2_beta;   // FP32
  std::optional<Gemm> qkv = std::nullopt;
  std::optional<Gemm> out = std::nullopt;
  std::optional<Gemm> up = std::nullopt;
  std::optional<Gemm> down = std::nullopt;
};

// One instance's encoder on one device. Thread-compatible: the executor calls Pack/Scatter on its
// batcher and completion threads and Enqueue on the compute stream's thread, never two at once
// for one slot (cuda_model.h).
class CudaEncoder final : public CudaRaggedModel {
 public:
  static absl::StatusOr<std::unique_ptr<CudaEncoder>> Create(
      const ModelConfig& config, std::shared_ptr<const enc::EncoderNetwork> net,
      const enc::GpuOptions& options, int device);

  const std::vector<RaggedBucket>& buckets() const override { return buckets_; }
  size_t input_bytes(int bucket) const override { return inputs_[bucket].bytes; }
  size_t output_bytes(int bucket) const override { return outputs_[bucket].bytes; }
  std::unique_ptr<RaggedBatchState> NewBatchState() const override {
    return std::make_unique<EncoderBatchState>();
  }
  absl::Status Pack(const Batch& batch, RaggedBatchState& state, void* staging) override;
  void PackEmpty(int bucket, RaggedBatchState& state, void* staging) override;
  void OutputRanges(const RaggedBatchState& state, std::vector<BlockRange>& ranges) const override;
  absl::Status Enqueue(cudaStream_t stream, const void* inputs, void* outputs, int bucket) override;
  absl::Status Scatter(const Batch& batch, const RaggedBatchState& state, const void* outputs,
                       std::vector<InferenceResponse>& responses) const override;
  BlockRange NonFiniteRange(const RaggedBatchState& state) const override;
  std::string Summary() const override;

 private:
  CudaEncoder(const ModelConfig& config, std::shared_ptr<const enc::EncoderNetwork> net, int device,
              CublasLtHandle handle, DeviceBuffer workspace, ElementType type,
              cublasComputeType_t compute, std::vector<RaggedBucket> buckets)
      : config_(config),
        net_(std::move(net)),
        device_(device),
        handle_(std::move(handle)),
        workspace_(std::move(workspace)),
        type_(type),
        compute_(compute),
        buckets_(std::move(buckets)) {}

  absl::Status Upload();
  absl::Status Allocate();
  // Uploads FP32 `values` as `type` (converted on the device); load time only (it waits).
  absl::StatusOr<DeviceBuffer> UploadAs(const std::vector<float>& values, ElementType type);
  // The CPU loader keeps a layer's linear weights only in its GEMM's panel layout
  // (encoder_gemm.h): unpacked here to nn.Linear's row-major [out, in] for the upload, one matrix
  // at a time (load time only; the temporary is freed before the next).
  absl::StatusOr<DeviceBuffer> UploadAs(const enc::PackedWeights& weights, ElementType type) {
    return UploadAs(weights.Unpack(), type);
  }
  // A GEMM of `in` -> `out` features at each bucket's token (per_token) or sequence count, with
  // `epilogue` (bias from `bias`), falling back to a plain GEMM where cuBLASLt has no algorithm
  // for the epilogue at some bucket.
  absl::StatusOr<Gemm> MakeGemm(const std::string& name, int in, int out, bool per_token,
                                cublasLtEpilogue_t epilogue, const void* bias);
  absl::Status RunGemm(const Gemm& gemm, const DeviceBuffer& weight, const void* x, void* y,
                       int bucket, cudaStream_t stream);
  EncoderBatchView View(const void* inputs, int bucket) const;

  const ModelConfig& config_;
  const std::shared_ptr<const enc::EncoderNetwork> net_;
  const int device_;
  CublasLtHandle handle_;
  DeviceBuffer workspace_;
  const ElementType type_;
  const cublasComputeType_t compute_;
  const std::vector<RaggedBucket> buckets_;
  std::vector<InputLayout> inputs_;
  std::vector<OutputLayout> outputs_;
  std::optional<CudaStream> upload_stream_;
  // For Summary(): GEMMs asked for a fused epilogue, and those that fell back to a plain GEMM
  // and our kernel; device bytes of the weights and of the scratch.
  int fused_epilogues_ = 0;
  int epilogue_fallbacks_ = 0;
  int own_kernel_gemms_ = 0;
  size_t weight_bytes_ = 0;
  size_t scratch_bytes_ = 0;

  // Weights.
  std::optional<DeviceBuffer> word_;
  std::optional<DeviceBuffer> position_;
  std::optional<DeviceBuffer> type_embeddings_;
  std::optional<DeviceBuffer> embedding_gamma_;
  std::optional<DeviceBuffer> embedding_beta_;
  std::vector<Layer> layers_;
  std::optional<DeviceBuffer> pooler_weight_;
  std::optional<DeviceBuffer> pooler_bias_;  // FP32
  std::optional<DeviceBuffer> classifier_dense_weight_;
  std::optional<DeviceBuffer> classifier_dense_bias_;  // FP32
  std::optional<DeviceBuffer> classifier_weight_;
  std::optional<DeviceBuffer> classifier_bias_;  // FP32
  std::optional<Gemm> pooler_gemm_;
  std::optional<Gemm> classifier_dense_gemm_;
  std::optional<Gemm> classifier_gemm_;

  // Scratch for the largest bucket, compute type (shared by the slots: one compute stream).
  std::optional<DeviceBuffer> x_;             // [T, H]
  std::optional<DeviceBuffer> qkv_buffer_;    // [T, 3H]
  std::optional<DeviceBuffer> context_;       // [T, H]
  std::optional<DeviceBuffer> projected_;     // [T, H]
  std::optional<DeviceBuffer> intermediate_;  // [T, I]
  std::optional<DeviceBuffer> first_;         // [S, H]
  std::optional<DeviceBuffer> head_a_;        // [S, H]
  std::optional<DeviceBuffer> head_b_;        // [S, H]
  std::optional<DeviceBuffer> logits_typed_;  // [S, labels]
};

}  // namespace sluice::engine::cuda::gpu_encoder
