// sluice-engine-bench: the engine alone (no network) on the bundled models, per batch bucket.
// Not a test: it prints a short table and, with --json, writes every figure to a file that
// docs/performance.md quotes with the command that produced it.
//
// For each model and each batch bucket b (1, 2, 4, ..., max_batch_size) it sends requests of b
// items each through Engine::Submit, with dynamic batching switched off so that every executed
// batch is exactly one request of b items (one bucket), in two modes:
//   - pipeline: --outstanding requests in flight at once (closed loop: a request is submitted as
//     soon as one is answered), so the executor's slots overlap gathering inputs and answering
//     outputs with compute, as the server does under load;
//   - sync: one request at a time (submit, wait for its answer, then the next), the forced
//     synchronous baseline: every batch pays the whole queue -> batcher -> executor -> completion
//     round trip alone.
// It reports items per second and, per executed batch, the compute phases from the model's
// stats (ModelStats batch_stats: input gather, infer, output scatter; on a GPU the executor fills
// them from CUDA events).
//
//   build/bench/sluice-engine-bench --device=cpu --seconds=0.5 --json engine_bench.json
//
// --device=auto|cpu|cuda:N goes through engine::SelectDevice, as the server's flag does.
// --graphs=on|off sets each model's optimization.cuda.graphs; it only means something on a GPU
// (the table says "n/a on CPU" otherwise).
//
// Every figure names the executor its model ran on ("cuda:0", or "cpu" when the engine put the
// model on the CPU backend, which it does silently for a model without a GPU implementation):
// read from the engine's own load log. --require-device=cuda fails the run when a model did not
// run on the GPU, so a CPU fallback is never reported as a GPU figure. Non-finite FP32 outputs
// fail the run too.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/bench_support.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "engine/device.h"
#include "engine/engine.h"
#include "nlohmann/json.hpp"
#include "server/model_config_parser.h"

namespace sluice::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  std::string model_repository = SLUICE_SOURCE_DIR "/models";
  std::string models = "mlp,simple";
  std::string device = "cpu";
  std::string graphs = "on";
  std::string mode = "both";  // both | pipeline | sync
  double seconds = 0.5;       // per measured point
  int outstanding = 16;       // requests in flight in pipeline mode
  // Batches in flight per instance on the device that runs (EngineOptions::executor_slots on the
  // CPU, gpu_executor_slots on a GPU); 0: the engine's default for that device (2, 3).
  int executor_slots = 0;
  std::string buckets;  // empty: 1, 2, 4, ..., max_batch_size
  std::string json_path;
  std::string require_device;  // "cuda" or "cpu": fail when a model ran elsewhere; empty: any
};

// The model's spec from <repository>/<name>/config.pbtxt (version 1), with dynamic batching off
// (one request = one batch = one bucket) and optimization.cuda.graphs as asked.
absl::StatusOr<engine::ModelSpec> LoadSpec(const Flags& flags, const std::string& name) {
  const std::string dir = absl::StrCat(flags.model_repository, "/", name);
  ASSIGN_OR_RETURN(std::string text, ReadText(dir + "/config.pbtxt"));
  ASSIGN_OR_RETURN(auto proto, server::ParseModelConfigText(text, dir + "/config.pbtxt"));
  ASSIGN_OR_RETURN(engine::ModelConfig config, server::ToEngineModelConfig(proto, name));
  if (config.max_batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("model '", name, "' has no batch dimension"));
  }
  config.dynamic_batching.reset();
  config.cuda_graphs = flags.graphs == "on";
  engine::ModelSpec spec;
  spec.config = std::move(config);
  spec.version = 1;
  spec.version_path = dir + "/1";
  return spec;
}

// One batch of `items` items of every input: random values (FP32 in [-1, 1], INT32 small), zeros
// for other types. The requests' views point into these buffers.
struct Inputs {
  std::vector<std::string> names;
  std::vector<engine::DataType> dtypes;
  std::vector<engine::Shape> shapes;
  std::vector<std::vector<std::byte>> data;
};

absl::StatusOr<Inputs> MakeInputs(const engine::ModelConfig& config, int items) {
  Inputs inputs;
  std::mt19937 rng(items);
  for (const engine::TensorSpec& spec : config.inputs) {
    engine::Shape shape = spec.dims;
    for (int64_t d : shape) {
      if (d < 0) {
        return absl::InvalidArgumentError(absl::StrCat("model '", config.name, "' input '",
                                                       spec.name, "' has a variable dimension"));
      }
    }
    shape.insert(shape.begin(), items);
    ASSIGN_OR_RETURN(int64_t elements, engine::ElementCount(shape));
    ASSIGN_OR_RETURN(size_t bytes, engine::FixedByteSize(spec.dtype, elements));
    std::vector<std::byte> data(bytes, std::byte{0});
    if (spec.dtype == engine::DataType::kFp32) {
      std::uniform_real_distribution<float> dist(-1.f, 1.f);
      for (int64_t i = 0; i < elements; ++i) {
        const float v = dist(rng);
        std::memcpy(data.data() + i * sizeof(float), &v, sizeof(float));
      }
    } else if (spec.dtype == engine::DataType::kInt32) {
      std::uniform_int_distribution<int32_t> dist(-1000, 1000);
      for (int64_t i = 0; i < elements; ++i) {
        const int32_t v = dist(rng);
        std::memcpy(data.data() + i * sizeof(int32_t), &v, sizeof(int32_t));
      }
    }
    inputs.names.push_back(spec.name);
    inputs.dtypes.push_back(spec.dtype);
    inputs.shapes.push_back(std::move(shape));
    inputs.data.push_back(std::move(data));
  }
  return inputs;
}

// Counts answers; the submitting thread waits on it.
struct Tracker {
  std::mutex mu;
  std::condition_variable cv;
  int outstanding = 0;
  int64_t answered = 0;
  int64_t failed = 0;
  std::string first_error;
  int64_t non_finite = 0;  // FP32 output values that were NaN or infinite
};

int64_t NonFinite(const engine::InferenceResponse& response) {
  int64_t count = 0;
  for (const engine::Tensor& tensor : response.outputs) {
    if (tensor.dtype != engine::DataType::kFp32) continue;
    for (size_t at = 0; at + sizeof(float) <= tensor.data.size(); at += sizeof(float)) {
      float value;
      std::memcpy(&value, tensor.data.data() + at, sizeof(float));
      count += std::isfinite(value) ? 0 : 1;
    }
  }
  return count;
}

void Submit(engine::Engine& engine, const std::string& model, const Inputs& inputs,
            Tracker& tracker) {
  auto request = std::make_unique<engine::InferenceRequest>(
      model, -1, [&tracker](absl::StatusOr<engine::InferenceResponse> result) {
        std::lock_guard<std::mutex> lock(tracker.mu);
        --tracker.outstanding;
        ++tracker.answered;
        if (!result.ok()) {
          if (tracker.failed++ == 0) tracker.first_error = result.status().ToString();
        } else {
          tracker.non_finite += NonFinite(*result);
        }
        tracker.cv.notify_all();
      });
  for (size_t i = 0; i < inputs.names.size(); ++i) {
    request->inputs.push_back(
        engine::TensorView{inputs.names[i], inputs.dtypes[i], inputs.shapes[i], inputs.data[i]});
  }
  request->received_time = Clock::now();
  {
    std::lock_guard<std::mutex> lock(tracker.mu);
    ++tracker.outstanding;
  }
  engine.Submit(std::move(request));
}

struct Point {
  std::string model;
  int bucket = 0;
  std::string mode;
  double seconds = 0;
  int64_t requests = 0;
  int64_t batches = 0;
  double items_per_second = 0;
  // Mean per executed batch of this bucket, from the model's stats.
  double input_us = 0;
  double infer_us = 0;
  double output_us = 0;
};

absl::StatusOr<engine::BatchStat> BucketStats(const engine::Engine& engine,
                                              const std::string& model, int bucket) {
  ASSIGN_OR_RETURN(std::vector<engine::Engine::VersionStats> stats, engine.GetStats(model, -1));
  if (stats.empty()) return absl::NotFoundError(model);
  const auto& batch_stats = stats.front().stats.batch_stats;
  auto it = batch_stats.find(static_cast<uint64_t>(bucket));
  return it == batch_stats.end() ? engine::BatchStat{} : it->second;
}

// Runs `model` at `bucket` for `seconds` with `in_flight` requests outstanding (1: sync).
absl::StatusOr<Point> Measure(engine::Engine& engine, const std::string& model, int bucket,
                              const Inputs& inputs, int in_flight, double seconds) {
  Tracker tracker;
  auto run_for = [&](std::chrono::duration<double> duration, int64_t min_requests) {
    const auto start = Clock::now();
    int64_t submitted = 0;
    while (Clock::now() - start < duration || submitted < min_requests) {
      {
        std::unique_lock<std::mutex> lock(tracker.mu);
        tracker.cv.wait(lock, [&] { return tracker.outstanding < in_flight; });
      }
      Submit(engine, model, inputs, tracker);
      ++submitted;
    }
    std::unique_lock<std::mutex> lock(tracker.mu);
    tracker.cv.wait(lock, [&] { return tracker.outstanding == 0; });
    return std::make_pair(submitted, std::chrono::duration<double>(Clock::now() - start).count());
  };
  // Warm-up: caches, the batcher's and executor's threads, the allocator.
  run_for(std::chrono::duration<double>(seconds / 10), 2 * in_flight);
  ASSIGN_OR_RETURN(engine::BatchStat before, BucketStats(engine, model, bucket));
  const auto [requests, elapsed] =
      run_for(std::chrono::duration<double>(seconds), static_cast<int64_t>(in_flight));
  ASSIGN_OR_RETURN(engine::BatchStat after, BucketStats(engine, model, bucket));
  if (tracker.failed > 0) {
    return absl::InternalError(absl::StrCat(model, " bucket ", bucket, ": ", tracker.failed,
                                            " requests failed, first: ", tracker.first_error));
  }
  if (tracker.non_finite > 0) {
    return absl::InternalError(absl::StrCat(model, " bucket ", bucket, ": ", tracker.non_finite,
                                            " non-finite output values"));
  }
  Point point;
  point.model = model;
  point.bucket = bucket;
  point.mode = in_flight == 1 ? "sync" : "pipeline";
  point.seconds = elapsed;
  point.requests = requests;
  point.items_per_second = static_cast<double>(requests) * bucket / elapsed;
  point.batches = static_cast<int64_t>(after.compute_infer.count - before.compute_infer.count);
  auto mean_us = [&](const engine::DurationStat& a, const engine::DurationStat& b) {
    const uint64_t count = a.count - b.count;
    return count == 0 ? 0.0 : static_cast<double>(a.ns - b.ns) / static_cast<double>(count) / 1e3;
  };
  point.input_us = mean_us(after.compute_input, before.compute_input);
  point.infer_us = mean_us(after.compute_infer, before.compute_infer);
  point.output_us = mean_us(after.compute_output, before.compute_output);
  return point;
}

// Where model `name` runs: `selected` ("cuda:N" or "cpu"), unless the engine's load log (read
// from `log`, the file `logger` writes) says it put the model on the CPU backend. The log lines
// of the load are copied to stderr.
absl::StatusOr<std::string> ExecutorOf(const std::string& name, const engine::ModelConfig& config,
                                       const std::string& selected, common::Logger& logger,
                                       std::FILE& log) {
  logger.Flush();
  std::fflush(&log);
  std::rewind(&log);
  std::string text;
  char buffer[4096];
  while (std::fgets(buffer, sizeof(buffer), &log) != nullptr) text += buffer;
  std::fputs(text.c_str(), stderr);
  // The next model's lines only: the file starts again empty.
  if (ftruncate(fileno(&log), 0) != 0) return absl::InternalError("cannot truncate the log file");
  std::rewind(&log);
  if (selected == "cpu" || config.instance_kind == engine::InstanceKind::kCpu) return "cpu";
  const std::string fallback = absl::StrCat("model '", name, "' runs on the CPU backend");
  if (text.find(fallback) != std::string::npos) return "cpu (fallback from " + selected + ")";
  return selected;
}

absl::Status Run(Flags flags) {
  ASSIGN_OR_RETURN(engine::DeviceSelection device, engine::SelectDevice(flags.device));
  const bool on_gpu = device.kind == engine::DeviceSelection::Kind::kCuda;
  const std::string graphs = on_gpu ? flags.graphs : "n/a on CPU";

  engine::EngineOptions options;
  options.device = device;
  // The slot count of the executors that run: the CPU one's field does nothing to a GPU run.
  if (flags.executor_slots > 0) {
    (on_gpu ? options.gpu_executor_slots : options.executor_slots) = flags.executor_slots;
  }
  flags.executor_slots = on_gpu ? options.gpu_executor_slots : options.executor_slots;
  // The engine's log goes to a file this function reads after each load: the engine says there
  // (executor_factory.cc) when a model runs on the CPU backend instead of the selected GPU.
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> log_file(std::tmpfile(), &std::fclose);
  if (log_file == nullptr) return absl::InternalError("cannot create a temporary log file");
  common::Logger logger(common::LoggerOptions{.sink = log_file.get()});
  options.logger = &logger;
  ASSIGN_OR_RETURN(std::unique_ptr<engine::Engine> engine, engine::Engine::Create(options));
  const std::string gpu_name = absl::StrCat("cuda:", device.cuda_device);
  nlohmann::json executors = nlohmann::json::object();

  std::vector<std::string> modes;
  if (flags.mode == "both" || flags.mode == "pipeline") modes.push_back("pipeline");
  if (flags.mode == "both" || flags.mode == "sync") modes.push_back("sync");

  std::printf("sluice-engine-bench: %s\n", device.description.c_str());
  std::printf("machine: nproc %u, CPU %s\n", std::thread::hardware_concurrency(),
              CpuModel().c_str());
  std::printf(
      "%.2f s per point; pipeline: %d requests outstanding, %d executor slots; CUDA graphs: "
      "%s\n\n",
      flags.seconds, flags.outstanding, flags.executor_slots, graphs.c_str());

  nlohmann::json results = nlohmann::json::array();
  std::vector<Point> points;
  for (absl::string_view name_view : absl::StrSplit(flags.models, ',', absl::SkipEmpty())) {
    const std::string name(name_view);
    ASSIGN_OR_RETURN(engine::ModelSpec spec, LoadSpec(flags, name));
    const engine::ModelConfig config = spec.config;
    RETURN_IF_ERROR(engine->LoadModel(std::move(spec)));
    ASSIGN_OR_RETURN(const std::string executor,
                     ExecutorOf(name, config, on_gpu ? gpu_name : "cpu", logger, *log_file));
    executors[name] = executor;
    if (!flags.require_device.empty() && executor.rfind(flags.require_device, 0) != 0) {
      return absl::FailedPreconditionError(absl::StrCat("model '", name, "' ran on ", executor,
                                                        ", not on ", flags.require_device,
                                                        " (--require-device)"));
    }
    std::vector<int> buckets;
    if (flags.buckets.empty()) {
      for (int b = 1; b < config.max_batch_size; b *= 2) buckets.push_back(b);
      buckets.push_back(config.max_batch_size);
    } else {
      for (absl::string_view entry : absl::StrSplit(flags.buckets, ',')) {
        int b = 0;
        if (!absl::SimpleAtoi(entry, &b) || b < 1) {
          return absl::InvalidArgumentError(absl::StrCat("--buckets: '", entry, "'"));
        }
        if (b <= config.max_batch_size) buckets.push_back(b);
      }
    }
    std::printf("model %s on %s (max_batch_size %d, %d instance(s))\n", name.c_str(),
                executor.c_str(), config.max_batch_size, config.instance_count);
    std::printf(
        "| bucket | pipeline items/s | sync items/s | pipeline/sync | infer us/batch (pipeline) | "
        "infer us/batch (sync) | input+output us/batch (sync) |\n");
    std::printf("|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int bucket : buckets) {
      ASSIGN_OR_RETURN(Inputs inputs, MakeInputs(config, bucket));
      Point pipeline, sync;
      for (const std::string& mode : modes) {
        const int in_flight = mode == "sync" ? 1 : flags.outstanding;
        ASSIGN_OR_RETURN(Point point,
                         Measure(*engine, name, bucket, inputs, in_flight, flags.seconds));
        (mode == "sync" ? sync : pipeline) = point;
        results.push_back({{"model", point.model},
                           {"executor", executor},
                           {"bucket", point.bucket},
                           {"mode", point.mode},
                           {"outstanding", in_flight},
                           {"seconds", point.seconds},
                           {"requests", point.requests},
                           {"batches", point.batches},
                           {"items_per_second", point.items_per_second},
                           {"compute_input_us_per_batch", point.input_us},
                           {"compute_infer_us_per_batch", point.infer_us},
                           {"compute_output_us_per_batch", point.output_us}});
      }
      const double ratio = pipeline.items_per_second > 0 && sync.items_per_second > 0
                               ? pipeline.items_per_second / sync.items_per_second
                               : 0;
      std::printf("| %d | %.0f | %.0f | %.2f | %.1f | %.1f | %.1f |\n", bucket,
                  pipeline.items_per_second, sync.items_per_second, ratio, pipeline.infer_us,
                  sync.infer_us, sync.input_us + sync.output_us);
      std::fflush(stdout);
    }
    std::printf("\n");
    RETURN_IF_ERROR(engine->UnloadModel(name));
  }

  if (!flags.json_path.empty()) {
    nlohmann::json out = {
        {"benchmark", "sluice-engine-bench"},
        {"device", flags.device},
        {"device_description", device.description},
        {"cuda_graphs", graphs},
        {"seconds_per_point", flags.seconds},
        {"outstanding", flags.outstanding},
        {"executor_slots", flags.executor_slots},
        {"executors", executors},
        {"dynamic_batching", "off (one request = one batch = one bucket)"},
        {"machine", {{"nproc", std::thread::hardware_concurrency()}, {"cpu", CpuModel()}}},
        {"results", results}};
    std::ofstream file(flags.json_path);
    if (!file) return absl::PermissionDeniedError("cannot write " + flags.json_path);
    file << out.dump(2) << "\n";
    if (!file) return absl::DataLossError("writing " + flags.json_path + " failed");
    std::printf("wrote %s\n", flags.json_path.c_str());
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace sluice::bench

int main(int argc, char** argv) {
  sluice::bench::Flags flags;
  CLI::App app{
      "sluice-engine-bench: engine throughput and compute time per batch bucket, asynchronous "
      "pipeline vs one request at a time, on the bundled models; no network"};
  app.add_option("--model-repository", flags.model_repository, "Model repository")
      ->capture_default_str();
  app.add_option("--models", flags.models, "Comma-separated models of the repository to run")
      ->capture_default_str();
  app.add_option("--device", flags.device, "auto, cpu or cuda:N (engine::SelectDevice)")
      ->capture_default_str();
  app.add_option("--graphs", flags.graphs,
                 "Each model's optimization.cuda.graphs (on a GPU; n/a on the CPU)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  app.add_option("--mode", flags.mode, "pipeline, sync or both")
      ->check(CLI::IsMember({"both", "pipeline", "sync"}))
      ->capture_default_str();
  app.add_option("--seconds", flags.seconds, "Measured time per point (model, bucket, mode)")
      ->check(CLI::Range(0.01, 60.0))
      ->capture_default_str();
  app.add_option("--outstanding", flags.outstanding, "Requests in flight in pipeline mode")
      ->check(CLI::Range(2, 4096))
      ->capture_default_str();
  app.add_option("--executor-slots", flags.executor_slots,
                 "Batches in flight per instance, on the CPU or the GPU (whichever runs the "
                 "models); 0: the engine's default for that device (2 on the CPU, 3 on a GPU)")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  app.add_option("--buckets", flags.buckets,
                 "Comma-separated batch buckets (default 1, 2, 4, ..., max_batch_size)");
  app.add_option("--json", flags.json_path, "Also write every figure to this JSON file");
  app.add_option("--require-device", flags.require_device,
                 "cuda or cpu: fail when a model did not run there (a silent CPU fallback)")
      ->check(CLI::IsMember({"cuda", "cpu"}));
  CLI11_PARSE(app, argc, argv);
  const absl::Status status = sluice::bench::Run(flags);
  if (!status.ok()) {
    std::cerr << "sluice-engine-bench: " << status << "\n";
    return 1;
  }
  return 0;
}
