#pragma once

// Text tasks: what the text APIs (TEI's /embed /rerank /predict, Cohere's and Jina's rerank) ask
// of an encoder model, in one place. A task is N texts (or N text pairs) of one request; it runs
// as engine requests of at most max_batch_size rows each, which the model's token-budget batcher
// joins with other requests' rows like any sequences, and its answer is gathered in order. The
// routes convert their JSON to a TextTask and the TextTaskResult back; they never build engine
// requests themselves.
//
// The encoder contract assumed: inputs `text` (and `text_pair`) BYTES [n, 1] (a tokenizer in the
// version folder); outputs `embedding` FP32 [n, d] for embedders, `logits` and `score` FP32
// [n, labels] (with their labels) for sequence classifiers; `input_ids` INT64 [n, seq] (the ids
// each row ran with, padded with 0) for token counts.

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/model_config.h"
#include "engine/engine.h"

namespace sluice::server::http {

// What an encoder model can do over the text APIs (from its config alone).
struct TextModelTraits {
  bool embeds = false;         // a text input, an FP32 `embedding` output and no classifier head
  bool classifies = false;     // a text input and FP32 `logits` and `score` outputs
  bool pairs = false;          // also a `text_pair` input (cross-encoders)
  bool counts_tokens = false;  // an `input_ids` output
  int num_labels = 0;
  std::vector<std::string> labels;  // by label index
  int64_t embedding_size = -1;      // -1: variable
  // One label: a reranker (a relevance score per pair), as TEI and sentence-transformers'
  // CrossEncoder decide.
  bool reranks() const { return classifies && pairs && num_labels == 1; }
};
TextModelTraits TraitsOf(const engine::ModelConfig& config);

// The ready models' names whose traits satisfy `wanted`, in name order.
std::vector<std::string> ReadyModelsWith(engine::Engine& engine,
                                         const std::function<bool(const TextModelTraits&)>& wanted);

// The model a text request is for: `requested` if given (NotFound if it is not loaded;
// InvalidArgument naming what it lacks if !wanted), else the one ready model that can do the task
// (InvalidArgument listing them when there are several, NotFound when there is none). `task`
// names the task in messages ("embeddings", "reranking", "classification").
absl::StatusOr<std::string> ChooseModel(engine::Engine& engine, const std::string& requested,
                                        const std::function<bool(const TextModelTraits&)>& wanted,
                                        const std::string& task);

struct TextTask {
  std::string model;
  std::vector<std::string> texts;
  // Empty, or one second text per text (a pair: query and document, premise and hypothesis).
  std::vector<std::string> pairs;
  // The FP32 output each row answers with: "embedding", "logits" or "score".
  std::string output;
  // What the model does with an over-long text or pair (every part carries it).
  engine::TextTruncation truncation;
  // The model's sentence-transformers prompt to prepend (unset: its default, if any).
  std::optional<std::string> prompt_name;
  // When the HTTP request arrived; the client's disconnect flag (nullable).
  std::chrono::steady_clock::time_point received;
  std::shared_ptr<const std::atomic<bool>> cancelled;
};

struct TextTaskResult {
  // One row of the output per text, in order.
  std::vector<std::vector<float>> rows;
  // Tokens each row ran with (special tokens included), when the model reports them.
  std::optional<std::vector<int64_t>> tokens;
  int64_t total_tokens() const;
};

// Submits `task` (REQUIRES: texts non-empty, pairs empty or as many) to `engine` on `config`'s
// model as requests of at most max_batch_size rows, and calls `done` exactly once, on an engine
// thread or this one, with every row's output or the first error (a part refused at once stops
// the parts after it).
void RunTextTask(engine::Engine& engine, const engine::ModelConfig& config, TextTask task,
                 std::function<void(absl::StatusOr<TextTaskResult>)> done);

}  // namespace sluice::server::http
