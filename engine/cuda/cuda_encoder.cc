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

#include "engine/cuda/cuda_encoder.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/cuda/cublaslt_algo.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/kernels/dense_epilogue.cuh"
#include "engine/models/encoder/encoder_model.h"

namespace sluice::engine::cuda {
namespace gpu_encoder {
namespace {

// cuBLASLt's recommended workspace for Hopper; one per instance, shared by its GEMMs (one stream).
constexpr size_t kWorkspaceBytes = 32u << 20;
constexpr size_t kAlignment = 256;

size_t AlignUp(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

}  // namespace

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
  if (NoMatmulAlgorithm(gemm.status()) && epilogue == CUBLASLT_EPILOGUE_DEFAULT && !per_token) {
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
  if (FallBackToPlainGemm(gemm.status(), epilogue)) {
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
  ASSIGN_OR_RETURN(word_, UploadAs(net.word_embeddings.Widened(), type_));
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
  // First: the architecture is the reason, whatever else (head size, pooling) would also be.
  if (!shape.layer_plans.empty() && shape.layer_plans.front().causal) {
    return absl::UnimplementedError(
        "Qwen3's decoder layers (causal attention, RMSNorm, grouped-query attention, rotary "
        "embeddings, SwiGLU): the GPU kernels run BERT's post-norm layers");
  }
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
  if (shape.pooling.weightedmean || shape.pooling.lasttoken || !shape.dense.empty() ||
      shape.truncate_dim > 0) {
    return absl::UnimplementedError(
        "sentence-transformers' weightedmean or lasttoken pooling, a Dense module or the "
        "`dimensions` parameter: the GPU pools cls, max, mean and mean_sqrt_len, untruncated");
  }
  if (!shape.layer_plans.empty() && shape.layer_plans.front().pre_norm) {
    return absl::UnimplementedError(
        "ModernBERT's layers (pre-norm, rotary embeddings, GeGLU, sliding-window attention): the "
        "GPU kernels run BERT's post-norm layers");
  }
  if (!shape.relative_position_bias.empty()) {
    return absl::UnimplementedError(
        "MPNet's relative position bias: the GPU attention kernel adds no bias");
  }
  if (shape.classifier == enc::ClassifierKind::kDistilbert) {
    return absl::UnimplementedError(
        "DistilBERT's classification head (pre_classifier + ReLU): the GPU runs BERT's and "
        "RoBERTa's heads");
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
  // Which path computed the intermediate activation: the tests' tolerances depend on it
  // (cuBLASLt's GELU epilogue evaluates the tanh form with its own fast tanh).
  const enc::HiddenActivation activation = net_->activation;
  const char* activation_name = activation == enc::HiddenActivation::kGeluErf    ? "exact GELU"
                                : activation == enc::HiddenActivation::kGeluTanh ? "tanh GELU"
                                                                                 : "ReLU";
  const bool up_fused =
      !layers_.empty() && layers_.front().up.has_value() && layers_.front().up->fused;
  return absl::StrCat(
      "encoder on cuda:", device_, ": ", ElementTypeName(type_), " activations",
      compute_ == CUBLAS_COMPUTE_32F_FAST_TF32 ? ", TF32 GEMMs" : "", ", buckets ", buckets, ", ",
      fused_epilogues_ - epilogue_fallbacks_, " of ", fused_epilogues_,
      " GEMM epilogues fused (the others: plain GEMM + our kernel), intermediate ", activation_name,
      up_fused ? " in cuBLASLt's epilogue" : " by our kernel", ", ", own_kernel_gemms_,
      " head GEMMs on our own kernel (cuBLASLt offered none), weights ", weight_bytes_ >> 20,
      " MiB, scratch ", scratch_bytes_ >> 20, " MiB");
}

}  // namespace gpu_encoder

using gpu_encoder::CudaEncoder;
namespace enc = models::encoder;

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
