// Shared-memory tensors over gRPC (issue 16): the real sluice-server on loopback, regions the test
// makes with shm_open as a client does, requests built exactly as tritonclient.grpc and
// perf_analyzer build them (InferParameter string_param / int64_param; no raw_input_contents
// entry for an input in shared memory). Both directions, every error case, the limits, the
// metrics, and unregister during load. The HTTP side is http_shared_memory_test.py.

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/grpc_service.grpc.pb.h"
#include "tests/integration/server_process.h"
#include "tests/support/http_get.h"

namespace sluice {
namespace {

using inference::GRPCInferenceService;
using inference::ModelInferRequest;
using inference::ModelInferResponse;
using ::testing::HasSubstr;
using testing::ServerProcess;

// A POSIX shared-memory object made as tritonclient.utils.shared_memory makes one.
class ClientRegion {
 public:
  explicit ClientRegion(size_t size)
      : key_(absl::StrCat("/sluice_shm_it_", getpid(), "_", counter_++)), size_(size) {
    fd_ = shm_open(key_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    EXPECT_GE(fd_, 0) << std::strerror(errno);
    EXPECT_EQ(ftruncate(fd_, static_cast<off_t>(size)), 0);
    base_ = static_cast<char*>(mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0));
    EXPECT_NE(base_, MAP_FAILED);
  }
  ~ClientRegion() {
    munmap(base_, size_);
    close(fd_);
    shm_unlink(key_.c_str());
  }
  const std::string& key() const { return key_; }
  size_t size() const { return size_; }
  template <typename T>
  void Put(size_t offset, const std::vector<T>& values) {
    std::memcpy(base_ + offset, values.data(), values.size() * sizeof(T));
  }
  void Clear(size_t offset, size_t size) { std::memset(base_ + offset, 0, size); }
  template <typename T>
  std::vector<T> Get(size_t offset, size_t count) const {
    std::vector<T> out(count);
    std::memcpy(out.data(), base_ + offset, count * sizeof(T));
    return out;
  }

 private:
  static inline std::atomic<int> counter_{0};
  std::string key_;
  size_t size_;
  int fd_ = -1;
  char* base_ = nullptr;
};

void SetRegion(google::protobuf::Map<std::string, inference::InferParameter>& parameters,
               const std::string& region, int64_t byte_size, int64_t offset = 0) {
  parameters["shared_memory_region"].set_string_param(region);
  parameters["shared_memory_byte_size"].set_int64_param(byte_size);
  // tritonclient sends the offset only when it is not 0.
  if (offset != 0) parameters["shared_memory_offset"].set_int64_param(offset);
}

class SharedMemoryGrpcTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto server = ServerProcess::Start({"--model-repository=" + testing::BundledModelRepository(),
                                        "--shared-memory-max-regions=6",
                                        "--shared-memory-max-bytes=67108864"});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr);
    channel_ = grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials());
    stub_ = GRPCInferenceService::NewStub(channel_);
  }
  void TearDown() override {
    // Every test leaves no region behind.
    inference::SystemSharedMemoryUnregisterRequest request;
    inference::SystemSharedMemoryUnregisterResponse response;
    grpc::ClientContext context;
    EXPECT_TRUE(stub_->SystemSharedMemoryUnregister(&context, request, &response).ok());
  }

  grpc::Status Register(const std::string& name, const std::string& key, uint64_t offset,
                        uint64_t byte_size) {
    inference::SystemSharedMemoryRegisterRequest request;
    request.set_name(name);
    request.set_key(key);
    request.set_offset(offset);
    request.set_byte_size(byte_size);
    inference::SystemSharedMemoryRegisterResponse response;
    grpc::ClientContext context;
    return stub_->SystemSharedMemoryRegister(&context, request, &response);
  }
  grpc::Status Unregister(const std::string& name) {
    inference::SystemSharedMemoryUnregisterRequest request;
    request.set_name(name);
    inference::SystemSharedMemoryUnregisterResponse response;
    grpc::ClientContext context;
    return stub_->SystemSharedMemoryUnregister(&context, request, &response);
  }
  grpc::Status Infer(const ModelInferRequest& request, ModelInferResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    return stub_->ModelInfer(&context, request, response);
  }
  double Metric(const std::string& series) {
    std::optional<double> value = testing::ScrapeValue(server_->metrics_port(), series);
    EXPECT_TRUE(value.has_value()) << series;
    return value.value_or(-1);
  }
  // `series` once it reads `want` (a completed request releases its regions just after its
  // answer is sent), or its last reading after 5 s.
  double MetricSettlesAt(const std::string& series, double want) {
    double value = Metric(series);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (value != want && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      value = Metric(series);
    }
    return value;
  }

  // A `simple` request whose inputs are at offsets 0 and 64 of `in` and whose outputs go to
  // offsets 0 and 64 of `out` (byte size 64 each: 16 INT32).
  static ModelInferRequest SimpleRequest(const std::string& in, const std::string& out) {
    ModelInferRequest request;
    request.set_model_name("simple");
    for (int i = 0; i < 2; ++i) {
      auto* input = request.add_inputs();
      input->set_name(absl::StrCat("INPUT", i));
      input->set_datatype("INT32");
      input->add_shape(1);
      input->add_shape(16);
      SetRegion(*input->mutable_parameters(), in, 64, i * 64);
      auto* output = request.add_outputs();
      output->set_name(absl::StrCat("OUTPUT", i));
      SetRegion(*output->mutable_parameters(), out, 64, i * 64);
    }
    return request;
  }

  static inline ServerProcess* server_ = nullptr;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<GRPCInferenceService::Stub> stub_;
};

std::vector<int32_t> Iota(int32_t start, int step = 1) {
  std::vector<int32_t> v(16);
  for (int i = 0; i < 16; ++i) v[i] = start + i * step;
  return v;
}

TEST_F(SharedMemoryGrpcTest, ServerMetadataListsTheExtensions) {
  inference::ServerMetadataRequest request;
  inference::ServerMetadataResponse response;
  grpc::ClientContext context;
  ASSERT_TRUE(stub_->ServerMetadata(&context, request, &response).ok());
  EXPECT_THAT(response.extensions(), ::testing::Contains("system_shared_memory"));
  EXPECT_THAT(response.extensions(), ::testing::Contains("cuda_shared_memory"));
}

TEST_F(SharedMemoryGrpcTest, SimpleBothDirectionsInSharedMemory) {
  ClientRegion in(128);
  ClientRegion out(128);
  const std::vector<int32_t> a = Iota(1);
  const std::vector<int32_t> b = Iota(100, -3);
  in.Put(0, a);
  in.Put(64, b);
  ASSERT_TRUE(Register("input_data", in.key(), 0, 128).ok());
  ASSERT_TRUE(Register("output_data", out.key(), 0, 128).ok());

  inference::SystemSharedMemoryStatusRequest status_request;
  inference::SystemSharedMemoryStatusResponse status;
  grpc::ClientContext context;
  ASSERT_TRUE(stub_->SystemSharedMemoryStatus(&context, status_request, &status).ok());
  ASSERT_EQ(status.regions().size(), 2u);
  EXPECT_EQ(status.regions().at("input_data").key(), in.key());
  EXPECT_EQ(status.regions().at("output_data").byte_size(), 128u);

  ModelInferResponse response;
  grpc::Status infer = Infer(SimpleRequest("input_data", "output_data"), &response);
  ASSERT_TRUE(infer.ok()) << infer.error_message();
  // Outputs went to the region; the response carries their parameters and no bytes.
  EXPECT_EQ(response.raw_output_contents_size(), 0);
  ASSERT_EQ(response.outputs_size(), 2);
  EXPECT_EQ(response.outputs(0).parameters().at("shared_memory_region").string_param(),
            "output_data");
  EXPECT_EQ(response.outputs(0).parameters().at("shared_memory_byte_size").int64_param(), 64);
  EXPECT_EQ(response.outputs(1).parameters().at("shared_memory_offset").int64_param(), 64);
  const std::vector<int32_t> sum = out.Get<int32_t>(0, 16);
  const std::vector<int32_t> diff = out.Get<int32_t>(64, 16);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(sum[i], a[i] + b[i]) << i;
    EXPECT_EQ(diff[i], a[i] - b[i]) << i;
  }
  // Metrics: two system regions, both mapped read-only once, the output region also writable.
  EXPECT_EQ(Metric("sluice_shared_memory_regions{kind=\"system\"}"), 2);
  EXPECT_EQ(Metric("sluice_shared_memory_mapped_bytes"), 128 * 3);
}

TEST_F(SharedMemoryGrpcTest, MixedInlineAndSharedMemoryTensors) {
  // INPUT0 in shared memory, INPUT1 inline (its raw_input_contents entry is the only one);
  // OUTPUT0 into shared memory, OUTPUT1 inline.
  ClientRegion region(4096);
  const std::vector<int32_t> a = Iota(-5, 7);
  const std::vector<int32_t> b = Iota(3, 2);
  region.Put(1000, a);
  ASSERT_TRUE(Register("mixed", region.key(), 0, 4096).ok());
  ModelInferRequest request;
  request.set_model_name("simple");
  auto* in0 = request.add_inputs();
  in0->set_name("INPUT0");
  in0->set_datatype("INT32");
  in0->add_shape(1);
  in0->add_shape(16);
  SetRegion(*in0->mutable_parameters(), "mixed", 64, 1000);
  auto* in1 = request.add_inputs();
  in1->set_name("INPUT1");
  in1->set_datatype("INT32");
  in1->add_shape(1);
  in1->add_shape(16);
  request.add_raw_input_contents()->assign(reinterpret_cast<const char*>(b.data()), 64);
  auto* out0 = request.add_outputs();
  out0->set_name("OUTPUT0");
  SetRegion(*out0->mutable_parameters(), "mixed", 64, 2048);
  request.add_outputs()->set_name("OUTPUT1");
  ModelInferResponse response;
  grpc::Status infer = Infer(request, &response);
  ASSERT_TRUE(infer.ok()) << infer.error_message();
  // One raw_output_contents entry per output: empty for the one in shared memory.
  ASSERT_EQ(response.raw_output_contents_size(), 2);
  EXPECT_TRUE(response.raw_output_contents(0).empty());
  ASSERT_EQ(response.raw_output_contents(1).size(), 64u);
  std::vector<int32_t> diff(16);
  std::memcpy(diff.data(), response.raw_output_contents(1).data(), 64);
  const std::vector<int32_t> sum = region.Get<int32_t>(2048, 16);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(sum[i], a[i] + b[i]);
    EXPECT_EQ(diff[i], a[i] - b[i]);
  }
}

TEST_F(SharedMemoryGrpcTest, StreamInferUsesSharedMemoryToo) {
  ClientRegion in(128);
  ClientRegion out(128);
  in.Put(0, Iota(10));
  in.Put(64, Iota(1));
  ASSERT_TRUE(Register("s_in", in.key(), 0, 128).ok());
  ASSERT_TRUE(Register("s_out", out.key(), 0, 128).ok());
  grpc::ClientContext context;
  auto stream = stub_->ModelStreamInfer(&context);
  ModelInferRequest request = SimpleRequest("s_in", "s_out");
  request.set_id("stream-1");
  ASSERT_TRUE(stream->Write(request));
  inference::ModelStreamInferResponse answer;
  ASSERT_TRUE(stream->Read(&answer));
  EXPECT_EQ(answer.error_message(), "");
  EXPECT_EQ(answer.infer_response().id(), "stream-1");
  EXPECT_EQ(out.Get<int32_t>(0, 16)[15], 10 + 15 + 1 + 15);
  EXPECT_EQ(out.Get<int32_t>(64, 16)[3], 9);
  // A stream request naming an unknown region is answered on the stream, which goes on.
  ASSERT_TRUE(stream->Write(SimpleRequest("s_in", "nope")));
  ASSERT_TRUE(stream->Read(&answer));
  EXPECT_THAT(answer.error_message(), HasSubstr("no shared-memory region named 'nope'"));
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(SharedMemoryGrpcTest, RegistrationErrorsAreClear) {
  ClientRegion region(4096);
  grpc::Status missing = Register("r", "/sluice_no_such_region_for_test", 0, 64);
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(missing.error_message(), HasSubstr("no shared-memory object has that key"));
  for (const char* key : {"/dev/shm/x", "/../etc/passwd", "relative", "/..", ""}) {
    grpc::Status bad = Register("r", key, 0, 64);
    EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << key;
    EXPECT_THAT(bad.error_message(), HasSubstr("is not a POSIX shared-memory name")) << key;
  }
  grpc::Status long_key = Register("r", "/" + std::string(300, 'k'), 0, 64);
  EXPECT_EQ(long_key.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  grpc::Status long_name = Register(std::string(300, 'n'), region.key(), 0, 64);
  EXPECT_EQ(long_name.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  grpc::Status past_end = Register("r", region.key(), 4000, 200);
  EXPECT_EQ(past_end.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(past_end.error_message(), HasSubstr("runs past its 4096 bytes"));
  grpc::Status wraps = Register("r", region.key(), ~uint64_t{0} - 10, 64);
  EXPECT_EQ(wraps.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  ASSERT_TRUE(Register("r", region.key(), 0, 4096).ok());
  grpc::Status twice = Register("r", region.key(), 0, 64);
  EXPECT_EQ(twice.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_THAT(twice.error_message(), HasSubstr("'r' is already registered"));
  grpc::Status unknown = Unregister("never-registered");
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::NOT_FOUND);

  // --shared-memory-max-regions=6: the seventh is refused.
  for (int i = 1; i < 6; ++i) ASSERT_TRUE(Register(absl::StrCat("r", i), region.key(), 0, 64).ok());
  grpc::Status full = Register("r6", region.key(), 0, 64);
  EXPECT_EQ(full.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(full.error_message(), HasSubstr("--shared-memory-max-regions"));
  ASSERT_TRUE(Unregister("").ok());
  // --shared-memory-max-bytes=64 MiB.
  ClientRegion big(size_t{65} << 20);
  grpc::Status too_many_bytes = Register("big", big.key(), 0, big.size());
  EXPECT_EQ(too_many_bytes.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(too_many_bytes.error_message(), HasSubstr("--shared-memory-max-bytes"));

  // CUDA on a CPU-only server: a clear refusal saying why.
  inference::CudaSharedMemoryRegisterRequest cuda;
  cuda.set_name("g");
  cuda.set_raw_handle(std::string(64, '\0'));
  cuda.set_byte_size(64);
  inference::CudaSharedMemoryRegisterResponse cuda_response;
  grpc::ClientContext context;
  grpc::Status cuda_status = stub_->CudaSharedMemoryRegister(&context, cuda, &cuda_response);
  EXPECT_EQ(cuda_status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(cuda_status.error_message(), HasSubstr("on the CPU"));
  inference::CudaSharedMemoryStatusRequest cuda_status_request;
  inference::CudaSharedMemoryStatusResponse cuda_status_response;
  grpc::ClientContext status_context;
  ASSERT_TRUE(
      stub_->CudaSharedMemoryStatus(&status_context, cuda_status_request, &cuda_status_response)
          .ok());
  EXPECT_TRUE(cuda_status_response.regions().empty());
}

TEST_F(SharedMemoryGrpcTest, InferenceErrorsAreClear) {
  ClientRegion region(256);
  ASSERT_TRUE(Register("small", region.key(), 0, 96).ok());
  ModelInferResponse response;
  // Unknown region.
  grpc::Status unknown = Infer(SimpleRequest("nope", "small"), &response);
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(unknown.error_message(),
              HasSubstr("input 'INPUT0': no shared-memory region named 'nope'"));
  // Region too small for the declared tensor: INPUT1 at offset 64 + 64 runs past its 96 bytes.
  grpc::Status small = Infer(SimpleRequest("small", "small"), &response);
  EXPECT_EQ(small.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(small.error_message(), HasSubstr("input 'INPUT1' in shared-memory region 'small'"));
  EXPECT_THAT(small.error_message(), HasSubstr("runs past its 96 bytes"));
  // A byte size that is not what the shape needs.
  ModelInferRequest wrong_size = SimpleRequest("small", "small");
  SetRegion(*wrong_size.mutable_inputs(1)->mutable_parameters(), "small", 32, 0);
  grpc::Status mismatch = Infer(wrong_size, &response);
  EXPECT_EQ(mismatch.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(mismatch.error_message(), HasSubstr("16 INT32 elements need 64 bytes"));
  // Offset + size overflowing uint64.
  ModelInferRequest overflow = SimpleRequest("small", "small");
  SetRegion(*overflow.mutable_inputs(0)->mutable_parameters(), "small", 64,
            std::numeric_limits<int64_t>::max());
  EXPECT_EQ(Infer(overflow, &response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // A negative offset or a byte size of the wrong type.
  ModelInferRequest negative = SimpleRequest("small", "small");
  (*negative.mutable_inputs(0)->mutable_parameters())["shared_memory_offset"].set_int64_param(-8);
  EXPECT_EQ(Infer(negative, &response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ModelInferRequest no_size = SimpleRequest("small", "small");
  no_size.mutable_inputs(0)->mutable_parameters()->erase("shared_memory_byte_size");
  grpc::Status missing_size = Infer(no_size, &response);
  EXPECT_EQ(missing_size.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(missing_size.error_message(), HasSubstr("needs shared_memory_byte_size"));
  // An input in shared memory that also has raw contents.
  ModelInferRequest both = SimpleRequest("small", "small");
  both.add_raw_input_contents()->assign(64, '\0');
  grpc::Status mixed = Infer(both, &response);
  EXPECT_EQ(mixed.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(mixed.error_message(), HasSubstr("inputs not in shared memory"));

  // Output region too small for the result: OUTPUT0 is 64 bytes, its placement offers 32.
  ClientRegion in(128);
  ClientRegion out(128);
  in.Put(0, Iota(1));
  in.Put(64, Iota(2));
  ASSERT_TRUE(Register("in", in.key(), 0, 128).ok());
  ASSERT_TRUE(Register("out", out.key(), 0, 128).ok());
  ModelInferRequest short_output = SimpleRequest("in", "out");
  SetRegion(*short_output.mutable_outputs(0)->mutable_parameters(), "out", 32, 0);
  grpc::Status too_small = Infer(short_output, &response);
  EXPECT_EQ(too_small.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(too_small.error_message(),
              HasSubstr("output 'OUTPUT0' is 64 bytes (shape [1,16] INT32) but its "
                        "shared_memory_byte_size in region 'out' is only 32"));
  EXPECT_EQ(out.Get<int32_t>(0, 1)[0], 0);  // nothing written
  // An output placement outside its region is refused before the request runs.
  ModelInferRequest outside = SimpleRequest("in", "out");
  SetRegion(*outside.mutable_outputs(1)->mutable_parameters(), "out", 64, 100);
  EXPECT_EQ(Infer(outside, &response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

// Identity with a 1 MiB FP32 tensor both ways while another thread unregisters and registers the
// regions again and again: every answer is either right (values checked) or a clear refusal
// naming the missing region; nothing crashes, and when the load ends no mapping is left behind.
TEST_F(SharedMemoryGrpcTest, UnregisterDuringLoad) {
  constexpr int kElements = 256 * 1024;
  constexpr int64_t kBytes = kElements * 4;
  ClientRegion in(kBytes);
  ClientRegion out(size_t{kBytes} * 4);
  std::vector<float> values(kElements);
  for (int i = 0; i < kElements; ++i) values[i] = static_cast<float>(i) * 0.5f;
  in.Put(0, values);
  ASSERT_TRUE(Register("load_in", in.key(), 0, kBytes).ok());
  ASSERT_TRUE(Register("load_out", out.key(), 0, kBytes * 4).ok());

  std::atomic<bool> stop{false};
  std::atomic<int> ok{0};
  std::atomic<int> refused{0};
  std::atomic<int> wrong{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&, c] {
      auto stub = GRPCInferenceService::NewStub(channel_);
      ModelInferRequest request;
      request.set_model_name("identity");
      auto* input = request.add_inputs();
      input->set_name("INPUT0");
      input->set_datatype("FP32");
      input->add_shape(1);
      input->add_shape(kElements);
      SetRegion(*input->mutable_parameters(), "load_in", kBytes);
      auto* output = request.add_outputs();
      output->set_name("OUTPUT0");
      SetRegion(*output->mutable_parameters(), "load_out", kBytes, c * kBytes);
      for (int n = 0; n < 200 && !stop.load(); ++n) {
        // Cleared first: a right answer must have been written by this request.
        out.Clear(static_cast<size_t>(c) * kBytes, kBytes);
        ModelInferResponse response;
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
        grpc::Status status = stub->ModelInfer(&context, request, &response);
        if (status.ok()) {
          const std::vector<float> got = out.Get<float>(static_cast<size_t>(c) * kBytes, kElements);
          if (got != values) wrong.fetch_add(1);
          ok.fetch_add(1);
        } else if (status.error_code() == grpc::StatusCode::INVALID_ARGUMENT &&
                   status.error_message().find("no shared-memory region named") !=
                       std::string::npos) {
          refused.fetch_add(1);
        } else {
          ADD_FAILURE() << status.error_code() << ": " << status.error_message();
          wrong.fetch_add(1);
        }
      }
    });
  }
  int cycles = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(4);
  while (std::chrono::steady_clock::now() < until) {
    EXPECT_TRUE(Unregister("load_in").ok());
    EXPECT_TRUE(Unregister("load_out").ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    EXPECT_TRUE(Register("load_in", in.key(), 0, kBytes).ok());
    EXPECT_TRUE(Register("load_out", out.key(), 0, kBytes * 4).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(8));
    ++cycles;
  }
  stop.store(true);
  for (auto& t : clients) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(ok.load(), 0);
  EXPECT_GT(cycles, 10);
  std::cout << "unregister during load: " << ok.load() << " answered, " << refused.load()
            << " refused, " << cycles << " unregister/register cycles\n";
  ASSERT_TRUE(Unregister("").ok());
  // No request in flight: nothing mapped, nothing draining.
  EXPECT_EQ(MetricSettlesAt("sluice_shared_memory_mapped_bytes", 0), 0);
  EXPECT_EQ(MetricSettlesAt("sluice_shared_memory_draining_regions", 0), 0);
  EXPECT_EQ(Metric("sluice_shared_memory_regions{kind=\"system\"}"), 0);
}

TEST(SharedMemoryOffTest, ZeroRegionsRefusesRegistration) {
  auto server = ServerProcess::Start(
      {"--model-repository=" + testing::BundledModelRepository(), "--shared-memory-max-regions=0"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = GRPCInferenceService::NewStub(
      grpc::CreateChannel((*server)->address(), grpc::InsecureChannelCredentials()));
  ClientRegion region(4096);
  inference::SystemSharedMemoryRegisterRequest request;
  request.set_name("r");
  request.set_key(region.key());
  request.set_byte_size(64);
  inference::SystemSharedMemoryRegisterResponse response;
  grpc::ClientContext context;
  grpc::Status status = stub->SystemSharedMemoryRegister(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), HasSubstr("--shared-memory-max-regions=0"));
}

}  // namespace
}  // namespace sluice
