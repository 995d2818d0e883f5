// sluice-cuda-encoder-bench: the encoder on the GPU (issue 14), the CUDA executor alone (no
// batcher, no network), on a BERT-base-shape checkpoint it writes itself (tools/
// encoder_generator.h: hidden 768, 12 layers, 12 heads, intermediate 3072, vocabulary 30522,
// 512 positions; deterministic weights, FP16 unless --dtype says otherwise).
//
// Points: batches of 1, 8, 32 and 128 sequences of --seq tokens (default 128), and a ragged mix
// (32 sequences of 8..256 tokens, uniform), each with CUDA graphs on and off, in two modes:
//   - sync: one batch at a time (execute, wait for its answers): the latency of a lone batch and
//     its device phases (H2D copy, compute, D2H copy), timed by the executor's CUDA events;
//   - pipeline: batches back to back, every slot busy (closed loop): sequences/s, tokens/s, and
//     the share of wall time the compute stream was busy (sum of event-timed compute / wall).
// Prints a table (lines starting with '|') and, with --json, every figure.
//
//   build/bench/sluice-cuda-encoder-bench --seconds=1 --json=encoder_bench.json
//
// Needs a GPU; without one it says why and exits 2.

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/cuda/cuda_executor.h"
#include "engine/cuda/cuda_model.h"
#include "engine/cuda/device_info.h"
#include "engine/models/encoder/encoder_model.h"
#include "nlohmann/json.hpp"
#include "tools/encoder_generator.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using engine::Batch;
using engine::DataType;
using engine::InferenceRequest;
using engine::InferenceResponse;
using engine::TensorView;

struct Options {
  int device = 0;
  std::string dtype = "fp16";
  int seq = 128;
  double seconds = 1.0;
  int sync_batches = 20;
  std::string json;
  std::string folder;  // reuse a checkpoint instead of writing one
};

// A batch's requests (one sequence per request row), owned and reusable: rebuilt per execution.
struct BatchInputs {
  std::vector<std::vector<int64_t>> ids;   // per request, [1, length]
  std::vector<std::vector<int64_t>> mask;  // ones
  std::vector<std::vector<int64_t>> types;
  int sequences = 0;
  int64_t tokens = 0;
};

BatchInputs MakeInputs(const std::vector<int>& lengths, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> id(1000, 29000);
  BatchInputs inputs;
  for (int length : lengths) {
    std::vector<int64_t> ids(static_cast<size_t>(length));
    for (int64_t& v : ids) v = id(rng);
    ids.front() = 101;  // [CLS]
    ids.back() = 102;   // [SEP]
    inputs.ids.push_back(std::move(ids));
    inputs.mask.emplace_back(static_cast<size_t>(length), 1);
    inputs.types.emplace_back(static_cast<size_t>(length), 0);
    ++inputs.sequences;
    inputs.tokens += length;
  }
  return inputs;
}

std::span<const std::byte> Bytes(const std::vector<int64_t>& values) {
  return {reinterpret_cast<const std::byte*>(values.data()), values.size() * 8};
}

// Counts answers; wakes the driver when a slot frees.
struct Progress {
  std::mutex mu;
  std::condition_variable cv;
  int64_t answered = 0;
  int64_t failed = 0;
  std::string first_error;
};

Batch MakeBatch(const BatchInputs& inputs, Progress& progress) {
  Batch batch;
  for (size_t r = 0; r < inputs.ids.size(); ++r) {
    auto request = std::make_unique<InferenceRequest>(
        "encoder", -1, [&progress](absl::StatusOr<InferenceResponse> result) {
          std::lock_guard<std::mutex> lock(progress.mu);
          ++progress.answered;
          if (!result.ok() && progress.failed++ == 0) {
            progress.first_error = std::string(result.status().message());
          }
          progress.cv.notify_all();
        });
    const engine::Shape shape = {1, static_cast<int64_t>(inputs.ids[r].size())};
    request->inputs.push_back(
        TensorView{"input_ids", DataType::kInt64, shape, Bytes(inputs.ids[r])});
    request->inputs.push_back(
        TensorView{"attention_mask", DataType::kInt64, shape, Bytes(inputs.mask[r])});
    request->inputs.push_back(
        TensorView{"token_type_ids", DataType::kInt64, shape, Bytes(inputs.types[r])});
    request->requested_outputs = {"embedding"};
    request->batch_size = 1;
    request->token_count = static_cast<int64_t>(inputs.ids[r].size());
    request->received_time = Clock::now();
    batch.items += 1;
    batch.tokens += request->token_count;
    batch.requests.push_back(std::move(request));
  }
  batch.dispatch_time = Clock::now();
  return batch;
}

struct Loaded {
  std::unique_ptr<engine::Model> model;
  std::unique_ptr<engine::ModelStats> stats;
  std::unique_ptr<engine::cuda::CudaExecutor> executor;
  Progress* progress = nullptr;
};

absl::StatusOr<Loaded> Load(const std::string& folder, const Options& options, bool graphs,
                            Progress& progress) {
  engine::ModelSpec spec;
  spec.config.name = "encoder";
  spec.config.backend = "encoder";
  spec.config.max_batch_size = 128;
  spec.config.parameters = {{"max_batch_tokens", "32768"},
                            {"cuda_buckets", "1x128,8x1024,32x8192,128x32768"}};
  spec.version = 1;
  spec.version_path = folder;
  Loaded loaded;
  absl::StatusOr<std::unique_ptr<engine::Model>> model = engine::models::CreateEncoderModel(spec);
  if (!model.ok()) return model.status();
  loaded.model = *std::move(model);
  absl::StatusOr<std::unique_ptr<engine::cuda::CudaRaggedModel>> ragged =
      engine::cuda::CreateCudaRaggedModel(*loaded.model, options.device);
  if (!ragged.ok()) return ragged.status();
  loaded.stats =
      std::make_unique<engine::ModelStats>(engine::ModelStatsOptions{.model_name = "encoder"});
  engine::cuda::CudaExecutorOptions executor_options;
  executor_options.device = options.device;
  executor_options.use_graphs = graphs;
  executor_options.executor.slot_count = 3;
  executor_options.executor.stats = loaded.stats.get();
  executor_options.executor.on_slot_freed = [&progress] {
    std::lock_guard<std::mutex> lock(progress.mu);
    progress.cv.notify_all();
  };
  absl::StatusOr<std::unique_ptr<engine::cuda::CudaExecutor>> executor =
      engine::cuda::CudaExecutor::CreateRagged(loaded.model->config(), *std::move(ragged),
                                               executor_options);
  if (!executor.ok()) return executor.status();
  loaded.executor = *std::move(executor);
  loaded.progress = &progress;
  return loaded;
}

struct Phases {
  double input_ms = 0;
  double compute_ms = 0;
  double output_ms = 0;
  uint64_t compute_ns = 0;
  uint64_t batches = 0;
};

// The event-timed phases of the batches of `items` items run between two snapshots (ModelStats'
// per-batch-size figures: one observation per batch, where the model-wide ones count requests).
Phases PhasesSince(const engine::ModelStatsSnapshot& before,
                   const engine::ModelStatsSnapshot& after, int items) {
  const auto stat = [items](const engine::ModelStatsSnapshot& snapshot) {
    auto it = snapshot.batch_stats.find(static_cast<uint64_t>(items));
    return it == snapshot.batch_stats.end() ? engine::BatchStat{} : it->second;
  };
  const engine::BatchStat a = stat(before);
  const engine::BatchStat b = stat(after);
  Phases p;
  p.batches = b.compute_infer.count - a.compute_infer.count;
  p.compute_ns = b.compute_infer.ns - a.compute_infer.ns;
  if (p.batches == 0) return p;
  const double n = static_cast<double>(p.batches);
  p.input_ms = static_cast<double>(b.compute_input.ns - a.compute_input.ns) / n / 1e6;
  p.compute_ms = static_cast<double>(p.compute_ns) / n / 1e6;
  p.output_ms = static_cast<double>(b.compute_output.ns - a.compute_output.ns) / n / 1e6;
  return p;
}

// Waits until `target` answers came (or a failure); false on a failure.
bool WaitAnswered(Progress& progress, int64_t target) {
  std::unique_lock<std::mutex> lock(progress.mu);
  progress.cv.wait(lock, [&] { return progress.answered >= target || progress.failed > 0; });
  return progress.failed == 0;
}

struct Point {
  std::string label;
  bool graphs = false;
  int sequences = 0;
  int64_t tokens = 0;
  double sync_ms_p50 = 0;
  Phases sync_phases;
  double sequences_per_s = 0;
  double tokens_per_s = 0;
  double busy_share = 0;
};

absl::StatusOr<Point> Measure(Loaded& loaded, const std::string& label, const BatchInputs& inputs,
                              const Options& options, bool graphs) {
  Progress& progress = *loaded.progress;
  engine::cuda::CudaExecutor& executor = *loaded.executor;
  Point point{
      .label = label, .graphs = graphs, .sequences = inputs.sequences, .tokens = inputs.tokens};
  auto fail = [&]() {
    return absl::InternalError(absl::StrCat(label, ": a request failed: ", progress.first_error));
  };
  // Warm-up.
  for (int i = 0; i < 3; ++i) {
    const int64_t target = progress.answered + inputs.sequences;
    executor.Execute(MakeBatch(inputs, progress));
    if (!WaitAnswered(progress, target)) return fail();
  }
  // Sync: one batch at a time.
  std::vector<double> latencies;
  engine::ModelStatsSnapshot before = loaded.stats->Snapshot();
  for (int i = 0; i < options.sync_batches; ++i) {
    const int64_t target = progress.answered + inputs.sequences;
    const auto start = Clock::now();
    executor.Execute(MakeBatch(inputs, progress));
    if (!WaitAnswered(progress, target)) return fail();
    latencies.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  point.sync_phases = PhasesSince(before, loaded.stats->Snapshot(), inputs.sequences);
  std::sort(latencies.begin(), latencies.end());
  point.sync_ms_p50 = latencies[latencies.size() / 2];
  // Pipeline: every slot busy for --seconds.
  before = loaded.stats->Snapshot();
  const int64_t first = progress.answered;
  int64_t sent = 0;
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration<double>(options.seconds);
  while (Clock::now() < end) {
    {
      std::unique_lock<std::mutex> lock(progress.mu);
      progress.cv.wait(lock, [&] { return executor.HasFreeSlot() || progress.failed > 0; });
      if (progress.failed > 0) return fail();
    }
    executor.Execute(MakeBatch(inputs, progress));
    sent += inputs.sequences;
  }
  if (!WaitAnswered(progress, first + sent)) return fail();
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  const Phases pipeline = PhasesSince(before, loaded.stats->Snapshot(), inputs.sequences);
  point.sequences_per_s = static_cast<double>(sent) / wall;
  point.tokens_per_s = point.sequences_per_s * static_cast<double>(inputs.tokens) /
                       static_cast<double>(inputs.sequences);
  point.busy_share = static_cast<double>(pipeline.compute_ns) / 1e9 / wall;
  return point;
}

int Run(const Options& options) {
  absl::StatusOr<std::vector<engine::cuda::DeviceInfo>> devices = engine::cuda::ListDevices();
  if (!devices.ok()) {
    std::fprintf(stderr, "sluice-cuda-encoder-bench: no usable GPU: %s\n",
                 std::string(devices.status().message()).c_str());
    return 2;
  }
  std::string folder = options.folder;
  fs::path temp;
  if (folder.empty()) {
    temp = fs::temp_directory_path() / absl::StrCat("sluice_encoder_bench_", ::getpid());
    tools::EncoderCheckpointOptions checkpoint;
    checkpoint.vocab_size = 30522;
    checkpoint.hidden_size = 768;
    checkpoint.layers = 12;
    checkpoint.heads = 12;
    checkpoint.intermediate_size = 3072;
    checkpoint.max_position_embeddings = 512;
    checkpoint.dtype = options.dtype == "fp32"   ? DataType::kFp32
                       : options.dtype == "bf16" ? DataType::kBf16
                                                 : DataType::kFp16;
    const auto start = Clock::now();
    absl::Status written = tools::WriteEncoderCheckpoint(checkpoint, (temp / "1").string());
    if (!written.ok()) {
      std::fprintf(stderr, "writing the checkpoint: %s\n", written.ToString().c_str());
      return 1;
    }
    std::printf("checkpoint: BERT-base shape, %s, written in %.1f s\n", options.dtype.c_str(),
                std::chrono::duration<double>(Clock::now() - start).count());
    folder = (temp / "1").string();
  }
  struct Cleanup {
    fs::path path;
    ~Cleanup() {
      std::error_code ignored;
      if (!path.empty()) fs::remove_all(path, ignored);
    }
  } cleanup{temp};

  std::vector<std::pair<std::string, BatchInputs>> workloads;
  for (int batch : {1, 8, 32, 128}) {
    workloads.emplace_back(absl::StrCat("b", batch, "x", options.seq),
                           MakeInputs(std::vector<int>(batch, options.seq), 7));
  }
  {
    std::mt19937 rng(11);
    std::uniform_int_distribution<int> length(8, 256);
    std::vector<int> lengths(32);
    for (int& l : lengths) l = length(rng);
    workloads.emplace_back("ragged32x8..256", MakeInputs(lengths, 13));
  }
  std::vector<Point> points;
  for (bool graphs : {true, false}) {
    Progress progress;
    const auto start = Clock::now();
    absl::StatusOr<Loaded> loaded = Load(folder, options, graphs, progress);
    if (!loaded.ok()) {
      std::fprintf(stderr, "loading (graphs %s): %s\n", graphs ? "on" : "off",
                   loaded.status().ToString().c_str());
      return 1;
    }
    std::printf("loaded with graphs %s in %.2f s (4 buckets x 3 slots): %s\n",
                graphs ? "on" : "off", std::chrono::duration<double>(Clock::now() - start).count(),
                loaded->executor->ragged_summary().c_str());
    for (const auto& [label, inputs] : workloads) {
      absl::StatusOr<Point> point = Measure(*loaded, label, inputs, options, graphs);
      if (!point.ok()) {
        std::fprintf(stderr, "%s\n", point.status().ToString().c_str());
        return 1;
      }
      points.push_back(*point);
    }
    absl::StatusOr<engine::cuda::DeviceCounters> counters = loaded->executor->ReadCounters();
    if (counters.ok()) {
      std::printf(
          "device counters (graphs %s): %llu batches, %llu sequences, %llu tokens, %llu "
          "non-finite embedding values\n",
          graphs ? "on" : "off", counters->batches, counters->sequences, counters->tokens,
          counters->non_finite_outputs);
    }
    loaded->executor->Stop();
  }
  std::printf(
      "\n| workload | graphs | seqs | tokens | sync p50 ms | H2D ms | compute ms | D2H ms "
      "| seq/s | tokens/s | busy |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  nlohmann::json json = nlohmann::json::array();
  for (const Point& p : points) {
    std::printf("| %s | %s | %d | %lld | %.3f | %.3f | %.3f | %.3f | %.0f | %.0f | %.0f%% |\n",
                p.label.c_str(), p.graphs ? "on" : "off", p.sequences,
                static_cast<long long>(p.tokens), p.sync_ms_p50, p.sync_phases.input_ms,
                p.sync_phases.compute_ms, p.sync_phases.output_ms, p.sequences_per_s,
                p.tokens_per_s, 100 * p.busy_share);
    json.push_back({{"workload", p.label},
                    {"graphs", p.graphs},
                    {"sequences", p.sequences},
                    {"tokens", p.tokens},
                    {"sync_ms_p50", p.sync_ms_p50},
                    {"h2d_ms", p.sync_phases.input_ms},
                    {"compute_ms", p.sync_phases.compute_ms},
                    {"d2h_ms", p.sync_phases.output_ms},
                    {"sequences_per_s", p.sequences_per_s},
                    {"tokens_per_s", p.tokens_per_s},
                    {"compute_busy_share", p.busy_share}});
  }
  if (!options.json.empty()) std::ofstream(options.json) << json.dump(2) << "\n";
  return 0;
}

}  // namespace
}  // namespace sluice

int main(int argc, char** argv) {
  sluice::Options options;
  CLI::App app{"sluice-cuda-encoder-bench: the encoder on the GPU, BERT-base shape"};
  app.add_option("--device", options.device, "GPU index");
  app.add_option("--dtype", options.dtype, "checkpoint type: fp16, bf16, fp32")
      ->check(CLI::IsMember({"fp16", "bf16", "fp32"}));
  app.add_option("--seq", options.seq, "tokens per sequence")->check(CLI::Range(2, 512));
  app.add_option("--seconds", options.seconds, "pipeline seconds per point")
      ->check(CLI::Range(0.05, 60.0));
  app.add_option("--sync-batches", options.sync_batches, "batches in the sync mode")
      ->check(CLI::Range(1, 10000));
  app.add_option("--json", options.json, "write every figure here");
  app.add_option("--checkpoint", options.folder,
                 "a checkpoint folder instead of the generated one");
  CLI11_PARSE(app, argc, argv);
  return sluice::Run(options);
}
