// observability_bench: what the observability of issue 5 costs the engine's throughput. Not a test:
// it prints figures (markdown) for docs/performance.md.
//
// Two experiments, in one run, each as paired sides:
//   logging:   logger at info + access log for every request (sample rate 1), written to a file,
//              vs logger at error and no access log;
//   collector: the stats collector thread every 10 ms vs no collector thread.
// Each round runs both sides of both experiments, alternating which side goes first (ABBA), each
// side on a fresh Engine with the model loaded, a short warm-up, then a timed closed-loop window;
// the figures are the medians over the rounds, and the ratio is on/off of the medians (the
// median of per-round ratios is printed too).
//
// In-process, through the engine API (Engine::Submit with a completion callback), not through
// gRPC: what observability adds sits on the engine's threads (the completion thread's stats and
// access-log records, the logger's writer thread, the collector), and in-process the request
// costs nothing else, so the ratio is an upper bound on what a served request sees (gRPC adds tens
// of microseconds per request that observability does not touch), and a client process does not
// compete with the server for the same cores. The model is `identity` (no compute to speak of),
// which again makes the overhead look as large as it can.
//
//   build/bench/observability_bench                      # defaults: 7 rounds x 2 s per side
//   build/bench/observability_bench --rounds 9 --seconds 3 --concurrency 64 --batch 1

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <semaphore>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/log.h"
#include "engine/engine.h"

namespace sluice::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  int rounds = 7;
  double seconds = 2.0;
  double warmup_seconds = 0.3;
  int concurrency = 64;
  int batch = 1;
  int elements = 16;  // FP32 elements per item
  int collector_interval_ms = 10;
  double access_log_sample_rate = 1.0;  // the logging side's
  std::string log_file = "/tmp/sluice_observability_bench.log";
  // Run only the logging side pair ("logging"), only the collector pair ("collector"), or both.
  std::string only;
};

// One side of an experiment.
struct Side {
  std::string name;
  common::LogLevel log_level = common::LogLevel::kError;
  double access_log_sample_rate = 0;
  std::chrono::milliseconds stats_interval{0};
};

struct RunResult {
  double items_per_second = 0;
  // Process CPU time (all threads, user + system) per item over the timed window: less sensitive
  // than throughput to other processes sharing the cores.
  double cpu_us_per_item = 0;
  uint64_t log_written = 0;
  uint64_t log_dropped = 0;
};

engine::ModelSpec IdentitySpec(const Flags& flags) {
  engine::ModelConfig config;
  config.name = "identity";
  config.backend = "identity";
  config.max_batch_size = 64;
  config.inputs = {{"INPUT0", engine::DataType::kFp32, {flags.elements}}};
  config.outputs = {{"OUTPUT0", engine::DataType::kFp32, {flags.elements}}};
  config.dynamic_batching = engine::DynamicBatchingConfig{};  // batch what is queued, no delay
  return engine::ModelSpec{std::move(config), 1, ""};
}

double ProcessCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// A closed loop: `concurrency` requests outstanding, one submitter thread; items answered per
// second over the timed window.
RunResult RunSide(const Flags& flags, const Side& side) {
  std::FILE* sink = std::fopen(flags.log_file.c_str(), "w");
  if (sink == nullptr) {
    std::fprintf(stderr, "cannot open %s\n", flags.log_file.c_str());
    std::exit(1);
  }
  RunResult result;
  {
    common::Logger logger({.min_level = side.log_level, .sink = sink});
    auto engine = engine::Engine::Create({.logger = &logger,
                                          .stats_interval = side.stats_interval,
                                          .access_log_sample_rate = side.access_log_sample_rate});
    if (!engine.ok()) {
      std::fprintf(stderr, "engine: %s\n", std::string(engine.status().message()).c_str());
      std::exit(1);
    }
    if (absl::Status status = (*engine)->LoadModel(IdentitySpec(flags)); !status.ok()) {
      std::fprintf(stderr, "load: %s\n", std::string(status.message()).c_str());
      std::exit(1);
    }
    auto input = std::make_shared<std::vector<std::byte>>(static_cast<size_t>(flags.batch) *
                                                          static_cast<size_t>(flags.elements) * 4);
    const engine::Shape shape = {flags.batch, flags.elements};

    std::counting_semaphore<> window(flags.concurrency);
    std::atomic<uint64_t> answered_items{0};
    std::atomic<uint64_t> failures{0};
    std::atomic<bool> stop{false};
    const uint64_t items_per_request = static_cast<uint64_t>(flags.batch);
    std::thread submitter([&] {
      uint64_t n = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        if (!window.try_acquire_for(std::chrono::milliseconds(10))) continue;
        auto request = std::make_unique<engine::InferenceRequest>(
            "identity", -1, [&](absl::StatusOr<engine::InferenceResponse> response) {
              if (response.ok()) {
                answered_items.fetch_add(items_per_request, std::memory_order_relaxed);
              } else {
                failures.fetch_add(1, std::memory_order_relaxed);
              }
              window.release();
            });
        request->id = absl::StrCat(n++);
        request->inputs.push_back(
            engine::TensorView{"INPUT0", engine::DataType::kFp32, shape, *input});
        request->keepalive = input;
        request->received_time = Clock::now();
        (*engine)->Submit(std::move(request));
      }
    });
    std::this_thread::sleep_for(std::chrono::duration<double>(flags.warmup_seconds));
    const uint64_t items_start = answered_items.load();
    const auto t0 = Clock::now();
    const double cpu0 = ProcessCpuSeconds();
    std::this_thread::sleep_for(std::chrono::duration<double>(flags.seconds));
    const uint64_t items_end = answered_items.load();
    const double cpu1 = ProcessCpuSeconds();
    const auto t1 = Clock::now();
    stop = true;
    submitter.join();
    for (int i = 0; i < flags.concurrency; ++i) window.acquire();  // every request answered
    if (failures.load() > 0) {
      std::fprintf(stderr, "%s: %llu requests failed\n", side.name.c_str(),
                   static_cast<unsigned long long>(failures.load()));
      std::exit(1);
    }
    result.items_per_second = static_cast<double>(items_end - items_start) /
                              std::chrono::duration<double>(t1 - t0).count();
    result.cpu_us_per_item = 1e6 * (cpu1 - cpu0) / static_cast<double>(items_end - items_start);
    (*engine)->Shutdown();
    logger.Flush();
    result.log_written = logger.written();
    result.log_dropped = logger.dropped();
  }
  std::fclose(sink);
  return result;
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

struct Experiment {
  std::string name;
  Side on;
  Side off;
  std::vector<double> on_rate, off_rate, ratios, on_cpu, off_cpu;
  uint64_t on_written = 0, on_dropped = 0;
};

int Main(const Flags& flags) {
  std::vector<Experiment> experiments(2);
  experiments[0].name = "logging";
  experiments[0].on = {absl::StrCat("info + access log (rate ", flags.access_log_sample_rate, ")"),
                       common::LogLevel::kInfo,
                       flags.access_log_sample_rate,
                       {}};
  experiments[0].off = {"level error, no access log", common::LogLevel::kError, 0.0, {}};
  experiments[1].name = "collector";
  experiments[1].on = {absl::StrCat("collector every ", flags.collector_interval_ms, " ms"),
                       common::LogLevel::kError, 0.0,
                       std::chrono::milliseconds(flags.collector_interval_ms)};
  experiments[1].off = {"no collector", common::LogLevel::kError, 0.0, {}};

  std::printf(
      "observability_bench: identity model, batch %d x %d FP32, concurrency %d, %d rounds x "
      "%.1f s per side (+%.1f s warm-up), %u hardware threads\n\n",
      flags.batch, flags.elements, flags.concurrency, flags.rounds, flags.seconds,
      flags.warmup_seconds, std::thread::hardware_concurrency());
  std::printf("| round | experiment | side | items/s | CPU us/item |\n|---|---|---|---|---|\n");
  for (int round = 0; round < flags.rounds; ++round) {
    for (Experiment& e : experiments) {
      if (!flags.only.empty() && flags.only != e.name) continue;
      // ABBA: the side that runs first alternates from round to round.
      const bool on_first = round % 2 == 0;
      RunResult on, off;
      if (on_first) {
        on = RunSide(flags, e.on);
        off = RunSide(flags, e.off);
      } else {
        off = RunSide(flags, e.off);
        on = RunSide(flags, e.on);
      }
      e.on_rate.push_back(on.items_per_second);
      e.off_rate.push_back(off.items_per_second);
      e.ratios.push_back(on.items_per_second / off.items_per_second);
      e.on_cpu.push_back(on.cpu_us_per_item);
      e.off_cpu.push_back(off.cpu_us_per_item);
      e.on_written += on.log_written;
      e.on_dropped += on.log_dropped;
      std::printf("| %d | %s | %s | %.0f | %.2f |\n| %d | %s | %s | %.0f | %.2f |\n", round + 1,
                  e.name.c_str(), e.on.name.c_str(), on.items_per_second, on.cpu_us_per_item,
                  round + 1, e.name.c_str(), e.off.name.c_str(), off.items_per_second,
                  off.cpu_us_per_item);
      std::fflush(stdout);
    }
  }
  std::printf(
      "\n| experiment | on | off | median items/s on | median items/s off | throughput ratio "
      "on/off (medians) | median of per-round ratios | median CPU us/item on | off |\n"
      "|---|---|---|---|---|---|---|---|---|\n");
  for (const Experiment& e : experiments) {
    if (e.on_rate.empty()) continue;
    const double on = Median(e.on_rate);
    const double off = Median(e.off_rate);
    std::printf("| %s | %s | %s | %.0f | %.0f | %.3f | %.3f | %.2f | %.2f |\n", e.name.c_str(),
                e.on.name.c_str(), e.off.name.c_str(), on, off, on / off, Median(e.ratios),
                Median(e.on_cpu), Median(e.off_cpu));
  }
  const Experiment& logging = experiments[0];
  const double total = static_cast<double>(logging.on_written + logging.on_dropped);
  std::printf("\nlogging side: %llu records written, %llu dropped (%.1f%%) over all rounds\n",
              static_cast<unsigned long long>(logging.on_written),
              static_cast<unsigned long long>(logging.on_dropped),
              total > 0 ? 100.0 * static_cast<double>(logging.on_dropped) / total : 0.0);
  std::remove(flags.log_file.c_str());
  return 0;
}

}  // namespace
}  // namespace sluice::bench

int main(int argc, char** argv) {
  CLI::App app{
      "observability_bench: engine throughput with and without the logger's access log "
      "and the stats collector (paired sides, alternating, medians)"};
  sluice::bench::Flags flags;
  app.add_option("--rounds", flags.rounds, "Rounds (each runs every side once)")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app.add_option("--seconds", flags.seconds, "Timed window per side")
      ->check(CLI::Range(0.1, 600.0))
      ->capture_default_str();
  app.add_option("--warmup-seconds", flags.warmup_seconds, "Untimed warm-up per side")
      ->capture_default_str();
  app.add_option("--concurrency", flags.concurrency, "Requests outstanding")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--batch", flags.batch, "Items per request")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--elements", flags.elements, "FP32 elements per item")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--collector-interval-ms", flags.collector_interval_ms,
                 "The collector's interval on its 'on' side")
      ->check(CLI::Range(1, 60000))
      ->capture_default_str();
  app.add_option("--access-log-sample-rate", flags.access_log_sample_rate,
                 "The access-log sample rate of the logging experiment's 'on' side")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--log-file", flags.log_file, "Where the logging side writes (removed at the end)")
      ->capture_default_str();
  app.add_option("--only", flags.only, "Run one experiment: logging or collector (for profiling)")
      ->check(CLI::IsMember({"logging", "collector"}));
  CLI11_PARSE(app, argc, argv);
  return sluice::bench::Main(flags);
}
