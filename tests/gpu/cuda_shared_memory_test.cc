// CUDA shared memory (issue 16) end to end on a GPU: this process allocates device memory, exports
// it with cudaIpcGetMemHandle (an IPC handle cannot be opened by the process that made it, so the
// server must be another process), registers it with a sluice-server running on that GPU
// (--device=cuda:0), and runs `simple` with both inputs and both outputs in the CUDA regions.
// Skips, saying why, where no GPU is usable.

#include <cuda_runtime_api.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/cuda/device_info.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/grpc_service.grpc.pb.h"
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
  auto devices = engine::cuda::ListDevices();
  if (!devices.ok()) GTEST_SKIP() << "no usable GPU: " << devices.status();
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

}  // namespace
}  // namespace sluice
