// sluice-cuda-encoder-bench: the encoder on the GPU (issues 14, 35), the CUDA executor alone (no
// batcher, no network), on a BERT-base-shape checkpoint (--checkpoint, or one it writes itself:
// tools/encoder_generator.h, hidden 768, 12 layers, 12 heads, intermediate 3072, vocabulary 30522,
// 512 positions; deterministic weights).
//
// Points: batches of 1, 8, 32 and 128 sequences of --seq tokens (default 128), and a ragged mix
// (32 sequences of 8..256 tokens, RaggedLengths()), CUDA graphs on, off or both, each:
//   - sync: one batch at a time (execute, wait for its answers): the latency of a lone batch and
//     its device phases (H2D copy, compute, D2H copy), timed by the executor's CUDA events;
//   - pipeline: batches back to back, every slot busy (closed loop): sequences/s, tokens/s, the
//     share of wall time the compute stream was busy, and the process's CPU time per sequence
//     (the completion thread waits on blocking-sync events).
// Buckets are sized to the workloads (WorkloadBuckets); every point names its bucket and reports
// the tokens present and the tokens the GEMMs computed, and the TFLOP/s of both against the
// H200's measured bf16 rate. Then each of a layer's GEMMs alone at those token counts
// (cuda_gemm_timing.h). The executor's own summary (device, types, fused epilogues) heads the
// table: every figure names what it ran on. Non-finite embeddings fail the run (exit 1).
//
//   build/bench/sluice-cuda-encoder-bench --seconds=1 --json=encoder_bench.json
//   build/bench/sluice-cuda-encoder-bench --checkpoint DIR --compute bf16 --seq 512 --graphs on
//
// Needs a GPU; without one it says why and exits 2.

#include <sys/resource.h>

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
#include <tuple>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/cuda_gemm_timing.h"
#include "engine/cuda/cuda_executor.h"
#include "engine/cuda/cuda_model.h"
#include "engine/cuda/device_info.h"
#include "engine/models/encoder/encoder_model.h"
#include "engine/models/encoder/encoder_network.h"
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
  std::string dtype = "fp16";    // of the checkpoint written when --checkpoint is not given
  std::string compute = "fp16";  // the encoder's compute_type parameter
  bool tf32 = false;             // allow_tf32 (FP32 compute on TF32 tensor cores)
  int seq = 128;
  std::string graphs = "both";  // on, off, both
  double seconds = 1.0;
  int sync_batches = 20;
  int gemm_repetitions = 20;  // the GEMMs alone; 0: not timed
  std::string buckets;        // empty: sized to the workloads (WorkloadBuckets)
  std::string json;
  std::string folder;  // reuse a checkpoint instead of writing one
};

// The ragged workload's lengths, 8..256, deterministic: bench/gpu_torch_encoder.py draws the
// same ones, so that PyTorch runs the same batch.
std::vector<int> RaggedLengths() {
  std::vector<int> lengths;
  for (int i = 0; i < 32; ++i) lengths.push_back(8 + (i * 97 + 13) % 249);
  return lengths;
}

// The CUDA graph buckets sized to the workloads (issue 35): batches of 1, 8, 32 and 128
// sequences of `seq` tokens each fill their bucket exactly, and the ragged mix (3,964 tokens) gets
// the smallest 32-sequence bucket that holds it. The GEMMs run over a bucket's whole token
// capacity (a captured graph fixes cuBLASLt's dimensions; the real counts only reach the
// attention and pooling kernels, from device memory), so a bucket larger than its batch would
// count padding rows as work: every point reports the tokens present and the tokens computed.
std::string WorkloadBuckets(int seq) {
  int64_t ragged = 0;
  for (int length : RaggedLengths()) ragged += length;
  const int64_t ragged_bucket = (ragged + 255) / 256 * 256;
  std::string buckets;
  for (int batch : {1, 8, 32, 128}) {
    absl::StrAppend(&buckets, buckets.empty() ? "" : ",", batch, "x", int64_t{batch} * seq);
  }
  if (ragged_bucket != int64_t{32} * seq) absl::StrAppend(&buckets, ",32x", ragged_bucket);
  return buckets;
}

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
  std::shared_ptr<const engine::models::encoder::EncoderNetwork> net;
  Progress* progress = nullptr;
};

absl::StatusOr<Loaded> Load(const std::string& folder, const Options& options, bool graphs,
                            Progress& progress) {
  const std::string buckets =
      options.buckets.empty() ? WorkloadBuckets(options.seq) : options.buckets;
  engine::ModelSpec spec;
  spec.config.name = "encoder";
  spec.config.backend = "encoder";
  spec.config.max_batch_size = 128;
  spec.config.parameters = {{"max_batch_tokens", absl::StrCat(128 * options.seq)},
                            {"cuda_buckets", buckets},
                            {"compute_type", options.compute},
                            {"allow_tf32", options.tf32 ? "true" : "false"}};
  spec.version = 1;
  spec.version_path = folder;
  Loaded loaded;
  absl::StatusOr<std::unique_ptr<engine::Model>> model = engine::models::CreateEncoderModel(spec);
  if (!model.ok()) return model.status();
  loaded.model = *std::move(model);
  loaded.net = engine::models::LoadedEncoderNetwork(*loaded.model);
  if (loaded.net == nullptr) return absl::InternalError("the model is not an encoder");
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

// The process's CPU time (user + system), seconds.
double ProcessCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// Floating-point operations of one forward pass over sequences of `lengths`, with the GEMMs over
// `gemm_rows` token rows (the bucket's capacity, or the tokens present): per layer the four
// linear layers (2 x rows x (4 h^2 + 2 h I)) and attention's two products per sequence
// (4 x L^2 x h). LayerNorm, softmax, GELU and pooling are left out (a few per cent).
double ForwardFlops(const engine::models::encoder::EncoderNetwork& net,
                    const std::vector<int>& lengths, int64_t gemm_rows) {
  const double h = net.hidden;
  const double inter = net.intermediate;
  double attention = 0;
  for (int length : lengths) attention += 4.0 * length * length * h;
  return net.layers *
         (2.0 * static_cast<double>(gemm_rows) * (4 * h * h + 2 * h * inter) + attention);
}

struct Point {
  std::string label;
  bool graphs = false;
  int sequences = 0;
  int64_t tokens = 0;           // present
  int64_t tokens_computed = 0;  // the bucket's capacity: the rows the GEMMs ran over
  std::string bucket;
  double sync_ms_p50 = 0;
  Phases sync_phases;
  double sequences_per_s = 0;
  double tokens_per_s = 0;
  double busy_share = 0;
  double cpu_us_per_sequence = 0;
  double flops_present = 0;
  double flops_computed = 0;
  double tflops_present = 0;   // useful work / event-timed compute of a lone batch
  double tflops_computed = 0;  // work done, padding rows included
  double tflops_pipeline = 0;  // useful work at the pipeline's rate (copies overlapped)
};

// The smallest bucket that holds the batch, as the encoder chooses (buckets ascend by tokens).
std::pair<std::string, int64_t> BucketFor(const std::string& buckets, int sequences,
                                          int64_t tokens) {
  std::vector<std::pair<int, int64_t>> parsed;
  for (absl::string_view entry : absl::StrSplit(buckets, ',')) {
    std::pair<std::string, std::string> pair = absl::StrSplit(entry, 'x');
    int s = 0;
    int64_t t = 0;
    if (absl::SimpleAtoi(pair.first, &s) && absl::SimpleAtoi(pair.second, &t)) {
      parsed.emplace_back(s, t);
    }
  }
  std::sort(parsed.begin(), parsed.end(), [](const auto& a, const auto& b) {
    return std::tie(a.second, a.first) < std::tie(b.second, b.first);
  });
  for (const auto& [s, t] : parsed) {
    if (sequences <= s && tokens <= t) return {absl::StrCat(s, "x", t), t};
  }
  return {"none", 0};
}

absl::StatusOr<Point> Measure(Loaded& loaded, const std::string& label, const BatchInputs& inputs,
                              const std::vector<int>& lengths, const Options& options,
                              bool graphs) {
  Progress& progress = *loaded.progress;
  engine::cuda::CudaExecutor& executor = *loaded.executor;
  Point point{
      .label = label, .graphs = graphs, .sequences = inputs.sequences, .tokens = inputs.tokens};
  const auto [bucket, capacity] =
      BucketFor(options.buckets.empty() ? WorkloadBuckets(options.seq) : options.buckets,
                inputs.sequences, inputs.tokens);
  point.bucket = bucket;
  point.tokens_computed = capacity;
  point.flops_present = ForwardFlops(*loaded.net, lengths, inputs.tokens);
  point.flops_computed = ForwardFlops(*loaded.net, lengths, capacity);
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
  if (point.sync_phases.compute_ms > 0) {
    point.tflops_present = point.flops_present / (point.sync_phases.compute_ms * 1e-3) / 1e12;
    point.tflops_computed = point.flops_computed / (point.sync_phases.compute_ms * 1e-3) / 1e12;
  }
  // Pipeline: every slot busy for --seconds. The completion thread waits on blocking-sync
  // events, so the process's CPU time over it is what the host pays per sequence.
  before = loaded.stats->Snapshot();
  const int64_t first = progress.answered;
  int64_t sent = 0;
  const double cpu_before = ProcessCpuSeconds();
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
  const double cpu = ProcessCpuSeconds() - cpu_before;
  const Phases pipeline = PhasesSince(before, loaded.stats->Snapshot(), inputs.sequences);
  point.sequences_per_s = static_cast<double>(sent) / wall;
  point.tokens_per_s = point.sequences_per_s * static_cast<double>(inputs.tokens) /
                       static_cast<double>(inputs.sequences);
  point.busy_share = static_cast<double>(pipeline.compute_ns) / 1e9 / wall;
  point.cpu_us_per_sequence = sent > 0 ? cpu / static_cast<double>(sent) * 1e6 : 0;
  point.tflops_pipeline =
      point.flops_present * point.sequences_per_s / static_cast<double>(inputs.sequences) / 1e12;
  return point;
}
// The H200's bf16 dense matrix rate as measured on the device machine (PyTorch, 8192^3 on random
// data): what the TFLOP/s figures are set against.
constexpr double kPeakTflops = 790;

engine::cuda::ElementType ComputeElementType(const std::string& compute) {
  return compute == "fp16"   ? engine::cuda::ElementType::kFp16
         : compute == "bf16" ? engine::cuda::ElementType::kBf16
                             : engine::cuda::ElementType::kFp32;
}

int Run(const Options& options) {
  absl::StatusOr<std::vector<engine::cuda::DeviceInfo>> devices = engine::cuda::ListDevices();
  if (!devices.ok() || options.device >= static_cast<int>(devices->size())) {
    std::fprintf(stderr, "sluice-cuda-encoder-bench: no usable GPU %d: %s\n", options.device,
                 devices.ok() ? "no such index" : std::string(devices.status().message()).c_str());
    return 2;
  }
  const std::string gpu = (*devices)[options.device].name;
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

  struct Workload {
    std::string label;
    std::vector<int> lengths;
    BatchInputs inputs;
  };
  std::vector<Workload> workloads;
  for (int batch : {1, 8, 32, 128}) {
    std::vector<int> lengths(static_cast<size_t>(batch), options.seq);
    workloads.push_back(
        {absl::StrCat("b", batch, "x", options.seq), lengths, MakeInputs(lengths, 7)});
  }
  workloads.push_back({"ragged32x8..256", RaggedLengths(), MakeInputs(RaggedLengths(), 13)});

  std::vector<bool> modes;
  if (options.graphs != "off") modes.push_back(true);
  if (options.graphs != "on") modes.push_back(false);
  std::vector<Point> points;
  std::string executor_summary;
  std::shared_ptr<const engine::models::encoder::EncoderNetwork> net;
  for (bool graphs : modes) {
    Progress progress;
    const auto start = Clock::now();
    absl::StatusOr<Loaded> loaded = Load(folder, options, graphs, progress);
    if (!loaded.ok()) {
      std::fprintf(stderr, "loading (graphs %s): %s\n", graphs ? "on" : "off",
                   loaded.status().ToString().c_str());
      return 1;
    }
    net = loaded->net;
    // The executor every figure ran on, as it describes itself (device, types, buckets, which
    // GEMM epilogues are fused): a benchmark on anything else is not this one.
    executor_summary = loaded->executor->ragged_summary();
    std::printf("loaded with graphs %s in %.2f s (3 slots): %s\n", graphs ? "on" : "off",
                std::chrono::duration<double>(Clock::now() - start).count(),
                executor_summary.c_str());
    uint64_t non_finite = 0;
    for (const Workload& workload : workloads) {
      absl::StatusOr<Point> point =
          Measure(*loaded, workload.label, workload.inputs, workload.lengths, options, graphs);
      if (!point.ok()) {
        std::fprintf(stderr, "%s\n", point.status().ToString().c_str());
        return 1;
      }
      // Non-finite outputs fail the benchmark: a fast wrong answer is not a figure.
      absl::StatusOr<engine::cuda::DeviceCounters> counters = loaded->executor->ReadCounters();
      if (!counters.ok()) {
        std::fprintf(stderr, "reading the device counters: %s\n",
                     counters.status().ToString().c_str());
        return 1;
      }
      if (counters->non_finite_outputs > non_finite) {
        std::fprintf(stderr,
                     "%s (graphs %s): %llu non-finite embedding values on %s; failing the "
                     "benchmark\n",
                     workload.label.c_str(), graphs ? "on" : "off",
                     counters->non_finite_outputs - non_finite, executor_summary.c_str());
        return 1;
      }
      non_finite = counters->non_finite_outputs;
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

  std::vector<bench::GemmTiming> gemms;
  if (options.gemm_repetitions > 0 && net != nullptr) {
    std::vector<int64_t> rows;
    for (const Point& p : points) {
      if (std::find(rows.begin(), rows.end(), p.tokens_computed) == rows.end()) {
        rows.push_back(p.tokens_computed);
      }
    }
    absl::StatusOr<std::vector<bench::GemmTiming>> timed =
        bench::TimeEncoderGemms(options.device, ComputeElementType(options.compute), options.tf32,
                                net->hidden, net->intermediate, rows, options.gemm_repetitions);
    if (!timed.ok()) {
      std::fprintf(stderr, "the GEMMs alone: %s\n", timed.status().ToString().c_str());
      return 1;
    }
    gemms = *std::move(timed);
  }

  std::printf("\n%s on %s; TFLOP/s against %.0f (bf16 dense, measured)\n", executor_summary.c_str(),
              gpu.c_str(), kPeakTflops);
  std::printf(
      "| workload | graphs | bucket | tokens present/computed | sync p50 ms | H2D ms | compute ms "
      "| "
      "D2H ms | seq/s | tokens/s | busy | TFLOP/s present/computed | %% peak | CPU us/seq |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  nlohmann::json json_points = nlohmann::json::array();
  for (const Point& p : points) {
    std::printf(
        "| %s | %s | %s | %lld/%lld | %.3f | %.3f | %.3f | %.3f | %.0f | %.0f | %.0f%% | "
        "%.1f/%.1f | %.1f | %.1f |\n",
        p.label.c_str(), p.graphs ? "on" : "off", p.bucket.c_str(),
        static_cast<long long>(p.tokens), static_cast<long long>(p.tokens_computed), p.sync_ms_p50,
        p.sync_phases.input_ms, p.sync_phases.compute_ms, p.sync_phases.output_ms,
        p.sequences_per_s, p.tokens_per_s, 100 * p.busy_share, p.tflops_present, p.tflops_computed,
        100 * p.tflops_present / kPeakTflops, p.cpu_us_per_sequence);
    json_points.push_back({{"workload", p.label},
                           {"graphs", p.graphs},
                           {"bucket", p.bucket},
                           {"sequences", p.sequences},
                           {"tokens", p.tokens},
                           {"tokens_computed", p.tokens_computed},
                           {"sync_ms_p50", p.sync_ms_p50},
                           {"h2d_ms", p.sync_phases.input_ms},
                           {"compute_ms", p.sync_phases.compute_ms},
                           {"d2h_ms", p.sync_phases.output_ms},
                           {"sequences_per_s", p.sequences_per_s},
                           {"tokens_per_s", p.tokens_per_s},
                           {"compute_busy_share", p.busy_share},
                           {"cpu_us_per_sequence", p.cpu_us_per_sequence},
                           {"flops_present", p.flops_present},
                           {"flops_computed", p.flops_computed},
                           {"tflops_present", p.tflops_present},
                           {"tflops_computed", p.tflops_computed},
                           {"tflops_pipeline", p.tflops_pipeline},
                           {"peak_share_present", p.tflops_present / kPeakTflops}});
  }
  nlohmann::json json_gemms = nlohmann::json::array();
  if (!gemms.empty()) {
    std::printf("\nGEMMs alone (cuBLASLt, %s, %d repetitions):\n",
                options.tf32 ? "tf32" : options.compute.c_str(), options.gemm_repetitions);
    std::printf(
        "| tokens | GEMM | out x in | us | TFLOP/s | %% peak |\n|---|---|---|---|---|---|\n");
  }
  for (const bench::GemmTiming& g : gemms) {
    std::printf("| %lld | %s | %dx%d | %.1f | %.1f | %.1f |\n", static_cast<long long>(g.tokens),
                g.name.c_str(), g.out, g.in, g.us, g.tflops, 100 * g.tflops / kPeakTflops);
    json_gemms.push_back({{"name", g.name},
                          {"tokens", g.tokens},
                          {"in", g.in},
                          {"out", g.out},
                          {"us", g.us},
                          {"tflops", g.tflops}});
  }
  if (!options.json.empty()) {
    const nlohmann::json json = {
        {"benchmark", "sluice-cuda-encoder-bench"},
        {"executor", executor_summary},
        {"gpu", gpu},
        {"compute", options.compute},
        {"tf32", options.tf32},
        {"seq", options.seq},
        {"buckets", options.buckets.empty() ? WorkloadBuckets(options.seq) : options.buckets},
        {"peak_tflops", kPeakTflops},
        {"points", json_points},
        {"gemms", json_gemms}};
    std::ofstream(options.json) << json.dump(2) << "\n";
  }
  return 0;
}

}  // namespace
}  // namespace sluice

int main(int argc, char** argv) {
  sluice::Options options;
  CLI::App app{"sluice-cuda-encoder-bench: the encoder on the GPU, BERT-base shape"};
  app.add_option("--device", options.device, "GPU index");
  app.add_option("--dtype", options.dtype,
                 "type of the checkpoint written when --checkpoint is not given")
      ->check(CLI::IsMember({"fp16", "bf16", "fp32"}));
  app.add_option("--compute", options.compute, "compute_type: fp16, bf16, fp32 or checkpoint")
      ->check(CLI::IsMember({"fp16", "bf16", "fp32", "checkpoint"}));
  app.add_flag("--tf32", options.tf32, "allow_tf32: FP32 GEMMs on TF32 tensor cores");
  app.add_option("--seq", options.seq, "tokens per sequence")->check(CLI::Range(2, 512));
  app.add_option("--graphs", options.graphs, "CUDA graphs: on, off or both")
      ->check(CLI::IsMember({"on", "off", "both"}));
  app.add_option("--seconds", options.seconds, "pipeline seconds per point")
      ->check(CLI::Range(0.05, 60.0));
  app.add_option("--sync-batches", options.sync_batches, "batches in the sync mode")
      ->check(CLI::Range(1, 10000));
  app.add_option("--gemm-repetitions", options.gemm_repetitions,
                 "repetitions of each GEMM timed alone (0: none)")
      ->check(CLI::Range(0, 100000));
  app.add_option("--buckets", options.buckets,
                 "cuda_buckets (default: sized to the workloads, see WorkloadBuckets)");
  app.add_option("--json", options.json, "write every figure here");
  app.add_option("--checkpoint", options.folder,
                 "a checkpoint folder instead of the generated one");
  CLI11_PARSE(app, argc, argv);
  return sluice::Run(options);
}
