// The `mlp` backend through the real server and client: the bundled model against a float64
// reference, explicit load/unload/reload under traffic, broken weights files, path traversal.

#include <signal.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/inference_client.h"
#include "client/random_input.h"
#include "client/tensor_codec.h"
#include "engine/models/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/server_process.h"

namespace sluice {
namespace {

using client::AddInput;
using client::DecodeOutput;
using client::InferenceClient;
using inference::ModelInferRequest;
using ::testing::HasSubstr;
using testing::ServerProcess;

constexpr int kIn = 784;
constexpr int kOut = 10;

std::string BundledWeights() {
  return testing::BundledModelRepository() + "/mlp/1/model.safetensors";
}

std::unique_ptr<InferenceClient> Connect(const ServerProcess& server) {
  client::ClientOptions options;
  options.timeout_ms = 20'000;  // a lost request shows up as DEADLINE_EXCEEDED, never a hang
  auto client = InferenceClient::Create(server.address(), options);
  EXPECT_TRUE(client.ok()) << client.status();
  return *std::move(client);
}

// The bundled network (relu, relu, softmax) in float64, from the weights file itself.
class Reference {
 public:
  static Reference& Bundled() {
    static Reference* reference = new Reference(BundledWeights());
    return *reference;
  }

  std::vector<double> Run(const std::vector<float>& input, int rows) const {
    std::vector<double> current(input.begin(), input.end());
    for (size_t l = 0; l < layers_.size(); ++l) {
      const Layer& layer = layers_[l];
      std::vector<double> next(static_cast<size_t>(rows) * layer.out);
      for (int r = 0; r < rows; ++r) {
        double* row = next.data() + static_cast<size_t>(r) * layer.out;
        for (int o = 0; o < layer.out; ++o) {
          double sum = layer.bias[o];
          for (int i = 0; i < layer.in; ++i) {
            sum += current[static_cast<size_t>(r) * layer.in + i] *
                   layer.weight[static_cast<size_t>(o) * layer.in + i];
          }
          row[o] = l + 1 < layers_.size() ? std::max(sum, 0.0) : sum;
        }
        if (l + 1 == layers_.size()) {  // softmax
          const double max = *std::max_element(row, row + layer.out);
          double total = 0;
          for (int o = 0; o < layer.out; ++o) total += (row[o] = std::exp(row[o] - max));
          for (int o = 0; o < layer.out; ++o) row[o] /= total;
        }
      }
      current = std::move(next);
    }
    return current;
  }

  // Largest error of any row relative to that row's largest value; "" when under 1e-5.
  std::string Check(const std::vector<float>& input, const std::vector<float>& output,
                    int rows) const {
    const std::vector<double> expected = Run(input, rows);
    if (output.size() != expected.size()) {
      return absl::StrCat("output has ", output.size(), " values, expected ", expected.size());
    }
    for (int r = 0; r < rows; ++r) {
      double scale = 0, error = 0;
      for (int c = 0; c < kOut; ++c) {
        scale = std::max(scale, std::fabs(expected[r * kOut + c]));
        error = std::max(error, std::fabs(output[r * kOut + c] - expected[r * kOut + c]));
      }
      if (error > 1e-5 * scale) return absl::StrCat("row ", r, " relative error ", error / scale);
    }
    return "";
  }

 private:
  struct Layer {
    int in = 0, out = 0;
    std::vector<float> weight, bias;
  };
  explicit Reference(const std::string& path) {
    auto file = engine::models::SafetensorsFile::Open(path);
    EXPECT_TRUE(file.ok()) << file.status();
    if (!file.ok()) return;
    for (int index : {0, 2, 4}) {
      const engine::TensorView* weight = file->Find(absl::StrCat(index, ".weight"));
      const engine::TensorView* bias = file->Find(absl::StrCat(index, ".bias"));
      EXPECT_TRUE(weight != nullptr && bias != nullptr);
      if (weight == nullptr || bias == nullptr) return;
      Layer layer;
      layer.out = static_cast<int>(weight->shape[0]);
      layer.in = static_cast<int>(weight->shape[1]);
      layer.weight = engine::models::ToFloat32(*weight).value();
      layer.bias = engine::models::ToFloat32(*bias).value();
      layers_.push_back(std::move(layer));
    }
  }
  std::vector<Layer> layers_;
};

std::vector<float> RandomInput(std::mt19937& rng, int rows) {
  std::uniform_real_distribution<float> dist(0.f, 1.f);  // pixel intensities
  std::vector<float> values(static_cast<size_t>(rows) * kIn);
  for (float& v : values) v = dist(rng);
  return values;
}

ModelInferRequest MlpRequest(const std::string& model, const std::vector<float>& input, int rows) {
  ModelInferRequest request;
  request.set_model_name(model);
  EXPECT_TRUE(AddInput(request, "INPUT0", {rows, kIn}, input).ok());
  return request;
}

// Infers and checks against the reference; "" or what went wrong.
std::string InferAndCheck(InferenceClient& client, const std::string& model, std::mt19937& rng,
                          int rows) {
  const std::vector<float> input = RandomInput(rng, rows);
  auto response = client.Infer(MlpRequest(model, input, rows));
  if (!response.ok()) return response.status().ToString();
  auto output = DecodeOutput(*response, "OUTPUT0");
  if (!output.ok()) return output.status().ToString();
  if (output->shape != std::vector<int64_t>{rows, kOut}) return "wrong output shape";
  return Reference::Bundled().Check(input, output->As<float>().value(), rows);
}

class TempRepository {
 public:
  TempRepository() {
    root_ = std::filesystem::path(::testing::TempDir()) /
            absl::StrCat("sluice_mlp_repo_", getpid(), "_", counter_++);
    std::filesystem::create_directories(root_);
  }
  ~TempRepository() { std::filesystem::remove_all(root_); }

  void CopyBundled(const std::string& name) {
    std::filesystem::copy(std::filesystem::path(testing::BundledModelRepository()) / name,
                          root_ / name, std::filesystem::copy_options::recursive);
  }
  // An mlp model called `name` taking `in_features` inputs, with `weights` as 1/model.safetensors.
  void AddMlp(const std::string& name, const std::string& weights, int in_features = kIn,
              const std::string& extra_config = "") {
    std::filesystem::create_directories(root_ / name / "1");
    std::ofstream(root_ / name / "1" / "model.safetensors", std::ios::binary) << weights;
    std::ofstream(root_ / name / "config.pbtxt")
        << "backend: \"mlp\"\nmax_batch_size: 8\n"
        << "input [ { name: \"INPUT0\" data_type: TYPE_FP32 dims: [ " << in_features << " ] } ]\n"
        << "output [ { name: \"OUTPUT0\" data_type: TYPE_FP32 dims: [ 10 ] } ]\n"
        << "parameters { key: \"output_activation\" value: { string_value: \"softmax\" } }\n"
        << extra_config;
  }
  std::string path() const { return root_.string(); }

 private:
  static inline int counter_ = 0;
  std::filesystem::path root_;
};

std::string ReadBundledWeights() {
  std::ifstream in(BundledWeights(), std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// name -> (state, reason) from RepositoryIndex.
std::map<std::string, std::pair<std::string, std::string>> IndexOf(InferenceClient& client) {
  std::map<std::string, std::pair<std::string, std::string>> index;
  auto response = client.RepositoryIndex();
  EXPECT_TRUE(response.ok()) << response.status();
  if (!response.ok()) return index;
  for (const auto& model : response->models()) {
    index[model.name()] = {model.state(), model.reason()};
  }
  return index;
}

TEST(MlpIntegrationTest, ServesTheBundledMlp) {
  auto server = ServerProcess::Start({"--model-repository=" + testing::BundledModelRepository()});
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = Connect(**server);
  EXPECT_EQ(client->ModelReady("mlp").value_or(false), true);

  auto metadata = client->ModelMetadata("mlp");
  ASSERT_TRUE(metadata.ok()) << metadata.status();
  ASSERT_EQ(metadata->inputs_size(), 1);
  EXPECT_EQ(metadata->inputs(0).name(), "INPUT0");
  EXPECT_EQ(metadata->inputs(0).datatype(), "FP32");
  EXPECT_THAT(metadata->inputs(0).shape(), ::testing::ElementsAre(-1, kIn));
  EXPECT_THAT(metadata->outputs(0).shape(), ::testing::ElementsAre(-1, kOut));

  std::mt19937 rng(1);
  for (int rows : {1, 5, 64}) {
    EXPECT_EQ(InferAndCheck(*client, "mlp", rng, rows), "") << "batch " << rows;
  }
  // Requests in flight together are batched by the server; each still gets its own rows.
  std::vector<std::vector<float>> inputs;
  std::vector<std::string> errors(32, "not answered");
  for (int i = 0; i < 32; ++i) {
    inputs.push_back(RandomInput(rng, 1 + i % 3));
    client->AsyncInfer(
        MlpRequest("mlp", inputs.back(), 1 + i % 3), [&, i](client::InferResult result) {
          if (!result.ok()) {
            errors[i] = result.status().ToString();
            return;
          }
          auto output = DecodeOutput(*result, "OUTPUT0");
          errors[i] = output.ok() ? Reference::Bundled().Check(
                                        inputs[i], output->As<float>().value(), 1 + i % 3)
                                  : output.status().ToString();
        });
  }
  client->WaitForAsync();
  for (int i = 0; i < 32; ++i) EXPECT_EQ(errors[i], "") << "request " << i;

  // A request with the wrong feature count is refused by name.
  ModelInferRequest bad;
  bad.set_model_name("mlp");
  ASSERT_TRUE(AddInput(bad, "INPUT0", {1, 783}, std::vector<float>(783, 0.f)).ok());
  auto refused = client->Infer(bad);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("input 'INPUT0'"));
  EXPECT_EQ((*server)->Stop().value_or(-1), 0);
}

TEST(MlpLifecycleTest, LoadUnloadAndReloadUnderTrafficAnswerEveryRequest) {
  TempRepository repo;
  repo.CopyBundled("mlp");
  repo.CopyBundled("simple");
  auto server =
      ServerProcess::Start({"--model-repository=" + repo.path(), "--model-control-mode=explicit",
                            "--load-model=mlp", "--load-model=simple"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto control = Connect(**server);

  // Outcomes by status code, and any wrong answer.
  std::mutex mu;
  std::map<absl::StatusCode, int> outcomes;
  std::vector<std::string> wrong_answers;
  int simple_failures = 0;
  std::atomic<bool> stop{false};
  std::vector<std::thread> traffic;
  for (int t = 0; t < 3; ++t) {
    traffic.emplace_back([&, t] {
      auto client = Connect(**server);
      std::mt19937 rng(100 + t);
      while (!stop.load()) {
        const int rows = 1 + static_cast<int>(rng() % 3);
        const std::vector<float> input = RandomInput(rng, rows);
        auto response = client->Infer(MlpRequest("mlp", input, rows));
        std::string wrong;
        if (response.ok()) {
          auto output = DecodeOutput(*response, "OUTPUT0");
          wrong = output.ok() ? Reference::Bundled().Check(input, output->As<float>().value(), rows)
                              : output.status().ToString();
        }
        std::lock_guard<std::mutex> lock(mu);
        outcomes[response.status().code()]++;
        if (!wrong.empty()) wrong_answers.push_back(wrong);
        if (response.status().code() != absl::StatusCode::kOk &&
            response.status().code() != absl::StatusCode::kUnavailable &&
            response.status().code() != absl::StatusCode::kNotFound) {
          wrong_answers.push_back(response.status().ToString());
        }
      }
    });
  }
  // The other model serves throughout.
  traffic.emplace_back([&] {
    auto client = Connect(**server);
    while (!stop.load()) {
      ModelInferRequest request;
      request.set_model_name("simple");
      EXPECT_TRUE(AddInput(request, "INPUT0", {1, 16}, std::vector<int32_t>(16, 2)).ok());
      EXPECT_TRUE(AddInput(request, "INPUT1", {1, 16}, std::vector<int32_t>(16, 1)).ok());
      auto response = client->Infer(request);
      std::lock_guard<std::mutex> lock(mu);
      if (!response.ok()) simple_failures++;
    }
  });

  auto pause = [] { std::this_thread::sleep_for(std::chrono::milliseconds(120)); };
  for (int cycle = 0; cycle < 3; ++cycle) {
    pause();
    ASSERT_TRUE(control->UnloadModel("mlp").ok());
    EXPECT_EQ(control->ModelReady("mlp").value_or(true), false);
    pause();
    ASSERT_TRUE(control->LoadModel("mlp").ok());
    EXPECT_EQ(control->ModelReady("mlp").value_or(false), true);
    pause();
    ASSERT_TRUE(control->LoadModel("mlp").ok());  // reload while loaded: swapped in place
  }
  pause();
  stop = true;
  for (auto& thread : traffic) thread.join();

  std::lock_guard<std::mutex> lock(mu);
  int total = 0;
  for (const auto& [code, count] : outcomes) total += count;
  EXPECT_GT(outcomes[absl::StatusCode::kOk], 0);
  // The model was away three times: requests in those windows got NOT_FOUND (or UNAVAILABLE while
  // it drained), never a hang or another code.
  EXPECT_GT(outcomes[absl::StatusCode::kNotFound] + outcomes[absl::StatusCode::kUnavailable], 0);
  EXPECT_EQ(outcomes[absl::StatusCode::kOk] + outcomes[absl::StatusCode::kNotFound] +
                outcomes[absl::StatusCode::kUnavailable],
            total);
  EXPECT_THAT(wrong_answers, ::testing::IsEmpty());
  EXPECT_EQ(simple_failures, 0);
  std::cout << "[ outcomes ] ok=" << outcomes[absl::StatusCode::kOk]
            << " not_found=" << outcomes[absl::StatusCode::kNotFound]
            << " unavailable=" << outcomes[absl::StatusCode::kUnavailable] << " total=" << total
            << "\n";
  EXPECT_EQ((*server)->Stop().value_or(-1), 0);
}

// A corrupt file, a truncated file and a config/weights mismatch: each a clear load error with its
// reason in RepositoryIndex, while the good models load and serve.
class BrokenWeightsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string weights = ReadBundledWeights();
    ASSERT_GT(weights.size(), 2'000'000u);
    repo_.CopyBundled("mlp");
    repo_.CopyBundled("simple");
    std::string corrupt = weights;
    corrupt.replace(8, 12, "{not json!!!");  // the header's first bytes
    repo_.AddMlp("mlp_corrupt", corrupt);
    repo_.AddMlp("mlp_truncated", weights.substr(0, weights.size() / 2));
    repo_.AddMlp("mlp_mismatch", weights, /*in_features=*/785);
  }

  void ExpectBrokenReasons(InferenceClient& client) {
    auto index = IndexOf(client);
    EXPECT_EQ(index["mlp"].first, "READY");
    EXPECT_EQ(index["simple"].first, "READY");
    for (const char* name : {"mlp_corrupt", "mlp_truncated", "mlp_mismatch"}) {
      EXPECT_EQ(index[name].first, "UNAVAILABLE") << name;
    }
    EXPECT_THAT(index["mlp_corrupt"].second, HasSubstr("header is not valid JSON"));
    EXPECT_THAT(index["mlp_corrupt"].second, HasSubstr("mlp_corrupt/1/model.safetensors"));
    EXPECT_THAT(index["mlp_truncated"].second, HasSubstr("beyond the data section"));
    EXPECT_THAT(index["mlp_truncated"].second, HasSubstr("truncated file?"));
    EXPECT_THAT(index["mlp_mismatch"].second,
                HasSubstr("config input 'INPUT0' has 785 features but layer '0.weight' (shape "
                          "[512,784]) expects 784"));
  }

  void ExpectGoodModelsServe(InferenceClient& client) {
    std::mt19937 rng(7);
    EXPECT_EQ(InferAndCheck(client, "mlp", rng, 2), "");
    ModelInferRequest request;
    request.set_model_name("simple");
    ASSERT_TRUE(AddInput(request, "INPUT0", {1, 16}, std::vector<int32_t>(16, 2)).ok());
    ASSERT_TRUE(AddInput(request, "INPUT1", {1, 16}, std::vector<int32_t>(16, 1)).ok());
    EXPECT_TRUE(client.Infer(request).ok());
  }

  TempRepository repo_;
};

TEST_F(BrokenWeightsTest, AtStartupTheOthersLoadAndServe) {
  auto server = ServerProcess::Start({"--model-repository=" + repo_.path()});
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = Connect(**server);
  ExpectBrokenReasons(*client);
  ExpectGoodModelsServe(*client);
  // Inference on a broken model says why it is unavailable.
  std::mt19937 rng(3);
  auto response = client->Infer(MlpRequest("mlp_truncated", RandomInput(rng, 1), 1));
  EXPECT_EQ(response.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(response.status().message()), HasSubstr("beyond the data section"));
  EXPECT_EQ((*server)->Stop().value_or(-1), 0);
}

TEST_F(BrokenWeightsTest, ExplicitLoadReturnsTheReason) {
  auto server =
      ServerProcess::Start({"--model-repository=" + repo_.path(), "--model-control-mode=explicit",
                            "--load-model=mlp", "--load-model=simple"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = Connect(**server);
  for (const char* name : {"mlp_corrupt", "mlp_truncated", "mlp_mismatch"}) {
    absl::Status status = client->LoadModel(name);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << name << ": " << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr(absl::StrCat("model '", name, "'")));
  }
  ExpectBrokenReasons(*client);
  ExpectGoodModelsServe(*client);
  EXPECT_EQ((*server)->Stop().value_or(-1), 0);
}

TEST(MlpLifecycleTest, NamesAndWeightPathsCannotLeaveTheRepository) {
  TempRepository repo;
  repo.CopyBundled("mlp");
  repo.AddMlp("mlp_escape", ReadBundledWeights(), kIn,
              "parameters { key: \"weights_file\" value: { string_value: "
              "\"../../mlp/1/model.safetensors\" } }\n");
  auto server = ServerProcess::Start(
      {"--model-repository=" + repo.path(), "--model-control-mode=explicit", "--load-model=mlp"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = Connect(**server);
  for (const char* name : {"../x", "..", "mlp/../mlp", "/etc", "mlp/1"}) {
    absl::Status status = client->LoadModel(name);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << name << ": " << status;
  }
  absl::Status escape = client->LoadModel("mlp_escape");
  EXPECT_EQ(escape.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(escape.message()),
              HasSubstr("parameter 'weights_file' = '../../mlp/1/model.safetensors' must be a "
                        "plain file name inside the version folder"));
  std::mt19937 rng(5);
  EXPECT_EQ(InferAndCheck(*client, "mlp", rng, 1), "");
  EXPECT_EQ((*server)->Stop().value_or(-1), 0);
}

}  // namespace
}  // namespace sluice
