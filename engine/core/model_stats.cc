#include "engine/core/model_stats.h"

#include <random>
#include <utility>
#include <vector>

#include "common/log.h"
#include "engine/core/inference_request.h"

namespace sluice::engine {
namespace {

double Seconds(std::chrono::nanoseconds d) { return std::chrono::duration<double>(d).count(); }

int64_t Micros(std::chrono::nanoseconds d) {
  return std::chrono::duration_cast<std::chrono::microseconds>(d).count();
}

// A small per-thread generator: sampling must not take a lock or share a cache line between
// completion threads.
double UniformDraw() {
  thread_local std::minstd_rand rng(std::random_device{}());
  thread_local std::uniform_real_distribution<double> dist(0.0, 1.0);
  return dist(rng);
}

}  // namespace

absl::string_view FailureReasonName(FailureReason reason) {
  switch (reason) {
    case FailureReason::kInvalidArgument:
      return "invalid_argument";
    case FailureReason::kQueueFull:
      return "queue_full";
    case FailureReason::kDeadlineExceeded:
      return "deadline_exceeded";
    case FailureReason::kUnavailable:
      return "unavailable";
    case FailureReason::kInternal:
      return "internal";
    case FailureReason::kCancelled:
      return "cancelled";
    case FailureReason::kOther:
      return "other";
  }
  return "other";
}

FailureReason FailureReasonFromCode(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
      return FailureReason::kInvalidArgument;
    case absl::StatusCode::kResourceExhausted:
      return FailureReason::kQueueFull;
    case absl::StatusCode::kDeadlineExceeded:
      return FailureReason::kDeadlineExceeded;
    case absl::StatusCode::kUnavailable:
      return FailureReason::kUnavailable;
    case absl::StatusCode::kInternal:
      return FailureReason::kInternal;
    case absl::StatusCode::kCancelled:
      return FailureReason::kCancelled;
    default:
      return FailureReason::kOther;
  }
}

ModelStats::ModelStats(ModelStatsOptions options) : options_(std::move(options)) {
  stats_.counts_tokens = options_.counts_tokens;
}

bool ModelStats::Sampled() const {
  const double rate = options_.access_log_sample_rate;
  if (rate <= 0 || options_.logger == nullptr) return false;
  if (!options_.logger->Enabled(common::LogLevel::kInfo)) return false;
  return rate >= 1 || UniformDraw() < rate;
}

void ModelStats::RecordBatchTokens(int64_t tokens) {
  common::MutexLock lock(&mu_);
  stats_.batch_tokens.Observe(kBatchTokensBucketBounds, static_cast<double>(tokens));
}

void ModelStats::RecordBatch(const BatchRecord& batch) {
  const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  const uint64_t request_count = batch.requests.size();
  {
    common::MutexLock lock(&mu_);
    stats_.last_inference_ms = static_cast<uint64_t>(now_ms);
    stats_.inference_count += batch.items;
    stats_.execution_count += 1;
    // Every request of the batch spent the batch's compute time (as Triton reports it).
    stats_.compute_input.Add(batch.input, request_count);
    stats_.compute_infer.Add(batch.infer, request_count);
    stats_.compute_output.Add(batch.output, request_count);
    for (const RequestTiming& request : batch.requests) {
      stats_.queue.Add(request.queue);
      stats_.success.Add(request.total);
      stats_.queue_duration.Observe(kDurationBucketBoundsSeconds, Seconds(request.queue));
      stats_.request_duration.Observe(kDurationBucketBoundsSeconds, Seconds(request.total));
    }
    BatchStat& per_size = stats_.batch_stats[batch.items];
    per_size.compute_input.Add(batch.input);
    per_size.compute_infer.Add(batch.infer);
    per_size.compute_output.Add(batch.output);
    // The compute histograms count batches: a batch is what the device runs.
    stats_.batch_size.Observe(kBatchSizeBucketBounds, static_cast<double>(batch.items));
    stats_.compute_input_duration.Observe(kDurationBucketBoundsSeconds, Seconds(batch.input));
    stats_.compute_infer_duration.Observe(kDurationBucketBoundsSeconds, Seconds(batch.infer));
    stats_.compute_output_duration.Observe(kDurationBucketBoundsSeconds, Seconds(batch.output));
  }
  if (options_.access_log_sample_rate <= 0) return;
  // Access log, outside the lock: the record carries numbers, the logger thread formats them.
  const int64_t compute_us = Micros(batch.input + batch.infer + batch.output);
  for (const RequestTiming& request : batch.requests) {
    if (!Sampled()) continue;
    options_.logger->Log(common::LogLevel::kInfo, "access",
                         {{"model", options_.model_name},
                          {"version", options_.model_version},
                          {"id", request.id},
                          {"batch", request.batch_size},
                          {"batch_items", batch.items},
                          {"queue_us", Micros(request.queue)},
                          {"compute_us", compute_us},
                          {"total_us", Micros(request.total)},
                          {"status", "OK"}});
  }
}

void ModelStats::RecordFailure(const InferenceRequest& request, absl::StatusCode code) {
  const auto total = std::chrono::steady_clock::now() - request.received_time;
  {
    common::MutexLock lock(&mu_);
    stats_.fail.Add(total);
    stats_.failures_by_reason[static_cast<size_t>(FailureReasonFromCode(code))] += 1;
  }
  if (!Sampled()) return;
  options_.logger->Log(common::LogLevel::kInfo, "access",
                       {{"model", options_.model_name},
                        {"version", options_.model_version},
                        {"id", request.id},
                        {"batch", request.batch_size},
                        {"total_us", Micros(total)},
                        {"status", absl::StatusCodeToString(code)}});
}

void ModelStats::RecordDeviceItems(uint64_t items, std::chrono::steady_clock::time_point now,
                                   uint64_t tokens) {
  common::MutexLock lock(&mu_);
  if (last_device_reading_ != std::chrono::steady_clock::time_point{} &&
      now > last_device_reading_) {
    const double seconds = Seconds(now - last_device_reading_);
    if (items >= last_device_items_) {
      stats_.throughput_items_per_second =
          static_cast<double>(items - last_device_items_) / seconds;
    }
    if (tokens >= last_device_tokens_) {
      stats_.throughput_tokens_per_second =
          static_cast<double>(tokens - last_device_tokens_) / seconds;
    }
  }
  last_device_reading_ = now;
  last_device_items_ = items;
  last_device_tokens_ = tokens;
  stats_.device_items = items;
  stats_.device_tokens = tokens;
}

void ModelStats::RecordPreparation(const PreparationRecord& record) {
  const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  common::MutexLock lock(&prep_mu_);
  preparation_.last_prepared_ms = static_cast<uint64_t>(now_ms);
  preparation_.items += record.items;
  preparation_.jobs += 1;
  preparation_.success.Add(record.total);
  preparation_.queue.Add(record.queue);
  preparation_.compute.Add(record.compute);
  preparation_.compute_by_items[record.items].Add(record.compute);
  tokenize_duration_.Observe(kDurationBucketBoundsSeconds, Seconds(record.total));
}

void ModelStats::RecordPreparationFailure(std::chrono::nanoseconds total) {
  common::MutexLock lock(&prep_mu_);
  preparation_.fail.Add(total);
}

ModelStatsSnapshot ModelStats::Snapshot() const {
  ModelStatsSnapshot snapshot;
  {
    common::MutexLock lock(&mu_);
    snapshot = stats_;
  }
  common::MutexLock lock(&prep_mu_);
  snapshot.preparation = preparation_;
  snapshot.tokenize_duration = tokenize_duration_;
  return snapshot;
}

}  // namespace sluice::engine
