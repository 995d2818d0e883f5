// GPU engine tests (CTest label `gpu`): the CUDA executor against the CPU backend, graphs against
// plain launches, slot reuse under load, the device counters, and the fault path. Each test skips
// with the reason where no GPU is usable; BucketsTest runs everywhere.

#include "engine/cuda/cuda_executor.h"

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/wire/float16.h"
#include "engine/backend_registry.h"
#include "engine/cuda/cuda_mlp.h"
#include "engine/cuda/cuda_model.h"
#include "engine/cuda/device_info.h"
#include "engine/device.h"
#include "engine/engine.h"
#include "engine/models/safetensors.h"
#include "gtest/gtest.h"
#include "tests/gpu/gpu_required.h"
#include "tests/support/engine/answer.h"

namespace sluice::engine::cuda {
namespace {

constexpr auto kWait = std::chrono::seconds(30);

// --- Helpers ------------------------------------------------------------------------------------

using testing::Answer;

// A request owning its input bytes.
std::unique_ptr<InferenceRequest> MakeRequest(const std::string& model, const ModelConfig& config,
                                              int rows, std::vector<std::vector<std::byte>> data,
                                              InferenceRequest::Completion done) {
  auto owned = std::make_shared<std::vector<std::vector<std::byte>>>(std::move(data));
  auto request = std::make_unique<InferenceRequest>(model, -1, std::move(done));
  for (size_t i = 0; i < config.inputs.size(); ++i) {
    Shape shape = config.inputs[i].dims;
    if (config.max_batch_size > 0) shape.insert(shape.begin(), rows);
    request->inputs.push_back(
        TensorView{config.inputs[i].name, config.inputs[i].dtype, shape, (*owned)[i]});
  }
  request->keepalive = owned;
  request->received_time = std::chrono::steady_clock::now();
  return request;
}

std::vector<std::byte> Bytes(const void* data, size_t size) {
  const auto* begin = static_cast<const std::byte*>(data);
  return std::vector<std::byte>(begin, begin + size);
}

std::vector<float> Floats(const std::vector<std::byte>& bytes) {
  std::vector<float> values(bytes.size() / 4);
  std::memcpy(values.data(), bytes.data(), values.size() * 4);
  return values;
}

std::vector<std::byte> Encode(const std::vector<float>& values, DataType dtype) {
  std::vector<std::byte> out;
  if (dtype == DataType::kFp32) return Bytes(values.data(), values.size() * 4);
  for (float v : values) {
    const uint16_t bits =
        dtype == DataType::kFp16 ? wire::FloatToHalf(v) : wire::FloatToBFloat16(v);
    out.push_back(static_cast<std::byte>(bits & 0xff));
    out.push_back(static_cast<std::byte>(bits >> 8));
  }
  return out;
}

// A temporary model repository folder, removed at the end.
class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            absl::StrCat("sluice_gpu_test_", getpid(), "_", counter_++);
    std::filesystem::create_directories(path_ / "1");
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string version_path() const { return (path_ / "1").string(); }

 private:
  static inline std::atomic<int> counter_{0};
  std::filesystem::path path_;
};

// Writes an MLP with layer sizes `sizes` (input first) and random weights stored as `dtype`.
void WriteMlp(const TempDir& dir, const std::vector<int>& sizes, DataType dtype, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<std::byte>> storage;
  storage.reserve(2 * sizes.size());
  std::vector<TensorView> tensors;
  for (size_t l = 0; l + 1 < sizes.size(); ++l) {
    const int in = sizes[l];
    const int out = sizes[l + 1];
    std::normal_distribution<float> weight(0.f, 1.f / std::sqrt(static_cast<float>(in)));
    std::vector<float> w(static_cast<size_t>(in) * out);
    std::vector<float> b(out);
    for (float& v : w) v = weight(rng);
    for (float& v : b) v = weight(rng);
    const int index = static_cast<int>(2 * l);
    storage.push_back(Encode(w, dtype));
    tensors.push_back({absl::StrCat(index, ".weight"), dtype, {out, in}, storage.back()});
    storage.push_back(Encode(b, dtype));
    tensors.push_back({absl::StrCat(index, ".bias"), dtype, {out}, storage.back()});
  }
  ASSERT_TRUE(
      models::WriteSafetensorsFile(dir.version_path() + "/model.safetensors", tensors).ok());
}

ModelConfig MlpConfig(const std::string& name, int in, int out, int max_batch_size,
                      std::map<std::string, std::string> parameters) {
  ModelConfig config;
  config.name = name;
  config.backend = "mlp";
  config.max_batch_size = max_batch_size;
  config.inputs = {{"INPUT0", DataType::kFp32, {in}}};
  config.outputs = {{"OUTPUT0", DataType::kFp32, {out}}};
  config.dynamic_batching = DynamicBatchingConfig{};
  config.parameters = std::move(parameters);
  return config;
}

absl::StatusOr<std::unique_ptr<Engine>> GpuEngine(int64_t max_queue = 4096) {
  EngineOptions options;
  options.device.kind = DeviceSelection::Kind::kCuda;
  options.device.cuda_device = 0;
  options.gpu_executor_slots = 3;  // the GPU's slots (executor_slots is the CPU executor's)
  options.default_max_queue_size = max_queue;
  return Engine::Create(options);
}

// Runs `rows` rows of `input` through the engine's model `name` as one request.
absl::StatusOr<std::vector<float>> InferFloats(Engine& engine, const std::string& name,
                                               const ModelConfig& config, int rows,
                                               const std::vector<float>& input) {
  auto answer = std::make_shared<Answer>();
  engine.Submit(MakeRequest(name, config, rows, {Bytes(input.data(), input.size() * 4)},
                            Answer::Into(answer)));
  absl::StatusOr<InferenceResponse> response = answer->WaitForResult(kWait);
  if (!response.ok()) return response.status();
  return Floats(response->outputs.at(0).data);
}

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override { SLUICE_SKIP_WITHOUT_GPU(); }
};

// --- Tests --------------------------------------------------------------------------------------

TEST(BucketsTest, PowersOfTwoOrPreferredSizesEndingAtMax) {
  ModelConfig config;
  config.max_batch_size = 64;
  EXPECT_EQ(BatchBuckets(config), std::vector<int>({1, 2, 4, 8, 16, 32, 64}));
  config.max_batch_size = 12;
  EXPECT_EQ(BatchBuckets(config), std::vector<int>({1, 2, 4, 8, 12}));
  config.dynamic_batching = DynamicBatchingConfig{.preferred_batch_sizes = {8, 4}};
  EXPECT_EQ(BatchBuckets(config), std::vector<int>({4, 8, 12}));
  config.max_batch_size = 0;
  EXPECT_EQ(BatchBuckets(config), std::vector<int>({1}));
}

struct Precision {
  const char* label;
  DataType dtype;
  std::map<std::string, std::string> parameters;
  double tolerance;  // max |gpu - cpu| / max |cpu|, over every output of a bucket
};

TEST_F(GpuTest, MlpMatchesTheCpuBackendAtEveryBucket) {
  // Tolerances a correct GPU meets, relative to the largest reference output (four layers, the
  // widest K = 784; the CPU reference accumulates in FP32 in another order):
  //  - fp32 1e-5: both sides FP32; reordered sums of 784 products differ by ~K * 2^-24 of the
  //    largest partial sum, about 5e-5 in the worst case and ~1e-6 in practice (errors cancel).
  //  - tf32 1e-2: TF32 tensor cores read 10 of FP32's 23 mantissa bits (relative rounding 2^-11,
  //    ~4.9e-4, on every input of every product), which over 784-term sums and four layers
  //    reaches a few 1e-3; 1e-2 leaves room without hiding a wrong layout (that is O(1)).
  //  - bf16 2e-2: weights and the activations between layers are BF16 (8 mantissa bits: 2^-9,
  //    ~2e-3, per rounding), rounded again at each of four layers; accumulation is FP32.
  //  - fp16 1e-2: the same with FP16's 11 bits (~2.4e-4 per rounding) plus the FP16 range of the
  //    hidden activations; observed errors are well below, 1e-2 is the bound the format allows.
  //  - fp32-activations 1e-4 where our kernels compute every activation (exact GELU, SiLU, and
  //    the tanh GELU when cuBLASLt had no fused epilogue for it): tanhf/erff/expf within a few
  //    ulp, ~1e-6 per layer, through four layers well under 1e-4.
  //  - fp32-activations where cuBLASLt's GELU_BIAS epilogue computes the tanh GELU (the layer
  //    description says so): cuBLASLt may evaluate tanh with the hardware approximation (PTX
  //    tanh.approx.f32, relative error up to 2^-10.99 ~ 5e-4 per the PTX ISA). GELU =
  //    0.5 x (1 + tanh(u)) then errs by up to 0.5 |x| 5e-4 = 2.5e-4 of the layer's largest
  //    output; SiLU, exact GELU and softmax after it are 1-Lipschitz-ish and keep it of that
  //    order: kFusedTanhGeluFp32 = 1e-3 (4x margin), still far below a wrong layout (O(1)).
  const std::vector<Precision> precisions = {
      {"fp32", DataType::kFp32, {{"output_activation", "softmax"}}, 1e-5},
      {"tf32", DataType::kFp32, {{"allow_tf32", "true"}}, 1e-2},
      {"bf16", DataType::kBf16, {}, 2e-2},
      {"fp16", DataType::kFp16, {}, 1e-2},
      // Every epilogue path: cuBLASLt's GELU (tanh form), the separate kernel for exact GELU and
      // SiLU, and softmax after a bias epilogue.
      {"fp32-activations", DataType::kFp32, {{"activations", "gelu_tanh,gelu,silu,softmax"}}, 1e-4},
  };
  constexpr double kFusedTanhGeluFp32 = 1e-3;
  const std::vector<int> sizes = {784, 512, 256, 128, 10};
  for (const Precision& precision : precisions) {
    SCOPED_TRACE(precision.label);
    const std::map<std::string, std::string>& parameters = precision.parameters;
    TempDir dir;
    WriteMlp(dir, sizes, precision.dtype, 7);
    ModelSpec spec{.config = MlpConfig("mlp", sizes.front(), sizes.back(), 64, parameters),
                   .version = 1,
                   .version_path = dir.version_path()};
    // Which path each layer takes on this GPU (a fused cuBLASLt epilogue, our kernel by design,
    // or our kernel because cuBLASLt had none): the bound depends on it, and every failure says
    // which path ran.
    std::string path;
    {
      auto instance = CreateCudaMlpInstance(spec, 0, BatchBuckets(spec.config));
      ASSERT_TRUE(instance.ok()) << instance.status();
      path = DescribeCudaMlpInstance(**instance);
    }
    std::printf("%s: %s\n", precision.label, path.c_str());
    SCOPED_TRACE(path);
    const double tolerance =
        precision.dtype == DataType::kFp32 && parameters.count("allow_tf32") == 0 &&
                path.find("GELU_BIAS (tanh form) epilogue") != std::string::npos
            ? std::max(precision.tolerance, kFusedTanhGeluFp32)
            : precision.tolerance;
    auto cpu_model = CreateModel(spec);
    ASSERT_TRUE(cpu_model.ok()) << cpu_model.status();
    auto cpu = (*cpu_model)->CreateInstance(0);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    auto engine = GpuEngine();
    ASSERT_TRUE(engine.ok()) << engine.status();
    ASSERT_TRUE((*engine)->LoadModel(spec).ok());

    std::mt19937 rng(11);
    std::uniform_real_distribution<float> uniform(-1.f, 1.f);
    for (int bucket : BatchBuckets(spec.config)) {
      // The full bucket, and one row short of it (a padded batch).
      for (int rows : {bucket, bucket - 1}) {
        if (rows < 1) continue;
        std::vector<float> input(static_cast<size_t>(rows) * sizes.front());
        for (float& v : input) v = uniform(rng);
        TensorView view{"INPUT0",
                        DataType::kFp32,
                        {rows, sizes.front()},
                        std::span<const std::byte>(reinterpret_cast<const std::byte*>(input.data()),
                                                   input.size() * 4)};
        auto expected = (*cpu)->Run(std::span<const TensorView>(&view, 1));
        ASSERT_TRUE(expected.ok()) << expected.status();
        const std::vector<float> want = Floats((*expected)[0].data);
        auto got = InferFloats(**engine, "mlp", spec.config, rows, input);
        ASSERT_TRUE(got.ok()) << got.status();
        ASSERT_EQ(got->size(), want.size());
        double max_diff = 0;
        double max_ref = 0;
        for (size_t i = 0; i < want.size(); ++i) {
          max_diff = std::max(max_diff, std::abs(static_cast<double>((*got)[i]) - want[i]));
          max_ref = std::max(max_ref, std::abs(static_cast<double>(want[i])));
        }
        EXPECT_LE(max_diff / std::max(max_ref, 1e-30), tolerance)
            << "rows " << rows << " (bucket " << bucket << ")";
      }
    }
  }
}

TEST_F(GpuTest, GraphReplayEqualsPlainLaunchesBitForBit) {
  TempDir dir;
  const std::vector<int> sizes = {256, 512, 10};
  WriteMlp(dir, sizes, DataType::kBf16, 3);
  ModelSpec graphs{.config = MlpConfig("graphs", 256, 10, 32, {{"output_activation", "softmax"}}),
                   .version = 1,
                   .version_path = dir.version_path()};
  ModelSpec eager = graphs;
  eager.config.name = "eager";
  eager.config.cuda_graphs = false;
  auto engine = GpuEngine();
  ASSERT_TRUE(engine.ok()) << engine.status();
  ASSERT_TRUE((*engine)->LoadModel(graphs).ok());
  ASSERT_TRUE((*engine)->LoadModel(eager).ok());
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uniform(-2.f, 2.f);
  for (int rows : BatchBuckets(graphs.config)) {
    std::vector<float> input(static_cast<size_t>(rows) * 256);
    for (float& v : input) v = uniform(rng);
    auto a = InferFloats(**engine, "graphs", graphs.config, rows, input);
    auto b = InferFloats(**engine, "eager", eager.config, rows, input);
    ASSERT_TRUE(a.ok() && b.ok()) << a.status() << " " << b.status();
    ASSERT_EQ(a->size(), b->size());
    EXPECT_EQ(std::memcmp(a->data(), b->data(), a->size() * 4), 0) << "rows " << rows;
  }
}

// 10,000 concurrent requests through `simple` (batched, padded, three slots): every answer is
// computed from its own inputs, which carry the request's number; the device counters count
// every item.
TEST_F(GpuTest, SlotReuseNeverMixesResultsAndCountersCountEveryItem) {
  constexpr int kRequests = 10000;
  constexpr int kThreads = 8;
  ModelConfig config;
  config.name = "simple";
  config.backend = "simple";
  config.max_batch_size = 8;
  config.inputs = {{"INPUT0", DataType::kInt32, {16}}, {"INPUT1", DataType::kInt32, {16}}};
  config.outputs = {{"OUTPUT0", DataType::kInt32, {16}}, {"OUTPUT1", DataType::kInt32, {16}}};
  config.dynamic_batching = DynamicBatchingConfig{.max_queue_delay = std::chrono::microseconds(50),
                                                  .preferred_batch_sizes = {}};
  auto engine = GpuEngine(/*max_queue=*/kRequests);
  ASSERT_TRUE(engine.ok()) << engine.status();
  ASSERT_TRUE((*engine)->LoadModel({.config = config, .version = 1, .version_path = ""}).ok());

  std::atomic<int> wrong{0};
  std::atomic<int> failed{0};
  std::atomic<int> answered{0};
  std::mutex mu;
  std::condition_variable done;
  std::vector<std::thread> senders;
  for (int t = 0; t < kThreads; ++t) {
    senders.emplace_back([&, t] {
      for (int id = t; id < kRequests; id += kThreads) {
        std::vector<int32_t> a(16), b(16);
        for (int i = 0; i < 16; ++i) {
          a[i] = id * 16 + i;
          b[i] = -3 * id + i;
        }
        auto check = [&, a, b](absl::StatusOr<InferenceResponse> result) {
          if (!result.ok()) {
            failed.fetch_add(1);
          } else {
            std::vector<int32_t> sum(16), diff(16);
            std::memcpy(sum.data(), result->outputs.at(0).data.data(), 64);
            std::memcpy(diff.data(), result->outputs.at(1).data.data(), 64);
            for (int i = 0; i < 16; ++i) {
              if (sum[i] != a[i] + b[i] || diff[i] != a[i] - b[i]) {
                wrong.fetch_add(1);
                break;
              }
            }
          }
          if (answered.fetch_add(1) + 1 == kRequests) {
            std::lock_guard<std::mutex> lock(mu);
            done.notify_all();
          }
        };
        (*engine)->Submit(
            MakeRequest("simple", config, 1, {Bytes(a.data(), 64), Bytes(b.data(), 64)}, check));
      }
    });
  }
  for (std::thread& sender : senders) sender.join();
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(done.wait_for(lock, std::chrono::seconds(60),
                              [&] { return answered.load() == kRequests; }));
  }
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  (*engine)->CollectStats(std::chrono::steady_clock::now());
  auto stats = (*engine)->GetStats("simple", -1);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->at(0).stats.device_items, static_cast<uint64_t>(kRequests));
}

// An identity model with fixed dims, driven by a CudaExecutor directly.
class ExecutorFaultTest : public GpuTest {};

TEST_F(ExecutorFaultTest, ACudaErrorFailsTheBatchInternalAndMarksTheExecutorUnhealthy) {
  ModelConfig config;
  config.name = "identity4";
  config.backend = "identity";
  config.max_batch_size = 4;
  config.inputs = {{"INPUT0", DataType::kFp32, {4}}};
  config.outputs = {{"OUTPUT0", DataType::kFp32, {4}}};
  ModelSpec spec{.config = config, .version = 1, .version_path = ""};
  const std::vector<int> buckets = BatchBuckets(config);
  auto model = CreateCudaIdentityInstance(spec, 0, buckets);
  ASSERT_TRUE(model.ok()) << model.status();
  ModelStats stats(ModelStatsOptions{.model_name = "identity4"});
  std::atomic<int> faults{0};
  std::string fault_message;
  CudaExecutorOptions options;
  options.executor.slot_count = 2;
  options.executor.stats = &stats;
  options.executor.on_fault = [&](const absl::Status& status) {
    fault_message = std::string(status.message());
    faults.fetch_add(1);
  };
  auto executor = CudaExecutor::Create(config, *std::move(model), options);
  ASSERT_TRUE(executor.ok()) << executor.status();

  // After a fault the executor offers no slot (Executor::HasFreeSlot); a batch handed over anyway
  // (the batcher looked before the fault) fails without touching the device.
  auto run_one = [&](bool expect_free_slot = true) -> absl::StatusOr<InferenceResponse> {
    const std::vector<float> input = {1, 2, 3, 4};
    auto answer = std::make_shared<Answer>();
    Batch batch;
    batch.requests.push_back(
        MakeRequest("identity4", config, 1, {Bytes(input.data(), 16)}, Answer::Into(answer)));
    batch.items = 1;
    batch.dispatch_time = std::chrono::steady_clock::now();
    EXPECT_EQ((*executor)->HasFreeSlot(), expect_free_slot);
    (*executor)->Execute(std::move(batch));
    return answer->WaitForResult(kWait);
  };
  auto healthy = run_one();
  ASSERT_TRUE(healthy.ok()) << healthy.status();
  EXPECT_EQ(Floats(healthy->outputs.at(0).data), std::vector<float>({1, 2, 3, 4}));

  (*executor)->InjectFaultForTest();
  auto faulted = run_one();
  ASSERT_TRUE(absl::IsInternal(faulted.status())) << faulted.status();
  EXPECT_NE(faulted.status().message().find("cudaGetLastError"), std::string::npos)
      << faulted.status();
  EXPECT_FALSE((*executor)->healthy());
  auto after = run_one(/*expect_free_slot=*/false);
  ASSERT_TRUE(absl::IsInternal(after.status())) << after.status();
  EXPECT_NE(after.status().message().find("faulted earlier"), std::string::npos) << after.status();
  (*executor)->Stop();
  EXPECT_EQ(faults.load(), 1);
  EXPECT_NE(fault_message.find("cudaGetLastError"), std::string::npos) << fault_message;
  // The batch before the fault was counted on the device; the failed ones were not.
  auto counters = (*executor)->ReadCounters();
  ASSERT_TRUE(counters.ok()) << counters.status();
  EXPECT_EQ(counters->items, 1u);
  EXPECT_EQ(counters->bucket_batches[0], 1u);
}

// Device memory of this process standing in for an opened CUDA IPC region (cudaIpcOpenMemHandle
// refuses a handle from its own process): what the executor reads through DeviceBytes is the
// same kind of pointer. Records, when its last keepalive goes, how many requests were answered
// by then.
class DeviceAllocation final : public ImportedDeviceMemory {
 public:
  DeviceAllocation(void* base, uint64_t size, std::function<void()> on_release)
      : base_(base), size_(size), on_release_(std::move(on_release)) {}
  ~DeviceAllocation() override {
    on_release_();
    cudaFree(base_);
  }
  int device() const override { return 0; }
  uint64_t byte_size() const override { return size_; }
  const void* device_address() const override { return base_; }
  absl::Status CopyToHost(uint64_t, std::span<std::byte>) const override {
    return absl::InternalError("the CUDA executor must not copy through the host");
  }
  absl::Status CopyFromHost(uint64_t, std::span<const std::byte>) override {
    return absl::InternalError("not used");
  }

 private:
  void* const base_;
  const uint64_t size_;
  const std::function<void()> on_release_;
};

// Inputs in device memory (CUDA shared-memory regions): copied device to device on the
// executor's input stream, in batches that mix them with host inputs, and the mapping is held
// until the batch finished on the device; after a fault, until the executor is destroyed.
TEST_F(ExecutorFaultTest, DeviceInputsAreCopiedOnTheStreamAndHeldUntilTheBatchFinished) {
  ModelConfig config;
  config.name = "identity4";
  config.backend = "identity";
  config.max_batch_size = 4;
  config.inputs = {{"INPUT0", DataType::kFp32, {4}}};
  config.outputs = {{"OUTPUT0", DataType::kFp32, {4}}};
  ModelSpec spec{.config = config, .version = 1, .version_path = ""};
  auto model = CreateCudaIdentityInstance(spec, 0, BatchBuckets(config));
  ASSERT_TRUE(model.ok()) << model.status();
  ModelStats stats(ModelStatsOptions{.model_name = "identity4"});
  CudaExecutorOptions options;
  options.executor.slot_count = 2;
  options.executor.stats = &stats;
  auto executor = CudaExecutor::Create(config, *std::move(model), options);
  ASSERT_TRUE(executor.ok()) << executor.status();

  std::vector<std::shared_ptr<Answer>> answers;
  std::atomic<int> released{0};
  std::atomic<int> answered_at_release{-1};
  const auto answered = [&] {
    int n = 0;
    for (const auto& answer : answers) n += answer->count();
    return n;
  };
  // 8 rows of 4 floats on the device: row r holds 100 r + 0..3.
  std::vector<float> rows(32);
  for (int i = 0; i < 32; ++i) rows[i] = static_cast<float>(100 * (i / 4) + i % 4);
  void* base = nullptr;
  ASSERT_EQ(cudaMalloc(&base, 128), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(base, rows.data(), 128, cudaMemcpyHostToDevice), cudaSuccess);
  auto memory = std::make_shared<DeviceAllocation>(base, 128, [&] {
    answered_at_release.store(answered());
    released.fetch_add(1);
  });
  const auto device_request = [&](int first_row, int count) {
    auto answer = std::make_shared<Answer>();
    answers.push_back(answer);
    auto request = MakeRequest("identity4", config, count,
                               {std::vector<std::byte>(static_cast<size_t>(count) * 16)},
                               Answer::Into(answer));
    request->inputs[0].data = {};
    request->inputs[0].device = DeviceBytes{.memory = memory.get(),
                                            .offset = static_cast<uint64_t>(first_row) * 16,
                                            .byte_size = static_cast<uint64_t>(count) * 16,
                                            .keepalive = memory};
    request->batch_size = count;
    return request;
  };
  const std::vector<float> host = {-1, -2, -3, -4};

  // device row 5, one host row, device rows 1-2 (4 rows: bucket 4, no padding); then device row 7
  // alone (bucket 1).
  Batch mixed;
  mixed.requests.push_back(device_request(5, 1));
  auto host_answer = std::make_shared<Answer>();
  answers.push_back(host_answer);
  mixed.requests.push_back(
      MakeRequest("identity4", config, 1, {Bytes(host.data(), 16)}, Answer::Into(host_answer)));
  mixed.requests.push_back(device_request(1, 2));
  mixed.items = 4;
  mixed.dispatch_time = std::chrono::steady_clock::now();
  (*executor)->Execute(std::move(mixed));
  Batch lone;
  lone.requests.push_back(device_request(7, 1));
  lone.items = 1;
  lone.dispatch_time = std::chrono::steady_clock::now();
  ASSERT_TRUE((*executor)->HasFreeSlot());
  (*executor)->Execute(std::move(lone));
  memory.reset();  // the requests and the executor's slots hold it now
  const std::vector<std::vector<float>> expected = {
      {500, 501, 502, 503}, host, {100, 101, 102, 103, 200, 201, 202, 203}, {700, 701, 702, 703}};
  for (size_t r = 0; r < answers.size(); ++r) {
    auto result = answers[r]->WaitForResult(kWait);
    ASSERT_TRUE(result.ok()) << "request " << r << ": " << result.status();
    EXPECT_EQ(Floats(result->outputs.at(0).data), expected[r]) << "request " << r;
  }
  // Released once, after every request that read it was answered (the request destroyed after its
  // answer, the slot's lease after Wait).
  for (int i = 0; i < 3000 && released.load() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(released.load(), 1);
  EXPECT_EQ(answered_at_release.load(), 4);

  // After a fault: the batch is answered INTERNAL at once, but its copies may still be queued, so
  // the slot keeps the mapping until the executor synchronized its streams in its destructor.
  ASSERT_EQ(cudaMalloc(&base, 128), cudaSuccess);
  released.store(0);
  answers.clear();
  memory = std::make_shared<DeviceAllocation>(base, 128, [&] { released.fetch_add(1); });
  (*executor)->InjectFaultForTest();
  Batch faulted;
  faulted.requests.push_back(device_request(0, 2));
  faulted.items = 2;
  faulted.dispatch_time = std::chrono::steady_clock::now();
  (*executor)->Execute(std::move(faulted));
  memory.reset();
  auto failed = answers[0]->WaitForResult(kWait);
  ASSERT_TRUE(absl::IsInternal(failed.status())) << failed.status();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(released.load(), 0) << "released with the faulted batch's copies maybe queued";
  executor->reset();
  EXPECT_EQ(released.load(), 1);
}

}  // namespace
}  // namespace sluice::engine::cuda
