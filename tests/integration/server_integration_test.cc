// sluice-server as a process on loopback, driven by the client library: every RPC, the bundled
// models against expected values, concurrency, streams, bad requests, model control, SIGTERM.

#include <signal.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <regex>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/inference_client.h"
#include "client/tensor_codec.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/integration/grpc_health_check.h"
#include "tests/integration/server_process.h"

namespace sluice {
namespace {

using client::AddInput;
using client::DecodeOutput;
using client::InferenceClient;
using inference::ModelInferRequest;
using inference::ModelInferResponse;
using ::testing::HasSubstr;
using testing::ServerProcess;

std::unique_ptr<InferenceClient> Connect(const ServerProcess& server) {
  auto client = InferenceClient::Create(server.address());
  EXPECT_TRUE(client.ok()) << client.status();
  return *std::move(client);
}

std::vector<int32_t> RandomInts(std::mt19937& rng, size_t n) {
  std::uniform_int_distribution<int32_t> dist(std::numeric_limits<int32_t>::min(),
                                              std::numeric_limits<int32_t>::max());
  std::vector<int32_t> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

int32_t WrapAdd(int32_t a, int32_t b) {
  return static_cast<int32_t>(static_cast<uint32_t>(a) + static_cast<uint32_t>(b));
}
int32_t WrapSub(int32_t a, int32_t b) {
  return static_cast<int32_t>(static_cast<uint32_t>(a) - static_cast<uint32_t>(b));
}

// A `simple` request of `batch` rows with random data; `a` and `b` receive the inputs.
ModelInferRequest SimpleRequest(std::mt19937& rng, int batch, std::vector<int32_t>& a,
                                std::vector<int32_t>& b, const std::string& id = "") {
  a = RandomInts(rng, 16 * batch);
  b = RandomInts(rng, 16 * batch);
  ModelInferRequest request;
  request.set_model_name("simple");
  request.set_id(id);
  EXPECT_TRUE(AddInput(request, "INPUT0", {batch, 16}, a).ok());
  EXPECT_TRUE(AddInput(request, "INPUT1", {batch, 16}, b).ok());
  return request;
}

// Checks a `simple` response against its inputs; returns "" or what is wrong.
std::string CheckSimple(const ModelInferResponse& response, const std::vector<int32_t>& a,
                        const std::vector<int32_t>& b) {
  auto sum = DecodeOutput(response, "OUTPUT0");
  auto diff = DecodeOutput(response, "OUTPUT1");
  if (!sum.ok() || !diff.ok()) return "missing output";
  auto s = sum->As<int32_t>();
  auto d = diff->As<int32_t>();
  if (!s.ok() || !d.ok() || s->size() != a.size() || d->size() != a.size()) return "bad size";
  for (size_t i = 0; i < a.size(); ++i) {
    if ((*s)[i] != WrapAdd(a[i], b[i]) || (*d)[i] != WrapSub(a[i], b[i])) {
      return absl::StrCat("wrong value at ", i);
    }
  }
  return "";
}

class ServerIntegrationTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto server = ServerProcess::Start({"--model-repository=" + testing::BundledModelRepository()});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
  }
  static void TearDownTestSuite() {
    if (server_ != nullptr) {
      auto code = server_->Stop();
      EXPECT_TRUE(code.ok() && *code == 0) << server_->Log();
    }
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr);
    client_ = Connect(*server_);
  }

  static ServerProcess* server_;
  std::unique_ptr<InferenceClient> client_;
  std::mt19937 rng_{12345};
};
ServerProcess* ServerIntegrationTest::server_ = nullptr;

TEST_F(ServerIntegrationTest, HealthAndMetadata) {
  EXPECT_EQ(client_->ServerLive().value_or(false), true);
  EXPECT_EQ(client_->ServerReady().value_or(false), true);
  auto metadata = client_->ServerMetadata();
  ASSERT_TRUE(metadata.ok()) << metadata.status();
  EXPECT_EQ(metadata->name(), "sluice");
  EXPECT_THAT(metadata->extensions(), ::testing::Contains("statistics"));
  EXPECT_EQ(client_->ModelReady("simple").value_or(false), true);
  EXPECT_EQ(client_->ModelReady("simple", "1").value_or(false), true);
  EXPECT_EQ(client_->ModelReady("simple", "2").value_or(true), false);
  EXPECT_EQ(client_->ModelReady("no_such_model").value_or(true), false);

  auto model = client_->ModelMetadata("simple");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->name(), "simple");
  EXPECT_THAT(model->versions(), ::testing::ElementsAre("1"));
  ASSERT_EQ(model->inputs_size(), 2);
  EXPECT_EQ(model->inputs(0).name(), "INPUT0");
  EXPECT_EQ(model->inputs(0).datatype(), "INT32");
  EXPECT_THAT(model->inputs(0).shape(), ::testing::ElementsAre(-1, 16));
  EXPECT_EQ(client_->ModelMetadata("nope").status().code(), absl::StatusCode::kNotFound);

  auto config = client_->ModelConfig("simple");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->name(), "simple");
  EXPECT_EQ(config->max_batch_size(), 8);
  EXPECT_EQ(config->input_size(), 2);

  auto index = client_->RepositoryIndex();
  ASSERT_TRUE(index.ok()) << index.status();
  std::map<std::string, std::string> states;
  for (const auto& m : index->models()) states[m.name()] = m.state();
  EXPECT_EQ(states["simple"], "READY");
  EXPECT_EQ(states["identity"], "READY");
}

TEST_F(ServerIntegrationTest, GrpcHealthServiceSaysServing) {
  // grpc.health.v1.Health/Check with an empty HealthCheckRequest; SERVING encodes as 08 01.
  absl::StatusOr<std::string> bytes = testing::GrpcHealthCheck(server_->address());
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, std::string("\x08\x01", 2));
}

TEST_F(ServerIntegrationTest, SimpleMatchesExpectedValuesForEveryBatchSize) {
  for (int batch = 1; batch <= 8; ++batch) {
    std::vector<int32_t> a, b;
    ModelInferRequest request = SimpleRequest(rng_, batch, a, b, absl::StrCat("req-", batch));
    auto response = client_->Infer(request);
    ASSERT_TRUE(response.ok()) << response.status();
    EXPECT_EQ(response->id(), absl::StrCat("req-", batch));
    EXPECT_EQ(response->model_name(), "simple");
    EXPECT_EQ(response->model_version(), "1");
    EXPECT_EQ(response->raw_output_contents_size(), 2);
    auto sum = DecodeOutput(*response, "OUTPUT0");
    ASSERT_TRUE(sum.ok());
    EXPECT_THAT(sum->shape, ::testing::ElementsAre(batch, 16));
    EXPECT_EQ(CheckSimple(*response, a, b), "");
  }
}

TEST_F(ServerIntegrationTest, RequestedOutputSubsetAndTypedInputs) {
  ModelInferRequest request;
  request.set_model_name("simple");
  for (const char* name : {"INPUT0", "INPUT1"}) {
    auto* input = request.add_inputs();
    input->set_name(name);
    input->set_datatype("INT32");
    input->add_shape(1);
    input->add_shape(16);
    for (int i = 0; i < 16; ++i)
      input->mutable_contents()->add_int_contents(i * (name[5] == '0' ? 3 : 1));
  }
  client::AddRequestedOutput(request, "OUTPUT1");
  auto response = client_->Infer(request);
  ASSERT_TRUE(response.ok()) << response.status();
  ASSERT_EQ(response->outputs_size(), 1);
  EXPECT_EQ(response->outputs(0).name(), "OUTPUT1");
  auto diff = DecodeOutput(*response, "OUTPUT1")->As<int32_t>();
  ASSERT_TRUE(diff.ok());
  for (int i = 0; i < 16; ++i) EXPECT_EQ((*diff)[i], 2 * i);
}

TEST_F(ServerIntegrationTest, IdentityReturnsItsInput) {
  std::vector<float> values(1000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f - 3.f;
  ModelInferRequest request;
  request.set_model_name("identity");
  ASSERT_TRUE(AddInput(request, "INPUT0", {2, 500}, values).ok());
  auto response = client_->Infer(request);
  ASSERT_TRUE(response.ok()) << response.status();
  auto out = DecodeOutput(*response, "OUTPUT0");
  ASSERT_TRUE(out.ok());
  EXPECT_THAT(out->shape, ::testing::ElementsAre(2, 500));
  EXPECT_EQ(out->As<float>().value(), values);
}

TEST_F(ServerIntegrationTest, ThousandConcurrentAsyncRequestsEachGetTheirOwnAnswer) {
  constexpr int kRequests = 1000;
  struct Expected {
    std::vector<int32_t> a, b;
  };
  std::vector<Expected> expected(kRequests);
  std::vector<std::string> errors(kRequests, "not answered");
  std::atomic<int> answered{0};
  for (int i = 0; i < kRequests; ++i) {
    const int batch = 1 + i % 3;
    ModelInferRequest request =
        SimpleRequest(rng_, batch, expected[i].a, expected[i].b, absl::StrCat(i));
    client_->AsyncInfer(std::move(request), [&, i](client::InferResult result) {
      if (!result.ok()) {
        errors[i] = result.status().ToString();
      } else if (result->id() != absl::StrCat(i)) {
        errors[i] = "id mismatch";
      } else {
        errors[i] = CheckSimple(*result, expected[i].a, expected[i].b);
      }
      answered++;
    });
  }
  client_->WaitForAsync();
  EXPECT_EQ(answered.load(), kRequests);
  for (int i = 0; i < kRequests; ++i) ASSERT_EQ(errors[i], "") << "request " << i;

  // The batcher really batched: some executions held more than one request.
  auto stats = client_->ModelStatistics("simple");
  ASSERT_TRUE(stats.ok());
  const auto& s = stats->model_stats(0);
  EXPECT_LT(s.execution_count(), s.inference_stats().success().count());
}

TEST_F(ServerIntegrationTest, ThousandMessageStreamAnswersEveryRequest) {
  constexpr int kMessages = 1000;
  std::vector<std::vector<int32_t>> a(kMessages), b(kMessages);
  std::vector<ModelInferRequest> requests;
  for (int i = 0; i < kMessages; ++i) {
    requests.push_back(SimpleRequest(rng_, 1 + i % 2, a[i], b[i], absl::StrCat("s", i)));
  }
  // Every 100th message is bad (unknown input name): it must come back as an error with its id
  // while the stream goes on.
  for (int i = 50; i < kMessages; i += 100) {
    requests[i].mutable_inputs(1)->set_name("BOGUS");
  }
  std::mutex mu;
  std::map<std::string, std::string> results;  // id -> "" or error
  auto stream = client_->StartStream([&](client::InferResult result) {
    std::lock_guard<std::mutex> lock(mu);
    if (!result.ok()) {
      results[client::RequestIdOf(result.status())] = std::string(result.status().message());
      return;
    }
    const int i = std::stoi(result->id().substr(1));
    results[result->id()] = CheckSimple(*result, a[i], b[i]);
  });
  ASSERT_TRUE(stream.ok()) << stream.status();
  for (auto& request : requests) ASSERT_TRUE((*stream)->Write(std::move(request)).ok());
  ASSERT_TRUE((*stream)->Finish().ok());
  ASSERT_EQ(results.size(), static_cast<size_t>(kMessages));
  for (int i = 0; i < kMessages; ++i) {
    const std::string& result = results[absl::StrCat("s", i)];
    if (i % 100 == 50) {
      EXPECT_THAT(result, HasSubstr("'BOGUS'")) << i;
    } else {
      EXPECT_EQ(result, "") << i;
    }
  }
}

TEST_F(ServerIntegrationTest, BadRequestsGetClearErrorsAndTheServerKeepsServing) {
  struct Case {
    std::string what;
    std::function<void(ModelInferRequest&)> mutate;
    absl::StatusCode code;
    std::string message;
  };
  auto good = [&] {
    std::vector<int32_t> a, b;
    return SimpleRequest(rng_, 1, a, b);
  };
  const std::vector<Case> cases = {
      {"unknown model", [](ModelInferRequest& r) { r.set_model_name("nope"); },
       absl::StatusCode::kNotFound, "unknown model 'nope'"},
      {"unknown version", [](ModelInferRequest& r) { r.set_model_version("7"); },
       absl::StatusCode::kNotFound, "no version 7"},
      {"wrong shape",
       [](ModelInferRequest& r) {
         r.mutable_inputs(0)->set_shape(1, 8);
         r.mutable_raw_input_contents(0)->resize(32);
       },
       absl::StatusCode::kInvalidArgument, "input 'INPUT0' has shape [1,8]"},
      {"batch too large",
       [](ModelInferRequest& r) {
         for (int i = 0; i < 2; ++i) {
           r.mutable_inputs(i)->set_shape(0, 9);
           r.mutable_raw_input_contents(i)->resize(9 * 64);
         }
       },
       absl::StatusCode::kInvalidArgument, "batch size 9"},
      {"wrong dtype", [](ModelInferRequest& r) { r.mutable_inputs(1)->set_datatype("FP32"); },
       absl::StatusCode::kInvalidArgument, "input 'INPUT1' has data type FP32"},
      {"missing input",
       [](ModelInferRequest& r) {
         r.mutable_inputs()->RemoveLast();
         r.mutable_raw_input_contents()->RemoveLast();
       },
       absl::StatusCode::kInvalidArgument, "missing input 'INPUT1'"},
      {"raw byte size mismatch",
       [](ModelInferRequest& r) { r.mutable_raw_input_contents(0)->resize(60); },
       absl::StatusCode::kInvalidArgument, "input 'INPUT0' holds 60 bytes"},
      {"mixed raw and typed",
       [](ModelInferRequest& r) { r.mutable_inputs(1)->mutable_contents()->add_int_contents(1); },
       absl::StatusCode::kInvalidArgument, "'INPUT1' has typed contents"},
      {"unknown output", [](ModelInferRequest& r) { r.add_outputs()->set_name("OUTPUT9"); },
       absl::StatusCode::kInvalidArgument, "no output named 'OUTPUT9'"},
      {"bad version string", [](ModelInferRequest& r) { r.set_model_version("latest"); },
       absl::StatusCode::kInvalidArgument, "not a positive integer"},
  };
  for (const Case& c : cases) {
    ModelInferRequest request = good();
    c.mutate(request);
    auto response = client_->Infer(request);
    ASSERT_FALSE(response.ok()) << c.what;
    EXPECT_EQ(response.status().code(), c.code) << c.what << ": " << response.status();
    EXPECT_THAT(std::string(response.status().message()), HasSubstr(c.message)) << c.what;
  }
  std::vector<int32_t> a, b;
  auto response = client_->Infer(SimpleRequest(rng_, 2, a, b));
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(CheckSimple(*response, a, b), "");
}

TEST_F(ServerIntegrationTest, StatisticsCountWhatWasSent) {
  auto before = client_->ModelStatistics("identity");
  ASSERT_TRUE(before.ok()) << before.status();
  constexpr int kRequests = 20;
  for (int i = 0; i < kRequests; ++i) {
    ModelInferRequest request;
    request.set_model_name("identity");
    ASSERT_TRUE(AddInput(request, "INPUT0", {3, 4}, std::vector<float>(12, 1.f)).ok());
    ASSERT_TRUE(client_->Infer(request).ok());
  }
  ModelInferRequest bad;
  bad.set_model_name("identity");
  ASSERT_TRUE(AddInput(bad, "INPUT0", {3, 4}, std::vector<float>(12, 1.f)).ok());
  bad.mutable_inputs(0)->set_datatype("INT32");
  EXPECT_FALSE(client_->Infer(bad).ok());

  auto after = client_->ModelStatistics("identity");
  ASSERT_TRUE(after.ok());
  const auto& s0 = before->model_stats(0);
  const auto& s1 = after->model_stats(0);
  EXPECT_EQ(s1.name(), "identity");
  EXPECT_EQ(s1.version(), "1");
  EXPECT_EQ(s1.inference_count() - s0.inference_count(), 3u * kRequests);
  EXPECT_EQ(s1.inference_stats().success().count() - s0.inference_stats().success().count(),
            static_cast<uint64_t>(kRequests));
  EXPECT_EQ(s1.inference_stats().fail().count() - s0.inference_stats().fail().count(), 1u);
  EXPECT_EQ(s1.inference_stats().queue().count() - s0.inference_stats().queue().count(),
            static_cast<uint64_t>(kRequests));
  EXPECT_GT(s1.inference_stats().compute_infer().ns(), s0.inference_stats().compute_infer().ns());
  EXPECT_GT(s1.last_inference(), 0u);
  EXPECT_EQ(client_->ModelStatistics("nope").status().code(), absl::StatusCode::kNotFound);
  auto all = client_->ModelStatistics();
  ASSERT_TRUE(all.ok());
  // embedder, embedder/tokenizer (its tokenizer's entry), identity, mlp, simple: the bundled
  // models.
  EXPECT_EQ(all->model_stats_size(), 5);
}

TEST_F(ServerIntegrationTest, LoadUnloadNeedExplicitMode) {
  EXPECT_EQ(client_->LoadModel("simple").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(client_->UnloadModel("simple").code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(ServerIntegrationTest, UnimplementedRpcsSaySo) {
  auto channel = grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials());
  auto stub = inference::GRPCInferenceService::NewStub(channel);
  grpc::ClientContext context;
  inference::TraceSettingRequest request;
  inference::TraceSettingResponse response;
  grpc::Status status = stub->TraceSetting(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_THAT(status.error_message(), HasSubstr("trace settings"));
  // Shared memory is implemented (issue 16; shared_memory_integration_test.cc): no region yet.
  grpc::ClientContext shm_context;
  inference::SystemSharedMemoryStatusRequest shm_request;
  inference::SystemSharedMemoryStatusResponse shm_response;
  EXPECT_TRUE(stub->SystemSharedMemoryStatus(&shm_context, shm_request, &shm_response).ok());
  EXPECT_TRUE(shm_response.regions().empty());
}

// --- Tests with a server of their own ------------------------------------------------------------

class TempRepository {
 public:
  TempRepository() {
    root_ = std::filesystem::path(::testing::TempDir()) /
            absl::StrCat("sluice_repo_", getpid(), "_", counter_++);
    std::filesystem::create_directories(root_);
  }
  ~TempRepository() { std::filesystem::remove_all(root_); }
  void Add(const std::string& name, const std::string& config) {
    std::filesystem::create_directories(root_ / name / "1");
    std::ofstream(root_ / name / "config.pbtxt") << config;
  }
  void CopyBundled(const std::string& name) {
    std::filesystem::copy(std::filesystem::path(testing::BundledModelRepository()) / name,
                          root_ / name, std::filesystem::copy_options::recursive);
  }
  std::string path() const { return root_.string(); }

 private:
  static inline int counter_ = 0;
  std::filesystem::path root_;
};

TEST(ServerLifecycleTest, ExplicitModelControl) {
  TempRepository repo;
  repo.CopyBundled("simple");
  repo.CopyBundled("identity");
  repo.Add("broken", "backend: \"identity\"\ninput [ { name: \"X\" data_type: TYPE_NOPE } ]\n");
  auto server = ServerProcess::Start({"--model-repository=" + repo.path(),
                                      "--model-control-mode=explicit", "--load-model=simple"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = Connect(**server);

  auto index = client->RepositoryIndex();
  ASSERT_TRUE(index.ok());
  std::map<std::string, inference::RepositoryIndexResponse::ModelIndex> models;
  for (const auto& m : index->models()) models[m.name()] = m;
  ASSERT_EQ(models.size(), 3u);
  EXPECT_EQ(models["simple"].state(), "READY");
  EXPECT_EQ(models["identity"].state(), "UNAVAILABLE");
  EXPECT_EQ(models["identity"].reason(), "not loaded");
  EXPECT_EQ(client->RepositoryIndex(true)->models_size(), 1);

  ModelInferRequest request;
  request.set_model_name("identity");
  ASSERT_TRUE(AddInput(request, "INPUT0", {1, 3}, std::vector<float>{1, 2, 3}).ok());
  EXPECT_EQ(client->Infer(request).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(client->LoadModel("identity").ok());
  EXPECT_TRUE(client->Infer(request).ok());
  ASSERT_TRUE(client->UnloadModel("identity").ok());
  EXPECT_EQ(client->Infer(request).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client->ModelReady("identity").value_or(true), false);

  absl::Status broken = client->LoadModel("broken");
  EXPECT_EQ(broken.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(broken.message()), HasSubstr("TYPE_NOPE"));
  index = client->RepositoryIndex();
  for (const auto& m : index->models()) {
    if (m.name() == "broken") {
      EXPECT_THAT(m.reason(), HasSubstr("TYPE_NOPE"));
    }
  }
  EXPECT_EQ(client->LoadModel("../simple").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client->LoadModel("absent").code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(client->ModelReady("simple").value_or(false));  // the others kept serving
  EXPECT_EQ((*server)->Stop().value_or(-1), 0);
}

TEST(ServerLifecycleTest, FullQueueAnswersResourceExhaustedAtOnce) {
  TempRepository repo;
  // The first request waits up to 3 s for a fuller batch; the queue holds only it.
  repo.Add("slow", R"pb(
    backend: "identity"
    max_batch_size: 64 input
    [ {
      name: "IN"
      data_type: TYPE_FP32
      dims: [ 1 ]
    }] output
    [ {
      name: "OUT"
      data_type: TYPE_FP32
      dims: [ 1 ]
    }]
    dynamic_batching {
      max_queue_delay_microseconds: 3000000
      default_queue_policy { max_queue_size: 1 }
    }
  )pb");
  auto server = ServerProcess::Start({"--model-repository=" + repo.path()});
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = Connect(**server);
  ModelInferRequest request;
  request.set_model_name("slow");
  ASSERT_TRUE(AddInput(request, "IN", {1, 1}, std::vector<float>{4.f}).ok());

  std::atomic<bool> first_done{false};
  absl::Status first_status = absl::UnknownError("unset");
  client->AsyncInfer(request, [&](client::InferResult result) {
    first_status = result.status();
    first_done = true;
  });
  // Give the first request time to reach the queue (it then waits 3 s there for a batch).
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto start = std::chrono::steady_clock::now();
  auto rejected = client->Infer(request);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(rejected.ok());
  EXPECT_EQ(rejected.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(rejected.status().message()), HasSubstr("queue is full"));
  EXPECT_LT(elapsed, std::chrono::seconds(2)) << "rejection must not wait for the queue";
  EXPECT_FALSE(first_done.load());
  client->WaitForAsync();
  EXPECT_TRUE(first_status.ok()) << first_status;
  EXPECT_EQ((*server)->Stop().value_or(-1), 0);
}

TEST(ServerLifecycleTest, SigtermUnderLoadAnswersEveryAcceptedRequest) {
  auto server = ServerProcess::Start({"--model-repository=" + testing::BundledModelRepository()});
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = Connect(**server);
  std::mt19937 rng(7);

  constexpr int kRequests = 3000;
  std::vector<std::vector<int32_t>> a(kRequests), b(kRequests);
  std::vector<ModelInferRequest> requests;
  for (int i = 0; i < kRequests; ++i)
    requests.push_back(SimpleRequest(rng, 1, a[i], b[i], absl::StrCat(i)));

  std::mutex mu;
  std::map<absl::StatusCode, int> outcomes;
  std::vector<std::string> wrong;
  std::atomic<int> callbacks{0};
  std::thread sender([&] {
    for (int i = 0; i < kRequests; ++i) {
      client->AsyncInfer(requests[i], [&, i](client::InferResult result) {
        std::lock_guard<std::mutex> lock(mu);
        outcomes[result.status().code()]++;
        if (result.ok()) {
          std::string check = CheckSimple(*result, a[i], b[i]);
          if (!check.empty()) wrong.push_back(check);
        }
        callbacks++;
      });
      // Keep a bounded number in flight so the signal lands mid-stream.
      while (client->AsyncInFlight() > 64) std::this_thread::yield();
    }
  });
  while (callbacks.load() < kRequests / 4)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto exit_code = (*server)->Stop(std::chrono::seconds(30), SIGTERM);
  sender.join();
  client->WaitForAsync();

  ASSERT_TRUE(exit_code.ok()) << exit_code.status();
  EXPECT_EQ(*exit_code, 0) << (*server)->Log();
  EXPECT_EQ(callbacks.load(), kRequests);
  EXPECT_TRUE(wrong.empty());
  int total = 0;
  for (const auto& [code, count] : outcomes) {
    total += count;
    // Accepted requests are answered OK. Later ones are refused: UNAVAILABLE from the draining
    // engine, or UNAVAILABLE/CANCELLED from gRPC for calls that never reached the service once
    // the server shuts its port. Nothing else.
    EXPECT_TRUE(code == absl::StatusCode::kOk || code == absl::StatusCode::kUnavailable ||
                code == absl::StatusCode::kCancelled)
        << absl::StatusCodeToString(code) << " x" << count;
  }
  EXPECT_EQ(total, kRequests);
  EXPECT_GE(outcomes[absl::StatusCode::kOk], kRequests / 4);
  // Every request the engine accepted was answered, and every answer reached the client: the
  // server's own count of successes equals the OKs received, and it failed none it accepted.
  const std::string log = (*server)->Log();
  EXPECT_THAT(log, HasSubstr("received SIGTERM"));
  std::smatch match;
  ASSERT_TRUE(std::regex_search(log, match,
                                std::regex("final stats model=simple version=1 success=([0-9]+) "
                                           "failure=([0-9]+)")))
      << log;
  EXPECT_EQ(std::stoi(match[1]), outcomes[absl::StatusCode::kOk]);
  EXPECT_EQ(std::stoi(match[2]), 0);
}

TEST(ServerLifecycleTest, ClientReportsADownServerClearly) {
  auto client = InferenceClient::Create("127.0.0.1:1");
  ASSERT_TRUE(client.ok());
  auto live = (*client)->ServerLive();
  ASSERT_FALSE(live.ok());
  EXPECT_EQ(live.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(live.status().message()), HasSubstr("127.0.0.1:1"));
}

TEST(ServerLifecycleTest, OversizeMessageIsRefusedAndServerKeepsServing) {
  auto server = ServerProcess::Start({"--model-repository=" + testing::BundledModelRepository(),
                                      "--grpc-max-message-bytes=65536"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = Connect(**server);
  ModelInferRequest big;
  big.set_model_name("identity");
  ASSERT_TRUE(AddInput(big, "INPUT0", {1, 100000}, std::vector<float>(100000, 1.f)).ok());
  auto response = client->Infer(big);
  EXPECT_EQ(response.status().code(), absl::StatusCode::kResourceExhausted) << response.status();
  ModelInferRequest small;
  small.set_model_name("identity");
  ASSERT_TRUE(AddInput(small, "INPUT0", {1, 10}, std::vector<float>(10, 1.f)).ok());
  EXPECT_TRUE(client->Infer(small).ok());
  EXPECT_EQ((*server)->Stop().value_or(-1), 0);
}

TEST(ServerLifecycleTest, BadFlagsAndMissingRepositoryFailClearly) {
  auto missing = ServerProcess::Start({"--model-repository=/nonexistent/sluice/models"});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("is not a directory"));
  auto device = ServerProcess::Start({"--device=tpu:0"});
  ASSERT_FALSE(device.ok());
  EXPECT_THAT(std::string(device.status().message()), HasSubstr("--device=tpu:0"));
}

}  // namespace
}  // namespace sluice
