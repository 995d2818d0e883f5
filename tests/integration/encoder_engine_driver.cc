// sluice-encoder-engine-driver: the `encoder` backend through the engine API (Engine::LoadModel,
// Engine::Submit, dynamic batching with the ragged token budget), no server, for
// encoder_engine_reference_test.py, which compares its answers with Hugging Face transformers.
// Test-only.
//
// It loads --model-dir as model "m" (config: backend encoder, max_batch_size, dynamic batching
// with --max-queue-delay-us, inputs and outputs completed from the checkpoint), then reads one
// JSON line per mix on stdin:
//   [{"inputs": {"input_ids": {"dtype": "INT64", "shape": [2, 5], "data": [...]}, ...},
//     "outputs": ["embedding"]}, ...]
// submits every request of the mix at once (so that they queue together and the batcher joins
// them), waits for all answers and prints one JSON line:
//   {"answers": [{"outputs": {"embedding": {"shape": [...], "data": [...]}}} | {"error": "..."}],
//    "executions": <batches the mix took (execution_count delta)>}

#include <chrono>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "engine/core/backend.h"
#include "engine/engine.h"
#include "nlohmann/json.hpp"
#include "tests/support/engine/answer.h"

namespace sluice::tests {
namespace {

uint64_t Executions(const engine::Engine& engine) {
  auto stats = engine.GetStats("m", -1);
  return stats.ok() && !stats->empty() ? stats->front().stats.execution_count : 0;
}

absl::StatusOr<std::unique_ptr<engine::InferenceRequest>> MakeRequest(
    const nlohmann::json& spec, std::shared_ptr<engine::testing::Answer> answer) {
  auto request = std::make_unique<engine::InferenceRequest>(
      "m", -1, engine::testing::Answer::Into(std::move(answer)));
  auto owned = std::make_shared<std::vector<std::vector<std::byte>>>();
  owned->reserve(spec.at("inputs").size());
  for (const auto& [name, tensor] : spec.at("inputs").items()) {
    const std::string dtype = tensor.at("dtype");
    const std::vector<int64_t> values = tensor.at("data");
    const engine::Shape shape = tensor.at("shape").get<std::vector<int64_t>>();
    std::vector<std::byte>& bytes = owned->emplace_back();
    engine::DataType type = engine::DataType::kInt64;
    if (dtype == "INT64") {
      bytes.resize(values.size() * 8);
      std::memcpy(bytes.data(), values.data(), bytes.size());
    } else if (dtype == "INT32") {
      type = engine::DataType::kInt32;
      std::vector<int32_t> narrow(values.begin(), values.end());
      bytes.resize(narrow.size() * 4);
      std::memcpy(bytes.data(), narrow.data(), bytes.size());
    } else {
      return absl::InvalidArgumentError("driver: dtype " + dtype);
    }
    request->inputs.push_back(engine::TensorView{name, type, shape, bytes});
  }
  request->keepalive = owned;
  if (spec.contains("outputs")) {
    request->requested_outputs = spec.at("outputs").get<std::vector<std::string>>();
  }
  return request;
}

nlohmann::json ToJson(const absl::StatusOr<engine::InferenceResponse>& result) {
  if (!result.ok()) return {{"error", result.status().ToString()}};
  nlohmann::json outputs = nlohmann::json::object();
  for (const engine::Tensor& tensor : result->outputs) {
    nlohmann::json data = nlohmann::json::array();
    if (tensor.dtype == engine::DataType::kFp32) {
      const auto* values = reinterpret_cast<const float*>(tensor.data.data());
      for (size_t i = 0; i < tensor.data.size() / 4; ++i) data.push_back(values[i]);
    } else if (tensor.dtype == engine::DataType::kInt64) {
      const auto* values = reinterpret_cast<const int64_t*>(tensor.data.data());
      for (size_t i = 0; i < tensor.data.size() / 8; ++i) data.push_back(values[i]);
    }
    outputs[tensor.name] = {{"shape", tensor.shape}, {"data", data}};
  }
  return {{"outputs", outputs}};
}

int Main(int argc, char** argv) {
  CLI::App app{"The encoder through the engine API, mixes on stdin (see the file comment)."};
  std::string model_dir;
  int max_batch = 8;
  int64_t delay_us = 50000;
  app.add_option("--model-dir", model_dir, "the checkpoint folder")->required();
  app.add_option("--max-batch-size", max_batch)->capture_default_str();
  app.add_option("--max-queue-delay-us", delay_us)->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  auto created = engine::Engine::Create(engine::EngineOptions{});
  if (!created.ok()) {
    std::cerr << created.status() << "\n";
    return 1;
  }
  std::unique_ptr<engine::Engine> engine = *std::move(created);
  engine::ModelSpec spec;
  spec.config.name = "m";
  spec.config.backend = "encoder";
  spec.config.max_batch_size = max_batch;
  spec.config.dynamic_batching = engine::DynamicBatchingConfig{};
  spec.config.dynamic_batching->max_queue_delay = std::chrono::microseconds(delay_us);
  spec.version_path = model_dir;
  if (absl::Status loaded = engine->LoadModel(spec); !loaded.ok()) {
    std::cerr << loaded << "\n";
    return 1;
  }

  std::string line;
  while (std::getline(std::cin, line)) {
    const nlohmann::json mix = nlohmann::json::parse(line);
    const uint64_t before = Executions(*engine);
    std::vector<std::shared_ptr<engine::testing::Answer>> answers;
    std::vector<std::unique_ptr<engine::InferenceRequest>> requests;
    for (const nlohmann::json& request_spec : mix) {
      answers.push_back(std::make_shared<engine::testing::Answer>());
      auto request = MakeRequest(request_spec, answers.back());
      if (!request.ok()) {
        std::cerr << request.status() << "\n";
        return 2;
      }
      requests.push_back(*std::move(request));
    }
    // Built first, submitted back to back: the mix queues together.
    for (auto& request : requests) engine->Submit(std::move(request));
    nlohmann::json out = {{"answers", nlohmann::json::array()}};
    for (const auto& answer : answers) {
      out["answers"].push_back(ToJson(answer->WaitForResult(std::chrono::seconds(60))));
    }
    out["executions"] = Executions(*engine) - before;
    std::cout << out.dump() << std::endl;
  }
  engine->Shutdown();
  return 0;
}

}  // namespace
}  // namespace sluice::tests

int main(int argc, char** argv) { return sluice::tests::Main(argc, argv); }
