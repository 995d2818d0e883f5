#include "server/stream_infer_reactor.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"
#include "server/infer_conversion.h"
#include "server/memory_release.h"

namespace sluice::server {
namespace {

using std::chrono::steady_clock;

// ModelStreamInfer: requests are read one after another and submitted at once; answers are
// written in completion order (each carries its request id), one write in flight at a time as
// gRPC requires. Reading pauses while max_in_flight answers are outstanding, or while the stream
// holds max_pending_bytes (requests being served plus answers not yet written; a count alone let
// 512 answers of any size pile up), or while all streams of its connection together hold
// max_connection_pending_bytes, or all streams together max_total_pending_bytes, and this one
// holds anything, so a client that never reads cannot make the server buffer without bound (4
// streams of a client that never read held 4 x 64 MiB before the per-connection bound). A stream
// that held much gives the allocator's free memory back when it ends. The reactor deletes itself in
// OnDone, which gRPC calls only after Finish(); Finish() waits for every submitted request.
class StreamInferReactor final
    : public grpc::ServerBidiReactor<inference::ModelInferRequest,
                                     inference::ModelStreamInferResponse> {
 public:
  StreamInferReactor(engine::Engine* engine, grpc::CallbackServerContext* context,
                     StreamInferOptions options)
      : engine_(engine), context_(context), options_(options) {
    if (options_.active_calls != nullptr) {
      options_.active_calls->fetch_add(1, std::memory_order_relaxed);
    }
    StartNextRead();
  }
  ~StreamInferReactor() override {
    AddPendingBytes(-pending_bytes_);
    if (options_.active_calls != nullptr) {
      options_.active_calls->fetch_sub(1, std::memory_order_relaxed);
    }
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client half-closed (or the call ended)
      bool finish = false;
      {
        common::MutexLock lock(&mu_);
        reads_done_ = true;
        finish = ShouldFinishLocked();
      }
      if (finish) Finish(grpc::Status::OK);
      return;
    }
    std::shared_ptr<inference::ModelInferRequest> message = std::move(read_message_);
    const std::string id = message->id();
    const std::string model_name = message->model_name();
    const int64_t request_bytes = static_cast<int64_t>(message->ByteSizeLong());
    {
      common::MutexLock lock(&mu_);
      ++outstanding_;
      AddPendingBytes(request_bytes);
    }
    const auto received = steady_clock::now();
    // Outputs the request places in shared memory (filled by ToEngineRequest; the lambda holds
    // their regions' leases until the answer is made).
    auto placements = std::make_shared<std::vector<shm::OutputPlacement>>();
    auto on_complete = [this, id, model_name, request_bytes,
                        placements](absl::StatusOr<engine::InferenceResponse> result) {
      inference::ModelStreamInferResponse response;
      if (result.ok()) {
        absl::Status written =
            ToProtoResponse(*std::move(result), *placements, response.mutable_infer_response());
        if (!written.ok()) result = written;
      }
      if (!result.ok()) {
        // Triton's convention: an error travels in error_message and the stream goes on.
        response.set_error_message(std::string(result.status().message()));
        response.mutable_infer_response()->set_id(id);
        response.mutable_infer_response()->set_model_name(model_name);
      }
      OnAnswer(std::move(response), request_bytes);
    };
    const inference::ModelInferRequest& message_ref = *message;
    absl::StatusOr<std::unique_ptr<engine::InferenceRequest>> request = ToEngineRequest(
        message_ref, std::move(message), on_complete, options_.shared_memory, placements.get());
    if (!request.ok()) {
      on_complete(request.status());
    } else {
      (*request)->received_time = received;
      (*request)->deadline = SteadyDeadline(context_->deadline());
      (*request)->cancelled = cancelled_;
      engine_->Submit(*std::move(request));
    }
    bool read_more = false;
    {
      common::MutexLock lock(&mu_);
      if (MayReadLocked()) {
        read_more = true;
      } else {
        read_paused_ = true;
      }
    }
    if (read_more) StartNextRead();
  }

  void OnWriteDone(bool ok) override {
    const inference::ModelStreamInferResponse* next = nullptr;
    bool resume_read = false;
    bool finish = false;
    {
      common::MutexLock lock(&mu_);
      writes_.pop_front();
      AddPendingBytes(-write_bytes_.front());
      write_bytes_.pop_front();
      if (!ok) {
        // The client is gone: drop what is queued, read no more, and keep counting answers
        // until every submitted request has been answered (only then may the call finish).
        write_failed_ = true;
        writes_.clear();
        for (int64_t bytes : write_bytes_) AddPendingBytes(-bytes);
        write_bytes_.clear();
        if (read_paused_) {
          read_paused_ = false;
          reads_done_ = true;
        }
      }
      if (!writes_.empty()) {
        next = &writes_.front();
      } else {
        writing_ = false;
      }
      if (read_paused_ && !write_failed_ && MayReadLocked()) {
        read_paused_ = false;
        resume_read = true;
      }
      if (next == nullptr && !resume_read) finish = ShouldFinishLocked();
    }
    if (finish) {
      Finish(grpc::Status::OK);
      return;
    }
    if (next != nullptr) StartWrite(next);
    if (resume_read) StartNextRead();
  }

  // The client cancelled the stream or went away: what it still has queued will not run.
  void OnCancel() override { cancelled_->store(true, std::memory_order_relaxed); }

  void OnDone() override {
    bool release = false;
    {
      common::MutexLock lock(&mu_);
      release = options_.release_memory_after_bytes > 0 &&
                peak_pending_bytes_ >= options_.release_memory_after_bytes;
    }
    delete this;  // frees the answers it still held
    if (release) ReleaseFreeMemory();
  }

 private:
  void StartNextRead() {
    read_message_ = std::make_shared<inference::ModelInferRequest>();
    StartRead(read_message_.get());
  }

  // Called from engine threads (or inline when a request is rejected at once).
  // `request_bytes` is what OnReadDone counted for the request this answers.
  void OnAnswer(inference::ModelStreamInferResponse response, int64_t request_bytes) {
    const inference::ModelStreamInferResponse* to_write = nullptr;
    const int64_t response_bytes = static_cast<int64_t>(response.ByteSizeLong());
    bool finish = false;
    {
      common::MutexLock lock(&mu_);
      --outstanding_;
      AddPendingBytes(-request_bytes);
      if (write_failed_ || finished_) {
        finish = ShouldFinishLocked();
      } else {
        writes_.push_back(std::move(response));
        write_bytes_.push_back(response_bytes);
        AddPendingBytes(response_bytes);
        if (!writing_) {
          writing_ = true;
          to_write = &writes_.front();  // deque references survive push_back/pop_front of others
        }
      }
    }
    if (finish) {
      Finish(grpc::Status::OK);
      return;
    }
    if (to_write != nullptr) StartWrite(to_write);
  }

  int InFlightLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return outstanding_ + static_cast<int>(writes_.size());
  }

  // Whether to read the next request. A stream that holds nothing may always read one, so that
  // every paused stream has an answer of its own whose write resumes it.
  bool MayReadLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (InFlightLocked() >= options_.max_in_flight) return false;
    if (pending_bytes_ >= options_.max_pending_bytes) return false;
    if (options_.connection_pending_bytes != nullptr && InFlightLocked() > 0 &&
        options_.connection_pending_bytes->load(std::memory_order_relaxed) >=
            options_.max_connection_pending_bytes) {
      return false;
    }
    if (options_.total_pending_bytes != nullptr && InFlightLocked() > 0 &&
        options_.total_pending_bytes->load(std::memory_order_relaxed) >=
            options_.max_total_pending_bytes) {
      return false;
    }
    return true;
  }

  // REQUIRES: mu_ held (or the reactor being destroyed: clang does not check destructors).
  void AddPendingBytes(int64_t delta) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    pending_bytes_ += delta;
    peak_pending_bytes_ = std::max(peak_pending_bytes_, pending_bytes_);
    if (options_.connection_pending_bytes != nullptr) {
      options_.connection_pending_bytes->fetch_add(delta, std::memory_order_relaxed);
    }
    if (options_.total_pending_bytes != nullptr) {
      options_.total_pending_bytes->fetch_add(delta, std::memory_order_relaxed);
    }
  }

  // Whether the call may finish now: reading ended and every submitted request has been
  // answered and written. True once (it marks the call finished); the caller then calls
  // Finish() after releasing mu_ (never under the lock: STYLE rule 16).
  bool ShouldFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_ || !reads_done_ || outstanding_ > 0 || writing_) return false;
    finished_ = true;
    return true;
  }

  engine::Engine* const engine_;
  grpc::CallbackServerContext* const context_;
  const StreamInferOptions options_;
  // The message being read; shared with the engine request that borrows its bytes.
  std::shared_ptr<inference::ModelInferRequest> read_message_;
  // Set by OnCancel; shared with every request this stream submitted.
  const std::shared_ptr<std::atomic<bool>> cancelled_ = std::make_shared<std::atomic<bool>>(false);

  common::Mutex mu_;
  // Front is in flight.
  std::deque<inference::ModelStreamInferResponse> writes_ ABSL_GUARDED_BY(mu_);
  // ByteSizeLong of each of writes_.
  std::deque<int64_t> write_bytes_ ABSL_GUARDED_BY(mu_);
  int outstanding_ ABSL_GUARDED_BY(mu_) = 0;             // submitted, not answered
  int64_t pending_bytes_ ABSL_GUARDED_BY(mu_) = 0;       // outstanding requests + writes_
  int64_t peak_pending_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // the most pending_bytes_ has been
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool read_paused_ ABSL_GUARDED_BY(mu_) = false;
  bool write_failed_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
NewStreamInferReactor(engine::Engine* engine, grpc::CallbackServerContext* context,
                      StreamInferOptions options) {
  return new StreamInferReactor(engine, context, options);
}

}  // namespace sluice::server
