#pragma once

// `encoder`: a BERT-family transformer encoder (bert, roberta, xlm-roberta) served straight from a
// Hugging Face checkpoint folder in the version directory (encoder_network.h lists the files).
//
// Config (config.pbtxt): `name`, `backend: "encoder"` and `max_batch_size` (> 0) suffice; inputs
// and outputs are completed from the checkpoint (CompleteEncoderConfig) and, where declared,
// checked against it.
//   inputs   input_ids       INT64 [-1] (INT32 accepted too)    token ids, < vocab_size
//            attention_mask  INT64 [-1], optional (all ones)    0/1; trailing zeros are padding
//            token_type_ids  INT64 [-1], optional (zeros)       only for models with token types
//   outputs  last_hidden_state [-1, H]  FP32   the request's own sequence length
//            embedding         [H x pooling modes] FP32 (1_Pooling/config.json; CLS without it;
//                              L2-normalised when modules.json lists Normalize, or parameter)
//            pooler_output     [H] FP32, where the checkpoint has pooler.dense
//            logits            [num_labels] FP32, for sequence-classification checkpoints
//   Each request is [batch, seq]; every input of a request has the same shape. Requests of
//   different lengths share a batch (ragged_batching, bounded by max_batch_tokens real tokens);
//   the CPU computes on packed tokens (encoder_forward.h).
//   parameters (optional; any other key is refused by name):
//     max_batch_tokens  real tokens per batch at most (default kDefaultMaxBatchTokens)
//     normalize         "true"/"false": L2-normalise `embedding` (default: as modules.json says)
//     compute_type, allow_tf32, cuda_buckets: the GPU's precision and CUDA graph buckets
//                       (encoder_batch.h ParseGpuOptions; checked on every backend)
//
// Rows of last_hidden_state at trailing padding (mask 0 after a sequence's last 1) are zeros: they
// are not computed (Hugging Face computes them, but they carry no meaning).

#include <memory>

#include "absl/status/statusor.h"
#include "engine/core/backend.h"

namespace sluice::engine::models {

// The token budget of a batch when the config sets no max_batch_tokens: 64 sequences of 128
// tokens. The scratch of an instance grows with the tokens of the largest batch it runs.
inline constexpr int64_t kDefaultEncoderMaxBatchTokens = 8192;

// The config with inputs, outputs and ragged_batching filled in from the checkpoint in
// spec.version_path, or InvalidArgument naming the model, the tensor and the mismatch when the
// config declares something the checkpoint does not give ("output 'logits' declared, but the
// checkpoint has no classification head").
absl::StatusOr<ModelConfig> CompleteEncoderConfig(const ModelSpec& spec);

// Loads the checkpoint (spec.config already completed). NotFound without config.json /
// model.safetensors; InvalidArgument for a bad config or a broken checkpoint, the message naming
// the model, version, file and tensor with both shapes.
absl::StatusOr<std::unique_ptr<Model>> CreateEncoderModel(const ModelSpec& spec);

namespace encoder {
struct EncoderNetwork;
}
// The network `model` loaded when it is an encoder (CreateEncoderModel's), else null: a GPU
// backend uploads these weights instead of reading the checkpoint again.
std::shared_ptr<const encoder::EncoderNetwork> LoadedEncoderNetwork(const Model& model);

}  // namespace sluice::engine::models
