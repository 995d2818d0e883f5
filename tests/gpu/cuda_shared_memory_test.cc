// CUDA shared memory (issue 16) end to end on a GPU: this process allocates device memory, exports
// it with cudaIpcGetMemHandle (an IPC handle cannot be opened by the process that made it, so the
// server must be another process: the child this test starts), registers it with a sluice-server
// running on that GPU (--device=cuda:0), and runs models with tensors in the CUDA regions:
//  - `simple` with both inputs and both outputs there;
//  - `mlp` (on the CUDA executor: its inputs are copied device to device on the executor's input
//    stream) and `identity` (KIND_CPU: the CPU executor copies device to host on its own thread),
//    each compared with the same bytes sent inline, alone and in batches that mix CUDA and inline
//    inputs.
// Skips, saying why, where no GPU is usable (fails instead with SLUICE_GPU_TESTS_REQUIRED=1).

#include <cuda_runtime_api.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/cuda/device_info.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/grpc_service.grpc.pb.h"
#include "tests/gpu/gpu_required.h"
#include "tests/integration/server_process.h"

namespace sluice {
namespace {

using inference::GRPCInferenceService;
using ::testing::HasSubstr;

void SetRegion(google::protobuf::Map<std::string, inference::InferParameter>& parameters,
               const std::string& region, int64_t byte_size, int64_t offset) {
  parameters["shared_memory_region"].set_string_param(region);
  parameters["shared_memory_byte_size"].set_int64_param(byte_size);
  if (offset != 0) parameters["shared_memory_offset"].set_int64_param(offset);
}

TEST(CudaSharedMemoryTest, SimpleThroughCudaIpcRegions) {
  SLUICE_SKIP_WITHOUT_GPU();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  void* in = nullptr;
  void* out = nullptr;
  ASSERT_EQ(cudaMalloc(&in, 128), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&out, 128), cudaSuccess);
  std::vector<int32_t> a(16);
  std::vector<int32_t> b(16);
  for (int i = 0; i < 16; ++i) {
    a[i] = i * 3;
    b[i] = 100 - i;
  }
  ASSERT_EQ(cudaMemcpy(in, a.data(), 64, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(static_cast<char*>(in) + 64, b.data(), 64, cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(cudaMemset(out, 0, 128), cudaSuccess);

  auto server = testing::ServerProcess::Start(
      {"--model-repository=" + testing::BundledModelRepository(), "--device=cuda:0"},
      std::chrono::seconds(120));
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = GRPCInferenceService::NewStub(
      grpc::CreateChannel((*server)->address(), grpc::InsecureChannelCredentials()));
  for (auto [name, pointer] : {std::pair<const char*, void*>{"cuda_in", in}, {"cuda_out", out}}) {
    cudaIpcMemHandle_t handle;
    ASSERT_EQ(cudaIpcGetMemHandle(&handle, pointer), cudaSuccess);
    inference::CudaSharedMemoryRegisterRequest request;
    request.set_name(name);
    request.set_raw_handle(std::string(reinterpret_cast<const char*>(&handle), sizeof(handle)));
    request.set_device_id(0);
    request.set_byte_size(128);
    inference::CudaSharedMemoryRegisterResponse response;
    grpc::ClientContext context;
    grpc::Status status = stub->CudaSharedMemoryRegister(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  inference::ModelInferRequest request;
  request.set_model_name("simple");
  for (int i = 0; i < 2; ++i) {
    auto* input = request.add_inputs();
    input->set_name(absl::StrCat("INPUT", i));
    input->set_datatype("INT32");
    input->add_shape(1);
    input->add_shape(16);
    SetRegion(*input->mutable_parameters(), "cuda_in", 64, i * 64);
    auto* output = request.add_outputs();
    output->set_name(absl::StrCat("OUTPUT", i));
    SetRegion(*output->mutable_parameters(), "cuda_out", 64, i * 64);
  }
  inference::ModelInferResponse response;
  grpc::ClientContext context;
  grpc::Status status = stub->ModelInfer(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.raw_output_contents_size(), 0);
  std::vector<int32_t> sum(16);
  std::vector<int32_t> diff(16);
  ASSERT_EQ(cudaMemcpy(sum.data(), out, 64, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(diff.data(), static_cast<char*>(out) + 64, 64, cudaMemcpyDeviceToHost),
            cudaSuccess);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(sum[i], a[i] + b[i]);
    EXPECT_EQ(diff[i], a[i] - b[i]);
  }
  inference::CudaSharedMemoryStatusRequest status_request;
  inference::CudaSharedMemoryStatusResponse status_response;
  grpc::ClientContext status_context;
  ASSERT_TRUE(stub->CudaSharedMemoryStatus(&status_context, status_request, &status_response).ok());
  EXPECT_EQ(status_response.regions().size(), 2u);
  EXPECT_EQ(status_response.regions().at("cuda_in").byte_size(), 128u);
  inference::CudaSharedMemoryUnregisterRequest unregister;
  inference::CudaSharedMemoryUnregisterResponse unregistered;
  grpc::ClientContext unregister_context;
  EXPECT_TRUE(
      stub->CudaSharedMemoryUnregister(&unregister_context, unregister, &unregistered).ok());
  // A handle that is not one: the server names the CUDA call that refused it.
  inference::CudaSharedMemoryRegisterRequest bogus;
  bogus.set_name("bogus");
  bogus.set_raw_handle(std::string(64, '\x5a'));
  bogus.set_byte_size(64);
  inference::CudaSharedMemoryRegisterResponse bogus_response;
  grpc::ClientContext bogus_context;
  grpc::Status refused = stub->CudaSharedMemoryRegister(&bogus_context, bogus, &bogus_response);
  EXPECT_FALSE(refused.ok());
  EXPECT_THAT(refused.error_message(), HasSubstr("cudaIpcOpenMemHandle"));
  EXPECT_TRUE((*server)->Stop().ok());
  cudaFree(in);
  cudaFree(out);
}

// Registers [pointer, pointer + byte_size) (this process's device memory on GPU 0) as `name`.
void RegisterCudaRegion(GRPCInferenceService::Stub& stub, const std::string& name, void* pointer,
                        int64_t byte_size) {
  cudaIpcMemHandle_t handle;
  ASSERT_EQ(cudaIpcGetMemHandle(&handle, pointer), cudaSuccess);
  inference::CudaSharedMemoryRegisterRequest request;
  request.set_name(name);
  request.set_raw_handle(std::string(reinterpret_cast<const char*>(&handle), sizeof(handle)));
  request.set_device_id(0);
  request.set_byte_size(byte_size);
  inference::CudaSharedMemoryRegisterResponse response;
  grpc::ClientContext context;
  grpc::Status status = stub.CudaSharedMemoryRegister(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
}

// One FP32 request for `model`: `rows` x `width` from region `region` at `offset` (bytes), or,
// with an empty region name, the same values inline.
inference::ModelInferRequest FloatRequest(const std::string& model, int64_t rows, int64_t width,
                                          const std::string& region, int64_t offset,
                                          const std::vector<float>& inline_values) {
  inference::ModelInferRequest request;
  request.set_model_name(model);
  auto* input = request.add_inputs();
  input->set_name("INPUT0");
  input->set_datatype("FP32");
  input->add_shape(rows);
  input->add_shape(width);
  const int64_t bytes = rows * width * static_cast<int64_t>(sizeof(float));
  if (!region.empty()) {
    SetRegion(*input->mutable_parameters(), region, bytes, offset);
  } else {
    request.add_raw_input_contents(std::string(reinterpret_cast<const char*>(inline_values.data()),
                                               inline_values.size() * sizeof(float)));
  }
  return request;
}

// The floats of the response's only output; empty (with a test failure) on an error.
std::vector<float> Infer(GRPCInferenceService::Stub& stub,
                         const inference::ModelInferRequest& request) {
  inference::ModelInferResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  grpc::Status status = stub.ModelInfer(&context, request, &response);
  EXPECT_TRUE(status.ok()) << request.model_name() << ": " << status.error_message();
  if (!status.ok() || response.raw_output_contents_size() != 1) return {};
  const std::string& raw = response.raw_output_contents(0);
  std::vector<float> values(raw.size() / sizeof(float));
  std::memcpy(values.data(), raw.data(), values.size() * sizeof(float));
  return values;
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, float tolerance) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tolerance) << "element " << i;
  }
}

// mlp (CUDA executor, device-to-device input copies) and identity (CPU executor on a GPU build,
// device-to-host copies on its thread) with their inputs in a CUDA region, against the same bytes
// sent inline; then concurrent requests, half in the region and half inline, that the batcher
// joins into mixed batches.
TEST(CudaSharedMemoryTest, MlpAndIdentityInputsInACudaRegionMatchInlineBytes) {
  SLUICE_SKIP_WITHOUT_GPU();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  constexpr int64_t kWidth = 784;       // mlp's INPUT0
  constexpr int64_t kRows = 8;          // rows of mlp input in the region
  constexpr int64_t kIdentity = 1000;   // identity's row width
  constexpr int64_t kMlpOffset = 4096;  // the region's first tensor does not start at 0
  const int64_t mlp_bytes = kRows * kWidth * static_cast<int64_t>(sizeof(float));
  const int64_t identity_offset = kMlpOffset + mlp_bytes;
  const int64_t region_bytes = identity_offset + kIdentity * static_cast<int64_t>(sizeof(float));

  // Deterministic values in [0, 1) (an mlp image), a different row pattern per row.
  std::vector<float> host(static_cast<size_t>(region_bytes / sizeof(float)), 0.f);
  float* mlp_rows = host.data() + kMlpOffset / sizeof(float);
  for (int64_t i = 0; i < kRows * kWidth; ++i) {
    mlp_rows[i] = static_cast<float>((i * 7919 + 13) % 1000) / 1000.f;
  }
  float* identity_row = host.data() + identity_offset / sizeof(float);
  for (int64_t i = 0; i < kIdentity; ++i) identity_row[i] = static_cast<float>(i) * 0.5f - 17.f;
  void* region = nullptr;
  ASSERT_EQ(cudaMalloc(&region, static_cast<size_t>(region_bytes)), cudaSuccess);
  ASSERT_EQ(
      cudaMemcpy(region, host.data(), static_cast<size_t>(region_bytes), cudaMemcpyHostToDevice),
      cudaSuccess);

  auto server = testing::ServerProcess::Start(
      {"--model-repository=" + testing::BundledModelRepository(), "--device=cuda:0"},
      std::chrono::seconds(120));
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = GRPCInferenceService::NewStub(
      grpc::CreateChannel((*server)->address(), grpc::InsecureChannelCredentials()));
  RegisterCudaRegion(*stub, "inputs", region, region_bytes);

  const auto row = [&](int64_t first, int64_t count) {
    return std::vector<float>(mlp_rows + first * kWidth, mlp_rows + (first + count) * kWidth);
  };
  // Alone: the whole region's rows, and one row at a row offset.
  const std::vector<float> inline_all =
      Infer(*stub, FloatRequest("mlp", kRows, kWidth, "", 0, row(0, kRows)));
  ASSERT_EQ(inline_all.size(), static_cast<size_t>(kRows * 10));
  const std::vector<float> cuda_all =
      Infer(*stub, FloatRequest("mlp", kRows, kWidth, "inputs", kMlpOffset, {}));
  ExpectNear(cuda_all, inline_all, 1e-6f);
  for (int64_t r = 0; r < kRows; ++r) {
    float sum = 0;
    for (int c = 0; c < 10; ++c) sum += cuda_all[r * 10 + c];
    EXPECT_NEAR(sum, 1.f, 1e-4f) << "row " << r << " is not a softmax";
  }
  // Rows differ, so a copy from the wrong offset cannot match.
  EXPECT_NE(std::vector<float>(cuda_all.begin(), cuda_all.begin() + 10),
            std::vector<float>(cuda_all.begin() + 10, cuda_all.begin() + 20));
  const std::vector<float> inline_row =
      Infer(*stub, FloatRequest("mlp", 1, kWidth, "", 0, row(5, 1)));
  const std::vector<float> cuda_row =
      Infer(*stub, FloatRequest("mlp", 1, kWidth, "inputs",
                                kMlpOffset + 5 * kWidth * static_cast<int64_t>(sizeof(float)), {}));
  ExpectNear(cuda_row, inline_row, 1e-6f);

  const std::vector<float> identity_values(identity_row, identity_row + kIdentity);
  const std::vector<float> identity_cuda =
      Infer(*stub, FloatRequest("identity", 1, kIdentity, "inputs", identity_offset, {}));
  EXPECT_EQ(identity_cuda, identity_values);
  EXPECT_EQ(Infer(*stub, FloatRequest("identity", 1, kIdentity, "", 0, identity_values)),
            identity_values);

  // Concurrent: each thread sends its own row, even threads from the region and odd ones inline,
  // several rounds, so that batches join requests of both kinds (rows are independent in an
  // MLP: each answer is its row's, batched or not).
  constexpr int kThreads = 8;
  constexpr int kRounds = 4;
  std::vector<std::vector<float>> reference(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    reference[t] = Infer(*stub, FloatRequest("mlp", 1, kWidth, "", 0, row(t % kRows, 1)));
  }
  std::vector<std::vector<std::vector<float>>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const int64_t r = t % kRows;
      const inference::ModelInferRequest request =
          t % 2 == 0
              ? FloatRequest("mlp", 1, kWidth, "inputs",
                             kMlpOffset + r * kWidth * static_cast<int64_t>(sizeof(float)), {})
              : FloatRequest("mlp", 1, kWidth, "", 0, row(r, 1));
      for (int round = 0; round < kRounds; ++round) got[t].push_back(Infer(*stub, request));
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    SCOPED_TRACE(t);
    ASSERT_EQ(got[t].size(), static_cast<size_t>(kRounds));
    for (const std::vector<float>& answer : got[t]) ExpectNear(answer, reference[t], 1e-5f);
  }

  // Unregistered while requests read it: each is answered with its row (the lease keeps the
  // mapping open under in-flight batches) or, once the name is gone, INVALID_ARGUMENT; never
  // wrong bytes.
  RegisterCudaRegion(*stub, "draining", region, region_bytes);
  std::atomic<int> answered{0};
  std::atomic<int> refused_after{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&, t] {
      const int64_t r = t % kRows;
      const inference::ModelInferRequest request =
          FloatRequest("mlp", 1, kWidth, "draining",
                       kMlpOffset + r * kWidth * static_cast<int64_t>(sizeof(float)), {});
      for (int i = 0; i < 50; ++i) {
        inference::ModelInferResponse response;
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
        grpc::Status status = stub->ModelInfer(&context, request, &response);
        if (!status.ok()) {
          EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
              << status.error_message();
          ++refused_after;
          continue;
        }
        ++answered;
        ASSERT_EQ(response.raw_output_contents_size(), 1);
        std::vector<float> values(10);
        ASSERT_EQ(response.raw_output_contents(0).size(), values.size() * sizeof(float));
        std::memcpy(values.data(), response.raw_output_contents(0).data(), 40);
        for (size_t c = 0; c < values.size(); ++c) {
          EXPECT_NEAR(values[c], reference[t][c], 1e-5f) << "thread " << t << " request " << i;
        }
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  inference::CudaSharedMemoryUnregisterRequest drain;
  drain.set_name("draining");
  inference::CudaSharedMemoryUnregisterResponse drained;
  grpc::ClientContext drain_context;
  EXPECT_TRUE(stub->CudaSharedMemoryUnregister(&drain_context, drain, &drained).ok());
  for (std::thread& reader : readers) reader.join();
  EXPECT_EQ(answered + refused_after, 200);
  EXPECT_GT(answered, 0);

  // Unregistered while nothing uses it: gone; the server still answers inline requests.
  inference::CudaSharedMemoryUnregisterRequest unregister;
  unregister.set_name("inputs");
  inference::CudaSharedMemoryUnregisterResponse unregistered;
  grpc::ClientContext unregister_context;
  EXPECT_TRUE(
      stub->CudaSharedMemoryUnregister(&unregister_context, unregister, &unregistered).ok());
  inference::ModelInferResponse refused_response;
  grpc::ClientContext refused_context;
  grpc::Status refused =
      stub->ModelInfer(&refused_context, FloatRequest("mlp", 1, kWidth, "inputs", kMlpOffset, {}),
                       &refused_response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ExpectNear(Infer(*stub, FloatRequest("mlp", 1, kWidth, "", 0, row(5, 1))), inline_row, 1e-6f);
  EXPECT_TRUE((*server)->Stop().ok());
  cudaFree(region);
}

}  // namespace
}  // namespace sluice
