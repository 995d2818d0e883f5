// InferenceClient against an in-process fake KServe v2 service on loopback (port 0). The fake is a
// few lines of synchronous gRPC service, not the real server: these tests cover the client's own
// machinery (status mapping, deadlines, async bookkeeping, the stream reactor under concurrent
// writes); tests/integration/ runs the client against the real server.

#include "client/inference_client.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/tensor_codec.h"
#include "gmock/gmock.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"

namespace sluice::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// "simple": OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 (INT32). "sleep": answers after
// 2 s. Requests whose id starts with "bad" fail; in a stream, id "abort" ends the stream with
// INVALID_ARGUMENT.
class FakeService final : public inference::GRPCInferenceService::Service {
 public:
  grpc::Status ServerLive(grpc::ServerContext*, const inference::ServerLiveRequest*,
                          inference::ServerLiveResponse* response) override {
    response->set_live(true);
    return grpc::Status::OK;
  }

  grpc::Status ServerReady(grpc::ServerContext*, const inference::ServerReadyRequest*,
                           inference::ServerReadyResponse* response) override {
    response->set_ready(false);
    return grpc::Status::OK;
  }

  grpc::Status ModelReady(grpc::ServerContext*, const inference::ModelReadyRequest* request,
                          inference::ModelReadyResponse* response) override {
    if (request->name() != "simple") {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown model '" + request->name() + "'");
    }
    response->set_ready(request->version().empty() || request->version() == "1");
    return grpc::Status::OK;
  }

  grpc::Status ModelConfig(grpc::ServerContext*, const inference::ModelConfigRequest* request,
                           inference::ModelConfigResponse* response) override {
    response->mutable_config()->set_name(request->name());
    response->mutable_config()->set_max_batch_size(8);
    return grpc::Status::OK;
  }

  grpc::Status RepositoryIndex(grpc::ServerContext*,
                               const inference::RepositoryIndexRequest* request,
                               inference::RepositoryIndexResponse* response) override {
    auto* model = response->add_models();
    model->set_name("simple");
    model->set_state("READY");
    if (!request->ready()) {
      auto* broken = response->add_models();
      broken->set_name("broken");
      broken->set_state("UNAVAILABLE");
      broken->set_reason("missing weights");
    }
    return grpc::Status::OK;
  }

  grpc::Status RepositoryModelLoad(grpc::ServerContext*,
                                   const inference::RepositoryModelLoadRequest* request,
                                   inference::RepositoryModelLoadResponse*) override {
    last_loaded_ = request->model_name();
    return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "model control is disabled");
  }

  grpc::Status ModelInfer(grpc::ServerContext* context, const inference::ModelInferRequest* request,
                          inference::ModelInferResponse* response) override {
    if (request->model_name() == "sleep") {
      for (int i = 0; i < 200 && !context->IsCancelled(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    return Compute(*request, *response);
  }

  grpc::Status ModelStreamInfer(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<inference::ModelStreamInferResponse, inference::ModelInferRequest>*
          stream) override {
    inference::ModelInferRequest request;
    while (stream->Read(&request)) {
      if (request.id() == "abort") {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "abort requested");
      }
      inference::ModelStreamInferResponse response;
      grpc::Status status = Compute(request, *response.mutable_infer_response());
      if (!status.ok()) {
        response.set_error_message(status.error_message());
        response.mutable_infer_response()->set_id(request.id());
      }
      stream->Write(response);
    }
    return grpc::Status::OK;
  }

  std::string last_loaded_;

 private:
  static grpc::Status Compute(const inference::ModelInferRequest& request,
                              inference::ModelInferResponse& response) {
    if (absl::StartsWith(request.id(), "bad")) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad request " + request.id());
    }
    response.set_model_name(request.model_name());
    response.set_id(request.id());
    if (request.inputs_size() != 2 || request.raw_input_contents_size() != 2) {
      return grpc::Status::OK;
    }
    std::vector<int32_t> a = *FromRawBytes<int32_t>(request.raw_input_contents(0));
    std::vector<int32_t> b = *FromRawBytes<int32_t>(request.raw_input_contents(1));
    std::vector<int32_t> sum(a.size()), difference(a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      sum[i] = a[i] + b[i];
      difference[i] = a[i] - b[i];
    }
    for (const auto& [name, values] : {std::pair{"OUTPUT0", &sum}, {"OUTPUT1", &difference}}) {
      auto* output = response.add_outputs();
      output->set_name(name);
      output->set_datatype("INT32");
      *output->mutable_shape() = request.inputs(0).shape();
      response.add_raw_output_contents(ToRawBytes<int32_t>(*values));
    }
    return grpc::Status::OK;
  }
};

class InferenceClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port, 0);
    url_ = absl::StrCat("127.0.0.1:", port);
    client_ = MakeClient(ClientOptions());
  }

  void TearDown() override {
    client_.reset();
    if (server_ != nullptr) server_->Shutdown();
  }

  std::unique_ptr<InferenceClient> MakeClient(ClientOptions options) {
    absl::StatusOr<std::unique_ptr<InferenceClient>> client =
        InferenceClient::Create(url_, options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }

  static inference::ModelInferRequest SimpleRequest(int32_t offset, const std::string& id) {
    inference::ModelInferRequest request;
    request.set_model_name("simple");
    request.set_id(id);
    std::vector<int32_t> a(16), b(16, 1);
    for (int i = 0; i < 16; ++i) a[i] = offset + i;
    EXPECT_TRUE(AddInput(request, "INPUT0", {1, 16}, a).ok());
    EXPECT_TRUE(AddInput(request, "INPUT1", {1, 16}, b).ok());
    return request;
  }

  // Checks that `result` is SimpleRequest(offset, id)'s answer.
  static void ExpectSimpleAnswer(const InferResult& result, int32_t offset, const std::string& id) {
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->id(), id);
    absl::StatusOr<OutputTensor> sum = DecodeOutput(*result, "OUTPUT0");
    ASSERT_TRUE(sum.ok()) << sum.status();
    EXPECT_EQ((*sum->As<int32_t>())[15], offset + 15 + 1);
  }

  FakeService service_;
  std::unique_ptr<grpc::Server> server_;
  std::string url_;
  std::unique_ptr<InferenceClient> client_;
};

TEST_F(InferenceClientTest, CreateValidatesArguments) {
  EXPECT_EQ(InferenceClient::Create("", {}).status().code(), absl::StatusCode::kInvalidArgument);
  ClientOptions negative;
  negative.timeout_ms = -1;
  EXPECT_EQ(InferenceClient::Create("h:1", negative).status().code(),
            absl::StatusCode::kInvalidArgument);
  ClientOptions zero_size;
  zero_size.max_message_bytes = 0;
  EXPECT_EQ(InferenceClient::Create("h:1", zero_size).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(InferenceClientTest, HealthAndMetadataRpcs) {
  EXPECT_EQ(*client_->ServerLive(), true);
  EXPECT_EQ(*client_->ServerReady(), false);
  EXPECT_EQ(*client_->ModelReady("simple"), true);
  EXPECT_EQ(*client_->ModelReady("simple", "2"), false);

  absl::StatusOr<bool> unknown = client_->ModelReady("nope");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(unknown.status().message(), "unknown model 'nope'");

  absl::StatusOr<inference::ModelConfig> config = client_->ModelConfig("simple");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->name(), "simple");
  EXPECT_EQ(config->max_batch_size(), 8);

  EXPECT_EQ(client_->RepositoryIndex()->models_size(), 2);
  EXPECT_EQ(client_->RepositoryIndex(/*ready_only=*/true)->models_size(), 1);

  absl::Status load = client_->LoadModel("simple");
  EXPECT_EQ(load.code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(load.message(), "model control is disabled");
  EXPECT_EQ(service_.last_loaded_, "simple");

  // Not implemented by the fake: the generated default answers UNIMPLEMENTED.
  EXPECT_EQ(client_->ServerMetadata().status().code(), absl::StatusCode::kUnimplemented);
}

TEST_F(InferenceClientTest, InferReturnsOutputsAndErrors) {
  ExpectSimpleAnswer(client_->Infer(SimpleRequest(10, "a")), 10, "a");

  InferResult bad = client_->Infer(SimpleRequest(0, "bad1"));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "bad request bad1");
}

TEST_F(InferenceClientTest, InferHonoursTheDeadline) {
  ClientOptions options;
  options.timeout_ms = 100;
  std::unique_ptr<InferenceClient> client = MakeClient(options);
  inference::ModelInferRequest request;
  request.set_model_name("sleep");
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(client->Infer(request).status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

TEST_F(InferenceClientTest, UnreachableServerIsUnavailableAndNamesTheAddress) {
  server_->Shutdown();
  server_.reset();
  std::unique_ptr<InferenceClient> client = MakeClient(ClientOptions());
  absl::StatusOr<bool> live = client->ServerLive();
  EXPECT_EQ(live.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(live.status().message(), HasSubstr("ServerLive to " + url_));

  absl::Notification done;
  client->AsyncInfer(SimpleRequest(0, "x"), [&done](InferResult result) {
    EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable);
    done.Notify();
  });
  client->WaitForAsync();
  EXPECT_TRUE(done.HasBeenNotified());

  absl::StatusOr<std::unique_ptr<InferStream>> stream =
      client->StartStream([](InferResult) { ADD_FAILURE() << "no response expected"; });
  ASSERT_TRUE(stream.ok());
  (void)(*stream)->Write(SimpleRequest(0, "x"));  // May be accepted before the failure is seen.
  absl::Status finished = (*stream)->Finish();
  EXPECT_EQ(finished.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(finished.message(), HasSubstr(url_));
  EXPECT_EQ((*stream)->Write(SimpleRequest(0, "y")).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(InferenceClientTest, ConcurrentAsyncInfer) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 50;
  std::atomic<int> ok_count{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const int32_t offset = t * 1000 + i;
        const std::string id = absl::StrCat(offset);
        client_->AsyncInfer(SimpleRequest(offset, id), [&ok_count, offset, id](InferResult r) {
          ExpectSimpleAnswer(r, offset, id);
          if (r.ok()) ok_count.fetch_add(1);
        });
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  client_->WaitForAsync();
  EXPECT_EQ(ok_count.load(), kThreads * kPerThread);
  EXPECT_EQ(client_->AsyncInFlight(), 0);
}

TEST_F(InferenceClientTest, AsyncCallbacksMayStartTheNextCall) {
  // Closed loop, as a load generator runs it: each completion starts the next request.
  constexpr int kChains = 4;
  constexpr int kPerChain = 25;
  std::atomic<int> completed{0};
  auto request = std::make_shared<const inference::ModelInferRequest>(SimpleRequest(5, "loop"));
  std::function<void(int)> start = [&](int remaining) {
    client_->AsyncInfer(request, [&, remaining](InferResult result) {
      ExpectSimpleAnswer(result, 5, "loop");
      completed.fetch_add(1);
      if (remaining > 1) start(remaining - 1);
    });
  };
  for (int c = 0; c < kChains; ++c) start(kPerChain);
  client_->WaitForAsync();
  EXPECT_EQ(completed.load(), kChains * kPerChain);
}

TEST_F(InferenceClientTest, ClientDestructorWaitsForAsyncCalls) {
  std::atomic<int> completed{0};
  std::unique_ptr<InferenceClient> client = MakeClient(ClientOptions());
  for (int i = 0; i < 20; ++i) {
    client->AsyncInfer(SimpleRequest(i, "d"), [&completed](InferResult) { completed++; });
  }
  client.reset();
  EXPECT_EQ(completed.load(), 20);
}

TEST_F(InferenceClientTest, StreamWithConcurrentWriters) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 100;
  absl::Mutex mu;
  absl::flat_hash_set<std::string> ids;
  std::vector<std::string> order;
  int errors = 0;
  absl::StatusOr<std::unique_ptr<InferStream>> stream =
      client_->StartStream([&](InferResult result) {
        absl::MutexLock lock(&mu);
        if (!result.ok()) {
          ++errors;
          return;
        }
        absl::StatusOr<OutputTensor> sum = DecodeOutput(*result, "OUTPUT0");
        ASSERT_TRUE(sum.ok()) << sum.status();
        // id "t:i" was sent with offset t * 1000 + i.
        const std::string& id = result->id();
        const size_t colon = id.find(':');
        const int32_t offset =
            std::stoi(id.substr(0, colon)) * 1000 + std::stoi(id.substr(colon + 1));
        EXPECT_EQ((*sum->As<int32_t>())[0], offset + 1);
        EXPECT_TRUE(ids.insert(id).second) << "duplicate " << id;
        if (id[0] == '0') order.push_back(id);
      });
  ASSERT_TRUE(stream.ok()) << stream.status();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        EXPECT_TRUE((*stream)->Write(SimpleRequest(t * 1000 + i, absl::StrCat(t, ":", i))).ok());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_TRUE((*stream)->Finish().ok());
  absl::MutexLock lock(&mu);
  EXPECT_EQ(ids.size(), static_cast<size_t>(kThreads * kPerThread));
  EXPECT_EQ(errors, 0);
  // One writer's requests go out, and come back, in the order it wrote them.
  ASSERT_EQ(order.size(), static_cast<size_t>(kPerThread));
  for (int i = 0; i < kPerThread; ++i) EXPECT_EQ(order[i], absl::StrCat("0:", i));
  // Finished: further writes are refused, Finish() repeats its answer.
  EXPECT_EQ((*stream)->Write(SimpleRequest(0, "late")).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE((*stream)->Finish().ok());
}

TEST_F(InferenceClientTest, StreamErrorResponsesCarryTheRequestId) {
  absl::Mutex mu;
  std::vector<absl::Status> results;
  absl::StatusOr<std::unique_ptr<InferStream>> stream =
      client_->StartStream([&](InferResult result) {
        absl::MutexLock lock(&mu);
        results.push_back(result.status());
      });
  ASSERT_TRUE(stream.ok());
  ASSERT_TRUE((*stream)->Write(SimpleRequest(0, "good")).ok());
  ASSERT_TRUE((*stream)->Write(SimpleRequest(0, "bad7")).ok());
  EXPECT_TRUE((*stream)->Finish().ok());
  absl::MutexLock lock(&mu);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_TRUE(results[0].ok());
  EXPECT_EQ(results[1].code(), absl::StatusCode::kUnknown);
  EXPECT_EQ(results[1].message(), "bad request bad7");
  EXPECT_EQ(RequestIdOf(results[1]), "bad7");
  EXPECT_EQ(RequestIdOf(results[0]), "");
}

TEST_F(InferenceClientTest, StreamEndedByTheServerReportsItsStatus) {
  std::atomic<int> responses{0};
  absl::StatusOr<std::unique_ptr<InferStream>> stream =
      client_->StartStream([&](InferResult) { responses++; });
  ASSERT_TRUE(stream.ok());
  ASSERT_TRUE((*stream)->Write(SimpleRequest(0, "one")).ok());
  ASSERT_TRUE((*stream)->Write(SimpleRequest(0, "abort")).ok());
  // Keep writing while the server ends the stream: writes are accepted or refused, never crash.
  for (int i = 0; i < 200; ++i) (void)(*stream)->Write(SimpleRequest(0, "after"));
  absl::Status status = (*stream)->Finish();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "abort requested");
  EXPECT_EQ(responses.load(), 1);
}

TEST_F(InferenceClientTest, StreamCancelAndDestroyWithoutFinish) {
  {
    absl::StatusOr<std::unique_ptr<InferStream>> stream = client_->StartStream([](InferResult) {});
    ASSERT_TRUE(stream.ok());
    for (int i = 0; i < 50; ++i) ASSERT_TRUE((*stream)->Write(SimpleRequest(i, "x")).ok());
    // Destroyed here with writes possibly queued: cancels and waits, no leak or hang.
  }
  absl::StatusOr<std::unique_ptr<InferStream>> stream = client_->StartStream([](InferResult) {});
  ASSERT_TRUE(stream.ok());
  (*stream)->Cancel();
  EXPECT_EQ((*stream)->Write(SimpleRequest(0, "x")).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*stream)->Finish().code(), absl::StatusCode::kCancelled);
}

TEST_F(InferenceClientTest, StreamOnIdleWritesDoneEndsCleanly) {
  absl::StatusOr<std::unique_ptr<InferStream>> stream = client_->StartStream([](InferResult) {});
  ASSERT_TRUE(stream.ok());
  (*stream)->WritesDone();
  (*stream)->WritesDone();  // Idempotent.
  EXPECT_EQ((*stream)->Write(SimpleRequest(0, "x")).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE((*stream)->Finish().ok());
}

TEST_F(InferenceClientTest, StartStreamNeedsACallback) {
  EXPECT_EQ(client_->StartStream(nullptr).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice::client
