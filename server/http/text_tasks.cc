#include "server/http/text_tasks.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/echo.h"
#include "common/wire/bytes_elements.h"
#include "server/http/parts_gather.h"

namespace sluice::server::http {
namespace {

constexpr char kTextInput[] = "text";
constexpr char kTextPairInput[] = "text_pair";
constexpr char kIdsOutput[] = "input_ids";

bool Fp32(const engine::TensorSpec* spec) {
  return spec != nullptr && spec->dtype == engine::DataType::kFp32;
}

// What one engine request (a part of a task) owns: its BYTES input tensors.
struct PartInputs {
  std::vector<std::byte> text;
  std::vector<std::byte> pairs;
};

// Every part's rows of `output` (and, where the model reports them, each row's token count:
// `input_ids` padded with 0 after the row's last token, which is a special token, non-zero).
absl::StatusOr<TextTaskResult> JoinRows(const std::vector<engine::InferenceResponse>& answers,
                                        const std::string& output, size_t rows, bool count_tokens) {
  TextTaskResult result;
  result.rows.reserve(rows);
  std::vector<int64_t> tokens;
  for (const engine::InferenceResponse& answer : answers) {
    const engine::Tensor* values = nullptr;
    const engine::Tensor* ids = nullptr;
    for (const engine::Tensor& tensor : answer.outputs) {
      if (tensor.name == output) values = &tensor;
      if (tensor.name == kIdsOutput) ids = &tensor;
    }
    if (values == nullptr || values->dtype != engine::DataType::kFp32 ||
        values->shape.size() != 2 ||
        values->data.size() !=
            static_cast<size_t>(values->shape[0] * values->shape[1]) * sizeof(float)) {
      return absl::InternalError(absl::StrCat("model '", common::EchoInput(answer.model_name),
                                              "' answered no FP32 [rows, n] '", output, "'"));
    }
    const auto* floats = reinterpret_cast<const float*>(values->data.data());
    for (int64_t row = 0; row < values->shape[0]; ++row) {
      result.rows.emplace_back(floats + row * values->shape[1],
                               floats + (row + 1) * values->shape[1]);
    }
    if (ids != nullptr && ids->dtype == engine::DataType::kInt64 && ids->shape.size() == 2 &&
        ids->data.size() == static_cast<size_t>(ids->shape[0] * ids->shape[1]) * sizeof(int64_t)) {
      const auto* values64 = reinterpret_cast<const int64_t*>(ids->data.data());
      for (int64_t row = 0; row < ids->shape[0]; ++row) {
        int64_t length = ids->shape[1];
        while (length > 0 && values64[row * ids->shape[1] + length - 1] == 0) --length;
        tokens.push_back(length);
      }
    }
  }
  if (result.rows.size() != rows) {
    return absl::InternalError(
        absl::StrCat("the model answered ", result.rows.size(), " rows for ", rows, " inputs"));
  }
  if (count_tokens && tokens.size() == rows) result.tokens = std::move(tokens);
  return result;
}

}  // namespace

TextModelTraits TraitsOf(const engine::ModelConfig& config) {
  TextModelTraits traits;
  const engine::TensorSpec* text = config.FindInput(kTextInput);
  const bool takes_text = text != nullptr && text->dtype == engine::DataType::kBytes;
  if (!takes_text || config.backend != "encoder") return traits;
  const engine::TensorSpec* pair = config.FindInput(kTextPairInput);
  traits.pairs = pair != nullptr && pair->dtype == engine::DataType::kBytes;
  const engine::TensorSpec* logits = config.FindOutput("logits");
  const engine::TensorSpec* score = config.FindOutput("score");
  traits.classifies = Fp32(logits) && Fp32(score) && !logits->dims.empty();
  // A checkpoint with a classification head is a classifier or reranker: its pooled `embedding`
  // was never trained as a sentence embedding, so the text APIs do not offer it as an embedder.
  const engine::TensorSpec* embedding = config.FindOutput("embedding");
  traits.embeds = Fp32(embedding) && !traits.classifies;
  if (traits.embeds && !embedding->dims.empty()) traits.embedding_size = embedding->dims.back();
  if (traits.classifies) {
    traits.num_labels = static_cast<int>(logits->dims.back());
    traits.labels = logits->labels;
    for (int i = static_cast<int>(traits.labels.size()); i < traits.num_labels; ++i) {
      traits.labels.push_back(absl::StrCat("LABEL_", i));
    }
  }
  const engine::TensorSpec* ids = config.FindOutput(kIdsOutput);
  traits.counts_tokens = ids != nullptr && ids->dtype == engine::DataType::kInt64;
  return traits;
}

std::vector<std::string> ReadyModelsWith(
    engine::Engine& engine, const std::function<bool(const TextModelTraits&)>& wanted) {
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (const engine::ModelVersionStatus& status : engine.ListModels()) {
    if (status.state != engine::ModelState::kReady || !seen.insert(status.name).second) continue;
    absl::StatusOr<engine::Engine::ModelInfo> info = engine.GetModel(status.name, -1);
    if (info.ok() && wanted(TraitsOf(*info->config))) names.push_back(status.name);
  }
  return names;
}

absl::StatusOr<std::string> ChooseModel(engine::Engine& engine, const std::string& requested,
                                        const std::function<bool(const TextModelTraits&)>& wanted,
                                        const std::string& task) {
  if (!requested.empty()) {
    absl::StatusOr<engine::Engine::ModelInfo> info = engine.GetModel(requested, -1);
    if (!info.ok()) return info.status();
    if (!wanted(TraitsOf(*info->config))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model '", common::EchoInput(requested), "' does not serve ", task,
          " (it needs a tokenizer in its folder and ",
          task == "embeddings" ? "an 'embedding' output" : "a sequence-classification head",
          task == "reranking" ? " with one label" : "", ")"));
    }
    return requested;
  }
  std::vector<std::string> names = ReadyModelsWith(engine, wanted);
  if (names.size() == 1) return names[0];
  if (names.empty()) {
    return absl::NotFoundError(absl::StrCat("no ready model serves ", task));
  }
  return absl::InvalidArgumentError(absl::StrCat("several models serve ", task, " (",
                                                 absl::StrJoin(names, ", "),
                                                 "): name one in the 'model' field"));
}

int64_t TextTaskResult::total_tokens() const {
  int64_t total = 0;
  if (tokens.has_value()) {
    for (int64_t count : *tokens) total += count;
  }
  return total;
}

void RunTextTask(engine::Engine& engine, const engine::ModelConfig& config, TextTask task,
                 std::function<void(absl::StatusOr<TextTaskResult>)> done) {
  const size_t total = task.texts.size();
  const size_t per_part =
      config.max_batch_size > 0 ? static_cast<size_t>(config.max_batch_size) : total;
  const size_t parts = (total + per_part - 1) / per_part;
  const bool count_tokens = TraitsOf(config).counts_tokens;
  auto gather = std::make_shared<PartsGather>(
      parts, [done = std::move(done), output = task.output, total,
              count_tokens](absl::StatusOr<std::vector<engine::InferenceResponse>> answers) {
        if (!answers.ok()) return done(answers.status());
        done(JoinRows(*answers, output, total, count_tokens));
      });
  for (size_t part = 0; part < parts; ++part) {
    // A part the engine refused at once (queue full, draining) decides the answer.
    if (gather->Failed()) {
      gather->Complete(part, absl::CancelledError("an earlier part of the request failed"));
      continue;
    }
    const size_t begin = part * per_part;
    const size_t end = std::min(total, begin + per_part);
    const int64_t n = static_cast<int64_t>(end - begin);
    auto storage = std::make_shared<PartInputs>();
    for (size_t i = begin; i < end; ++i) {
      wire::AppendBytesElement(storage->text, task.texts[i]);
      if (!task.pairs.empty()) wire::AppendBytesElement(storage->pairs, task.pairs[i]);
    }
    auto inference = std::make_unique<engine::InferenceRequest>(
        task.model, /*model_version=*/-1,
        [gather, part](absl::StatusOr<engine::InferenceResponse> result) {
          gather->Complete(part, std::move(result));
        });
    inference->inputs.push_back(
        engine::TensorView{kTextInput, engine::DataType::kBytes, {n, 1}, storage->text});
    if (!task.pairs.empty()) {
      inference->inputs.push_back(
          engine::TensorView{kTextPairInput, engine::DataType::kBytes, {n, 1}, storage->pairs});
    }
    inference->requested_outputs.push_back(task.output);
    if (count_tokens) inference->requested_outputs.emplace_back(kIdsOutput);
    inference->keepalive = std::move(storage);
    inference->text_truncation = task.truncation;
    inference->prompt_name = task.prompt_name;
    inference->received_time = task.received;
    inference->cancelled = task.cancelled;
    engine.Submit(std::move(inference));
  }
}

}  // namespace sluice::server::http
