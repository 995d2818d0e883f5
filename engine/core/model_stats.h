#pragma once

// ModelStats: the per-model-version counters that ModelStatistics and /metrics report, plus the
// sampled access log. Kept as Triton keeps its statistics (counts and summed nanoseconds per
// phase, and per batch size) and, for Prometheus, as cumulative histograms with fixed bucket
// bounds. No Prometheus type appears here: server/metrics_exporter maps a snapshot to families.
//
// Thread-safety: every method is safe to call from any thread. Record*() take one mutex for a few
// additions (never for I/O: access-log records are built and queued after it is released).
// Recording happens once per executed batch (completion thread), once per rejected or failed
// request (the thread that rejects it), and once per collector interval (RecordDeviceItems);
// never per request on a path that also serves successful requests.

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/mutex.h"

namespace sluice::common {
class Logger;
}

namespace sluice::engine {

class InferenceRequest;

struct DurationStat {
  uint64_t count = 0;
  uint64_t ns = 0;
  void Add(std::chrono::nanoseconds d, uint64_t n = 1) {
    count += n;
    ns += static_cast<uint64_t>(d.count()) * n;
  }
};

struct BatchStat {
  DurationStat compute_input;
  DurationStat compute_infer;
  DurationStat compute_output;
};

// Why a request failed, from its status code (the `reason` label of
// sluice_inference_requests_total{outcome="failure"}).
enum class FailureReason {
  kInvalidArgument = 0,  // INVALID_ARGUMENT: the request did not match the model
  kQueueFull,            // RESOURCE_EXHAUSTED: the model's queue was full
  kDeadlineExceeded,     // DEADLINE_EXCEEDED: expired in the queue
  kUnavailable,          // UNAVAILABLE: model stopping or server draining
  kInternal,             // INTERNAL: the backend failed the batch
  kCancelled,            // CANCELLED: the client cancelled or went away while it was queued
  kOther,                // any other code
};
inline constexpr size_t kFailureReasonCount = 7;
// "invalid_argument", "queue_full", "deadline_exceeded", "unavailable", "internal", "cancelled",
// "other".
absl::string_view FailureReasonName(FailureReason reason);
FailureReason FailureReasonFromCode(absl::StatusCode code);

// Upper bounds (inclusive, Prometheus `le`) of the duration histograms' buckets, in seconds, from
// 50 us to 10 s; a last, implicit bucket is +Inf.
inline constexpr std::array<double, 18> kDurationBucketBoundsSeconds = {
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
    0.05,    0.1,    0.25,    0.5,    1.0,   2.5,    5.0,   10.0, 30.0};
// Upper bounds of the batch-size histogram's buckets (items per executed batch); +Inf implicit.
inline constexpr std::array<double, 12> kBatchSizeBucketBounds = {1,  2,   4,   8,   16,   32,
                                                                  64, 128, 256, 512, 1024, 2048};

// Upper bounds of the batch-tokens histogram's buckets (real tokens per batch of a ragged-batching
// model); +Inf implicit.
inline constexpr std::array<double, 13> kBatchTokensBucketBounds = {
    16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536};

// A histogram with the fixed bounds `kBounds`: per-bucket (not cumulative) counts, the last one
// for observations above every bound, and their count and sum. Plain data; not thread-safe.
template <size_t kBucketCount>
struct FixedHistogram {
  // counts[i]: observations v with bounds[i-1] < v <= bounds[i]; counts[kBucketCount]: v above
  // the last bound.
  std::array<uint64_t, kBucketCount + 1> counts{};
  uint64_t count = 0;
  double sum = 0;

  void Observe(const std::array<double, kBucketCount>& bounds, double value, uint64_t n = 1) {
    size_t i = 0;
    while (i < kBucketCount && value > bounds[i]) ++i;
    counts[i] += n;
    count += n;
    sum += value * static_cast<double>(n);
  }
};
// Durations in seconds, buckets kDurationBucketBoundsSeconds.
using DurationHistogram = FixedHistogram<kDurationBucketBoundsSeconds.size()>;
// Items per batch, buckets kBatchSizeBucketBounds.
using BatchSizeHistogram = FixedHistogram<kBatchSizeBucketBounds.size()>;
// Tokens per batch, buckets kBatchTokensBucketBounds.
using BatchTokensHistogram = FixedHistogram<kBatchTokensBucketBounds.size()>;

// The preparation stage's counters, in the shape of Triton's statistics for a model of their own
// (a composing model of an ensemble: a Python-backend tokenizer in front of the model). Durations
// per request; the phases are counted for requests it prepared, as Triton counts them for
// successful requests only.
struct PreparationStats {
  // Wall-clock milliseconds since the epoch of the last request prepared; 0 if none.
  uint64_t last_prepared_ms = 0;
  // Batch items prepared (texts tokenized; a text with its text_pair is one item), and jobs run
  // (one per prepared request).
  uint64_t items = 0;
  uint64_t jobs = 0;
  // Per prepared request: handed to the pool -> prepared (queue + compute).
  DurationStat success;
  // Per request the stage failed (refused by a full or stopped pool, cancelled or past its
  // deadline while it waited, or refused by the preparation itself: invalid UTF-8, a text with no
  // tokens): handed to the pool -> failed.
  DurationStat fail;
  // Per prepared request: the wait for a pool thread, and the preparation itself.
  DurationStat queue;
  DurationStat compute;
  // The preparation's time per job size (items in the request), one count per job.
  std::map<uint64_t, DurationStat> compute_by_items;
};

// A copy of the counters at one moment.
struct ModelStatsSnapshot {
  // --- As ModelStatistics (Triton's statistics extension) reports them -----------------------
  // Wall-clock milliseconds since the epoch of the last completed inference; 0 if none.
  uint64_t last_inference_ms = 0;
  // Items inferred (a request of batch 4 counts 4), and batches executed.
  uint64_t inference_count = 0;
  uint64_t execution_count = 0;
  // Per request: end-to-end durations of successes and failures, and per phase.
  DurationStat success;
  DurationStat fail;
  DurationStat queue;
  DurationStat compute_input;
  DurationStat compute_infer;
  DurationStat compute_output;
  // The preparation stage (text inputs tokenized on the engine's preparation pool before they
  // reach the batcher), counted apart: the server reports it as the ModelStatistics entry of a
  // composing model (`<model>/tokenizer`). Not part of `queue`, which starts when a request
  // reaches the batcher; part of `success`/`fail`, which run from receipt to answer.
  // `prepares`: the model prepares requests at all (Model::prepares_requests(); filled in by the
  // engine), so that a model with a tokenizer reports the stage before its first text request.
  bool prepares = false;
  PreparationStats preparation;
  // Per executed batch size.
  std::map<uint64_t, BatchStat> batch_stats;
  // Requests in the queue when the snapshot was taken (filled in by the engine).
  uint64_t queue_depth = 0;

  // --- For /metrics ------------------------------------------------------------------------
  // Failed requests per FailureReason (they sum to fail.count).
  std::array<uint64_t, kFailureReasonCount> failures_by_reason{};
  // Items per executed batch, one observation per batch.
  BatchSizeHistogram batch_size;
  // Ragged-batching models only (counts_tokens): real tokens per batch handed to an executor, one
  // observation per batch (its sum is the tokens dispatched).
  bool counts_tokens = false;
  BatchTokensHistogram batch_tokens;
  // Per successful request: received -> answered, and enqueued -> handed to an executor.
  DurationHistogram request_duration;
  DurationHistogram queue_duration;
  // Per executed batch: gathering inputs, running the model, scattering outputs.
  DurationHistogram compute_input_duration;
  DurationHistogram compute_infer_duration;
  DurationHistogram compute_output_duration;
  // Per prepared request: as `preparation.success` (sluice_tokenize_duration_seconds).
  DurationHistogram tokenize_duration;
  // From the stats collector (0 until it ran): items the executors counted where they compute
  // (the device counters on a GPU), and their rate over the collector's last interval.
  uint64_t device_items = 0;
  double throughput_items_per_second = 0;
  // Ragged-batching models: real tokens counted the same way (on a GPU, by the device from the
  // batch it received), and their rate.
  uint64_t device_tokens = 0;
  double throughput_tokens_per_second = 0;
};

// One request of an executed batch, as the executor's completion path saw it. `id` is borrowed for
// the duration of the RecordBatch() call.
struct RequestTiming {
  absl::string_view id;
  int batch_size = 1;
  std::chrono::nanoseconds queue{0};  // enqueued -> handed to an executor
  std::chrono::nanoseconds total{0};  // received -> answered
};

// One executed batch whose requests all succeeded.
struct BatchRecord {
  uint64_t items = 0;
  std::chrono::nanoseconds input{0};
  std::chrono::nanoseconds infer{0};
  std::chrono::nanoseconds output{0};
  std::span<const RequestTiming> requests;
};

// One request prepared on the preparation pool.
struct PreparationRecord {
  uint64_t items = 0;                   // batch items prepared
  std::chrono::nanoseconds queue{0};    // handed to the pool -> picked up by a pool thread
  std::chrono::nanoseconds compute{0};  // the preparation itself (Model::PrepareRequest)
  std::chrono::nanoseconds total{0};    // handed to the pool -> prepared
};

struct ModelStatsOptions {
  // Identify the model in access-log records.
  std::string model_name;
  int64_t model_version = 0;
  // Where sampled access-log records go; borrowed, nullable (then none are written).
  common::Logger* logger = nullptr;
  // Fraction of requests (0..1) that get an access-log record at info level. 0: none.
  double access_log_sample_rate = 0;
  // The model batches by token budget (ModelConfig::ragged_batching): its snapshots report
  // batch_tokens (counts_tokens).
  bool counts_tokens = false;
};

class ModelStats {
 public:
  // No access log.
  ModelStats() : ModelStats(ModelStatsOptions{}) {}
  explicit ModelStats(ModelStatsOptions options);
  ModelStats(const ModelStats&) = delete;
  ModelStats& operator=(const ModelStats&) = delete;

  // One executed batch whose requests all succeeded. Called once per batch by the completion
  // path, before the requests are answered (so a client that asks for statistics right after its
  // answer sees itself). Queues one access-log record per sampled request.
  void RecordBatch(const BatchRecord& batch);

  // One request that failed after it reached the model: rejected at submit or enqueue, expired in
  // the queue, or failed in a batch, with the status it is answered with. Queues an access-log
  // record if the request is sampled.
  void RecordFailure(const InferenceRequest& request, absl::StatusCode code);

  // One batch of a ragged-batching model handed to an executor, with its real tokens. Called by
  // the model's batcher thread once per batch, outside its queue lock.
  void RecordBatchTokens(int64_t tokens);

  // Called by the stats collector once per interval with the items (and, for ragged-batching
  // models, the real tokens) its executors have counted so far (monotonic); sets device_items /
  // device_tokens and, from the previous reading, the throughputs.
  void RecordDeviceItems(uint64_t items, std::chrono::steady_clock::time_point now,
                         uint64_t tokens = 0);

  // Called once per prepared request, on the preparation pool thread that prepared it, with its
  // items and phases (`queue` + `compute` <= `total`, handed to the pool -> prepared). Takes its
  // own mutex, not the one the completion path records batches under, so pool threads never wait
  // for completion threads.
  void RecordPreparation(const PreparationRecord& record);
  // Called once per request the preparation stage failed (PreparationStats::fail says which),
  // with the time from being handed to the pool to the failure; by the thread that fails it. The
  // request's own failure is recorded apart (RecordFailure): it fails the model too.
  void RecordPreparationFailure(std::chrono::nanoseconds total);

  ModelStatsSnapshot Snapshot() const;

 private:
  bool Sampled() const;

  const ModelStatsOptions options_;
  mutable common::Mutex mu_;
  ModelStatsSnapshot stats_ ABSL_GUARDED_BY(mu_);
  // The collector's previous reading.
  std::chrono::steady_clock::time_point last_device_reading_ ABSL_GUARDED_BY(mu_){};
  uint64_t last_device_items_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t last_device_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  mutable common::Mutex prep_mu_;
  PreparationStats preparation_ ABSL_GUARDED_BY(prep_mu_);
  DurationHistogram tokenize_duration_ ABSL_GUARDED_BY(prep_mu_);
};

}  // namespace sluice::engine
