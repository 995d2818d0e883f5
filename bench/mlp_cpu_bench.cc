// mlp_cpu_bench: how fast the `mlp` backend runs on the CPU, and how close it comes to the GEMMs it
// is made of. Not a test: it prints a table (markdown) for docs/performance.md.
//
// For each batch size it measures, in one process:
//   - instance: ModelInstance::Run called in a loop (the backend alone: GEMMs + fused epilogues +
//     the output copy), as inferences (rows) per second and GFLOP/s;
//   - sgemm: cblas_sgemm alone on the same shapes (every layer, one after the other), GFLOP/s;
//     "fraction" is instance GFLOP/s over this;
//   - engine: Engine::Submit with one request of that batch size in flight at a time (queue,
//     batcher thread, executor thread, completion thread), inferences per second and median
//     latency. No network.
// Plus the machine's single-thread SGEMM rate on a large square product, for scale.
//
//   build/bench/mlp_cpu_bench --model-dir models/mlp
//   build/bench/mlp_cpu_bench --model-dir /tmp/mlp_large --batch-sizes 1,8,64

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
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
#include "common/status_macros.h"
#include "engine/backend_registry.h"
#include "engine/core/backend.h"
#include "engine/engine.h"
#include "engine/models/dense.h"
#include "engine/models/safetensors.h"
#include "server/model_config_parser.h"

namespace sluice::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  std::string model_dir;
  int64_t version = 1;
  std::string batch_sizes;  // empty: 1, 2, 4, ... up to max_batch_size, and max_batch_size
  int min_time_ms = 400;
  int instances = 0;  // 0: as the config says
};

struct LayerShape {
  int in = 0;
  int out = 0;
};

// Seconds per call of `run`, timed over at least `min_time` (after one untimed warm-up call); the
// best of three such windows, which filters out the other work a shared machine does.
double SecondsPerCall(const std::function<void()>& run, std::chrono::milliseconds min_time) {
  run();
  double best = 1e300;
  for (int window = 0; window < 3; ++window) {
    int64_t calls = 0;
    const auto start = Clock::now();
    auto now = start;
    do {
      run();
      ++calls;
      now = Clock::now();
    } while (now - start < min_time / 3 || calls < 2);
    best = std::min(best, std::chrono::duration<double>(now - start).count() / calls);
  }
  return best;
}

// The layer shapes, from the weights file ("<index>.weight" tensors in numeric order).
absl::StatusOr<std::vector<LayerShape>> LayerShapes(const std::string& weights_path) {
  ASSIGN_OR_RETURN(engine::models::SafetensorsFile file,
                   engine::models::SafetensorsFile::Open(weights_path));
  std::map<int, LayerShape> layers;
  for (const engine::TensorView& tensor : file.tensors()) {
    std::vector<std::string> parts = absl::StrSplit(tensor.name, '.');
    int index = 0;
    if (parts.size() == 2 && parts[1] == "weight" && absl::SimpleAtoi(parts[0], &index) &&
        tensor.shape.size() == 2) {
      layers[index] = {static_cast<int>(tensor.shape[1]), static_cast<int>(tensor.shape[0])};
    }
  }
  std::vector<LayerShape> shapes;
  for (const auto& [index, shape] : layers) shapes.push_back(shape);
  return shapes;
}

std::vector<float> RandomFloats(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> values(count);
  for (float& v : values) v = dist(rng);
  return values;
}

// Single-thread SGEMM GFLOP/s for C[m][n] = A[m][k] B[n][k]^T.
double SgemmGflops(int m, int n, int k, std::chrono::milliseconds min_time) {
  const std::vector<float> a = RandomFloats(static_cast<size_t>(m) * k, 1);
  const std::vector<float> b = RandomFloats(static_cast<size_t>(n) * k, 2);
  std::vector<float> c(static_cast<size_t>(m) * n);
  const double seconds =
      SecondsPerCall([&] { engine::cpu::Sgemm(a.data(), b.data(), m, n, k, c.data()); }, min_time);
  return 2.0 * m * n * k / seconds / 1e9;
}

// One request in flight at a time through the engine; returns {inferences/s, median latency us}.
std::pair<double, double> EngineRun(engine::Engine& engine, const std::string& model,
                                    const std::string& input_name, int batch, int in_features,
                                    std::chrono::milliseconds min_time) {
  const std::vector<float> values = RandomFloats(static_cast<size_t>(batch) * in_features, 3);
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(values.data()),
                                         values.size() * sizeof(float));
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  bool failed = false;
  auto infer_once = [&] {
    auto request = std::make_unique<engine::InferenceRequest>(
        model, -1, [&](absl::StatusOr<engine::InferenceResponse> result) {
          std::lock_guard<std::mutex> lock(mu);
          if (!result.ok() && !failed) {
            std::cerr << "engine request failed: " << result.status() << "\n";
            failed = true;
          }
          done = true;
          cv.notify_one();
        });
    request->inputs.push_back(
        engine::TensorView{input_name, engine::DataType::kFp32, {batch, in_features}, bytes});
    request->received_time = Clock::now();
    {
      std::lock_guard<std::mutex> lock(mu);
      done = false;
    }
    engine.Submit(std::move(request));
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
  };
  const double seconds = SecondsPerCall(infer_once, min_time);
  // Latencies: up to 101 requests, fewer for slow models (at least 5, or min_time's worth).
  std::vector<double> latencies;
  const auto sampling_start = Clock::now();
  while (latencies.size() < 101 &&
         (latencies.size() < 5 || Clock::now() - sampling_start < min_time)) {
    const auto start = Clock::now();
    infer_once();
    latencies.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  const size_t middle = latencies.size() / 2;
  std::nth_element(latencies.begin(), latencies.begin() + middle, latencies.end());
  return {batch / seconds, latencies[middle]};
}

absl::Status Run(const Flags& flags) {
  const std::chrono::milliseconds min_time(flags.min_time_ms);
  const std::string model_dir = flags.model_dir;
  const std::string folder = std::filesystem::path(model_dir).filename().string();
  ASSIGN_OR_RETURN(std::string text, ReadText(model_dir + "/config.pbtxt"));
  ASSIGN_OR_RETURN(auto proto, server::ParseModelConfigText(text, model_dir + "/config.pbtxt"));
  ASSIGN_OR_RETURN(engine::ModelConfig config, server::ToEngineModelConfig(proto, folder));
  if (flags.instances > 0) config.instance_count = flags.instances;
  engine::ModelSpec spec;
  spec.config = config;
  spec.version = flags.version;
  spec.version_path = absl::StrCat(model_dir, "/", flags.version);
  const auto weights_it = config.parameters.find("weights_file");
  const std::string weights_path = absl::StrCat(
      spec.version_path, "/",
      weights_it == config.parameters.end() ? "model.safetensors" : weights_it->second);
  ASSIGN_OR_RETURN(std::vector<LayerShape> layers, LayerShapes(weights_path));
  if (layers.empty()) return absl::InvalidArgumentError("no layers in " + weights_path);

  std::vector<int> batch_sizes;
  if (flags.batch_sizes.empty()) {
    for (int b = 1; b < config.max_batch_size; b *= 2) batch_sizes.push_back(b);
    batch_sizes.push_back(config.max_batch_size);
  } else {
    for (absl::string_view entry : absl::StrSplit(flags.batch_sizes, ',')) {
      int b = 0;
      if (!absl::SimpleAtoi(entry, &b) || b < 1 || b > config.max_batch_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("batch size '", entry, "' not in [1, ", config.max_batch_size, "]"));
      }
      batch_sizes.push_back(b);
    }
  }

  int64_t parameters = 0;
  double flops_per_row = 0;
  std::string shape_text = absl::StrCat(layers.front().in);
  for (const LayerShape& layer : layers) {
    parameters += static_cast<int64_t>(layer.in) * layer.out + layer.out;
    flops_per_row += 2.0 * layer.in * layer.out;
    absl::StrAppend(&shape_text, "-", layer.out);
  }

  engine::cpu::UseSingleThreadedBlas();
  const auto load_start = Clock::now();
  ASSIGN_OR_RETURN(std::unique_ptr<engine::Model> model, engine::CreateModel(spec));
  const double load_ms =
      std::chrono::duration<double, std::milli>(Clock::now() - load_start).count();
  ASSIGN_OR_RETURN(std::unique_ptr<engine::ModelInstance> instance, model->CreateInstance(0));

  engine::EngineOptions engine_options;
  ASSIGN_OR_RETURN(std::unique_ptr<engine::Engine> engine, engine::Engine::Create(engine_options));
  RETURN_IF_ERROR(engine->LoadModel(spec));

  std::printf(
      "model %s: layers %s (%lld parameters), activations per config, max_batch_size %d, "
      "%d engine instance(s)\n",
      config.name.c_str(), shape_text.c_str(), static_cast<long long>(parameters),
      config.max_batch_size, config.instance_count);
  std::printf("machine: nproc %u, CPU %s; OpenBLAS, 1 BLAS thread; weights load %.1f ms\n",
              std::thread::hardware_concurrency(), CpuModel().c_str(), load_ms);
  const double peak = SgemmGflops(1024, 1024, 1024, min_time);
  std::printf("single-thread SGEMM 1024x1024x1024: %.1f GFLOP/s\n\n", peak);

  std::printf(
      "| batch | instance inf/s | instance GFLOP/s | SGEMM same shapes GFLOP/s | "
      "fraction of SGEMM | fraction of 1024^3 SGEMM | engine inf/s (1 in flight) | "
      "engine p50 latency (us) |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  const engine::TensorSpec& input = config.inputs[0];
  for (int batch : batch_sizes) {
    const std::vector<float> x = RandomFloats(static_cast<size_t>(batch) * layers.front().in, 4);
    const engine::TensorView view{
        input.name,
        engine::DataType::kFp32,
        {batch, layers.front().in},
        {reinterpret_cast<const std::byte*>(x.data()), x.size() * sizeof(float)}};
    bool ok = true;
    const double instance_seconds = SecondsPerCall(
        [&] { ok = ok && instance->Run(std::span<const engine::TensorView>(&view, 1)).ok(); },
        min_time);
    if (!ok) return absl::InternalError("instance Run failed");

    // The same GEMMs alone, layer after layer, on buffers of the same shapes.
    int widest = layers.front().in;
    for (const LayerShape& layer : layers) widest = std::max(widest, layer.out);
    std::vector<std::vector<float>> weights;
    for (const LayerShape& layer : layers) {
      weights.push_back(RandomFloats(static_cast<size_t>(layer.in) * layer.out, 5));
    }
    std::vector<float> a = RandomFloats(static_cast<size_t>(batch) * widest, 6);
    std::vector<float> c(static_cast<size_t>(batch) * widest);
    const double sgemm_seconds = SecondsPerCall(
        [&] {
          for (size_t i = 0; i < layers.size(); ++i) {
            engine::cpu::Sgemm(i % 2 == 0 ? a.data() : c.data(), weights[i].data(), batch,
                               layers[i].out, layers[i].in, i % 2 == 0 ? c.data() : a.data());
          }
        },
        min_time);

    const auto [engine_rate, engine_p50_us] =
        EngineRun(*engine, config.name, input.name, batch, layers.front().in, min_time);
    const double flops = flops_per_row * batch;
    const double instance_gflops = flops / instance_seconds / 1e9;
    const double sgemm_gflops = flops / sgemm_seconds / 1e9;
    std::printf("| %d | %.0f | %.1f | %.1f | %.2f | %.2f | %.0f | %.0f |\n", batch,
                batch / instance_seconds, instance_gflops, sgemm_gflops,
                instance_gflops / sgemm_gflops, instance_gflops / peak, engine_rate, engine_p50_us);
    std::fflush(stdout);
  }
  engine->Shutdown();
  return absl::OkStatus();
}

}  // namespace
}  // namespace sluice::bench

int main(int argc, char** argv) {
  CLI::App app{"MLP inferences per second on the CPU backend, against OpenBLAS SGEMM."};
  sluice::bench::Flags flags;
  flags.model_dir = SLUICE_SOURCE_DIR "/models/mlp";
  app.add_option("--model-dir", flags.model_dir, "model folder (config.pbtxt and <version>/)")
      ->capture_default_str();
  app.add_option("--version", flags.version, "version folder")->capture_default_str();
  app.add_option("--batch-sizes", flags.batch_sizes,
                 "comma-separated (default: 1, 2, 4, ... and max_batch_size)");
  app.add_option("--min-time-ms", flags.min_time_ms, "time per measurement")->capture_default_str();
  app.add_option("--instances", flags.instances, "instances for the engine run (0: config's)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  absl::Status status = sluice::bench::Run(flags);
  if (!status.ok()) {
    std::cerr << "error: " << status << "\n";
    return 1;
  }
  return 0;
}
