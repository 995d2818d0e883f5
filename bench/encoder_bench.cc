// sluice-encoder-bench: the `encoder` backend alone (ModelInstance::Run on one thread, no queue, no
// network) on a Hugging Face checkpoint folder, for bench/encoder_bench.py, which alternates it
// with PyTorch eager and ONNX Runtime on the same checkpoint. Not a test.
//
// It loads the folder, prints one JSON line with the load time, the resident memory after the
// load ("rss_mib") and at its peak ("peak_rss_mib") and the FP32 weights' size, then serves rounds:
// for each line "BATCH SEQ SECONDS" on stdin it runs batches of BATCH sequences of SEQ random token
// ids for at least SECONDS and prints
// {"batch", "seq", "sequences_per_s", "gflops"} by wall-clock time and the same by the process's
// CPU time ("cpu_sequences_per_s", "cpu_gflops"; see CpuSeconds). "sgemm" on stdin prints the
// machine's one-thread SGEMM rate (a 1024 x 1024 x 1024 product on the same OpenBLAS), the
// denominator of the "share of one-core SGEMM" figure, and the OpenBLAS core type it ran on
// (OPENBLAS_CORETYPE in the environment forces one: a forced older core halves the denominator).
// "gemm TOKENS SECONDS" prints the one-thread rate of the encoder's own GEMM shapes for TOKENS rows
// (QKV, attention output, intermediate, output: M = TOKENS, N x K from config.json): sluice's own
// GEMM, which the forward pass uses, on the weights packed once beforehand as the encoder packs
// them at load ("packed": encoder_gemm.h, the variant this CPU picks or the one SLUICE_ENCODER_GEMM
// forces; "packed_cold": cycling through copies larger than the last-level cache, as the forward
// pass meets its weights), and OpenBLAS with the weights [N, K] read transposed ("nt", as the
// forward pass called it before) and pre-transposed ([K, N]: "nn"), by CPU time, and the OpenBLAS
// core type and packed variant in use; where the CPU has AVX512_BF16 also the BF16 GEMM on weights
// packed in BF16 ("packed_bf16", "packed_bf16_cold": encoder_gemm_bf16.cc), and the INT8 GEMM on
// weights packed in INT8 ("packed_int8", "packed_int8_cold": encoder_gemm_int8.cc, the activations
// quantized per row inside the timed call; GOP/s, a multiply-add counted as 2), and the FP32 GEMM
// on weights held in BF16 as a BF16 checkpoint's are ("packed_held_bf16", "packed_held_bf16_cold":
// widened per block, the same bits as "packed"). Where the CPU has AMX the BF16 and INT8 GEMMs are
// the AMX kernels ("packed_bf16" / "packed_int8" name the variant; SLUICE_ENCODER_GEMM=avx512-bf16
// or avx512-vnni measures the AVX-512 ones instead), and the output adds the measured tile peaks
// ("amx_peak_bf16_tflops", "amx_peak_int8_tops", against "fma_peak_fp32_tflops") and each shape's
// share of them ("packed_bf16_of_amx_peak", "packed_int8_of_amx_peak"); "amx" says why not
// elsewhere. --precision sets
// the model's `precision` parameter (fp32, bf16, int8, auto) for the forward-pass rounds.
//
//   echo "32 128 2" | build/bench/sluice-encoder-bench --model-dir /tmp/bert_base/1

#include <cblas.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "engine/backend_registry.h"
#include "engine/core/backend.h"
#include "engine/models/dense.h"
#include "engine/models/encoder/encoder_gemm.h"
#include "engine/models/encoder/encoder_gemm_amx.h"
#include "engine/models/encoder/encoder_model.h"
#include "engine/models/encoder/encoder_network.h"
#include "nlohmann/json.hpp"

namespace sluice::bench {
namespace {

using Clock = std::chrono::steady_clock;

// CPU seconds this process has run (all threads; OpenBLAS runs on the calling thread only). On a
// loaded machine the rates by CPU time stay near an idle core's where the wall-clock ones fall
// with the share of a core the process gets.
double CpuSeconds() {
  timespec now{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9;
}

// /proc/self/status's VmRSS (resident now) or VmHWM (the most resident so far), in MiB.
double StatusMib(const char* field = "VmRSS:") {
  std::ifstream status("/proc/self/status");
  std::string line;
  const size_t length = std::strlen(field);
  while (std::getline(status, line)) {
    if (line.compare(0, length, field) == 0) return std::stod(line.substr(length)) / 1024.0;
  }
  return 0;
}
double ResidentMib() { return StatusMib("VmRSS:"); }

// One-thread SGEMM GFLOP/s of a 1024^3 product for about a CPU second: {by wall, by CPU time}.
std::pair<double, double> SgemmGflops() {
  const int n = 1024;
  std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size());
  engine::cpu::Sgemm(a.data(), b.data(), n, n, n, c.data());  // warm-up
  int runs = 0;
  const auto start = Clock::now();
  const double cpu_start = CpuSeconds();
  double cpu = 0;
  do {
    engine::cpu::Sgemm(a.data(), b.data(), n, n, n, c.data());
    ++runs;
    cpu = CpuSeconds() - cpu_start;
  } while (cpu < 1.0);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const double flops = 2.0 * n * n * n * runs;
  return {flops / seconds / 1e9, flops / cpu / 1e9};
}

// One-thread GFLOP/s by CPU time of `run` (`flops` a call), after one warm-up call, called until
// `seconds` of CPU time have passed.
template <typename Run>
double GflopsByCpuTime(Run& run, double flops, double seconds) {
  run();  // warm-up
  int runs = 0;
  const double start = CpuSeconds();
  double elapsed = 0;
  do {
    run();
    ++runs;
    elapsed = CpuSeconds() - start;
  } while (elapsed < seconds);
  return flops * runs / elapsed / 1e9;
}

extern "C" char* openblas_get_corename(void);

// One-thread GFLOP/s by CPU time of C[m, n] = A[m, k] B for `seconds` of CPU time, B as [n, k]
// read transposed or [k, n].
double GemmGflops(int m, int n, int k, bool transposed, double seconds) {
  std::vector<float> a(static_cast<size_t>(m) * k, 0.5f), b(static_cast<size_t>(n) * k, 0.25f);
  std::vector<float> c(static_cast<size_t>(m) * n);
  auto run = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, transposed ? CblasTrans : CblasNoTrans, m, n, k, 1.0f,
                a.data(), k, b.data(), transposed ? k : n, 0.0f, c.data(), n);
  };
  return GflopsByCpuTime(run, 2.0 * m * n * k, seconds);
}

// One-thread GFLOP/s by CPU time of the encoder's packed GEMM, C[m, n] = A[m, k] W^T with W [n, k]
// packed beforehand (as at load), for `seconds` of CPU time. `cold`: each call takes the next of
// enough copies of W (>= 96 MiB together, more than the last-level cache) that W comes from
// memory, as in the encoder, where a layer's weights were last read a whole forward pass ago.
double PackedGemmGflops(
    int m, int n, int k, double seconds, bool cold,
    engine::models::encoder::WeightFormat format = engine::models::encoder::WeightFormat::kFp32) {
  using engine::models::encoder::PackedWeights;
  std::vector<float> a(static_cast<size_t>(m) * k, 0.5f), w(static_cast<size_t>(n) * k, 0.25f);
  std::vector<float> c(static_cast<size_t>(m) * n);
  const int64_t copies = cold ? (int64_t{96} << 20) / (int64_t{n} * k * 4) + 1 : 1;
  std::vector<PackedWeights> packed;
  for (int64_t i = 0; i < copies; ++i) packed.push_back(PackedWeights::Pack(w, n, k, format));
  size_t next = 0;
  auto run = [&] {
    engine::models::encoder::PackedGemm(a.data(), m, packed[next], nullptr, c.data());
    next = (next + 1) % packed.size();
  };
  return GflopsByCpuTime(run, 2.0 * m * n * k, seconds);
}

int Main(int argc, char** argv) {
  CLI::App app{"The encoder backend alone, rounds on stdin (see the file comment)."};
  std::string model_dir;
  int max_batch = 64;
  app.add_option("--model-dir", model_dir, "the checkpoint folder (config.json, model.safetensors)")
      ->required();
  app.add_option("--max-batch-size", max_batch, "the config's max_batch_size")
      ->capture_default_str();
  int threads = 1;
  app.add_option("--threads", threads,
                 "compute pool threads the forward pass is split over (1: the calling thread "
                 "alone, as the one-thread figures against PyTorch and ONNX Runtime are taken)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  std::string precision = "fp32";
  app.add_option("--precision", precision,
                 "the model's `precision` parameter: fp32, bf16, int8 (AVX512-VNNI CPUs) or auto")
      ->check(CLI::IsMember({"fp32", "bf16", "int8", "auto"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  engine::ModelSpec spec;
  spec.config.name = "encoder";
  spec.config.backend = "encoder";
  spec.config.max_batch_size = max_batch;
  spec.config.parameters["precision"] = precision;
  spec.version_path = model_dir;
  if (threads > 1) spec.compute_pool = std::make_shared<engine::ComputePool>(threads);
  const double rss_before = ResidentMib();
  const auto load_start = Clock::now();
  absl::StatusOr<engine::ModelConfig> completed = engine::CompleteModelConfig(spec);
  if (!completed.ok()) {
    std::cerr << completed.status() << "\n";
    return 1;
  }
  spec.config = *completed;
  absl::StatusOr<std::unique_ptr<engine::Model>> model = engine::CreateModel(spec);
  if (!model.ok()) {
    std::cerr << model.status() << "\n";
    return 1;
  }
  absl::StatusOr<std::unique_ptr<engine::ModelInstance>> instance = (*model)->CreateInstance(0);
  if (!instance.ok()) {
    std::cerr << instance.status() << "\n";
    return 1;
  }
  const double load_s = std::chrono::duration<double>(Clock::now() - load_start).count();
  // The sizes from the network the backend loaded (config.json's keys differ by architecture:
  // DistilBERT's dim, n_layers...). FLOPs per token: 2 per weight of the layers' linear layers
  // (a GLU MLP's gate included), plus attention's two products (4 x seq x H per token and layer;
  // a sliding-window layer does less, so its rate is understated).
  const std::shared_ptr<const engine::models::encoder::EncoderNetwork> net =
      engine::models::LoadedEncoderNetwork(**model);
  if (net == nullptr) {
    std::cerr << "the model is not an encoder\n";
    return 1;
  }
  const int64_t hidden = net->hidden;
  const int64_t layers = net->layers;
  const int64_t intermediate = net->intermediate;
  const int64_t vocab = net->vocab_size;
  double linear_weights = 0;
  for (const engine::models::encoder::EncoderLayer& layer : net->encoder_layers) {
    for (const engine::models::encoder::PackedWeights* w :
         {&layer.qkv_weight, &layer.attention_out_weight, &layer.intermediate_weight,
          &layer.output_weight}) {
      linear_weights += static_cast<double>(w->n()) * w->k();
    }
  }
  const double weight_mib = static_cast<double>(net->weight_bytes) / (1 << 20);
  // Attention's products run over heads x head_size (Qwen3's context width, not H; causal
  // attention counted whole, as its 128-query blocks compute it).
  const int64_t context_width = net->context_width();
  std::cout << nlohmann::json{{"load_s", load_s},
                              {"precision", (*model)->LoadSummary()},
                              {"rss_mib", ResidentMib()},
                              {"rss_before_mib", rss_before},
                              // The load's peak (one tensor widened while the others are held).
                              {"peak_rss_mib", StatusMib("VmHWM:")},
                              {"weights_mib", weight_mib}}
                   .dump()
            << std::endl;

  std::mt19937 rng(1);
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line == "sgemm") {
      const auto [wall, cpu] = SgemmGflops();
      std::cout << nlohmann::json{{"sgemm_gflops", wall},
                                  {"sgemm_cpu_gflops", cpu},
                                  {"core", openblas_get_corename()}}
                       .dump()
                << std::endl;
      continue;
    }
    if (line.rfind("gemm ", 0) == 0) {
      std::istringstream in(line.substr(5));
      int tokens = 0;
      double seconds = 0;
      if (!(in >> tokens >> seconds) || tokens < 1) {
        std::cerr << "bad gemm round '" << line << "'\n";
        return 2;
      }
      const int h = static_cast<int>(hidden);
      const int i = static_cast<int>(intermediate);
      nlohmann::json shapes = nlohmann::json::array();
      const bool bf16 = engine::models::encoder::gemm::Bf16Supported();
      for (const auto& [name, n, k] :
           {std::tuple{"qkv", 3 * h, h}, std::tuple{"attention_out", h, h},
            std::tuple{"intermediate", i, h}, std::tuple{"output", h, i}}) {
        shapes.push_back({{"gemm", name},
                          {"m", tokens},
                          {"n", n},
                          {"k", k},
                          {"nt_gflops", GemmGflops(tokens, n, k, true, seconds)},
                          {"nn_gflops", GemmGflops(tokens, n, k, false, seconds)},
                          {"packed_gflops", PackedGemmGflops(tokens, n, k, seconds, false)},
                          {"packed_cold_gflops", PackedGemmGflops(tokens, n, k, seconds, true)}});
        if (bf16) {
          using engine::models::encoder::WeightFormat;
          shapes.back()["packed_bf16_gflops"] =
              PackedGemmGflops(tokens, n, k, seconds, false, WeightFormat::kBf16);
          shapes.back()["packed_bf16_cold_gflops"] =
              PackedGemmGflops(tokens, n, k, seconds, true, WeightFormat::kBf16);
        }
        {
          // The FP32 product on weights held in BF16 (a BF16 checkpoint's, widened per block):
          // against "packed" / "packed_cold", what not inflating the weights at load costs.
          using engine::models::encoder::WeightFormat;
          shapes.back()["packed_held_bf16_gflops"] =
              PackedGemmGflops(tokens, n, k, seconds, false, WeightFormat::kFp32HeldBf16);
          shapes.back()["packed_held_bf16_cold_gflops"] =
              PackedGemmGflops(tokens, n, k, seconds, true, WeightFormat::kFp32HeldBf16);
        }
        {
          using engine::models::encoder::WeightFormat;
          shapes.back()["packed_int8_gops"] =
              PackedGemmGflops(tokens, n, k, seconds, false, WeightFormat::kInt8);
          shapes.back()["packed_int8_cold_gops"] =
              PackedGemmGflops(tokens, n, k, seconds, true, WeightFormat::kInt8);
        }
      }
      namespace gemm = engine::models::encoder::gemm;
      nlohmann::json out{{"core", openblas_get_corename()},
                         {"packed", gemm::Get().name},
                         {"packed_bf16", bf16 ? gemm::Bf16KernelName(gemm::Bf16For()) : "none"},
                         {"packed_int8", gemm::Int8KernelName(gemm::Int8For(gemm::Get()))},
                         {"amx", gemm::Amx().hardware ? "available" : gemm::Amx().reason}};
      if (gemm::Amx().hardware) {
        // The measured instruction peaks (one core; Sapphire Rapids' nominal: 1,024 BF16 FLOP and
        // 2,048 INT8 OP per cycle) and each AMX product's share of its peak.
        const gemm::AmxPeaks& peaks = gemm::AmxPeakRates();
        out["amx_peak_bf16_tflops"] = peaks.bf16_flops_per_s * 1e-12;
        out["amx_peak_int8_tops"] = peaks.int8_ops_per_s * 1e-12;
        out["fma_peak_fp32_tflops"] = peaks.fp32_fma_flops_per_s * 1e-12;
        for (auto& shape : shapes) {
          if (gemm::Bf16For() == gemm::Bf16Kernel::kAmx && shape.contains("packed_bf16_gflops")) {
            shape["packed_bf16_of_amx_peak"] =
                shape["packed_bf16_gflops"].get<double>() * 1e9 / peaks.bf16_flops_per_s;
          }
          if (gemm::Int8For(gemm::Get()) == gemm::Int8Kernel::kAmx) {
            shape["packed_int8_of_amx_peak"] =
                shape["packed_int8_gops"].get<double>() * 1e9 / peaks.int8_ops_per_s;
          }
        }
      }
      out["shapes"] = shapes;
      std::cout << out.dump() << std::endl;
      continue;
    }
    std::istringstream in(line);
    int64_t batch = 0, seq = 0;
    double seconds = 0;
    if (!(in >> batch >> seq >> seconds) || batch < 1 || batch > max_batch || seq < 1) {
      std::cerr << "bad round '" << line << "'\n";
      return 2;
    }
    std::vector<int64_t> ids(static_cast<size_t>(batch * seq));
    std::uniform_int_distribution<int64_t> token(1000 % vocab, vocab - 1);
    for (int64_t& id : ids) id = token(rng);
    std::vector<engine::TensorView> inputs = {
        {"input_ids",
         engine::DataType::kInt64,
         {batch, seq},
         std::span<const std::byte>(reinterpret_cast<const std::byte*>(ids.data()),
                                    ids.size() * 8)}};
    (void)(*instance)->Run(inputs);  // warm-up (scratch sized)
    int runs = 0;
    const auto start = Clock::now();
    const double cpu_start = CpuSeconds();
    double elapsed = 0;
    do {
      absl::StatusOr<std::vector<engine::Tensor>> out = (*instance)->Run(inputs);
      if (!out.ok()) {
        std::cerr << out.status() << "\n";
        return 1;
      }
      ++runs;
      elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    } while (elapsed < seconds);
    const double cpu = CpuSeconds() - cpu_start;
    const double per_sequence_flops =
        2.0 * seq * linear_weights + static_cast<double>(layers) * 4.0 * seq * seq * context_width;
    const double sequences_per_s = static_cast<double>(runs * batch) / elapsed;
    const double cpu_sequences_per_s = static_cast<double>(runs * batch) / cpu;
    std::cout << nlohmann::json{{"batch", batch},
                                {"seq", seq},
                                {"sequences_per_s", sequences_per_s},
                                {"gflops", sequences_per_s * per_sequence_flops / 1e9},
                                {"cpu_sequences_per_s", cpu_sequences_per_s},
                                {"cpu_gflops", cpu_sequences_per_s * per_sequence_flops / 1e9}}
                     .dump()
              << std::endl;
  }
  return 0;
}

}  // namespace
}  // namespace sluice::bench

int main(int argc, char** argv) { return sluice::bench::Main(argc, argv); }
