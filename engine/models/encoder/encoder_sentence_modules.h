#pragma once

// sentence-transformers' modules after the Transformer, read from a checkpoint folder as
// SentenceTransformer.save() writes them, and run as sentence-transformers runs them:
//
//   modules.json                       the pipeline, in order: Transformer, Pooling, Dense...,
//                                      Normalize (Dropout is the identity at inference); any other
//                                      module is refused by name, so no answer silently differs
//   <Pooling>/config.json              pooling modes: cls, max, mean, mean_sqrt_len, weightedmean,
//                                      lasttoken (concatenated in that order); include_prompt
//                                      false (pooling that skips the prompt's tokens) is refused
//   <Dense>/config.json                in_features, out_features, bias, activation_function
//   <Dense>/model.safetensors          linear.weight [out, in], linear.bias [out]
//   config_sentence_transformers.json  prompts {name: text} and default_prompt_name: read by
//                                      text::ReadSentencePrompts (text/sentence_prompts.h)
//
// Without modules.json (a plain transformers folder) the embedding is the first token's hidden
// state (CLS), unnormalised.

#include <filesystem>
#include <string>

#include "absl/status/statusor.h"
#include "engine/models/encoder/encoder_network.h"

namespace sluice::engine::models::encoder {

// Fills net.pooling, net.dense (sizes, activation, folder; not the weights) and net.normalize from
// modules.json and the modules' configs. REQUIRES net.hidden (config.json read). InvalidArgument
// naming the file and field.
absl::Status ReadSentenceModules(const std::filesystem::path& folder, EncoderNetwork& net);

// Reads the weights of every Dense module ReadSentenceModules described, checked against its
// config ("tensor 'linear.weight' has shape [8,32], 2_Dense/config.json needs [16,32]").
absl::Status ReadDenseWeights(const std::filesystem::path& folder, EncoderNetwork& net);

// "torch.nn.modules.activation.Tanh" -> kTanh ...; InvalidArgument listing the supported ones.
absl::StatusOr<DenseActivation> ParseDenseActivation(const std::string& name);

}  // namespace sluice::engine::models::encoder
