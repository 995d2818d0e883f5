#pragma once

// WindowCollector: where the load generators record what happens to each request, and from
// which the measurement loop takes one window's worth of records at a time.
//
// Thread-safety: every method may be called from any thread (gRPC callback threads record while
// the measurement thread takes windows). Recording takes a mutex for a few counter updates; the
// memory is bounded (two histograms per record, and at most one map entry per gRPC status code).

#include <cstdint>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "common/mutex.h"
#include "loadtest/latency_histogram.h"

namespace sluice::loadtest {

// What happened during one window (or one phase: warm-up, drain).
struct WindowRecord {
  // Latency of the requests that succeeded and completed in the window.
  LatencyHistogram latency;
  // Latency of the requests that failed in the window: how fast a server says no (a full queue's
  // RESOURCE_EXHAUSTED should take well under a millisecond), or how long a deadline took.
  LatencyHistogram failed_latency;
  int64_t succeeded = 0;
  int64_t failed = 0;
  // Real tokens of the requests that succeeded (0 when their tokens are not known).
  int64_t succeeded_tokens = 0;
  // Requests sent in the window (whatever became of them).
  int64_t sent = 0;
  // Open loop only: requests sent more than kLateThresholdUs (load_runner.h) after their scheduled
  // time, and requests not sent at all because the outstanding-request cap was reached.
  int64_t sent_late = 0;
  int64_t skipped = 0;
  // Failures by status code, and the first message seen per code (at most one entry per code).
  std::map<absl::StatusCode, int64_t> errors_by_code;
  std::map<absl::StatusCode, std::string> first_error_by_code;

  // Adds `other`'s counts to this one.
  void Merge(const WindowRecord& other);
};

class WindowCollector {
 public:
  WindowCollector() = default;
  WindowCollector(const WindowCollector&) = delete;
  WindowCollector& operator=(const WindowCollector&) = delete;

  void RecordSent();
  void RecordSentLate();
  void RecordSkipped();
  // One answered request, with its latency (counted under successes or failures), the real tokens
  // it carried (OutgoingRequest::tokens; counted for a success) and, for a failure, its error.
  void RecordResult(const absl::Status& status, int64_t latency_ns, int64_t tokens = 0);

  // Returns everything recorded since the previous TakeWindow (or construction) and starts a new
  // window.
  WindowRecord TakeWindow();

  // Successes and failures recorded in the current window so far (for progress lines).
  struct Peek {
    int64_t succeeded = 0;
    int64_t failed = 0;
  };
  Peek PeekCurrent() const;

 private:
  // common::Mutex (an annotated std::mutex), not absl::Mutex: TSan sees std::mutex through its
  // pthread interceptors, and Debian's Abseil is not instrumented (docs/reliability.md#sanitizers).
  mutable common::Mutex mu_;
  WindowRecord current_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice::loadtest
