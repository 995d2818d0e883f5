#include "engine/models/encoder/encoder_network.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/check.h"
#include "common/status_macros.h"
#include "common/wire/float16.h"
#include "engine/models/encoder/encoder_arch.h"
#include "engine/models/encoder/encoder_config_json.h"
#include "engine/models/encoder/encoder_modernbert.h"
#include "engine/models/encoder/encoder_qwen3.h"
#include "engine/models/encoder/encoder_sentence_modules.h"
#include "engine/models/safetensors.h"
#include "nlohmann/json.hpp"

namespace sluice::engine::models::encoder {
namespace {

namespace fs = std::filesystem;

// Sizes a config.json may give (a bound on what a hostile file makes the load allocate; real
// models are far below: BERT-large has hidden 1024, 24 layers, intermediate 4096).
constexpr int64_t kMaxDimension = 1 << 20;
constexpr int64_t kMaxLayers = 512;
// MPNetEncoder.compute_position_bias calls relative_position_bucket with num_buckets=32 and
// max_distance=128, whatever config.json says.
constexpr int kRelativeBuckets = 32;
constexpr int kRelativeMaxDistance = 128;

// MPNetEncoder.relative_position_bucket of key - query `relative`, in float32 as torch computes
// it (the log branch truncates a float32 product; at its integer points, distances 16, 32 and 64,
// the float32 values are exact).
int RelativePositionBucket(int relative) {
  const int half = kRelativeBuckets / 2;  // 16: one half for each direction
  int n = -relative;
  int bucket = n < 0 ? half : 0;
  n = n < 0 ? -n : n;
  const int max_exact = half / 2;  // 8
  if (n < max_exact) return bucket + n;
  const float scaled =
      std::log(static_cast<float>(n) / static_cast<float>(max_exact)) /
      static_cast<float>(std::log(static_cast<double>(kRelativeMaxDistance) / max_exact)) *
      static_cast<float>(half - max_exact);
  return bucket + std::min(max_exact + static_cast<int>(scaled), half - 1);
}

absl::Status ReadConfigJson(const fs::path& folder, EncoderNetwork& net) {
  const fs::path path = folder / "config.json";
  ASSIGN_OR_RETURN(Json json, ReadJsonFile(path));
  ASSIGN_OR_RETURN(net.model_type, StringField(json, path, "model_type", std::nullopt));
  const ArchSpec* spec = FindArch(net.model_type);
  if (spec == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", path.string(), "': model_type '", net.model_type,
        "' is not supported by the encoder backend (supported: ", SupportedModelTypes(), ")"));
  }
  net.arch = spec->arch;
  ASSIGN_OR_RETURN(const std::string position_type,
                   StringField(json, path, "position_embedding_type", "absolute"));
  if (position_type != "absolute") {
    return absl::InvalidArgumentError(absl::StrCat("'", path.string(),
                                                   "': position_embedding_type '", position_type,
                                                   "' is not supported (only \"absolute\")"));
  }
  if (BoolField(json, "sinusoidal_pos_embds")) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path.string(),
                     "': \"sinusoidal_pos_embds\": true is not supported (only learned position "
                     "embeddings)"));
  }
  ASSIGN_OR_RETURN(int64_t hidden,
                   IntField(json, path, spec->hidden_key, std::nullopt, 1, kMaxDimension));
  ASSIGN_OR_RETURN(int64_t layers,
                   IntField(json, path, spec->layers_key, std::nullopt, 1, kMaxLayers));
  ASSIGN_OR_RETURN(int64_t heads,
                   IntField(json, path, spec->heads_key, std::nullopt, 1, kMaxDimension));
  ASSIGN_OR_RETURN(int64_t intermediate,
                   IntField(json, path, spec->intermediate_key, std::nullopt, 1, kMaxDimension));
  ASSIGN_OR_RETURN(int64_t vocab,
                   IntField(json, path, "vocab_size", std::nullopt, 1, int64_t{1} << 24));
  ASSIGN_OR_RETURN(int64_t positions,
                   IntField(json, path, "max_position_embeddings", std::nullopt, 1, kMaxDimension));
  int64_t types = 0;
  if (spec->token_types) {
    ASSIGN_OR_RETURN(types, IntField(json, path, "type_vocab_size", 2, 0, 1 << 16));
  }
  ASSIGN_OR_RETURN(int64_t pad, IntField(json, path, "pad_token_id", 0, 0, vocab - 1));
  if (spec->fixed_padding_idx >= 0) pad = spec->fixed_padding_idx;
  if (spec->relative_attention_bias) {
    ASSIGN_OR_RETURN(const int64_t buckets,
                     IntField(json, path, "relative_attention_num_buckets", 32, 1, kMaxDimension));
    if (buckets < kRelativeBuckets) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", path.string(), "': relative_attention_num_buckets ", buckets, " is under the ",
          kRelativeBuckets, " buckets MPNetEncoder computes (compute_position_bias)"));
    }
    net.relative_attention_buckets = static_cast<int>(buckets);
  }
  if (!spec->qwen3 && hidden % heads != 0) {  // Qwen3's head_dim is its own field
    return absl::InvalidArgumentError(absl::StrCat("'", path.string(), "': ", spec->hidden_key, " ",
                                                   hidden, " is not a multiple of ",
                                                   spec->heads_key, " ", heads));
  }
  ASSIGN_OR_RETURN(net.activation_name,
                   StringField(json, path, spec->activation_key, spec->qwen3 ? "silu" : "gelu"));
  absl::StatusOr<HiddenActivation> activation = spec->qwen3
                                                    ? Qwen3Activation(net.activation_name)
                                                    : ParseHiddenActivation(net.activation_name);
  if (!activation.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", path.string(), "': \"", spec->activation_key, "\": ", activation.status().message()));
  }
  net.activation = *activation;
  // DistilBERT's LayerNorms are nn.LayerNorm(dim, eps=1e-12) whatever config.json says.
  net.layer_norm_eps = spec->default_layer_norm_eps;
  auto eps = spec->layer_norm_eps_key == nullptr ? json.end() : json.find(spec->layer_norm_eps_key);
  if (eps != json.end()) {
    if (!eps->is_number() || eps->get<double>() <= 0 || eps->get<double>() > 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", path.string(), "': \"", spec->layer_norm_eps_key, "\" must be a number in (0, 1]"));
    }
    net.layer_norm_eps = static_cast<float>(eps->get<double>());
  }
  net.hidden = static_cast<int>(hidden);
  net.layers = static_cast<int>(layers);
  net.heads = static_cast<int>(heads);
  net.intermediate = static_cast<int>(intermediate);
  net.vocab_size = static_cast<int>(vocab);
  net.max_position_embeddings = static_cast<int>(positions);
  net.type_vocab_size = static_cast<int>(types);
  net.pad_token_id = static_cast<int>(pad);
  net.layer_plans.assign(static_cast<size_t>(net.layers), LayerPlan{});
  if (spec->modernbert) RETURN_IF_ERROR(ReadModernBertConfig(json, path.string(), net));
  if (spec->qwen3) RETURN_IF_ERROR(ReadQwen3Config(json, path.string(), net));
  if (spec->positions_after_pad) {
    net.position_offset = net.pad_token_id + 1;
    net.max_sequence_length = net.max_position_embeddings - net.position_offset;
    if (net.max_sequence_length < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", path.string(), "': max_position_embeddings ", positions,
          " leaves no position after pad_token_id ", pad, " (RoBERTa positions start at pad + 1)"));
    }
  } else {
    net.position_offset = 0;
    net.max_sequence_length = net.max_position_embeddings;
  }
  auto id2label = json.find("id2label");
  if (id2label != json.end() && id2label->is_object()) {
    std::map<int64_t, std::string> by_index;
    for (const auto& [key, value] : id2label->items()) {
      char* end = nullptr;
      const long long index = std::strtoll(key.c_str(), &end, 10);
      if (end == key.c_str() || *end != '\0' || index < 0 || index >= kMaxDimension ||
          !value.is_string()) {
        return absl::InvalidArgumentError(absl::StrCat("'", path.string(), "': id2label entry '",
                                                       key, "' is not index -> label name"));
      }
      by_index[index] = value.get<std::string>();
    }
    if (!by_index.empty() &&
        by_index.rbegin()->first + 1 == static_cast<int64_t>(by_index.size())) {
      for (auto& [index, label] : by_index) net.labels.push_back(std::move(label));
    }
  }
  // sentence-transformers' CrossEncoder stores its activation as a class path
  // ("torch.nn.modules.activation.Sigmoid"); only the three it uses for scores are understood.
  net.explicit_score_activation.reset();
  if (auto st = json.find("sentence_transformers"); st != json.end() && st->is_object()) {
    if (auto fn = st->find("activation_fn"); fn != st->end() && fn->is_string()) {
      const std::string name = fn->get<std::string>();
      if (absl::EndsWith(name, "Sigmoid")) {
        net.explicit_score_activation = ScoreActivation::kSigmoid;
      } else if (absl::EndsWith(name, "Softmax")) {
        net.explicit_score_activation = ScoreActivation::kSoftmax;
      } else if (absl::EndsWith(name, "Identity")) {
        net.explicit_score_activation = ScoreActivation::kIdentity;
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("'", path.string(), "': sentence_transformers.activation_fn '", name,
                         "' is not supported (Sigmoid, Softmax or Identity)"));
      }
    }
  }
  return absl::OkStatus();
}

// The weights file's tensors, with the task-head prefix ("bert." / "roberta.") stripped from the
// encoder's own names.
class WeightSource {
 public:
  WeightSource(const SafetensorsFile& file, std::string prefix)
      : file_(file), prefix_(std::move(prefix)) {}

  const TensorView* FindEncoder(const std::string& name) const {
    if (const TensorView* t = file_.Find(prefix_ + name); t != nullptr) return t;
    return prefix_.empty() ? nullptr : file_.Find(name);
  }
  const TensorView* FindHead(const std::string& name) const { return file_.Find(name); }

  // The tensor `name` (encoder part unless `head`), FP32, checked against `shape`. A LayerNorm
  // weight/bias may be stored under TensorFlow's legacy names gamma/beta.
  absl::StatusOr<std::vector<float>> Get(const std::string& name, const Shape& shape,
                                         bool head = false) const {
    const TensorView* tensor = head ? FindHead(name) : FindEncoder(name);
    if (tensor == nullptr && absl::EndsWith(name, "LayerNorm.weight")) {
      tensor = FindEncoder(absl::StrCat(name.substr(0, name.size() - 6), "gamma"));
    }
    if (tensor == nullptr && absl::EndsWith(name, "LayerNorm.bias")) {
      tensor = FindEncoder(absl::StrCat(name.substr(0, name.size() - 4), "beta"));
    }
    const std::string shown = head ? name : prefix_ + name;
    if (tensor == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors file '", file_.path(), "' has no tensor '", shown,
                       "' (config.json needs it with shape ", ShapeToString(shape), ")"));
    }
    if (tensor->shape != shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          "safetensors file '", file_.path(), "': tensor '", tensor->name, "' has shape ",
          ShapeToString(tensor->shape), ", config.json needs ", ShapeToString(shape)));
    }
    absl::StatusOr<std::vector<float>> values = ToFloat32(*tensor);
    if (!values.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors file '", file_.path(), "': ", values.status().message()));
    }
    return values;
  }

 private:
  const SafetensorsFile& file_;
  const std::string prefix_;
};

// The prefix of the encoder's tensors: the architecture's ("bert.", "distilbert."...) when the
// checkpoint is a task model's, else none.
std::string DetectPrefix(const SafetensorsFile& file, const EncoderNetwork& net) {
  const ArchSpec& spec = *FindArch(net.model_type);
  if (file.Find(absl::StrCat(spec.task_prefix, spec.word_embeddings)) != nullptr) {
    return spec.task_prefix;
  }
  return "";
}

// Which heads the file holds, and the label count, from the header alone.
absl::Status DescribeHeads(const SafetensorsFile& file, EncoderNetwork& net) {
  const std::string prefix = DetectPrefix(file, net);
  WeightSource source(file, prefix);
  if (source.FindEncoder("pooler.dense.weight") != nullptr) {
    net.pooler_weight.assign(1, 0.0f);  // marks presence until the weights are read
  }
  const TensorView* classifier = nullptr;
  const TensorView* score = net.arch == EncoderArch::kQwen3 ? file.Find("score.weight") : nullptr;
  if (score != nullptr) {
    // Qwen3ForSequenceClassification: score [num_labels, H], no bias (read with the weights).
    net.classifier = ClassifierKind::kQwen3Score;
    classifier = score;
  } else if (const TensorView* out_proj = file.Find("classifier.out_proj.weight");
             out_proj != nullptr) {
    net.classifier = ClassifierKind::kRoberta;
    classifier = out_proj;
  } else if (const TensorView* linear = file.Find("classifier.weight");
             linear != nullptr && net.arch == EncoderArch::kModernbert) {
    // ModernBertForSequenceClassification: head.dense, head.norm (read with the weights) and
    // classifier.
    net.classifier = ClassifierKind::kModernbert;
    classifier = linear;
  } else if (linear != nullptr && net.arch == EncoderArch::kDistilbert) {
    // DistilBertForSequenceClassification: pre_classifier (read with the weights; its absence is
    // a load error naming it) + ReLU + classifier.
    net.classifier = ClassifierKind::kDistilbert;
    classifier = linear;
  } else if (linear != nullptr) {
    net.classifier = ClassifierKind::kBert;
    classifier = linear;
    if (!net.has_pooler()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "safetensors file '", file.path(), "' has 'classifier.weight' but no pooler ('", prefix,
          "pooler.dense.weight'), which BERT's classification head reads"));
    }
  }
  if (classifier != nullptr) {
    if (classifier->shape.size() != 2 || classifier->shape[0] < 1 ||
        classifier->shape[0] > kMaxDimension || classifier->shape[1] != net.hidden) {
      return absl::InvalidArgumentError(absl::StrCat(
          "safetensors file '", file.path(), "': tensor '", classifier->name, "' has shape ",
          ShapeToString(classifier->shape), ", config.json needs [num_labels,", net.hidden, "]"));
    }
    net.num_labels = static_cast<int>(classifier->shape[0]);
    net.score_activation = net.explicit_score_activation.value_or(
        net.num_labels == 1 ? ScoreActivation::kSigmoid : ScoreActivation::kSoftmax);
    if (!net.labels.empty() && static_cast<int>(net.labels.size()) != net.num_labels) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.json's id2label names ", net.labels.size(), " labels but tensor '",
                       classifier->name, "' has ", net.num_labels, " (shape ",
                       ShapeToString(classifier->shape), ")"));
    }
  }
  bool one_dtype = true;
  const DataType first = file.tensors().empty() ? DataType::kFp32 : file.tensors().front().dtype;
  for (const TensorView& tensor : file.tensors()) {
    // An I64 position_ids buffer rides along in many checkpoints; it is not a weight.
    if (tensor.dtype == DataType::kInt64) continue;
    one_dtype &= tensor.dtype == first;
  }
  net.stored_dtype =
      one_dtype && (first == DataType::kFp16 || first == DataType::kBf16) ? first : DataType::kFp32;
  return absl::OkStatus();
}

int64_t WeightBytes(const EncoderNetwork& net) {
  if (net.arch == EncoderArch::kModernbert) return ModernBertWeightBytes(net);
  if (net.arch == EncoderArch::kQwen3) return Qwen3WeightBytes(net);
  const int64_t h = net.hidden;
  const int64_t i = net.intermediate;
  int64_t floats =
      (int64_t{net.vocab_size} + net.max_position_embeddings + net.type_vocab_size + 2) * h;
  floats +=
      int64_t{net.layers} * (3 * h * h + 3 * h + h * h + h + 2 * h + i * h + i + h * i + h + 2 * h);
  if (net.has_pooler()) floats += h * h + h;
  floats += int64_t{net.relative_attention_buckets} * net.heads;
  if (net.relative_attention_buckets > 0) {
    floats += int64_t{net.heads} * (2 * int64_t{net.max_sequence_length} - 1);
  }
  if (net.classifier == ClassifierKind::kRoberta || net.classifier == ClassifierKind::kDistilbert) {
    floats += h * h + h;
  }
  if (net.classifier != ClassifierKind::kNone) floats += int64_t{net.num_labels} * (h + 1);
  for (const DenseLayer& dense : net.dense) {
    floats += int64_t{dense.out_features} * (int64_t{dense.in_features} + 1);
  }
  return floats * static_cast<int64_t>(sizeof(float));
}

absl::StatusOr<std::shared_ptr<EncoderNetwork>> Describe(const fs::path& folder,
                                                         const SafetensorsFile& file,
                                                         const EncoderLoadOptions& options) {
  auto net = std::make_shared<EncoderNetwork>();
  RETURN_IF_ERROR(ReadConfigJson(folder, *net));
  RETURN_IF_ERROR(ReadSentenceModules(folder, *net));
  if (options.normalize.has_value()) net->normalize = *options.normalize;
  if (options.dimensions > 0) {
    if (options.dimensions > net->full_embedding_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter 'dimensions' = ", options.dimensions, " is more than the ",
                       net->full_embedding_size(), " values of the model's embedding"));
    }
    net->truncate_dim = options.dimensions;
  }
  net->weight_format = options.weight_format;
  net->hold_16bit_weights = options.hold_16bit_weights;
  RETURN_IF_ERROR(DescribeHeads(file, *net));
  net->weight_bytes = WeightBytes(*net);
  if (net->weight_bytes > options.max_weight_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("config.json describes ", net->weight_bytes,
                                                   " bytes of FP32 weights, over the limit of ",
                                                   options.max_weight_bytes));
  }
  return net;
}

absl::StatusOr<SafetensorsFile> OpenWeights(const fs::path& folder) {
  const fs::path config = folder / "config.json";
  std::error_code ec;
  if (!fs::exists(config, ec)) {
    return absl::NotFoundError(
        absl::StrCat("no '", config.string(),
                     "' (the encoder backend serves a Hugging Face checkpoint folder: "
                     "config.json and model.safetensors)"));
  }
  return SafetensorsFile::Open((folder / "model.safetensors").string());
}

absl::Status ReadWeights(const SafetensorsFile& file, EncoderNetwork& net) {
  const ArchSpec& spec = *FindArch(net.model_type);
  WeightSource w(file, DetectPrefix(file, net));
  if (spec.qwen3) {
    return ReadQwen3Weights([&w](const std::string& name, const Shape& shape,
                                 bool head) { return w.Get(name, shape, head); },
                            spec, net);
  }
  if (spec.modernbert) {
    return ReadModernBertWeights([&w](const std::string& name, const Shape& shape,
                                      bool head) { return w.Get(name, shape, head); },
                                 spec, net);
  }
  const int64_t h = net.hidden;
  const int64_t inter = net.intermediate;
  {
    ASSIGN_OR_RETURN(std::vector<float> words,
                     w.Get("embeddings.word_embeddings.weight", {net.vocab_size, h}));
    net.word_embeddings =
        EmbeddingTable::Hold(std::move(words), net.vocab_size, net.hidden, net.hold_16bit_weights);
  }
  ASSIGN_OR_RETURN(net.position_embeddings, w.Get("embeddings.position_embeddings.weight",
                                                  {net.max_position_embeddings, h}));
  if (net.type_vocab_size > 0) {
    ASSIGN_OR_RETURN(net.type_embeddings,
                     w.Get("embeddings.token_type_embeddings.weight", {net.type_vocab_size, h}));
  }
  ASSIGN_OR_RETURN(net.embedding_norm_gamma, w.Get("embeddings.LayerNorm.weight", {h}));
  ASSIGN_OR_RETURN(net.embedding_norm_beta, w.Get("embeddings.LayerNorm.bias", {h}));
  net.encoder_layers.resize(net.layers);
  for (int l = 0; l < net.layers; ++l) {
    EncoderLayer& layer = net.encoder_layers[l];
    const std::string p = absl::StrCat(spec.layer_prefix, l, ".");
    const auto weight_of = [&](const char* linear) { return absl::StrCat(p, linear, ".weight"); };
    const auto bias_of = [&](const char* linear) { return absl::StrCat(p, linear, ".bias"); };
    // The row-major matrices live only until they are packed (one at a time), so that the loaded
    // network holds each weight once.
    std::vector<float> qkv_weight;
    qkv_weight.reserve(static_cast<size_t>(3 * h * h));
    layer.qkv_bias.reserve(static_cast<size_t>(3 * h));
    for (const char* part : {spec.query, spec.key, spec.value}) {
      ASSIGN_OR_RETURN(std::vector<float> weight, w.Get(weight_of(part), {h, h}));
      ASSIGN_OR_RETURN(std::vector<float> bias, w.Get(bias_of(part), {h}));
      qkv_weight.insert(qkv_weight.end(), weight.begin(), weight.end());
      layer.qkv_bias.insert(layer.qkv_bias.end(), bias.begin(), bias.end());
    }
    layer.qkv_weight = PackedWeights::Pack(qkv_weight, static_cast<int>(3 * h), static_cast<int>(h),
                                           PackFormat(net, qkv_weight));
    qkv_weight = {};
    {
      ASSIGN_OR_RETURN(std::vector<float> weight, w.Get(weight_of(spec.attention_out), {h, h}));
      layer.attention_out_weight = PackedWeights::Pack(
          weight, static_cast<int>(h), static_cast<int>(h), PackFormat(net, weight));
    }
    ASSIGN_OR_RETURN(layer.attention_out_bias, w.Get(bias_of(spec.attention_out), {h}));
    ASSIGN_OR_RETURN(layer.attention_norm_gamma, w.Get(weight_of(spec.attention_norm), {h}));
    ASSIGN_OR_RETURN(layer.attention_norm_beta, w.Get(bias_of(spec.attention_norm), {h}));
    {
      ASSIGN_OR_RETURN(std::vector<float> weight, w.Get(weight_of(spec.intermediate), {inter, h}));
      layer.intermediate_weight = PackedWeights::Pack(weight, static_cast<int>(inter),
                                                      static_cast<int>(h), PackFormat(net, weight));
    }
    ASSIGN_OR_RETURN(layer.intermediate_bias, w.Get(bias_of(spec.intermediate), {inter}));
    {
      ASSIGN_OR_RETURN(std::vector<float> weight, w.Get(weight_of(spec.output), {h, inter}));
      layer.output_weight = PackedWeights::Pack(weight, static_cast<int>(h),
                                                static_cast<int>(inter), PackFormat(net, weight));
    }
    ASSIGN_OR_RETURN(layer.output_bias, w.Get(bias_of(spec.output), {h}));
    ASSIGN_OR_RETURN(layer.output_norm_gamma, w.Get(weight_of(spec.output_norm), {h}));
    ASSIGN_OR_RETURN(layer.output_norm_beta, w.Get(bias_of(spec.output_norm), {h}));
  }
  if (spec.relative_attention_bias) {
    const int buckets = net.relative_attention_buckets;
    ASSIGN_OR_RETURN(const std::vector<float> table,
                     w.Get("encoder.relative_attention_bias.weight", {buckets, net.heads}));
    const int m = net.max_sequence_length;
    const int64_t width = 2 * int64_t{m} - 1;
    net.relative_position_bias.resize(static_cast<size_t>(net.heads * width));
    for (int r = -(m - 1); r <= m - 1; ++r) {
      const int bucket = RelativePositionBucket(r);
      for (int head = 0; head < net.heads; ++head) {
        net.relative_position_bias[static_cast<size_t>(head * width + r + m - 1)] =
            table[static_cast<size_t>(int64_t{bucket} * net.heads + head)];
      }
    }
  }
  if (net.has_pooler()) {
    ASSIGN_OR_RETURN(net.pooler_weight, w.Get("pooler.dense.weight", {h, h}));
    ASSIGN_OR_RETURN(net.pooler_bias, w.Get("pooler.dense.bias", {h}));
  }
  const int64_t labels = net.num_labels;
  if (net.classifier == ClassifierKind::kBert) {
    ASSIGN_OR_RETURN(net.classifier_weight, w.Get("classifier.weight", {labels, h}, true));
    ASSIGN_OR_RETURN(net.classifier_bias, w.Get("classifier.bias", {labels}, true));
  } else if (net.classifier == ClassifierKind::kRoberta) {
    ASSIGN_OR_RETURN(net.classifier_dense_weight, w.Get("classifier.dense.weight", {h, h}, true));
    ASSIGN_OR_RETURN(net.classifier_dense_bias, w.Get("classifier.dense.bias", {h}, true));
    ASSIGN_OR_RETURN(net.classifier_weight, w.Get("classifier.out_proj.weight", {labels, h}, true));
    ASSIGN_OR_RETURN(net.classifier_bias, w.Get("classifier.out_proj.bias", {labels}, true));
  } else if (net.classifier == ClassifierKind::kDistilbert) {
    ASSIGN_OR_RETURN(net.classifier_dense_weight, w.Get("pre_classifier.weight", {h, h}, true));
    ASSIGN_OR_RETURN(net.classifier_dense_bias, w.Get("pre_classifier.bias", {h}, true));
    ASSIGN_OR_RETURN(net.classifier_weight, w.Get("classifier.weight", {labels, h}, true));
    ASSIGN_OR_RETURN(net.classifier_bias, w.Get("classifier.bias", {labels}, true));
  }
  return absl::OkStatus();
}

}  // namespace

EmbeddingTable EmbeddingTable::Hold(std::vector<float> values, int64_t rows, int cols,
                                    bool compact) {
  CHECK(rows >= 0 && cols >= 0 && static_cast<int64_t>(values.size()) == rows * cols);
  EmbeddingTable table;
  table.rows_ = rows;
  table.cols_ = cols;
  table.format_ = compact ? ExactFp32Storage(values) : WeightFormat::kFp32;
  if (table.format_ == WeightFormat::kFp32) {
    table.fp32_ = std::move(values);
    return table;
  }
  const bool fp16 = table.format_ == WeightFormat::kFp32HeldFp16;
  table.held_.resize(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    // Exact values (Hold chose the form so): FP16's rounding returns them, BF16's are the FP32's
    // high halves.
    table.held_[i] = fp16 ? wire::FloatToHalf(values[i])
                          : static_cast<uint16_t>(std::bit_cast<uint32_t>(values[i]) >> 16);
  }
  return table;
}

EmbeddingTable EmbeddingTable::InPrecision(EmbeddingTable table, WeightFormat network_format) {
  const bool compact = network_format == WeightFormat::kBf16 ||
                       network_format == WeightFormat::kFp32HeldBf16 ||
                       network_format == WeightFormat::kInt8;
  if (!compact || table.empty() || table.format_ == WeightFormat::kFp32HeldBf16) return table;
  const int64_t rows = table.rows_;
  const int cols = table.cols_;
  std::vector<float> values =
      table.format_ == WeightFormat::kFp32 ? std::move(table.fp32_) : table.Widened();
  table = EmbeddingTable();  // its storage freed before the compact copy is made
  for (float& v : values) v = Bf16ToFloat(RoundToBf16(v));
  return Hold(std::move(values), rows, cols);
}

int64_t EmbeddingTable::bytes() const {
  return static_cast<int64_t>(fp32_.size() * sizeof(float) + held_.size() * sizeof(uint16_t));
}

void EmbeddingTable::CopyRow(int64_t id, float* out) const {
  const size_t first = static_cast<size_t>(id * cols_);
  if (format_ == WeightFormat::kFp32) {
    std::copy_n(fp32_.data() + first, cols_, out);
    return;
  }
  const uint16_t* row = held_.data() + first;
  if (format_ == WeightFormat::kFp32HeldFp16) {
    for (int j = 0; j < cols_; ++j) out[j] = wire::HalfToFloat(row[j]);
  } else {
    for (int j = 0; j < cols_; ++j) out[j] = wire::BFloat16ToFloat(row[j]);
  }
}

std::vector<float> EmbeddingTable::Widened() const {
  if (format_ == WeightFormat::kFp32) return fp32_;
  std::vector<float> out(static_cast<size_t>(rows_ * cols_));
  for (int64_t r = 0; r < rows_; ++r) CopyRow(r, out.data() + r * cols_);
  return out;
}

WeightFormat PackFormat(const EncoderNetwork& net, const std::vector<float>& w) {
  if (net.weight_format != WeightFormat::kFp32) return net.weight_format;
  return net.hold_16bit_weights ? ExactFp32Storage(w) : WeightFormat::kFp32;
}

absl::StatusOr<HiddenActivation> ParseHiddenActivation(const std::string& name) {
  if (name == "gelu") return HiddenActivation::kGeluErf;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "gelu_fast") {
    return HiddenActivation::kGeluTanh;
  }
  if (name == "relu") return HiddenActivation::kRelu;
  return absl::InvalidArgumentError(
      absl::StrCat("hidden_act '", name,
                   "' is not supported (supported: gelu (erf form), gelu_new, gelu_pytorch_tanh, "
                   "gelu_fast (tanh form), relu)"));
}

absl::StatusOr<std::shared_ptr<EncoderNetwork>> ReadEncoderDescription(
    const std::string& folder, const EncoderLoadOptions& options) {
  ASSIGN_OR_RETURN(SafetensorsFile file, OpenWeights(folder));
  return Describe(folder, file, options);
}

absl::StatusOr<std::shared_ptr<const EncoderNetwork>> LoadEncoderNetwork(
    const std::string& folder, const EncoderLoadOptions& options) {
  ASSIGN_OR_RETURN(SafetensorsFile file, OpenWeights(folder));
  ASSIGN_OR_RETURN(std::shared_ptr<EncoderNetwork> net, Describe(folder, file, options));
  RETURN_IF_ERROR(ReadWeights(file, *net));
  net->word_embeddings =
      EmbeddingTable::InPrecision(std::move(net->word_embeddings), net->weight_format);
  RETURN_IF_ERROR(ReadDenseWeights(folder, *net));
#if defined(__GLIBC__)
  // The row-major matrices freed after packing leave holes between the packed ones in glibc's heap
  // (its mmap threshold rises after the first large free, so later large blocks come from the
  // heap); hand those pages back, or the BERT-base shape keeps ~40 MiB (10% of its weights) more
  // resident than it holds.
  malloc_trim(0);
#endif
  return std::shared_ptr<const EncoderNetwork>(std::move(net));
}

}  // namespace sluice::engine::models::encoder
