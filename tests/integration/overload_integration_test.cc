// Overload against the real server process: a model of known capacity offered ten times what it
// serves, open loop, for SLUICE_OVERLOAD_SECONDS (3 s in the test command; the recorded run in
// docs/reliability.md uses 60).
//
// The model, "slow", is the identity backend taking 20 ms per batch of up to 4 requests on one
// CPU instance (execute_delay_ms): about 200 requests/s whatever the machine, so that two shared
// cores can offer ten times its capacity and still have room to answer the rejections. Its
// dynamic batcher has two priority levels: level 2 (the default) with a queue of 16, level 1
// with one of 128; 1 request in 50 asks for level 1.
//
// Asserted (each can fail):
//  - every request ends with OK, RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED or UNAVAILABLE, and none
//    hangs (every callback runs within its deadline plus a margin);
//  - nothing is lost: the server's counts by outcome equal what the client saw;
//  - level 1 is served under overload: every one of its requests succeeds, while level 2 is
//    rejected by the thousand;
//  - latency recovers: after the load stops, unloaded latency is back within 5 s.
// Measured and printed: capacity, the offered rate, rejection latency percentiles, accepted
// throughput over capacity, recovery time. Those are timing on shared cores, so the test command
// only prints them; SLUICE_OVERLOAD_ASSERT_TIMING=1 (the recorded run) also asserts the issue's
// bounds: rejections answered within 5 ms at p99, accepted throughput within 10% of capacity.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/inference_client.h"
#include "client/tensor_codec.h"
#include "gtest/gtest.h"
#include "tests/integration/server_process.h"
#include "tests/support/http_get.h"

namespace sluice {
namespace {

using Clock = std::chrono::steady_clock;
using inference::ModelInferRequest;
using testing::ScrapeValue;
using testing::ServerProcess;

constexpr int kExecuteDelayMs = 20;
constexpr int kMaxBatch = 4;
// The queue of priority level 2 (the default), which the overload fills.
constexpr int kQueuePerLevel = 16;
// Level 1's own, larger bound: level 1 is offered 0.2x capacity, and its queue must absorb the
// bursts of a load generator that falls behind on busy CI cores.
constexpr int kVipQueue = 128;
// One request in kVipEvery asks for priority level 1.
constexpr int kVipEvery = 50;
constexpr int kOverloadFactor = 10;
constexpr int kUnloadedProbes = 20;
// Client deadline of every request: far above any wait the queues allow (2 x 16 requests at
// 4 per 20 ms is 160 ms), so a DEADLINE_EXCEEDED would mean a request was stuck.
constexpr int kDeadlineMs = 5000;

int EnvInt(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::atoi(value) : fallback;
}

class SlowModelRepository {
 public:
  SlowModelRepository() {
    root_ = std::filesystem::temp_directory_path() / absl::StrCat("sluice-overload-", getpid());
    std::filesystem::create_directories(root_ / "slow" / "1");
    std::ofstream(root_ / "slow" / "config.pbtxt") << absl::StrFormat(
        R"(
backend: "identity"
max_batch_size: %d
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 16 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "execute_delay_ms" value: { string_value: "%d" } }
dynamic_batching {
  priority_levels: 2
  default_priority_level: 2
  default_queue_policy { max_queue_size: %d }
  priority_queue_policy { key: 1 value: { max_queue_size: %d } }
}
)",
        kMaxBatch, kExecuteDelayMs, kQueuePerLevel, kVipQueue);
  }
  ~SlowModelRepository() { std::filesystem::remove_all(root_); }
  std::string path() const { return root_.string(); }

 private:
  std::filesystem::path root_;
};

std::shared_ptr<const ModelInferRequest> SlowRequest(uint64_t priority) {
  auto request = std::make_shared<ModelInferRequest>();
  request->set_model_name("slow");
  EXPECT_TRUE(client::AddInput(*request, "IN", {1, 16}, std::vector<float>(16, 1.f)).ok());
  if (priority > 0) (*request->mutable_parameters())["priority"].set_uint64_param(priority);
  return request;
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t index = std::min(values.size() - 1, static_cast<size_t>(p / 100 * values.size()));
  return values[index];
}

// What became of the requests of one phase: counts and latencies (ms) by gRPC code (as the
// absl code the client library reports), and by priority level for level 1.
class Outcomes {
 public:
  void Record(absl::StatusCode code, double latency_ms, bool vip) {
    std::lock_guard<std::mutex> lock(mu_);
    latencies_ms_[code].push_back(latency_ms);
    if (vip) ++vip_by_code_[code];
  }
  int64_t Count(absl::StatusCode code) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = latencies_ms_.find(code);
    return it == latencies_ms_.end() ? 0 : static_cast<int64_t>(it->second.size());
  }
  int64_t Total() const {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t total = 0;
    for (const auto& [code, latencies] : latencies_ms_) total += latencies.size();
    return total;
  }
  std::vector<double> Latencies(absl::StatusCode code) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = latencies_ms_.find(code);
    return it == latencies_ms_.end() ? std::vector<double>{} : it->second;
  }
  std::map<absl::StatusCode, int64_t> VipByCode() const {
    std::lock_guard<std::mutex> lock(mu_);
    return vip_by_code_;
  }
  std::map<absl::StatusCode, int64_t> CountsByCode() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::map<absl::StatusCode, int64_t> counts;
    for (const auto& [code, latencies] : latencies_ms_) counts[code] = latencies.size();
    return counts;
  }

 private:
  mutable std::mutex mu_;
  std::map<absl::StatusCode, std::vector<double>> latencies_ms_;
  std::map<absl::StatusCode, int64_t> vip_by_code_;
};

double MsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

class OverloadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = ServerProcess::Start({"--model-repository=" + repo_.path()});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    auto client = client::InferenceClient::Create(server_->address(),
                                                  client::ClientOptions{.timeout_ms = kDeadlineMs});
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  void TearDown() override {
    if (server_ == nullptr) return;
    auto code = server_->Stop();
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_EQ(*code, 0) << server_->Log();
  }

  double Requests(const std::string& outcome_and_reason) {
    return ScrapeValue(server_->metrics_port(),
                       absl::StrCat(R"(sluice_inference_requests_total{model="slow",version="1",)",
                                    outcome_and_reason, "}"))
        .value_or(0);
  }

  // Failed requests of every reason an overload may produce.
  double Failures() {
    double sum = 0;
    for (const char* reason : {"queue_full", "deadline_exceeded", "unavailable", "cancelled"}) {
      sum += Requests(absl::StrCat(R"(outcome="failure",reason=")", reason, R"(")"));
    }
    return sum;
  }

  struct Capacity {
    double requests_per_s = 0;
    int64_t ok = 0;  // every request of the phase, warm-up and drain included
    int64_t failed = 0;
    int64_t rejected = 0;  // of the failed: RESOURCE_EXHAUSTED (a lane may find the queue full)
  };

  // Closed loop with `lanes` requests always in flight for `seconds`: successes per second over
  // the last seconds - 1 (the first second warms up).
  Capacity MeasureCapacity(int lanes, int seconds) {
    std::atomic<bool> stop{false};
    std::atomic<int64_t> ok{0};
    std::atomic<int64_t> failed{0};
    std::atomic<int64_t> rejected{0};
    auto request = SlowRequest(0);
    std::function<void()> issue = [&] {
      client_->AsyncInfer(request, [&](client::InferResult result) {
        (result.ok() ? ok : failed).fetch_add(1);
        if (result.status().code() == absl::StatusCode::kResourceExhausted) rejected.fetch_add(1);
        if (!stop.load()) issue();
      });
    };
    for (int i = 0; i < lanes; ++i) issue();
    std::this_thread::sleep_for(std::chrono::seconds(1));
    const int64_t ok_at_start = ok.load();
    const auto start = Clock::now();
    std::this_thread::sleep_for(std::chrono::seconds(seconds - 1));
    const int64_t served = ok.load() - ok_at_start;
    const double elapsed_s = MsSince(start) / 1000;
    stop.store(true);
    client_->WaitForAsync();
    return Capacity{.requests_per_s = served / elapsed_s,
                    .ok = ok.load(),
                    .failed = failed.load(),
                    .rejected = rejected.load()};
  }

  // Sequential requests, one at a time: their latencies (ms).
  std::vector<double> Probe(int count) {
    std::vector<double> latencies;
    auto request = SlowRequest(0);
    for (int i = 0; i < count; ++i) {
      const auto start = Clock::now();
      client::InferResult result = client_->Infer(*request);
      EXPECT_TRUE(result.ok()) << result.status();
      latencies.push_back(MsSince(start));
    }
    return latencies;
  }

  SlowModelRepository repo_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<client::InferenceClient> client_;
};

TEST_F(OverloadTest, TenTimesCapacityEndsEveryRequestServesLevelOneAndRecovers) {
  const int overload_seconds = std::max(2, EnvInt("SLUICE_OVERLOAD_SECONDS", 3));
  const bool assert_timing = EnvInt("SLUICE_OVERLOAD_ASSERT_TIMING", 0) != 0;

  // 1. Unloaded latency and capacity.
  const double unloaded_ms = Percentile(Probe(kUnloadedProbes), 50);
  const Capacity measured =
      MeasureCapacity(/*lanes=*/kQueuePerLevel, /*seconds=*/overload_seconds >= 30 ? 6 : 3);
  const double capacity = measured.requests_per_s;
  const double nominal = 1000.0 / kExecuteDelayMs * kMaxBatch;
  ASSERT_GT(capacity, 0.5 * nominal) << "the model serves far less than its nominal " << nominal
                                     << " requests/s: the machine is too busy for this test";

  // 2. Open loop at kOverloadFactor x capacity, constant gaps, for overload_seconds.
  const double rate = kOverloadFactor * capacity;
  const auto gap = std::chrono::duration<double>(1.0 / rate);
  auto normal = SlowRequest(0);  // the default level, 2
  auto vip = SlowRequest(1);
  Outcomes outcomes;
  std::atomic<int64_t> ok_in_window{0};
  // Accepted throughput is counted over the load's last overload_seconds - 1 seconds.
  std::atomic<bool> window_open{false};
  const auto load_start = Clock::now();
  const auto load_end = load_start + std::chrono::seconds(overload_seconds);
  int64_t sent = 0;
  int64_t vip_sent = 0;
  for (;; ++sent) {
    const auto due = load_start + std::chrono::duration_cast<Clock::duration>(gap * sent);
    if (due >= load_end) break;
    std::this_thread::sleep_until(due);
    if (!window_open.load() && Clock::now() >= load_start + std::chrono::seconds(1)) {
      window_open.store(true);
    }
    const bool is_vip = sent % kVipEvery == 0;
    vip_sent += is_vip;
    const auto start = Clock::now();
    client_->AsyncInfer(is_vip ? vip : normal, [&, start, is_vip](client::InferResult result) {
      const absl::StatusCode code = result.status().code();
      if (code == absl::StatusCode::kOk && window_open.load()) ok_in_window.fetch_add(1);
      outcomes.Record(code, MsSince(start), is_vip);
    });
  }
  window_open.store(false);
  const double window_s = std::chrono::duration<double>(Clock::now() - load_start).count() - 1;
  const double accepted_rate = ok_in_window.load() / window_s;
  const double offered_rate = sent / std::chrono::duration<double>(load_end - load_start).count();

  // 3. Recovery: probes one at a time from the moment the load stops, until three in a row are
  // back within twice the unloaded latency (plus 10 ms for a busy machine's scheduling).
  const auto stopped = Clock::now();
  const double good_ms = std::max(2 * unloaded_ms, unloaded_ms + 10);
  double recovered_after_ms = -1;
  int good_in_a_row = 0;
  double first_good_end_ms = 0;
  int64_t probes_ok = 0;
  int64_t probes_failed = 0;
  int64_t probes_rejected = 0;  // the first probes may still find the queue full
  auto probe = SlowRequest(0);
  while (MsSince(stopped) < 10'000) {
    const auto start = Clock::now();
    client::InferResult result = client_->Infer(*probe);
    const double latency = MsSince(start);
    (result.ok() ? probes_ok : probes_failed) += 1;
    probes_rejected += result.status().code() == absl::StatusCode::kResourceExhausted;
    if (result.ok() && latency <= good_ms) {
      if (good_in_a_row++ == 0) first_good_end_ms = MsSince(stopped);
      if (good_in_a_row == 3) {
        recovered_after_ms = first_good_end_ms;
        break;
      }
    } else {
      good_in_a_row = 0;
    }
  }

  // 4. Every request ends: nothing outstanding after the longest deadline plus a margin.
  const auto drain_deadline = Clock::now() + std::chrono::milliseconds(kDeadlineMs + 5000);
  while (client_->AsyncInFlight() > 0 && Clock::now() < drain_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(client_->AsyncInFlight(), 0) << "requests still unanswered after their deadline";
  client_->WaitForAsync();
  ASSERT_EQ(outcomes.Total(), sent);

  const auto counts = outcomes.CountsByCode();
  for (const auto& [code, count] : counts) {
    EXPECT_TRUE(code == absl::StatusCode::kOk || code == absl::StatusCode::kResourceExhausted ||
                code == absl::StatusCode::kDeadlineExceeded ||
                code == absl::StatusCode::kUnavailable)
        << count << " requests ended with " << absl::StatusCodeToString(code);
  }
  const int64_t ok = outcomes.Count(absl::StatusCode::kOk);
  const int64_t rejected = outcomes.Count(absl::StatusCode::kResourceExhausted);
  // Ten times capacity must overflow the queues: most requests are rejected, many served.
  EXPECT_GT(rejected, sent / 2);
  EXPECT_GT(ok, 0);

  // Level 1 is never starved or rejected: its queue has room, and it goes first.
  const auto vip_codes = outcomes.VipByCode();
  EXPECT_EQ(vip_codes.size(), 1u);
  EXPECT_EQ(vip_codes.count(absl::StatusCode::kOk) ? vip_codes.at(absl::StatusCode::kOk) : 0,
            vip_sent);

  // Nothing lost: the server, started for this test, counted exactly what the client saw in every
  // phase. Its counters reach the exporter within a collection interval, hence the wait.
  const double expected_successes = kUnloadedProbes + measured.ok + ok + probes_ok;
  const double expected_failures = measured.failed + (sent - ok) + probes_failed;
  const auto settle_deadline = Clock::now() + std::chrono::seconds(5);
  while (
      (Requests(R"(outcome="success")") != expected_successes || Failures() != expected_failures) &&
      Clock::now() < settle_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(Requests(R"(outcome="success")"), expected_successes);
  EXPECT_EQ(Failures(), expected_failures);
  EXPECT_EQ(Requests(R"(outcome="failure",reason="queue_full")"),
            static_cast<double>(measured.rejected + rejected + probes_rejected));

  // Latency recovers.
  ASSERT_GE(recovered_after_ms, 0) << "latency not back within 10 s of the load stopping";
  EXPECT_LE(recovered_after_ms, 5000);

  const std::vector<double> rejections = outcomes.Latencies(absl::StatusCode::kResourceExhausted);
  const std::vector<double> served = outcomes.Latencies(absl::StatusCode::kOk);
  const double rejection_p99 = Percentile(rejections, 99);
  const double accepted_ratio = accepted_rate / capacity;
  std::printf(
      "overload: nominal %.0f req/s, measured capacity %.1f req/s, unloaded latency p50 %.2f ms\n"
      "overload: offered %.1f req/s (%.2fx capacity) for %d s: %lld sent, %lld OK, %lld "
      "RESOURCE_EXHAUSTED, %lld DEADLINE_EXCEEDED, %lld UNAVAILABLE; level 1: %lld of %lld OK\n"
      "overload: rejection latency p50 %.2f ms, p99 %.2f ms, max %.2f ms\n"
      "overload: OK latency p50 %.1f ms, p99 %.1f ms, max %.1f ms\n"
      "overload: accepted throughput %.1f req/s over the last %.1f s = %.3f x capacity\n"
      "overload: latency back within %.1f ms after %.0f ms (%lld probes found the queue full "
      "first)\n",
      nominal, capacity, unloaded_ms, offered_rate, offered_rate / capacity, overload_seconds,
      static_cast<long long>(sent), static_cast<long long>(ok), static_cast<long long>(rejected),
      static_cast<long long>(outcomes.Count(absl::StatusCode::kDeadlineExceeded)),
      static_cast<long long>(outcomes.Count(absl::StatusCode::kUnavailable)),
      static_cast<long long>(
          vip_codes.count(absl::StatusCode::kOk) ? vip_codes.at(absl::StatusCode::kOk) : 0),
      static_cast<long long>(vip_sent), Percentile(rejections, 50), rejection_p99,
      Percentile(rejections, 100), Percentile(served, 50), Percentile(served, 99),
      Percentile(served, 100), accepted_rate, window_s, accepted_ratio, good_ms, recovered_after_ms,
      static_cast<long long>(probes_rejected));
  RecordProperty("capacity_rps", std::to_string(capacity));
  RecordProperty("rejection_p99_ms", std::to_string(rejection_p99));
  RecordProperty("accepted_over_capacity", std::to_string(accepted_ratio));
  RecordProperty("recovery_ms", std::to_string(recovered_after_ms));
  if (assert_timing) {
    EXPECT_LE(rejection_p99, 5.0);
    EXPECT_GE(accepted_ratio, 0.9);
    EXPECT_LE(accepted_ratio, 1.1);
  }
}

}  // namespace
}  // namespace sluice
