// SIGTERM under load, again and again: each cycle starts the server, keeps 64 requests in flight,
// sends SIGTERM (twice) mid-load and checks that readiness turns false before the process exits,
// that every request the server accepted was answered with the right values (its final success
// count equals the OKs the client received, and it failed none), and that it exits 0 within the
// drain bound. SLUICE_SHUTDOWN_CYCLES sets the number of cycles (default 5; the recorded run in
// docs/reliability.md used 100). The timings are printed, not asserted: they are figures.

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/inference_client.h"
#include "client/tensor_codec.h"
#include "gtest/gtest.h"
#include "tests/integration/server_process.h"

namespace sluice {
namespace {

using client::InferenceClient;
using inference::ModelInferRequest;
using testing::ServerProcess;
using Clock = std::chrono::steady_clock;

constexpr int kExitTimeoutSecs = 5;

int Cycles() {
  const char* value = std::getenv("SLUICE_SHUTDOWN_CYCLES");
  return value != nullptr && std::atoi(value) > 0 ? std::atoi(value) : 5;
}

ModelInferRequest SimpleRequest(int seed, std::vector<int32_t>& sum) {
  std::vector<int32_t> a(16), b(16);
  sum.resize(16);
  for (int i = 0; i < 16; ++i) {
    a[i] = seed * 31 + i;
    b[i] = seed - 7 * i;
    sum[i] = a[i] + b[i];
  }
  ModelInferRequest request;
  request.set_model_name("simple");
  request.set_id(absl::StrCat(seed));
  EXPECT_TRUE(client::AddInput(request, "INPUT0", {1, 16}, a).ok());
  EXPECT_TRUE(client::AddInput(request, "INPUT1", {1, 16}, b).ok());
  return request;
}

struct CycleFigures {
  double not_ready_ms = -1;  // SIGTERM -> first ServerReady that is not true
  double exit_ms = -1;       // SIGTERM -> process exit
  int ok = 0;
};

CycleFigures RunCycle(int cycle) {
  CycleFigures figures;
  auto server = ServerProcess::Start({"--model-repository=" + testing::BundledModelRepository(),
                                      "--model-control-mode=explicit", "--load-model=simple",
                                      absl::StrCat("--exit-timeout-secs=", kExitTimeoutSecs)});
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return figures;
  auto load_client = InferenceClient::Create((*server)->address());
  auto probe_client = InferenceClient::Create((*server)->address());
  EXPECT_TRUE(load_client.ok() && probe_client.ok());
  if (!load_client.ok() || !probe_client.ok()) return figures;

  constexpr int kRequests = 1000;
  std::vector<std::vector<int32_t>> expected(kRequests);
  std::vector<ModelInferRequest> requests;
  for (int i = 0; i < kRequests; ++i)
    requests.push_back(SimpleRequest(cycle * kRequests + i, expected[i]));
  std::mutex mu;
  std::map<absl::StatusCode, int> outcomes;
  int wrong = 0;
  std::atomic<int> answered{0};
  std::thread sender([&] {
    for (int i = 0; i < kRequests; ++i) {
      (*load_client)->AsyncInfer(requests[i], [&, i](client::InferResult result) {
        std::lock_guard<std::mutex> lock(mu);
        outcomes[result.status().code()]++;
        if (result.ok()) {
          auto sum = client::DecodeOutput(*result, "OUTPUT0");
          if (!sum.ok() || sum->As<int32_t>().value_or(std::vector<int32_t>{}) != expected[i]) {
            ++wrong;
          }
        }
        answered++;
      });
      while ((*load_client)->AsyncInFlight() > 64) std::this_thread::yield();
    }
  });
  while (answered.load() < kRequests / 4) std::this_thread::sleep_for(std::chrono::milliseconds(1));

  // Readiness, polled from its own connection (connected now, so that connection set-up is not
  // part of the measurement) from the moment the signal goes.
  EXPECT_TRUE((*probe_client)->ServerReady().value_or(false));
  std::atomic<bool> stop_probe{false};
  const auto signalled = Clock::now();
  std::thread probe([&] {
    while (!stop_probe.load()) {
      absl::StatusOr<bool> ready = (*probe_client)->ServerReady();
      if (!ready.ok() || !*ready) {
        figures.not_ready_ms =
            std::chrono::duration<double, std::milli>(Clock::now() - signalled).count();
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  // SIGTERM twice, as an impatient operator would: kill() here, and Stop() sends another. The
  // second must not cut the drain short.
  kill((*server)->pid(), SIGTERM);
  absl::StatusOr<int> exit_code = (*server)->Stop(std::chrono::seconds(kExitTimeoutSecs + 10));
  figures.exit_ms = std::chrono::duration<double, std::milli>(Clock::now() - signalled).count();
  stop_probe = true;
  probe.join();
  sender.join();
  (*load_client)->WaitForAsync();

  const std::string log = (*server)->Log();
  EXPECT_TRUE(exit_code.ok()) << exit_code.status();
  EXPECT_EQ(exit_code.value_or(-1), 0) << log;
  EXPECT_GE(figures.not_ready_ms, 0) << "cycle " << cycle << ": readiness never turned false";
  EXPECT_LT(figures.exit_ms, (kExitTimeoutSecs + 2) * 1000.0) << "cycle " << cycle;
  EXPECT_EQ(answered.load(), kRequests);
  EXPECT_EQ(wrong, 0);
  for (const auto& [code, count] : outcomes) {
    EXPECT_TRUE(code == absl::StatusCode::kOk || code == absl::StatusCode::kUnavailable ||
                code == absl::StatusCode::kCancelled)
        << "cycle " << cycle << ": " << absl::StatusCodeToString(code) << " x" << count;
  }
  figures.ok = outcomes[absl::StatusCode::kOk];
  std::smatch match;
  const bool found = std::regex_search(
      log, match,
      std::regex("final stats model=simple version=1 success=([0-9]+) failure=([0-9]+)"));
  EXPECT_TRUE(found) << log;
  if (found) {
    EXPECT_EQ(std::stoi(match[1]), figures.ok) << "cycle " << cycle;
    EXPECT_EQ(std::stoi(match[2]), 0) << "cycle " << cycle;
  }
  return figures;
}

TEST(ShutdownCyclesTest, EverySigtermUnderLoadDrainsAndExitsCleanly) {
  const int cycles = Cycles();
  std::vector<double> not_ready, exits;
  int ok_total = 0;
  for (int cycle = 0; cycle < cycles && !HasFatalFailure(); ++cycle) {
    const CycleFigures figures = RunCycle(cycle);
    not_ready.push_back(figures.not_ready_ms);
    exits.push_back(figures.exit_ms);
    ok_total += figures.ok;
  }
  std::sort(not_ready.begin(), not_ready.end());
  std::sort(exits.begin(), exits.end());
  auto p = [](const std::vector<double>& v, double q) {
    return v.empty() ? -1 : v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
  };
  std::printf(
      "%d SIGTERM cycles, %d requests answered OK across them\n"
      "SIGTERM -> readiness false: median %.1f ms, p99 %.1f ms, max %.1f ms\n"
      "SIGTERM -> exit 0:          median %.0f ms, p99 %.0f ms, max %.0f ms (bound: exit timeout "
      "%d s + 1 s gRPC grace)\n",
      cycles, ok_total, p(not_ready, 0.5), p(not_ready, 0.99), not_ready.back(), p(exits, 0.5),
      p(exits, 0.99), exits.back(), kExitTimeoutSecs);
}

}  // namespace
}  // namespace sluice
