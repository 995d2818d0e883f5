// `encoder` on the GPU (a ragged model, cuda_model.h's CudaRaggedModel): the network the CPU
// backend's loader read and checked (models::LoadedEncoderNetwork: no second read of the
// checkpoint), uploaded once per instance in the compute type, run on packed tokens.
//
// Per batch (one bucket of (sequences, tokens) capacity; the real counts and lengths come from the
// slot's input block on the device, so one captured graph serves every batch of the bucket):
//   embedding gather + LayerNorm (one kernel)
//   per layer: QKV GEMM (bias in the epilogue) -> varlen attention (our kernel, online softmax)
//              -> output GEMM -> bias + residual + LayerNorm (one kernel)
//              -> intermediate GEMM (bias + tanh-GELU or ReLU in the epilogue; exact erf GELU:
//                 plain GEMM + our bias + GELU kernel) -> output GEMM -> bias + residual + LN
//   last_hidden_state to FP32, pooling (+ L2 normalise), first tokens -> pooler dense + tanh,
//   classifier heads (GEMMs, bias/tanh in one small kernel each, logits in FP32).
// The GEMMs run over the bucket's whole token capacity (rows past the real tokens hold the
// embedding of token 0 and are never read back); attention and pooling read only real tokens.
//
// Precision: compute_type "checkpoint" (default) computes in the checkpoint's stored type
// (F16/BF16: tensor cores with FP32 accumulation; F32: FP32, on TF32 tensor cores with
// allow_tf32), or a forced fp32/fp16/bf16. LayerNorm, softmax, pooling and every bias the kernels
// add are FP32; the activations between kernels are stored in the compute type.
//
// Layout as cuda_mlp.cc: row-major x [rows, in] and W [out, in] are x^T and W^T to column-major
// cuBLASLt, so y^T (out x rows) = op(A) B with A = W^T transposed; bias runs along D's rows.

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/batch_answers.h"
#include "engine/cuda/cublaslt_handles.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/cuda_handles.h"
#include "engine/cuda/cuda_model.h"
#include "engine/cuda/element_upload.h"
#include "engine/cuda/kernels/dense_epilogue.cuh"
#include "engine/cuda/kernels/encoder_kernels.cuh"
#include "engine/models/encoder/encoder_batch.h"
#include "engine/models/encoder/encoder_model.h"
#include "engine/models/encoder/encoder_network.h"

namespace sluice::engine::cuda {
namespace {

namespace enc = models::encoder;

// cuBLASLt's recommended workspace for Hopper; one per instance, shared by its GEMMs (one stream).
constexpr size_t kWorkspaceBytes = 32u << 20;
constexpr size_t kAlignment = 256;

size_t AlignUp(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

// cuBLASLt has nothing for this GEMM: the heuristic found no algorithm (NotFound, from
// PickMatmulAlgo) or refused the combination of types, layouts and epilogue outright
// (CUBLAS_STATUS_NOT_SUPPORTED). Anything else is a real failure.
bool NoAlgorithm(const absl::Status& status) {
  return absl::IsNotFound(status) ||
         absl::StrContains(status.message(), "CUBLAS_STATUS_NOT_SUPPORTED");
}

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
constexpr size_t kAbsent = ~size_t{0};
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

absl::StatusOr<DeviceBuffer> CudaEncoder::UploadAs(const std::vector<float>& values,
                                                   ElementType type) {
  ASSIGN_OR_RETURN(DeviceBuffer result,
                   cuda::UploadAs(device_, values, type, upload_stream_->get()));
  weight_bytes_ += std::max<size_t>(values.size(), 1) * ElementBytes(type);
  return result;
}

absl::StatusOr<Gemm> CudaEncoder::MakeGemm(const std::string& name, int in, int out, bool per_token,
                                           cublasLtEpilogue_t epilogue, const void* bias) {
  auto build = [&](cublasLtEpilogue_t chosen) -> absl::StatusOr<Gemm> {
    ASSIGN_OR_RETURN(MatmulDesc desc, MatmulDesc::Create(compute_, CUDA_R_32F));
    const cublasOperation_t transpose = CUBLAS_OP_T;
    const cublasOperation_t no_transpose = CUBLAS_OP_N;
    RETURN_IF_ERROR(desc.Set(CUBLASLT_MATMUL_DESC_TRANSA, transpose));
    RETURN_IF_ERROR(desc.Set(CUBLASLT_MATMUL_DESC_TRANSB, no_transpose));
    RETURN_IF_ERROR(desc.Set(CUBLASLT_MATMUL_DESC_EPILOGUE, chosen));
    if (chosen != CUBLASLT_EPILOGUE_DEFAULT) {
      // The bias is of D's type (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE's default), D's rows long.
      RETURN_IF_ERROR(desc.Set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias));
    }
    ASSIGN_OR_RETURN(MatrixLayout a, MatrixLayout::Create(CudaType(type_), in, out, in));
    Gemm gemm{.desc = std::move(desc), .a = std::move(a)};
    gemm.fused = chosen != CUBLASLT_EPILOGUE_DEFAULT;
    for (const RaggedBucket& bucket : buckets_) {
      const uint64_t rows = per_token ? static_cast<uint64_t>(bucket.tokens)
                                      : static_cast<uint64_t>(bucket.sequences);
      ASSIGN_OR_RETURN(MatrixLayout b, MatrixLayout::Create(CudaType(type_), in, rows, in));
      ASSIGN_OR_RETURN(MatrixLayout d, MatrixLayout::Create(CudaType(type_), out, rows, out));
      absl::StatusOr<cublasLtMatmulAlgo_t> algo =
          PickMatmulAlgo(handle_.get(), gemm.desc, gemm.a, b, d, kWorkspaceBytes);
      if (!algo.ok()) {
        return absl::Status(algo.status().code(),
                            absl::StrCat("GEMM ", name, " (", out, "x", in, ") at ", rows,
                                         " rows: ", algo.status().message()));
      }
      gemm.b.push_back(std::move(b));
      gemm.d.push_back(std::move(d));
      gemm.algo.push_back(*algo);
    }
    return gemm;
  };
  if (epilogue != CUBLASLT_EPILOGUE_DEFAULT) ++fused_epilogues_;
  absl::StatusOr<Gemm> gemm = build(epilogue);
  if (NoAlgorithm(gemm.status()) && epilogue == CUBLASLT_EPILOGUE_DEFAULT && !per_token) {
    // A head GEMM (one row per sequence: pooler, classifier) cuBLASLt has no algorithm for at
    // some bucket (an odd label count in a 16-bit type, say): our small linear kernel computes
    // it, at a cost that is small next to the layers. Reported by Summary().
    ASSIGN_OR_RETURN(MatmulDesc desc, MatmulDesc::Create(compute_, CUDA_R_32F));
    ASSIGN_OR_RETURN(MatrixLayout a, MatrixLayout::Create(CudaType(type_), in, out, in));
    Gemm own{.desc = std::move(desc), .a = std::move(a)};
    own.own_kernel = true;
    own.in = in;
    own.out = out;
    ++own_kernel_gemms_;
    return own;
  }
  if (NoAlgorithm(gemm.status()) && epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    // No algorithm for the fused epilogue at some bucket (NotFound), or a type / epilogue pair
    // this cuBLASLt refuses outright (NOT_SUPPORTED from the heuristic; it depends on the GPU,
    // the version, the types and the shapes): a plain GEMM and our own bias (+ activation)
    // kernel compute the same layer. If the plain GEMM fails too, both reasons are reported.
    absl::StatusOr<Gemm> plain = build(CUBLASLT_EPILOGUE_DEFAULT);
    if (plain.ok()) {
      ++epilogue_fallbacks_;
      return plain;
    }
    return absl::Status(plain.status().code(),
                        absl::StrCat(plain.status().message(),
                                     " (with the fused epilogue: ", gemm.status().message(), ")"));
  }
  return gemm;
}

absl::Status CudaEncoder::RunGemm(const Gemm& gemm, const DeviceBuffer& weight, const void* x,
                                  void* y, int bucket, cudaStream_t stream) {
  if (gemm.own_kernel) {
    return LaunchSmallLinear(x, weight.get(), buckets_[bucket].sequences, gemm.in, gemm.out, type_,
                             y, stream);
  }
  const float alpha = 1.f;
  const float beta = 0.f;
  CUBLAS_RETURN_IF_ERROR(handle_.Matmul(gemm.desc.get(), &alpha, weight.get(), gemm.a.get(), x,
                                        gemm.b[bucket].get(), &beta, y, gemm.d[bucket].get(), y,
                                        gemm.d[bucket].get(), &gemm.algo[bucket], workspace_.get(),
                                        kWorkspaceBytes, stream));
  return absl::OkStatus();
}

absl::Status CudaEncoder::Upload() {
  const enc::EncoderNetwork& net = *net_;
  const int h = net.hidden;
  const int inter = net.intermediate;
  ASSIGN_OR_RETURN(word_, UploadAs(net.word_embeddings, type_));
  ASSIGN_OR_RETURN(position_, UploadAs(net.position_embeddings, type_));
  if (!net.type_embeddings.empty()) {
    ASSIGN_OR_RETURN(type_embeddings_, UploadAs(net.type_embeddings, type_));
  }
  ASSIGN_OR_RETURN(embedding_gamma_, UploadAs(net.embedding_norm_gamma, ElementType::kFp32));
  ASSIGN_OR_RETURN(embedding_beta_, UploadAs(net.embedding_norm_beta, ElementType::kFp32));
  cublasLtEpilogue_t up_epilogue = CUBLASLT_EPILOGUE_DEFAULT;  // exact GELU: our kernel
  if (net.activation == enc::HiddenActivation::kGeluTanh) up_epilogue = CUBLASLT_EPILOGUE_GELU_BIAS;
  if (net.activation == enc::HiddenActivation::kRelu) up_epilogue = CUBLASLT_EPILOGUE_RELU_BIAS;
  for (int l = 0; l < net.layers; ++l) {
    const enc::EncoderLayer& source = net.encoder_layers[l];
    ASSIGN_OR_RETURN(DeviceBuffer qkv_weight, UploadAs(source.qkv_weight, type_));
    ASSIGN_OR_RETURN(DeviceBuffer qkv_bias, UploadAs(source.qkv_bias, type_));
    ASSIGN_OR_RETURN(DeviceBuffer out_weight, UploadAs(source.attention_out_weight, type_));
    ASSIGN_OR_RETURN(DeviceBuffer out_bias,
                     UploadAs(source.attention_out_bias, ElementType::kFp32));
    ASSIGN_OR_RETURN(DeviceBuffer norm1_gamma,
                     UploadAs(source.attention_norm_gamma, ElementType::kFp32));
    ASSIGN_OR_RETURN(DeviceBuffer norm1_beta,
                     UploadAs(source.attention_norm_beta, ElementType::kFp32));
    ASSIGN_OR_RETURN(DeviceBuffer up_weight, UploadAs(source.intermediate_weight, type_));
    ASSIGN_OR_RETURN(DeviceBuffer up_bias, UploadAs(source.intermediate_bias, type_));
    ASSIGN_OR_RETURN(DeviceBuffer down_weight, UploadAs(source.output_weight, type_));
    ASSIGN_OR_RETURN(DeviceBuffer down_bias, UploadAs(source.output_bias, ElementType::kFp32));
    ASSIGN_OR_RETURN(DeviceBuffer norm2_gamma,
                     UploadAs(source.output_norm_gamma, ElementType::kFp32));
    ASSIGN_OR_RETURN(DeviceBuffer norm2_beta,
                     UploadAs(source.output_norm_beta, ElementType::kFp32));
    Layer layer{.qkv_weight = std::move(qkv_weight),
                .qkv_bias = std::move(qkv_bias),
                .out_weight = std::move(out_weight),
                .out_bias = std::move(out_bias),
                .norm1_gamma = std::move(norm1_gamma),
                .norm1_beta = std::move(norm1_beta),
                .up_weight = std::move(up_weight),
                .up_bias = std::move(up_bias),
                .down_weight = std::move(down_weight),
                .down_bias = std::move(down_bias),
                .norm2_gamma = std::move(norm2_gamma),
                .norm2_beta = std::move(norm2_beta)};
    const std::string p = absl::StrCat("layer ", l, " ");
    ASSIGN_OR_RETURN(layer.qkv, MakeGemm(p + "qkv", h, 3 * h, true, CUBLASLT_EPILOGUE_BIAS,
                                         layer.qkv_bias.get()));
    ASSIGN_OR_RETURN(layer.out, MakeGemm(p + "attention output", h, h, true,
                                         CUBLASLT_EPILOGUE_DEFAULT, nullptr));
    ASSIGN_OR_RETURN(
        layer.up, MakeGemm(p + "intermediate", h, inter, true, up_epilogue, layer.up_bias.get()));
    ASSIGN_OR_RETURN(layer.down,
                     MakeGemm(p + "output", inter, h, true, CUBLASLT_EPILOGUE_DEFAULT, nullptr));
    layers_.push_back(std::move(layer));
  }
  if (net.has_pooler()) {
    ASSIGN_OR_RETURN(pooler_weight_, UploadAs(net.pooler_weight, type_));
    ASSIGN_OR_RETURN(pooler_bias_, UploadAs(net.pooler_bias, ElementType::kFp32));
    ASSIGN_OR_RETURN(pooler_gemm_,
                     MakeGemm("pooler", h, h, false, CUBLASLT_EPILOGUE_DEFAULT, nullptr));
  }
  if (net.classifier == enc::ClassifierKind::kRoberta) {
    ASSIGN_OR_RETURN(classifier_dense_weight_, UploadAs(net.classifier_dense_weight, type_));
    ASSIGN_OR_RETURN(classifier_dense_bias_,
                     UploadAs(net.classifier_dense_bias, ElementType::kFp32));
    ASSIGN_OR_RETURN(classifier_dense_gemm_,
                     MakeGemm("classifier.dense", h, h, false, CUBLASLT_EPILOGUE_DEFAULT, nullptr));
  }
  if (net.classifier != enc::ClassifierKind::kNone) {
    ASSIGN_OR_RETURN(classifier_weight_, UploadAs(net.classifier_weight, type_));
    ASSIGN_OR_RETURN(classifier_bias_, UploadAs(net.classifier_bias, ElementType::kFp32));
    ASSIGN_OR_RETURN(classifier_gemm_, MakeGemm("classifier", h, net.num_labels, false,
                                                CUBLASLT_EPILOGUE_DEFAULT, nullptr));
  }
  return absl::OkStatus();
}

absl::Status CudaEncoder::Allocate() {
  const enc::EncoderNetwork& net = *net_;
  const size_t h = net.hidden;
  for (const RaggedBucket& bucket : buckets_) {
    const size_t tokens = static_cast<size_t>(bucket.tokens);
    const size_t sequences = static_cast<size_t>(bucket.sequences);
    InputLayout in;
    size_t at = 0;
    const auto take = [&at](size_t bytes) {
      const size_t offset = at;
      at = AlignUp(at + bytes);
      return offset;
    };
    in.counts = take(2 * sizeof(int32_t));
    in.cu_seqlens = take((sequences + 1) * sizeof(int32_t));
    in.token_ids = take(tokens * sizeof(int32_t));
    in.token_types = take(tokens * sizeof(int32_t));
    in.positions = take(tokens * sizeof(int32_t));
    in.attend = take(tokens * sizeof(int32_t));
    in.bytes = at;
    inputs_.push_back(in);
    OutputLayout out;
    at = 0;
    out.hidden = take(tokens * h * sizeof(float));
    out.embedding = take(sequences * net.embedding_size() * sizeof(float));
    if (net.has_pooler()) out.pooler = take(sequences * h * sizeof(float));
    if (net.classifier != enc::ClassifierKind::kNone) {
      out.logits = take(sequences * net.num_labels * sizeof(float));
    }
    out.bytes = at;
    outputs_.push_back(out);
  }
  const size_t tokens = static_cast<size_t>(buckets_.back().tokens);
  size_t sequences = 0;
  for (const RaggedBucket& bucket : buckets_) {
    sequences = std::max(sequences, static_cast<size_t>(bucket.sequences));
  }
  const size_t e = ElementBytes(type_);
  scratch_bytes_ =
      kWorkspaceBytes + (tokens * (6 * h + static_cast<size_t>(net.intermediate)) +
                         sequences * (3 * h + static_cast<size_t>(std::max(net.num_labels, 1)))) *
                            e;
  ASSIGN_OR_RETURN(x_, DeviceBuffer::Create(device_, tokens * h * e));
  ASSIGN_OR_RETURN(qkv_buffer_, DeviceBuffer::Create(device_, tokens * 3 * h * e));
  ASSIGN_OR_RETURN(context_, DeviceBuffer::Create(device_, tokens * h * e));
  ASSIGN_OR_RETURN(projected_, DeviceBuffer::Create(device_, tokens * h * e));
  ASSIGN_OR_RETURN(intermediate_, DeviceBuffer::Create(
                                      device_, tokens * static_cast<size_t>(net.intermediate) * e));
  ASSIGN_OR_RETURN(first_, DeviceBuffer::Create(device_, sequences * h * e));
  ASSIGN_OR_RETURN(head_a_, DeviceBuffer::Create(device_, sequences * h * e));
  ASSIGN_OR_RETURN(head_b_, DeviceBuffer::Create(device_, sequences * h * e));
  ASSIGN_OR_RETURN(logits_typed_,
                   DeviceBuffer::Create(
                       device_, sequences * static_cast<size_t>(std::max(net.num_labels, 1)) * e));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CudaEncoder>> CudaEncoder::Create(
    const ModelConfig& config, std::shared_ptr<const enc::EncoderNetwork> net,
    const enc::GpuOptions& options, int device) {
  const enc::EncoderNetwork& shape = *net;
  if (!SupportedHeadSize(shape.head_size())) {
    return absl::UnimplementedError(absl::StrCat("head size ", shape.head_size(), " (hidden ",
                                                 shape.hidden, " / ", shape.heads,
                                                 " heads): the GPU attention kernel runs 16, 32, "
                                                 "64 and 128"));
  }
  if (shape.hidden > kMaxEncoderHidden) {
    return absl::UnimplementedError(absl::StrCat(
        "hidden size ", shape.hidden, " is above the GPU kernels' limit of ", kMaxEncoderHidden));
  }
  if (shape.classifier == enc::ClassifierKind::kBert && !shape.has_pooler()) {
    return absl::UnimplementedError("a BERT classifier without pooler.dense");
  }
  ElementType type = ElementType::kFp32;
  switch (options.compute) {
    case enc::ComputeType::kCheckpoint:
      type = shape.stored_dtype == DataType::kFp16   ? ElementType::kFp16
             : shape.stored_dtype == DataType::kBf16 ? ElementType::kBf16
                                                     : ElementType::kFp32;
      break;
    case enc::ComputeType::kFp32:
      break;
    case enc::ComputeType::kFp16:
      type = ElementType::kFp16;
      break;
    case enc::ComputeType::kBf16:
      type = ElementType::kBf16;
      break;
  }
  const cublasComputeType_t compute = type == ElementType::kFp32 && options.allow_tf32
                                          ? CUBLAS_COMPUTE_32F_FAST_TF32
                                          : CUBLAS_COMPUTE_32F;
  std::vector<RaggedBucket> buckets;
  for (const enc::TokenBucket& bucket : options.buckets) {
    buckets.push_back({.sequences = bucket.sequences, .tokens = bucket.tokens});
  }
  ScopedDevice scoped(device);
  ASSIGN_OR_RETURN(CublasLtHandle handle, CublasLtHandle::Create());
  ASSIGN_OR_RETURN(DeviceBuffer workspace, DeviceBuffer::Create(device, kWorkspaceBytes));
  std::unique_ptr<CudaEncoder> encoder(new CudaEncoder(config, std::move(net), device,
                                                       std::move(handle), std::move(workspace),
                                                       type, compute, std::move(buckets)));
  ASSIGN_OR_RETURN(encoder->upload_stream_, CudaStream::Create(device));
  RETURN_IF_ERROR(encoder->Upload());
  RETURN_IF_ERROR(encoder->Allocate());
  encoder->upload_stream_.reset();
  return encoder;
}

EncoderBatchView CudaEncoder::View(const void* inputs, int bucket) const {
  const auto* base = static_cast<const std::byte*>(inputs);
  const InputLayout& in = inputs_[bucket];
  const auto at = [base](size_t offset) { return reinterpret_cast<const int32_t*>(base + offset); };
  return {.counts = at(in.counts),
          .cu_seqlens = at(in.cu_seqlens),
          .token_ids = at(in.token_ids),
          .token_types = at(in.token_types),
          .positions = at(in.positions),
          .attend = at(in.attend),
          .max_sequences = buckets_[bucket].sequences,
          .max_tokens = static_cast<int>(buckets_[bucket].tokens)};
}

absl::Status CudaEncoder::Enqueue(cudaStream_t stream, const void* inputs, void* outputs,
                                  int bucket) {
  if (bucket < 0 || bucket >= static_cast<int>(buckets_.size())) {
    return absl::InternalError(absl::StrCat("encoder on the GPU: no bucket ", bucket));
  }
  const enc::EncoderNetwork& net = *net_;
  const EncoderBatchView view = View(inputs, bucket);
  const int rows = view.max_tokens;
  const int sequences = view.max_sequences;
  const int h = net.hidden;
  const int longest =
      static_cast<int>(std::min<int64_t>(buckets_[bucket].tokens, net.max_sequence_length));
  const OutputLayout& out = outputs_[bucket];
  auto* out_base = static_cast<std::byte*>(outputs);
  const auto out_floats = [out_base](size_t offset) {
    return reinterpret_cast<float*>(out_base + offset);
  };
  void* x = x_->get();

  const EmbeddingTables tables{
      .word = word_->get(),
      .position = position_->get(),
      .type = type_embeddings_.has_value() ? type_embeddings_->get() : nullptr,
      .gamma = static_cast<const float*>(embedding_gamma_->get()),
      .beta = static_cast<const float*>(embedding_beta_->get()),
      .vocab = net.vocab_size,
      .positions = net.max_position_embeddings,
      .types = net.type_vocab_size};
  RETURN_IF_ERROR(LaunchEmbeddingLayerNorm(view, tables, net.layer_norm_eps, h, type_, x, stream));
  const DeviceActivation up_activation =
      net.activation == enc::HiddenActivation::kGeluErf    ? DeviceActivation::kGelu
      : net.activation == enc::HiddenActivation::kGeluTanh ? DeviceActivation::kGeluTanh
                                                           : DeviceActivation::kRelu;
  for (const Layer& layer : layers_) {
    RETURN_IF_ERROR(RunGemm(*layer.qkv, layer.qkv_weight, x, qkv_buffer_->get(), bucket, stream));
    if (!layer.qkv->fused) {
      RETURN_IF_ERROR(LaunchBiasActivation(qkv_buffer_->get(), layer.qkv_bias.get(), type_, rows,
                                           3 * h, DeviceActivation::kNone, stream));
    }
    RETURN_IF_ERROR(LaunchVarlenAttention(qkv_buffer_->get(), view, net.heads, net.head_size(),
                                          longest, type_, context_->get(), stream));
    RETURN_IF_ERROR(
        RunGemm(*layer.out, layer.out_weight, context_->get(), projected_->get(), bucket, stream));
    RETURN_IF_ERROR(LaunchBiasResidualLayerNorm(projected_->get(),
                                                static_cast<const float*>(layer.out_bias.get()), x,
                                                static_cast<const float*>(layer.norm1_gamma.get()),
                                                static_cast<const float*>(layer.norm1_beta.get()),
                                                net.layer_norm_eps, rows, h, type_, stream));
    RETURN_IF_ERROR(RunGemm(*layer.up, layer.up_weight, x, intermediate_->get(), bucket, stream));
    if (!layer.up->fused) {
      RETURN_IF_ERROR(LaunchBiasActivation(intermediate_->get(), layer.up_bias.get(), type_, rows,
                                           net.intermediate, up_activation, stream));
    }
    RETURN_IF_ERROR(RunGemm(*layer.down, layer.down_weight, intermediate_->get(), projected_->get(),
                            bucket, stream));
    RETURN_IF_ERROR(LaunchBiasResidualLayerNorm(projected_->get(),
                                                static_cast<const float*>(layer.down_bias.get()), x,
                                                static_cast<const float*>(layer.norm2_gamma.get()),
                                                static_cast<const float*>(layer.norm2_beta.get()),
                                                net.layer_norm_eps, rows, h, type_, stream));
  }
  // last_hidden_state in FP32, every row of the bucket (only the real ones are copied back).
  RETURN_IF_ERROR(LaunchHeadEpilogue(x, nullptr, rows, h, DeviceActivation::kNone, type_,
                                     out_floats(out.hidden), nullptr, stream));
  const PoolingFlags pooling{.cls = net.pooling.cls,
                             .max = net.pooling.max,
                             .mean = net.pooling.mean,
                             .mean_sqrt_len = net.pooling.mean_sqrt_len,
                             .normalize = net.normalize};
  RETURN_IF_ERROR(
      LaunchPoolEmbedding(x, view, h, pooling, type_, out_floats(out.embedding), stream));
  if (!net.has_pooler() && net.classifier == enc::ClassifierKind::kNone) return absl::OkStatus();
  RETURN_IF_ERROR(LaunchGatherFirstTokens(x, view, h, type_, first_->get(), stream));
  if (net.has_pooler()) {
    // pooler_output = tanh(first x W^T + b): FP32 to the output, compute type to head_b_ (the
    // BERT classifier's input).
    RETURN_IF_ERROR(
        RunGemm(*pooler_gemm_, *pooler_weight_, first_->get(), head_a_->get(), bucket, stream));
    RETURN_IF_ERROR(LaunchHeadEpilogue(
        head_a_->get(), static_cast<const float*>(pooler_bias_->get()), sequences, h,
        DeviceActivation::kTanh, type_, out_floats(out.pooler), head_b_->get(), stream));
  }
  if (net.classifier == enc::ClassifierKind::kRoberta) {
    // RobertaClassificationHead: dense + tanh on the first token, into head_b_.
    RETURN_IF_ERROR(RunGemm(*classifier_dense_gemm_, *classifier_dense_weight_, first_->get(),
                            head_a_->get(), bucket, stream));
    RETURN_IF_ERROR(LaunchHeadEpilogue(
        head_a_->get(), static_cast<const float*>(classifier_dense_bias_->get()), sequences, h,
        DeviceActivation::kTanh, type_, nullptr, head_b_->get(), stream));
  }
  if (net.classifier != enc::ClassifierKind::kNone) {
    RETURN_IF_ERROR(RunGemm(*classifier_gemm_, *classifier_weight_, head_b_->get(),
                            logits_typed_->get(), bucket, stream));
    RETURN_IF_ERROR(LaunchHeadEpilogue(
        logits_typed_->get(), static_cast<const float*>(classifier_bias_->get()), sequences,
        net.num_labels, DeviceActivation::kNone, type_, out_floats(out.logits), nullptr, stream));
  }
  return absl::OkStatus();
}

std::string CudaEncoder::Summary() const {
  std::string buckets;
  for (const RaggedBucket& bucket : buckets_) {
    absl::StrAppend(&buckets, buckets.empty() ? "" : ",", bucket.sequences, "x", bucket.tokens);
  }
  return absl::StrCat(
      "encoder on cuda:", device_, ": ", ElementTypeName(type_), " activations",
      compute_ == CUBLAS_COMPUTE_32F_FAST_TF32 ? ", TF32 GEMMs" : "", ", buckets ", buckets, ", ",
      fused_epilogues_ - epilogue_fallbacks_, " of ", fused_epilogues_,
      " GEMM epilogues fused (the others: plain GEMM + our kernel), ", own_kernel_gemms_,
      " head GEMMs on our own kernel (cuBLASLt offered none), weights ", weight_bytes_ >> 20,
      " MiB, scratch ", scratch_bytes_ >> 20, " MiB");
}

absl::Status CudaEncoder::Pack(const Batch& batch, RaggedBatchState& base, void* staging) {
  auto& state = static_cast<EncoderBatchState&>(base);
  const enc::EncoderNetwork& net = *net_;
  state.packed.Clear();
  state.request_tokens.clear();
  state.shapes.clear();
  state.wanted.clear();
  state.want_hidden = state.want_embedding = state.want_pooler = state.want_logits = false;
  for (const auto& request : batch.requests) {
    for (const TensorView& input : request->inputs) {
      // The engine refuses device inputs to ragged models at submit; one here would be read as
      // host memory.
      if (input.on_device()) {
        return absl::InvalidArgumentError(absl::StrCat("model '", config_.name, "': input '",
                                                       input.name, "' is in device memory"));
      }
    }
    const enc::RequestTokens tokens = enc::FindRequestTokens(request->inputs);
    ASSIGN_OR_RETURN(const enc::RequestShape shape, enc::PackRequest(net, tokens, state.packed));
    std::vector<bool> wanted = enc::WantedOutputs(config_, request->requested_outputs);
    for (size_t o = 0; o < config_.outputs.size(); ++o) {
      if (!wanted[o]) continue;
      const std::string& name = config_.outputs[o].name;
      state.want_hidden |= name == enc::kLastHiddenStateName;
      state.want_embedding |= name == enc::kEmbeddingName;
      state.want_pooler |= name == enc::kPoolerOutputName;
      state.want_logits |= name == enc::kLogitsName;
    }
    state.request_tokens.push_back(tokens);
    state.shapes.push_back(shape);
    state.wanted.push_back(std::move(wanted));
  }
  state.sequences = state.packed.sequences();
  state.tokens = state.packed.tokens();
  int chosen = -1;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (state.sequences <= buckets_[b].sequences && state.tokens <= buckets_[b].tokens) {
      chosen = static_cast<int>(b);
      break;
    }
  }
  if (chosen < 0) {
    // Only a lone request above the token budget gets here (the batcher lets it through alone).
    const RaggedBucket& largest = buckets_.back();
    return absl::InvalidArgumentError(
        absl::StrCat("model '", config_.name, "': a batch of ", state.sequences, " sequences and ",
                     state.tokens, " tokens does not fit the largest CUDA bucket (",
                     largest.sequences, " sequences, ", largest.tokens,
                     " tokens); on the GPU a request may carry at most that many tokens "
                     "(parameters max_batch_tokens and ",
                     enc::kCudaBucketsParam, ")"));
  }
  state.bucket = chosen;
  const RaggedBucket& bucket = buckets_[chosen];
  const InputLayout& in = inputs_[chosen];
  auto* base_bytes = static_cast<std::byte*>(staging);
  const auto ints = [base_bytes](size_t offset) {
    return reinterpret_cast<int32_t*>(base_bytes + offset);
  };
  ints(in.counts)[0] = state.sequences;
  ints(in.counts)[1] = static_cast<int32_t>(state.tokens);
  int32_t* cu = ints(in.cu_seqlens);
  for (int s = 0; s <= bucket.sequences; ++s) {
    // Past the real sequences: empty ones at the end (attention and pooling skip them).
    cu[s] = static_cast<int32_t>(state.packed.offsets[std::min(s, state.sequences)]);
  }
  const size_t real = static_cast<size_t>(state.tokens) * sizeof(int32_t);
  const size_t pad = static_cast<size_t>(bucket.tokens - state.tokens) * sizeof(int32_t);
  const auto fill = [&](size_t offset, const int32_t* values) {
    if (real > 0) std::memcpy(base_bytes + offset, values, real);
    std::memset(base_bytes + offset + real, 0, pad);
  };
  fill(in.token_ids, state.packed.token_ids.data());
  fill(in.token_types, state.packed.token_types.data());
  fill(in.positions, state.packed.positions.data());
  int32_t* attend = ints(in.attend);
  for (int64_t t = 0; t < state.tokens; ++t) attend[t] = state.packed.attend[t];
  std::memset(attend + state.tokens, 0, pad);
  return absl::OkStatus();
}

void CudaEncoder::PackEmpty(int bucket, RaggedBatchState& base, void* staging) {
  auto& state = static_cast<EncoderBatchState&>(base);
  state.packed.Clear();
  state.request_tokens.clear();
  state.shapes.clear();
  state.wanted.clear();
  state.sequences = 0;
  state.tokens = 0;
  state.bucket = bucket;
  // Zero counts, every cu_seqlens entry 0 (all sequences empty), token id 0 everywhere.
  std::memset(staging, 0, inputs_[bucket].bytes);
}

void CudaEncoder::OutputRanges(const RaggedBatchState& base,
                               std::vector<BlockRange>& ranges) const {
  const auto& state = static_cast<const EncoderBatchState&>(base);
  const enc::EncoderNetwork& net = *net_;
  const OutputLayout& out = outputs_[state.bucket];
  const size_t sequences = static_cast<size_t>(state.sequences);
  ranges.clear();
  if (state.want_hidden) {
    ranges.push_back({out.hidden, static_cast<size_t>(state.tokens) * net.hidden * 4});
  }
  if (state.want_embedding) {
    ranges.push_back({out.embedding, sequences * net.embedding_size() * 4});
  }
  if (state.want_pooler && out.pooler != kAbsent) {
    ranges.push_back({out.pooler, sequences * net.hidden * 4});
  }
  if (state.want_logits && out.logits != kAbsent) {
    ranges.push_back({out.logits, sequences * net.num_labels * 4});
  }
  // Empty ranges (a batch that wants none of these, e.g. only input_ids) copy nothing.
  std::erase_if(ranges, [](const BlockRange& range) { return range.bytes == 0; });
}

BlockRange CudaEncoder::NonFiniteRange(const RaggedBatchState& base) const {
  // The embeddings: every real sequence's, always computed, a few floats each. A NaN or inf in
  // the hidden states reaches them through the mean (the max and CLS modes may miss one).
  const auto& state = static_cast<const EncoderBatchState&>(base);
  return {outputs_[state.bucket].embedding,
          static_cast<size_t>(state.sequences) * net_->embedding_size() * 4};
}

absl::Status CudaEncoder::Scatter(const Batch& batch, const RaggedBatchState& base,
                                  const void* outputs,
                                  std::vector<InferenceResponse>& responses) const {
  const auto& state = static_cast<const EncoderBatchState&>(base);
  if (state.shapes.size() != batch.requests.size()) {
    return absl::InternalError(absl::StrCat("model '", config_.name, "': the slot packed ",
                                            state.shapes.size(), " requests, the batch has ",
                                            batch.requests.size()));
  }
  const auto* base_bytes = static_cast<const std::byte*>(outputs);
  const OutputLayout& out = outputs_[state.bucket];
  const auto floats = [base_bytes](size_t offset) {
    return offset == kAbsent ? nullptr : reinterpret_cast<const float*>(base_bytes + offset);
  };
  const enc::PackedResults results{.hidden = floats(out.hidden),
                                   .embedding = floats(out.embedding),
                                   .pooler = floats(out.pooler),
                                   .logits = floats(out.logits)};
  responses.resize(batch.requests.size());
  int first_sequence = 0;
  for (size_t r = 0; r < batch.requests.size(); ++r) {
    const InferenceRequest& request = *batch.requests[r];
    std::vector<Tensor> tensors =
        enc::RequestOutputs(config_, *net_, state.packed, state.request_tokens[r], state.shapes[r],
                            first_sequence, state.wanted[r], results);
    for (size_t index : SelectedOutputs(request, config_)) {
      Tensor& tensor = tensors[index];
      if (tensor.name != config_.outputs[index].name) {
        return absl::InternalError(absl::StrCat("model '", config_.name, "': output '",
                                                config_.outputs[index].name,
                                                "' was not computed for a request that wants it"));
      }
      responses[r].outputs.push_back(std::move(tensor));
    }
    first_sequence += static_cast<int>(state.shapes[r].rows);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaRaggedModel>> CreateCudaRaggedModel(const Model& model,
                                                                       int device) {
  const ModelConfig& config = model.config();
  std::shared_ptr<const enc::EncoderNetwork> net = models::LoadedEncoderNetwork(model);
  if (net == nullptr) {
    return absl::UnimplementedError(
        absl::StrCat("backend '", config.backend, "' has no ragged CUDA implementation"));
  }
  const int64_t max_batch_tokens = config.ragged_batching.has_value()
                                       ? config.ragged_batching->max_batch_tokens
                                       : models::kDefaultEncoderMaxBatchTokens;
  ASSIGN_OR_RETURN(const enc::GpuOptions options, enc::ParseGpuOptions(config, max_batch_tokens));
  absl::StatusOr<std::unique_ptr<CudaEncoder>> encoder =
      CudaEncoder::Create(config, std::move(net), options, device);
  if (!encoder.ok()) {
    return absl::Status(encoder.status().code(),
                        absl::StrCat("model '", config.name, "' (encoder on cuda:", device,
                                     "): ", encoder.status().message()));
  }
  return std::unique_ptr<CudaRaggedModel>(*std::move(encoder));
}

}  // namespace sluice::engine::cuda
