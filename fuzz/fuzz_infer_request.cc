// Fuzz target: a ModelInferRequest message as a client could send it (protobuf binary), through
// the server's conversion (ToEngineRequest: shapes, datatypes, raw and typed contents, BYTES
// length prefixes) and the engine's validation against a model's config, to its answer. Any input
// must end in an answer (an error or outputs), never a crash, a hang or a sanitizer report.

#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <string>

#include "engine/engine.h"
#include "google/protobuf/stubs/logging.h"
#include "proto/grpc_service.pb.h"
#include "server/infer_conversion.h"

namespace {

using sluice::engine::DataType;
using sluice::engine::Engine;
using sluice::engine::ModelConfig;
using sluice::engine::ModelSpec;

ModelConfig Config(const std::string& name, const std::string& backend, DataType dtype,
                   sluice::engine::Shape dims, int max_batch_size) {
  ModelConfig config;
  config.name = name;
  config.backend = backend;
  config.max_batch_size = max_batch_size;
  const int inputs = backend == "simple" ? 2 : 1;
  for (int i = 0; i < inputs; ++i) {
    config.inputs.push_back({"INPUT" + std::to_string(i), dtype, dims});
    config.outputs.push_back({"OUTPUT" + std::to_string(i), dtype, dims});
  }
  return config;
}

// One engine for the whole run, with models that cover fixed and variable shapes, batching and
// not, numeric and BYTES tensors. The fuzzer's model names are free text: most requests name no
// model, and the mutator finds these names in the seed corpus.
Engine& TheEngine() {
  static Engine* engine = [] {
    // Messages with invalid UTF-8 in string fields are refused, as gRPC refuses them; protobuf's
    // log line for each would only slow the fuzzer down.
    google::protobuf::SetLogHandler(nullptr);
    auto created = Engine::Create(sluice::engine::EngineOptions{});
    if (!created.ok()) std::abort();
    Engine* e = created->release();
    for (ModelConfig config : {Config("simple", "simple", DataType::kInt32, {16}, 8),
                               Config("identity_fp32", "identity", DataType::kFp32, {-1, 4}, 4),
                               Config("identity_bytes", "identity", DataType::kBytes, {-1}, 0),
                               Config("identity_fp16", "identity", DataType::kFp16, {2, -1}, 0)}) {
      if (!e->LoadModel(ModelSpec{config, 1, ""}).ok()) std::abort();
    }
    return e;
  }();
  return *engine;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Engine& engine = TheEngine();
  auto message = std::make_shared<inference::ModelInferRequest>();
  if (!message->ParseFromArray(data, static_cast<int>(size))) return 0;
  std::promise<void> answered;
  auto converted = sluice::server::ToEngineRequest(
      *message, message, [&answered](absl::StatusOr<sluice::engine::InferenceResponse> result) {
        if (result.ok()) {
          // Answers go back to the client: build the response as the server would.
          inference::ModelInferResponse response;
          sluice::server::ToProtoResponse(*std::move(result), &response);
        }
        answered.set_value();
      });
  if (!converted.ok()) return 0;
  engine.Submit(*std::move(converted));
  answered.get_future().wait();  // every accepted request is answered
  return 0;
}
