#pragma once

// Deterministic BERT checkpoints in Hugging Face's layout, for the bundled `embedder` model
// (models/embedder; a test regenerates it and compares the bytes) and for benchmarks that need a
// BERT-base-shape model without downloading one. Writes into a folder:
//   config.json                BertModel's config (model_type bert, hidden_act gelu)
//   model.safetensors          BertModel's state_dict names (no prefix), with pooler.dense
//   modules.json, 1_Pooling/config.json, sentence_bert_config.json
//                              a sentence-transformers head: mean pooling, then Normalize
// Values come from splitmix64 as tools/mlp_generator.h draws them: uniform in [-scale, scale)
// for every matrix and embedding, LayerNorm weights 1 + uniform(-0.1, 0.1) and biases uniform
// (-0.1, 0.1), in the file order of the names. The same options give the same bytes everywhere.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "engine/core/data_type.h"

namespace sluice::tools {

struct EncoderCheckpointOptions {
  int64_t vocab_size = 4096;
  int64_t hidden_size = 64;
  int64_t layers = 2;
  int64_t heads = 4;
  int64_t intermediate_size = 256;
  int64_t max_position_embeddings = 128;
  int64_t type_vocab_size = 2;
  uint64_t seed = 1;
  // Half-width of the uniform draw of weights and embeddings.
  double scale = 0.05;
  // kFp32, kFp16 or kBf16.
  engine::DataType dtype = engine::DataType::kFp32;
  // Whether to write the sentence-transformers files (mean pooling + Normalize).
  bool sentence_transformers = true;
};

// Writes the checkpoint into `folder` (created if missing; files replaced). InvalidArgument for
// bad options or a folder that cannot be written.
absl::Status WriteEncoderCheckpoint(const EncoderCheckpointOptions& options,
                                    const std::string& folder);

}  // namespace sluice::tools
