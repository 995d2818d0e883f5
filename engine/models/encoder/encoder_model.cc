#include "engine/models/encoder/encoder_model.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "common/wire/bytes_elements.h"
#include "engine/models/dense.h"
#include "engine/models/encoder/encoder_batch.h"
#include "engine/models/encoder/encoder_forward.h"
#include "engine/models/encoder/encoder_gemm.h"
#include "engine/models/encoder/encoder_network.h"
#include "engine/models/encoder/encoder_precision.h"
#include "engine/models/encoder/encoder_text_inputs.h"
#include "text/tokenizer.h"

namespace sluice::engine::models {
namespace {

using encoder::EncoderNetwork;
using encoder::PackedBatch;

constexpr absl::string_view kInputIds = "input_ids";
constexpr absl::string_view kAttentionMask = "attention_mask";
constexpr absl::string_view kTokenTypeIds = "token_type_ids";
constexpr absl::string_view kText = "text";
constexpr absl::string_view kTextPair = "text_pair";
constexpr absl::string_view kLastHiddenState = "last_hidden_state";
constexpr absl::string_view kEmbedding = "embedding";
constexpr absl::string_view kPoolerOutput = "pooler_output";
constexpr absl::string_view kLogits = "logits";
constexpr absl::string_view kMaxBatchTokensParam = "max_batch_tokens";
constexpr absl::string_view kNormalizeParam = "normalize";
constexpr absl::string_view kDimensionsParam = "dimensions";
// A budget larger than this is no budget (and would size scratch beyond any machine).
constexpr int64_t kMaxBatchTokensLimit = int64_t{1} << 22;

std::string Prefixed(const ModelSpec& spec, absl::string_view message) {
  return absl::StrCat("model '", spec.config.name, "' version ", spec.version,
                      " (backend encoder): ", message);
}

absl::Status WithContext(const ModelSpec& spec, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), Prefixed(spec, status.message()));
}

absl::StatusOr<encoder::EncoderLoadOptions> LoadOptions(const ModelConfig& config) {
  encoder::EncoderLoadOptions options;
  for (const auto& [key, value] : config.parameters) {
    // compute_type, allow_tf32 and cuda_buckets concern the GPU only; checked on every backend
    // (encoder::ParseGpuOptions) so that a typo fails the load wherever the model runs.
    if (key != kMaxBatchTokensParam && key != kNormalizeParam && key != kDimensionsParam &&
        key != encoder::kPrecisionParam && key != encoder::kComputeTypeParam &&
        key != encoder::kAllowTf32Param && key != encoder::kCudaBucketsParam) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown parameter '", key, "' (known: ", kMaxBatchTokensParam, ", ", kNormalizeParam,
          ", ", kDimensionsParam, ", ", encoder::kPrecisionParam, ", ", encoder::kComputeTypeParam,
          ", ", encoder::kAllowTf32Param, ", ", encoder::kCudaBucketsParam, ")"));
    }
  }
  if (auto it = config.parameters.find(std::string(kDimensionsParam));
      it != config.parameters.end()) {
    int value = 0;
    if (!absl::SimpleAtoi(it->second, &value) || value < 1) {
      return absl::InvalidArgumentError(absl::StrCat("parameter '", kDimensionsParam, "' = '",
                                                     it->second, "' must be a positive integer"));
    }
    options.dimensions = value;
  }
  auto it = config.parameters.find(std::string(kNormalizeParam));
  if (it != config.parameters.end()) {
    if (it->second != "true" && it->second != "false") {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter '", kNormalizeParam, "' = '", it->second, "' must be \"true\" or \"false\""));
    }
    options.normalize = it->second == "true";
  }
  ASSIGN_OR_RETURN(const encoder::CpuPrecision precision, encoder::ParseCpuPrecision(config));
  options.weight_format = precision.format;
  // A benchmark's switch, as SLUICE_ENCODER_GEMM: widen a BF16/FP16 checkpoint to FP32 at load
  // (what holding it in 16 bits saves and costs, measured in one run: docs/performance.md).
  const char* widen = std::getenv("SLUICE_ENCODER_WIDEN_WEIGHTS");
  if (widen != nullptr && std::string_view(widen) == "1") options.hold_16bit_weights = false;
  return options;
}

absl::StatusOr<int64_t> MaxBatchTokens(const ModelConfig& config) {
  auto it = config.parameters.find(std::string(kMaxBatchTokensParam));
  if (it == config.parameters.end()) return kDefaultEncoderMaxBatchTokens;
  int64_t value = 0;
  if (!absl::SimpleAtoi(it->second, &value) || value < 1 || value > kMaxBatchTokensLimit) {
    return absl::InvalidArgumentError(absl::StrCat("parameter '", kMaxBatchTokensParam, "' = '",
                                                   it->second, "' must be an integer in [1, ",
                                                   kMaxBatchTokensLimit, "]"));
  }
  return value;
}

// Whether the version folder holds a tokenizer (then the model takes text inputs too).
bool HasTokenizer(const std::string& dir) {
  std::error_code error;
  return std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json", error) ||
         std::filesystem::exists(std::filesystem::path(dir) / "vocab.txt", error);
}

// The inputs and outputs the checkpoint supports, in the order they are listed.
std::vector<TensorSpec> ExpectedInputs(const EncoderNetwork& net, bool text) {
  std::vector<TensorSpec> inputs = {{std::string(kInputIds), DataType::kInt64, {-1}},
                                    {std::string(kAttentionMask), DataType::kInt64, {-1}}};
  if (net.has_token_types()) inputs.push_back({std::string(kTokenTypeIds), DataType::kInt64, {-1}});
  if (text) {
    inputs.push_back({std::string(kText), DataType::kBytes, {1}});
    inputs.push_back({std::string(kTextPair), DataType::kBytes, {1}});
  }
  return inputs;
}

std::vector<TensorSpec> ExpectedOutputs(const EncoderNetwork& net, bool text) {
  std::vector<TensorSpec> outputs = {
      {std::string(kLastHiddenState), DataType::kFp32, {-1, net.hidden}},
      {std::string(kEmbedding), DataType::kFp32, {net.embedding_size()}}};
  if (net.has_pooler())
    outputs.push_back({std::string(kPoolerOutput), DataType::kFp32, {net.hidden}});
  if (net.classifier != encoder::ClassifierKind::kNone) {
    // Class names as transformers names unnamed ones (LABEL_i).
    std::vector<std::string> labels = net.labels;
    for (int i = static_cast<int>(labels.size()); i < net.num_labels; ++i) {
      labels.push_back(absl::StrCat("LABEL_", i));
    }
    outputs.push_back({std::string(kLogits), DataType::kFp32, {net.num_labels}, labels});
    outputs.push_back({encoder::kScoreName, DataType::kFp32, {net.num_labels}, labels});
  }
  if (text) outputs.push_back({std::string(kInputIds), DataType::kInt64, {-1}});
  return outputs;
}

std::string Names(const std::vector<TensorSpec>& specs) {
  std::vector<std::string> names;
  for (const TensorSpec& spec : specs) names.push_back(spec.name);
  return absl::StrJoin(names, ", ");
}

const TensorSpec* Find(const std::vector<TensorSpec>& specs, absl::string_view name) {
  for (const TensorSpec& spec : specs) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

// Checks a declared input or output against the checkpoint's (dims may say -1 where fixed).
absl::Status CheckDeclared(const TensorSpec& declared, const std::vector<TensorSpec>& expected,
                           const char* kind, const EncoderNetwork& net) {
  const TensorSpec* want = Find(expected, declared.name);
  if (want == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        kind, " '", declared.name, "' is declared, but this ", net.model_type,
        " checkpoint gives only: ", Names(expected),
        declared.name == kLogits || declared.name == encoder::kScoreName
            ? " (no classification head 'classifier.*')"
        : declared.name == kPoolerOutput ? " (no 'pooler.dense')"
        : declared.name == kTokenTypeIds ? " (type_vocab_size <= 1: no token types)"
        : declared.name == kText || declared.name == kTextPair || declared.name == kInputIds
            ? " (text inputs and the input_ids output need a tokenizer.json or "
              "vocab.txt in the version folder)"
            : ""));
  }
  const bool int_input = want->dtype == DataType::kInt64 && absl::string_view(kind) == "input";
  if (declared.dtype != want->dtype && !(int_input && declared.dtype == DataType::kInt32)) {
    return absl::InvalidArgumentError(absl::StrCat(
        kind, " '", declared.name, "' is declared ", DataTypeName(declared.dtype),
        ", the checkpoint gives ", DataTypeName(want->dtype), int_input ? " (or INT32)" : ""));
  }
  bool dims_ok = declared.dims.size() == want->dims.size();
  for (size_t d = 0; dims_ok && d < want->dims.size(); ++d) {
    dims_ok = declared.dims[d] == want->dims[d] || declared.dims[d] == -1;
  }
  if (!dims_ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        kind, " '", declared.name, "' is declared with dims ", ShapeToString(declared.dims),
        ", the checkpoint gives ", ShapeToString(want->dims), " (without the batch dimension)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> CompleteUnprefixed(const ModelSpec& spec) {
  ModelConfig config = spec.config;
  if (config.max_batch_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_batch_size must be > 0 (the encoder takes [batch, sequence] inputs), not ",
        config.max_batch_size));
  }
  ASSIGN_OR_RETURN(encoder::EncoderLoadOptions options, LoadOptions(config));
  ASSIGN_OR_RETURN(int64_t max_batch_tokens, MaxBatchTokens(config));
  ASSIGN_OR_RETURN(std::shared_ptr<EncoderNetwork> net,
                   encoder::ReadEncoderDescription(spec.version_path, options));
  const bool text = HasTokenizer(spec.version_path);
  const std::vector<TensorSpec> inputs = ExpectedInputs(*net, text);
  const std::vector<TensorSpec> outputs = ExpectedOutputs(*net, text);
  if (config.inputs.empty()) {
    config.inputs = inputs;
  } else {
    for (const TensorSpec& declared : config.inputs) {
      RETURN_IF_ERROR(CheckDeclared(declared, inputs, "input", *net));
    }
    if (config.FindInput(kInputIds) == nullptr && config.FindInput(kText) == nullptr) {
      return absl::InvalidArgumentError("the config declares inputs but not 'input_ids' or 'text'");
    }
  }
  if (config.outputs.empty()) {
    config.outputs = outputs;
  } else {
    for (TensorSpec& declared : config.outputs) {
      RETURN_IF_ERROR(CheckDeclared(declared, outputs, "output", *net));
      declared.dims = Find(outputs, declared.name)->dims;  // -1 where fixed: report the real size
      declared.labels = Find(outputs, declared.name)->labels;
    }
  }
  // The length limit text is truncated to: sentence_bert_config.json max_seq_length, else the
  // tokenizer's, else max_position_embeddings, never beyond the position table (as the load
  // below sets the tokenizer's).
  int64_t max_sequence_tokens = net->max_sequence_length;
  if (text) {
    if (absl::StatusOr<int> limit = text::ReadMaxSequenceLength(spec.version_path); limit.ok()) {
      max_sequence_tokens = std::min<int64_t>(*limit, max_sequence_tokens);
    }
  }
  config.ragged_batching = RaggedBatchingConfig{.max_batch_tokens = max_batch_tokens,
                                                .max_sequence_tokens = max_sequence_tokens};
  // Dynamic batching is on unless the config sets its own: an encoder batches sequences of any
  // length together (ragged), and a batch of 32 short sentences costs about as much CPU as a
  // handful run alone (the weights are read once per chunk, not once per request). A queue delay
  // of 0 adds no latency at low load: a batch is whatever waited while the previous one ran
  // (work-conserving). Measured in docs/performance.md; max_batch_size: 1 turns it off.
  if (!config.dynamic_batching.has_value()) config.dynamic_batching = DynamicBatchingConfig{};
  RETURN_IF_ERROR(encoder::ParseGpuOptions(config, max_batch_tokens).status());
  return config;
}

// ---------------------------------------------------------------------------------------------
// Requests.

using encoder::IntAt;
using encoder::RowLength;
using RequestInputs = encoder::RequestTokens;

RequestInputs FindInputs(std::span<const TensorView> inputs) {
  return encoder::FindRequestTokens(inputs);
}

class EncoderInstance final : public ModelInstance {
 public:
  EncoderInstance(const ModelConfig& config, std::shared_ptr<const EncoderNetwork> net,
                  std::shared_ptr<ComputePool> pool)
      : config_(config), net_(std::move(net)), pool_(std::move(pool)) {}

  bool runs_ragged() const override { return true; }

  absl::StatusOr<std::vector<Tensor>> Run(std::span<const TensorView> inputs) override {
    // One batch of tensors (the engine API's plain path): every config output.
    std::vector<RequestInputs> requests = {FindInputs(inputs)};
    std::vector<std::vector<bool>> wanted = {std::vector<bool>(config_.outputs.size(), true)};
    ASSIGN_OR_RETURN(auto outputs, RunPacked(requests, wanted));
    return std::move(outputs.front());
  }

  absl::StatusOr<std::vector<std::vector<Tensor>>> RunRagged(
      std::span<const InferenceRequest* const> requests) override {
    std::vector<RequestInputs> inputs;
    std::vector<std::vector<bool>> wanted;
    inputs.reserve(requests.size());
    for (const InferenceRequest* request : requests) {
      inputs.push_back(FindInputs(request->inputs));
      wanted.push_back(encoder::WantedOutputs(config_, request->requested_outputs));
    }
    return RunPacked(inputs, wanted);
  }

 private:
  absl::StatusOr<std::vector<std::vector<Tensor>>> RunPacked(
      const std::vector<RequestInputs>& requests, const std::vector<std::vector<bool>>& wanted) {
    const EncoderNetwork& net = *net_;
    batch_.Clear();
    std::vector<encoder::RequestShape> shapes;
    for (const RequestInputs& in : requests) {
      ASSIGN_OR_RETURN(encoder::RequestShape shape, encoder::PackRequest(net, in, batch_));
      shapes.push_back(shape);
    }
    encoder::Forward(net, batch_, workspace_, encoder::ForwardChunkTokens(), pool_.get());

    bool any_embedding = false;
    bool any_pooler = false;
    bool any_logits = false;
    for (size_t r = 0; r < requests.size(); ++r) {
      for (size_t o = 0; o < config_.outputs.size(); ++o) {
        if (!wanted[r][o]) continue;
        any_embedding |= config_.outputs[o].name == kEmbedding;
        any_pooler |= config_.outputs[o].name == kPoolerOutput;
        any_logits |=
            config_.outputs[o].name == kLogits || config_.outputs[o].name == encoder::kScoreName;
      }
    }
    const int sequences = batch_.sequences();
    encoder::PackedResults results{.hidden = workspace_.hidden()};
    if (any_embedding) {
      const int size = net.embedding_size();
      embedding_.resize(static_cast<size_t>(sequences) * size);
      for (int s = 0; s < sequences; ++s) {
        encoder::PoolEmbedding(net, batch_, workspace_.hidden(), s,
                               embedding_.data() + int64_t{s} * size);
      }
      results.embedding = embedding_.data();
    }
    if (any_pooler) {
      pooler_.resize(static_cast<size_t>(sequences) * net.hidden);
      encoder::PoolerOutput(net, batch_, workspace_, pooler_.data());
      results.pooler = pooler_.data();
    }
    if (any_logits) {
      logits_.resize(static_cast<size_t>(sequences) * net.num_labels);
      encoder::Logits(net, batch_, workspace_, logits_.data());
      results.logits = logits_.data();
    }
    std::vector<std::vector<Tensor>> outputs(requests.size());
    int first_sequence = 0;
    for (size_t r = 0; r < requests.size(); ++r) {
      outputs[r] = encoder::RequestOutputs(config_, net, batch_, requests[r], shapes[r],
                                           first_sequence, wanted[r], results);
      first_sequence += static_cast<int>(shapes[r].rows);
    }
    return outputs;
  }

  const ModelConfig& config_;
  const std::shared_ptr<const EncoderNetwork> net_;
  const std::shared_ptr<ComputePool> pool_;  // nullable: compute on this thread alone
  PackedBatch batch_;
  encoder::EncoderWorkspace workspace_;
  std::vector<float> embedding_;
  std::vector<float> pooler_;
  std::vector<float> logits_;
};

class EncoderModel final : public Model {
 public:
  EncoderModel(ModelConfig config, std::shared_ptr<const EncoderNetwork> net,
               std::shared_ptr<const encoder::EncoderTextInputs> text,
               std::shared_ptr<ComputePool> pool, std::string precision_summary)
      : config_(std::move(config)),
        net_(std::move(net)),
        text_(std::move(text)),
        pool_(std::move(pool)),
        precision_summary_(std::move(precision_summary)) {}

  const ModelConfig& config() const override { return config_; }
  std::string LoadSummary() const override { return absl::StrCat("CPU ", precision_summary_); }
  // Read from the network, not the config: its weight_format is what the load chose (auto
  // resolved, its accuracy fallback taken). Always present, fp32 too, so that a client reads
  // the precision without knowing the default. A GPU instance computes in its compute_type on
  // these weights (rounded to this precision); the value names the CPU backend's precision.
  std::map<std::string, std::string> ResolvedParameters() const override {
    return {{encoder::kPrecisionParam, encoder::PrecisionName(net_->weight_format)}};
  }
  const std::shared_ptr<const EncoderNetwork>& network() const { return net_; }
  absl::StatusOr<std::unique_ptr<ModelInstance>> CreateInstance(int) override {
    return std::make_unique<EncoderInstance>(config_, net_, pool_);
  }
  bool validates_requests() const override { return true; }
  absl::Status ValidateAndBindRequest(InferenceRequest& request) const override;
  bool NeedsPreparation(const InferenceRequest& request) const override {
    for (const TensorView& input : request.inputs) {
      if (input.name == kText) return true;
    }
    return false;
  }
  bool prepares_requests() const override { return text_ != nullptr; }
  absl::Status PrepareRequest(InferenceRequest& request) const override {
    if (text_ == nullptr) {
      return absl::InternalError(
          absl::StrCat("model '", config_.name, "': asked to tokenize without a tokenizer"));
    }
    return text_->Prepare(config_.name, config_.FindInput(kTokenTypeIds) != nullptr, request);
  }

 private:
  // ValidateAndBindRequest for a request with text inputs (tokenized later, on the pool).
  absl::Status ValidateTextRequest(InferenceRequest& request) const;

  absl::Status Fail(absl::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat("model '", config_.name, "': ", message));
  }

  const ModelConfig config_;
  const std::shared_ptr<const EncoderNetwork> net_;
  // Null without a tokenizer in the version folder (then the config has no text inputs).
  const std::shared_ptr<const encoder::EncoderTextInputs> text_;
  const std::shared_ptr<ComputePool> pool_;
  // The precision chosen at load and why (auto's accuracy check included).
  const std::string precision_summary_;
};

absl::Status EncoderModel::ValidateTextRequest(InferenceRequest& request) const {
  const TensorView* text = nullptr;
  const TensorView* pair = nullptr;
  for (const TensorView& input : request.inputs) {
    if (input.name == kText) {
      text = &input;
    } else if (input.name == kTextPair) {
      pair = &input;
    } else {
      // CheckRequestNames (engine/request_validation.h) ran first: the name is a config input.
      return Fail(absl::StrCat("the request carries both text and token ids (input '", input.name,
                               "'); send either 'text' (and 'text_pair') or token ids, not both"));
    }
  }
  if (text == nullptr) {
    return Fail(absl::StrCat("input '", kTextPair, "' needs input '", kText,
                             "' (the first text of each pair)"));
  }
  for (const TensorView* input : {text, pair}) {
    if (input == nullptr) continue;
    if (input->dtype != DataType::kBytes) {
      return Fail(absl::StrCat("input '", input->name, "' has data type ",
                               DataTypeName(input->dtype), ", the model expects BYTES"));
    }
    if (input->shape.size() != 2 || input->shape[1] != 1) {
      return Fail(absl::StrCat("input '", input->name, "' has shape ", ShapeToString(input->shape),
                               ", the model expects [batch, 1] (one string per batch item)"));
    }
    if (input->shape[0] < 1 || input->shape[0] > config_.max_batch_size) {
      return Fail(absl::StrCat("input '", input->name, "' has batch size ", input->shape[0],
                               ", allowed 1..", config_.max_batch_size, " (max_batch_size)"));
    }
    if (absl::Status framing = ValidateBytesElements(input->name, input->data, input->shape[0]);
        !framing.ok()) {
      return Fail(framing.message());
    }
  }
  if (pair != nullptr && pair->shape != text->shape) {
    return Fail(absl::StrCat("input '", kTextPair, "' has shape ", ShapeToString(pair->shape),
                             " but input '", kText, "' has ", ShapeToString(text->shape),
                             " (one pair per batch item)"));
  }
  request.batch_size = static_cast<int>(text->shape[0]);
  request.token_count = 0;  // PrepareRequest counts them
  return absl::OkStatus();
}

absl::Status EncoderModel::ValidateAndBindRequest(InferenceRequest& request) const {
  const EncoderNetwork& net = *net_;
  for (const TensorView& input : request.inputs) {
    if ((input.name == kText || input.name == kTextPair) && config_.FindInput(input.name)) {
      return ValidateTextRequest(request);
    }
  }
  const TensorView* shape_source = nullptr;
  for (const TensorView& input : request.inputs) {
    if (input.dtype != DataType::kInt64 && input.dtype != DataType::kInt32) {
      return Fail(absl::StrCat("input '", input.name, "' has data type ", DataTypeName(input.dtype),
                               ", the model expects INT64 (or INT32)"));
    }
    if (input.shape.size() != 2) {
      return Fail(absl::StrCat("input '", input.name, "' has shape ", ShapeToString(input.shape),
                               ", the model expects [batch, sequence]"));
    }
    if (input.shape[0] < 1 || input.shape[0] > config_.max_batch_size) {
      return Fail(absl::StrCat("input '", input.name, "' has batch size ", input.shape[0],
                               ", allowed 1..", config_.max_batch_size, " (max_batch_size)"));
    }
    if (input.shape[1] < 1 || input.shape[1] > net.max_sequence_length) {
      return Fail(absl::StrCat("input '", input.name, "' has sequence length ", input.shape[1],
                               ", allowed 1..", net.max_sequence_length,
                               " (the checkpoint's position table)"));
    }
    if (shape_source != nullptr && input.shape != shape_source->shape) {
      return Fail(absl::StrCat("input '", input.name, "' has shape ", ShapeToString(input.shape),
                               " but input '", shape_source->name, "' has ",
                               ShapeToString(shape_source->shape),
                               " (all inputs of a request have one [batch, sequence] shape)"));
    }
    shape_source = &input;
    const size_t expected = static_cast<size_t>(input.shape[0] * input.shape[1]) *
                            (input.dtype == DataType::kInt64 ? 8 : 4);
    if (input.data.size() != expected) {
      return Fail(absl::StrCat("input '", input.name, "' holds ", input.data.size(),
                               " bytes, shape ", ShapeToString(input.shape), " of ",
                               DataTypeName(input.dtype), " needs ", expected));
    }
  }
  const RequestInputs in = FindInputs(request.inputs);
  if (in.ids == nullptr) {
    return Fail(absl::StrCat("missing input '", kInputIds, "'"));
  }
  const int64_t rows = in.ids->shape[0];
  const int64_t seq = in.ids->shape[1];
  const int64_t count = rows * seq;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t id = IntAt(*in.ids, i);
    if (id < 0 || id >= net.vocab_size) {
      return Fail(absl::StrCat("input '", kInputIds, "' [", i / seq, ",", i % seq, "] = ", id,
                               " is outside the vocabulary [0, ", net.vocab_size, ")"));
    }
  }
  if (in.types != nullptr) {
    for (int64_t i = 0; i < count; ++i) {
      const int64_t type = IntAt(*in.types, i);
      if (type < 0 || type >= net.type_vocab_size) {
        return Fail(absl::StrCat("input '", kTokenTypeIds, "' [", i / seq, ",", i % seq,
                                 "] = ", type, " is outside [0, ", net.type_vocab_size,
                                 ") (type_vocab_size)"));
      }
    }
  }
  if (in.mask != nullptr) {
    for (int64_t i = 0; i < count; ++i) {
      const int64_t value = IntAt(*in.mask, i);
      if (value != 0 && value != 1) {
        return Fail(absl::StrCat("input '", kAttentionMask, "' [", i / seq, ",", i % seq,
                                 "] = ", value, "; a mask holds only 0 and 1"));
      }
    }
  }
  int64_t tokens = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t length = RowLength(in, r, seq);
    if (length == 0) {
      return Fail(absl::StrCat("input '", kAttentionMask, "' row ", r,
                               " is all zeros; each sequence needs at least one token"));
    }
    tokens += length;
  }
  // Config order, as the generic validation binds them (the batcher compares inputs by index).
  std::stable_sort(request.inputs.begin(), request.inputs.end(),
                   [&](const TensorView& a, const TensorView& b) {
                     return config_.FindInput(a.name) < config_.FindInput(b.name);
                   });
  request.batch_size = static_cast<int>(rows);
  request.token_count = tokens;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> CompleteEncoderConfig(const ModelSpec& spec) {
  absl::StatusOr<ModelConfig> config = CompleteUnprefixed(spec);
  if (!config.ok()) return WithContext(spec, config.status());
  return config;
}

absl::StatusOr<std::unique_ptr<Model>> CreateEncoderModel(const ModelSpec& spec) {
  // Completion is idempotent: a config the engine completed passes its own checks again, and a
  // caller that skipped it (a benchmark, a test) gets the same model.
  ASSIGN_OR_RETURN(const ModelConfig config, CompleteEncoderConfig(spec));
  absl::StatusOr<encoder::EncoderLoadOptions> options = LoadOptions(config);
  if (!options.ok()) return WithContext(spec, options.status());
  // What the load allocates before any of it is: the FP32 weights, shared, and per instance the
  // scratch of a batch at the token budget (grown on demand; a longer single request grows it).
  absl::StatusOr<std::shared_ptr<EncoderNetwork>> description =
      encoder::ReadEncoderDescription(spec.version_path, *options);
  if (!description.ok()) return WithContext(spec, description.status());
  const EncoderNetwork& shape = **description;
  const int64_t tokens = config.ragged_batching.has_value()
                             ? config.ragged_batching->max_batch_tokens
                             : kDefaultEncoderMaxBatchTokens;
  // The hidden states of every token, and the layers' activations (QKV, context, projection,
  // intermediate) of one chunk of the forward pass: at most the chunk or one longest sequence.
  // (Qwen3's QKV and context rows are qkv_width() and context_width() wide; a gated MLP's input
  // and gate rows 2 x intermediate.)
  const int64_t h = shape.hidden;
  const bool gated = !shape.layer_plans.empty() && shape.layer_plans.front().gated_mlp;
  const int64_t per_chunk_token = std::max<int64_t>(3 * h, shape.qkv_width()) +
                                  std::max<int64_t>(h, shape.context_width()) + h +
                                  int64_t{shape.intermediate} * (gated ? 3 : 1);
  const int64_t longest = shape.max_sequence_length;
  const int64_t chunk = std::min(tokens, std::max(encoder::ForwardChunkTokens(), longest));
  // Attention: one head's scores, [longest, longest] (the pre-norm passes, ModernBERT's and
  // Qwen3's, score 128 queries at a time: [128, longest]), its keys and values in panels.
  const bool pre_norm = !shape.layer_plans.empty() && shape.layer_plans.front().pre_norm;
  const int64_t score_rows = pre_norm ? std::min<int64_t>(longest, 128) : longest;
  const int64_t head_panels =
      2 * (longest + encoder::kPanelWidth) * (shape.head_size() + encoder::kPanelWidth);
  const int64_t scratch = SaturatingMul(
      SaturatingAdd(
          SaturatingAdd(SaturatingMul(tokens, shape.hidden), SaturatingMul(chunk, per_chunk_token)),
          SaturatingAdd(SaturatingMul(score_rows, longest), head_panels)),
      sizeof(float));
  if (absl::Status status =
          CheckLoadBytes(config, spec.limits, scratch, shape.weight_bytes,
                         absl::StrCat("FP32 weights and per instance scratch for ", tokens,
                                      " tokens (max_batch_tokens)"));
      !status.ok()) {
    return WithContext(spec, status);
  }
  // The tokenizer and prompts, where the config takes text (the version folder holds them).
  std::shared_ptr<const encoder::EncoderTextInputs> text;
  if (config.FindInput(kText) != nullptr) {
    absl::StatusOr<std::unique_ptr<const encoder::EncoderTextInputs>> loaded =
        encoder::EncoderTextInputs::Load(spec.version_path, shape.max_sequence_length,
                                         shape.vocab_size);
    if (!loaded.ok()) return WithContext(spec, loaded.status());
    text = *std::move(loaded);
  }
  absl::StatusOr<encoder::CpuPrecision> precision = encoder::ParseCpuPrecision(config);
  if (!precision.ok()) return WithContext(spec, precision.status());
  absl::StatusOr<encoder::PrecisionLoad> network =
      encoder::LoadEncoderNetworkInPrecision(spec.version_path, *options, *precision);
  if (!network.ok()) return WithContext(spec, network.status());
  cpu::UseSingleThreadedBlas();
  return std::make_unique<EncoderModel>(config, std::move(network->net), std::move(text),
                                        spec.compute_pool, std::move(network->summary));
}

std::shared_ptr<const EncoderNetwork> LoadedEncoderNetwork(const Model& model) {
  const auto* encoder = dynamic_cast<const EncoderModel*>(&model);
  return encoder == nullptr ? nullptr : encoder->network();
}

}  // namespace sluice::engine::models
