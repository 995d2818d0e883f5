// The bundled `embedder` served by a sluice-server on the GPU (issue 14), end to end over gRPC:
// one server, two models over the same checkpoint folder, `embedder_gpu` (instance_group
// KIND_GPU: the CUDA encoder) and `embedder_cpu` (KIND_CPU), the same texts (tokenized by the
// server) sent to both, one at a time and concurrently (so that the GPU model batches them);
// the embeddings must agree within FP32's tolerance, and the server must log that the GPU model
// runs on cuda:0. Skips, saying why, where no GPU is usable (fails instead with
// SLUICE_GPU_TESTS_REQUIRED=1).

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/grpc_service.grpc.pb.h"
#include "tests/gpu/gpu_required.h"
#include "tests/integration/server_process.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using inference::GRPCInferenceService;
using ::testing::HasSubstr;

// One text in, the `embedding` out (FP32), or the error.
absl::StatusOr<std::vector<float>> Embed(GRPCInferenceService::Stub& stub, const std::string& model,
                                         const std::string& text) {
  inference::ModelInferRequest request;
  request.set_model_name(model);
  auto* input = request.add_inputs();
  input->set_name("text");
  input->set_datatype("BYTES");
  input->add_shape(1);
  input->add_shape(1);
  std::string element(4, '\0');
  const uint32_t size = static_cast<uint32_t>(text.size());
  std::memcpy(element.data(), &size, 4);
  element += text;
  request.add_raw_input_contents(element);
  request.add_outputs()->set_name("embedding");
  inference::ModelInferResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  grpc::Status status = stub.ModelInfer(&context, request, &response);
  if (!status.ok()) return absl::InternalError(status.error_message());
  if (response.raw_output_contents_size() != 1) {
    return absl::InternalError("expected one output");
  }
  const std::string& bytes = response.raw_output_contents(0);
  std::vector<float> values(bytes.size() / 4);
  std::memcpy(values.data(), bytes.data(), values.size() * 4);
  return values;
}

TEST(CudaEncoderServerTest, TheEmbedderOnKindGpuMatchesKindCpuOverGrpc) {
  SLUICE_SKIP_WITHOUT_GPU();
  const fs::path source = fs::path(testing::BundledModelRepository()) / "embedder" / "1";
  ASSERT_TRUE(fs::exists(source / "config.json")) << source;
  const fs::path repository =
      fs::temp_directory_path() / absl::StrCat("sluice_gpu_embedder_", ::getpid());
  fs::remove_all(repository);
  for (const char* kind : {"gpu", "cpu"}) {
    const fs::path model = repository / absl::StrCat("embedder_", kind);
    fs::create_directories(model);
    fs::copy(source, model / "1", fs::copy_options::recursive);
    std::ofstream(model / "config.pbtxt")
        << "name: \"embedder_" << kind << "\"\nbackend: \"encoder\"\nmax_batch_size: 32\n"
        << "dynamic_batching { max_queue_delay_microseconds: 2000 }\n"
        << "instance_group [ { count: 1 kind: KIND_" << (kind == std::string("gpu") ? "GPU" : "CPU")
        << " } ]\nparameters { key: \"max_batch_tokens\" value: { string_value: \"4096\" } }\n";
  }
  auto server = testing::ServerProcess::Start(
      {"--model-repository=" + repository.string(), "--device=cuda:0"}, std::chrono::seconds(120));
  ASSERT_TRUE(server.ok()) << server.status();
  // The load summary of the GPU instance (engine/executor_factory.cc).
  EXPECT_THAT((*server)->Log(), HasSubstr("model 'embedder_gpu' instance 0: encoder on cuda:0"));
  auto stub = GRPCInferenceService::NewStub(
      grpc::CreateChannel((*server)->address(), grpc::InsecureChannelCredentials()));
  std::vector<std::string> texts;
  for (int i = 0; i < 24; ++i) {
    std::string text = "request " + std::to_string(i);
    // Up to ~25 words: even split into several WordPiece pieces each, under the embedder's
    // 128-token limit.
    for (int w = 0; w < i; ++w) text += " server";
    texts.push_back(text);
  }
  std::vector<std::vector<float>> cpu(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    auto embedding = Embed(*stub, "embedder_cpu", texts[i]);
    ASSERT_TRUE(embedding.ok()) << embedding.status();
    cpu[i] = *embedding;
  }
  // Concurrently: the GPU model batches requests of different lengths together.
  std::vector<absl::StatusOr<std::vector<float>>> gpu(texts.size(), absl::UnknownError("unset"));
  std::vector<std::thread> senders;
  for (size_t i = 0; i < texts.size(); ++i) {
    senders.emplace_back([&, i] { gpu[i] = Embed(*stub, "embedder_gpu", texts[i]); });
  }
  for (std::thread& sender : senders) sender.join();
  for (size_t i = 0; i < texts.size(); ++i) {
    ASSERT_TRUE(gpu[i].ok()) << gpu[i].status();
    ASSERT_EQ(gpu[i]->size(), cpu[i].size());
    double diff = 0;
    double scale = 1e-3;
    for (size_t j = 0; j < cpu[i].size(); ++j) {
      diff = std::max(diff, std::abs(double{(*gpu[i])[j]} - cpu[i][j]));
      scale = std::max(scale, std::abs(double{cpu[i][j]}));
    }
    // FP32 checkpoint, FP32 compute: the tolerance of cuda_encoder_test.cc's fp32 case.
    EXPECT_LE(diff / scale, 2e-4) << "text " << i;
  }
  EXPECT_TRUE((*server)->Stop().ok());
  fs::remove_all(repository);
}

}  // namespace
}  // namespace sluice
