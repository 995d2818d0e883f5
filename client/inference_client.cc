#include "client/inference_client.h"

#include <chrono>
#include <deque>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/status_convert.h"
#include "common/check.h"
#include "common/pem_file.h"
#include "common/status_macros.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace sluice::client {
namespace {

using Stub = inference::GRPCInferenceService::Stub;

// Where a stream error's request id travels (absl::Status payloads are keyed by a type URL).
constexpr char kRequestIdPayload[] = "type.sluice/request_id";

void SetDeadline(grpc::ClientContext& context, int64_t timeout_ms) {
  if (timeout_ms > 0) {
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
  }
}

}  // namespace

// ---- AsyncTracker -------------------------------------------------------------------------------

// Counts AsyncInfer calls whose callback has not finished. Each call holds a shared_ptr to it, so
// the callback's final Unlock() runs on a live mutex even if WaitForAsync() returned in between
// and the client was destroyed.
struct InferenceClient::AsyncTracker {
  explicit AsyncTracker(std::string target) : target(std::move(target)) {}

  void Started() {
    absl::MutexLock lock(&mu);
    ++in_flight;
  }
  void Finished() {
    absl::MutexLock lock(&mu);
    --in_flight;
  }
  void WaitIdle() {
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(this, &AsyncTracker::IdleLocked));
  }
  int64_t InFlight() {
    absl::MutexLock lock(&mu);
    return in_flight;
  }
  bool IdleLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return in_flight == 0; }

  const std::string target;  // For error messages.
  absl::Mutex mu;
  int64_t in_flight ABSL_GUARDED_BY(mu) = 0;
};

// ---- InferStream::Reactor -----------------------------------------------------------------------

// The gRPC callback reactor behind an InferStream.
//
// Reads: one StartRead at a time, each started from OnReadDone after the user callback returned,
// so callbacks are serialized and in order.
//
// Writes: gRPC allows one write operation (StartWrite or StartWritesDone) in flight at a time,
// while Write() may be called from many threads. Whoever sets `writing_` (under mu_) holds the
// "write token" and is the only one allowed to call StartWrite/StartWritesDone or to release the
// write hold; the token passes from Write() to OnWriteDone(), which starts the next queued write
// or returns the token.
//
// Hold: Write()/WritesDone() start operations from outside reactions, so a hold (added before
// StartCall) keeps the call from finishing while the write side may still be used. It is released
// exactly once, when the write side closes (`write_side_closed_`): after StartWritesDone, after a
// failed write, or when the read side ended with no write in flight. RemoveHold() is always the
// last thing a path does, because OnDone may run inline from it.
//
// Lifetime: owned by its InferStream, which waits for OnDone (done_) before destroying it.
class InferStream::Reactor final
    : public grpc::ClientBidiReactor<inference::ModelInferRequest,
                                     inference::ModelStreamInferResponse> {
 public:
  Reactor(InferCallback on_response, std::string target)
      : on_response_(std::move(on_response)), target_(std::move(target)) {}

  void Start(Stub& stub, int64_t timeout_ms) {
    SetDeadline(context_, timeout_ms);
    stub.async()->ModelStreamInfer(&context_, this);
    AddHold();
    StartRead(&response_);
    StartCall();
  }

  absl::Status Write(inference::ModelInferRequest request) {
    {
      absl::MutexLock lock(&mu_);
      if (writes_done_requested_ || write_side_closed_ || read_side_done_ || cancelled_) {
        return absl::FailedPreconditionError(
            "InferStream::Write after WritesDone, Finish or Cancel, or after the stream ended "
            "(Finish() returns its status)");
      }
      if (writing_) {
        pending_.push_back(std::move(request));
        return absl::OkStatus();
      }
      writing_ = true;  // We hold the write token: in_flight_ is ours until OnWriteDone.
      in_flight_ = std::move(request);
    }
    StartWrite(&in_flight_);
    return absl::OkStatus();
  }

  void WritesDone() {
    {
      absl::MutexLock lock(&mu_);
      if (writes_done_requested_) return;
      writes_done_requested_ = true;
      // A write in flight: OnWriteDone sends WritesDone after the queue drains.
      if (writing_ || write_side_closed_) return;
      writing_ = true;
      write_side_closed_ = true;
    }
    StartWritesDone();
    RemoveHold();
  }

  void Cancel() {
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      pending_.clear();
    }
    context_.TryCancel();  // Thread-safe; in-flight operations then complete with ok == false.
  }

  absl::Status Finish() {
    WritesDone();
    done_.WaitForNotification();
    return final_status_;
  }

  bool done() const { return done_.HasBeenNotified(); }

  void OnReadDone(bool ok) override {
    if (ok) {
      InferResult result = ToResult(response_);
      response_.Clear();
      on_response_(std::move(result));
      StartRead(&response_);
      return;
    }
    // The server ended the stream (or it failed): no more reads, and writes are pointless.
    bool release_hold = false;
    {
      absl::MutexLock lock(&mu_);
      read_side_done_ = true;
      pending_.clear();
      if (!writing_ && !write_side_closed_) {
        write_side_closed_ = true;
        release_hold = true;
      }
    }
    if (release_hold) RemoveHold();
  }

  void OnWriteDone(bool ok) override {
    enum class Next { kWrite, kWritesDone, kCloseWithoutWritesDone, kIdle } next;
    {
      absl::MutexLock lock(&mu_);
      if (!ok || read_side_done_ || cancelled_) {
        pending_.clear();
        writing_ = false;
        write_side_closed_ = true;
        next = Next::kCloseWithoutWritesDone;
      } else if (!pending_.empty()) {
        in_flight_ = std::move(pending_.front());
        pending_.pop_front();
        next = Next::kWrite;
      } else if (writes_done_requested_) {
        write_side_closed_ = true;  // Keep the token: WritesDone is the last write operation.
        next = Next::kWritesDone;
      } else {
        writing_ = false;
        next = Next::kIdle;
      }
    }
    switch (next) {
      case Next::kWrite:
        StartWrite(&in_flight_);
        break;
      case Next::kWritesDone:
        StartWritesDone();
        RemoveHold();
        break;
      case Next::kCloseWithoutWritesDone:
        RemoveHold();
        break;
      case Next::kIdle:
        break;
    }
  }

  void OnDone(const grpc::Status& status) override {
    final_status_ = FromGrpcStatus(status, "ModelStreamInfer", target_);
    done_.Notify();  // Last: the owner may destroy this reactor as soon as it sees the notice.
  }

 private:
  static InferResult ToResult(inference::ModelStreamInferResponse& response) {
    if (!response.error_message().empty()) {
      absl::Status error = absl::UnknownError(response.error_message());
      if (!response.infer_response().id().empty()) {
        error.SetPayload(kRequestIdPayload, absl::Cord(response.infer_response().id()));
      }
      return error;
    }
    return std::move(*response.mutable_infer_response());
  }

  grpc::ClientContext context_;
  const InferCallback on_response_;
  const std::string target_;

  // Only the read flow touches it (one read at a time).
  inference::ModelStreamInferResponse response_;
  // The message being written; owned by the holder of the write token (see class comment).
  inference::ModelInferRequest in_flight_;

  absl::Mutex mu_;
  std::deque<inference::ModelInferRequest> pending_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;                // The write token is taken.
  bool writes_done_requested_ ABSL_GUARDED_BY(mu_) = false;  // WritesDone()/Finish() called.
  bool write_side_closed_ ABSL_GUARDED_BY(mu_) = false;      // The hold has been (or is being)
                                                             // released; no more writes.
  bool read_side_done_ ABSL_GUARDED_BY(mu_) = false;         // A read failed: the call is over.
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;

  // Written by OnDone before done_.Notify(); read only after done_ is notified.
  absl::Status final_status_;
  absl::Notification done_;
};

// ---- InferStream --------------------------------------------------------------------------------

InferStream::InferStream(std::unique_ptr<Reactor> reactor) : reactor_(std::move(reactor)) {}

InferStream::~InferStream() {
  if (!reactor_->done()) {
    reactor_->Cancel();
    reactor_->Finish().IgnoreError();  // Cancelled by us: the status says nothing new.
  }
}

absl::Status InferStream::Write(inference::ModelInferRequest request) {
  return reactor_->Write(std::move(request));
}

void InferStream::WritesDone() { reactor_->WritesDone(); }

void InferStream::Cancel() { reactor_->Cancel(); }

absl::Status InferStream::Finish() { return reactor_->Finish(); }

std::string RequestIdOf(const absl::Status& status) {
  absl::optional<absl::Cord> id = status.GetPayload(kRequestIdPayload);
  return id.has_value() ? std::string(*id) : std::string();
}

// ---- InferenceClient ----------------------------------------------------------------------------

namespace {

// One synchronous unary RPC through `method` of the stub.
template <typename Request, typename Response>
absl::StatusOr<Response> UnaryCall(
    Stub& stub, grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&, Response*),
    absl::string_view rpc, const Request& request, const std::string& target, int64_t timeout_ms) {
  grpc::ClientContext context;
  SetDeadline(context, timeout_ms);
  Response response;
  RETURN_IF_ERROR(FromGrpcStatus((stub.*method)(&context, request, &response), rpc, target));
  return response;
}

bool TlsWanted(const TlsOptions& tls) {
  return tls.enabled || !tls.ca_file.empty() || !tls.cert_file.empty() || !tls.key_file.empty() ||
         !tls.server_name.empty();
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(
    const TlsOptions& tls) {
  if (!TlsWanted(tls)) return grpc::InsecureChannelCredentials();
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return absl::InvalidArgumentError(
        "a TLS client certificate needs its key, and a key its certificate (give both)");
  }
  grpc::SslCredentialsOptions ssl;
  if (!tls.ca_file.empty()) {
    ASSIGN_OR_RETURN(ssl.pem_root_certs, common::ReadPemFile("TLS CA file", tls.ca_file));
  }
  if (!tls.cert_file.empty()) {
    ASSIGN_OR_RETURN(ssl.pem_cert_chain,
                     common::ReadPemFile("TLS client certificate", tls.cert_file));
    ASSIGN_OR_RETURN(ssl.pem_private_key, common::ReadPemFile("TLS client key", tls.key_file));
  }
  return grpc::SslCredentials(ssl);
}

}  // namespace

absl::StatusOr<std::unique_ptr<InferenceClient>> InferenceClient::Create(const std::string& url,
                                                                         ClientOptions options) {
  if (url.empty()) return absl::InvalidArgumentError("server url is empty (want host:port)");
  if (options.timeout_ms < 0 || options.stream_timeout_ms < 0) {
    return absl::InvalidArgumentError("timeouts must be >= 0 ms (0 means none)");
  }
  if (options.max_message_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_message_bytes must be positive, got ", options.max_message_bytes));
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials,
                   ChannelCredentials(options.tls));
  if (!options.tls.server_name.empty()) {
    args.SetSslTargetNameOverride(options.tls.server_name);
  }
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(url, credentials, args);
  return std::unique_ptr<InferenceClient>(new InferenceClient(url, options, std::move(channel)));
}

InferenceClient::InferenceClient(std::string url, ClientOptions options,
                                 std::shared_ptr<grpc::Channel> channel)
    : url_(std::move(url)),
      options_(options),
      channel_(std::move(channel)),
      stub_(inference::GRPCInferenceService::NewStub(channel_)),
      tracker_(std::make_shared<AsyncTracker>(url_)) {}

InferenceClient::~InferenceClient() { WaitForAsync(); }

void InferenceClient::PrepareContext(grpc::ClientContext& context) const {
  SetDeadline(context, options_.timeout_ms);
}

absl::StatusOr<bool> InferenceClient::ServerLive() {
  ASSIGN_OR_RETURN(inference::ServerLiveResponse response,
                   UnaryCall(*stub_, &Stub::ServerLive, "ServerLive",
                             inference::ServerLiveRequest(), url_, options_.timeout_ms));
  return response.live();
}

absl::StatusOr<bool> InferenceClient::ServerReady() {
  ASSIGN_OR_RETURN(inference::ServerReadyResponse response,
                   UnaryCall(*stub_, &Stub::ServerReady, "ServerReady",
                             inference::ServerReadyRequest(), url_, options_.timeout_ms));
  return response.ready();
}

absl::StatusOr<bool> InferenceClient::ModelReady(absl::string_view name,
                                                 absl::string_view version) {
  inference::ModelReadyRequest request;
  request.set_name(std::string(name));
  request.set_version(std::string(version));
  ASSIGN_OR_RETURN(
      inference::ModelReadyResponse response,
      UnaryCall(*stub_, &Stub::ModelReady, "ModelReady", request, url_, options_.timeout_ms));
  return response.ready();
}

absl::StatusOr<inference::ServerMetadataResponse> InferenceClient::ServerMetadata() {
  return UnaryCall(*stub_, &Stub::ServerMetadata, "ServerMetadata",
                   inference::ServerMetadataRequest(), url_, options_.timeout_ms);
}

absl::StatusOr<inference::ModelMetadataResponse> InferenceClient::ModelMetadata(
    absl::string_view name, absl::string_view version) {
  inference::ModelMetadataRequest request;
  request.set_name(std::string(name));
  request.set_version(std::string(version));
  return UnaryCall(*stub_, &Stub::ModelMetadata, "ModelMetadata", request, url_,
                   options_.timeout_ms);
}

absl::StatusOr<inference::ModelConfig> InferenceClient::ModelConfig(absl::string_view name,
                                                                    absl::string_view version) {
  inference::ModelConfigRequest request;
  request.set_name(std::string(name));
  request.set_version(std::string(version));
  ASSIGN_OR_RETURN(
      inference::ModelConfigResponse response,
      UnaryCall(*stub_, &Stub::ModelConfig, "ModelConfig", request, url_, options_.timeout_ms));
  return std::move(*response.mutable_config());
}

absl::StatusOr<inference::ModelStatisticsResponse> InferenceClient::ModelStatistics(
    absl::string_view name, absl::string_view version) {
  inference::ModelStatisticsRequest request;
  request.set_name(std::string(name));
  request.set_version(std::string(version));
  return UnaryCall(*stub_, &Stub::ModelStatistics, "ModelStatistics", request, url_,
                   options_.timeout_ms);
}

absl::StatusOr<inference::RepositoryIndexResponse> InferenceClient::RepositoryIndex(
    bool ready_only) {
  inference::RepositoryIndexRequest request;
  request.set_ready(ready_only);
  return UnaryCall(*stub_, &Stub::RepositoryIndex, "RepositoryIndex", request, url_,
                   options_.timeout_ms);
}

absl::Status InferenceClient::LoadModel(absl::string_view name) {
  inference::RepositoryModelLoadRequest request;
  request.set_model_name(std::string(name));
  return UnaryCall(*stub_, &Stub::RepositoryModelLoad, "RepositoryModelLoad", request, url_,
                   options_.timeout_ms)
      .status();
}

absl::Status InferenceClient::UnloadModel(absl::string_view name) {
  inference::RepositoryModelUnloadRequest request;
  request.set_model_name(std::string(name));
  return UnaryCall(*stub_, &Stub::RepositoryModelUnload, "RepositoryModelUnload", request, url_,
                   options_.timeout_ms)
      .status();
}

InferResult InferenceClient::Infer(const inference::ModelInferRequest& request) {
  return UnaryCall(*stub_, &Stub::ModelInfer, "ModelInfer", request, url_, options_.timeout_ms);
}

void InferenceClient::AsyncInfer(inference::ModelInferRequest request, InferCallback callback) {
  AsyncInfer(std::make_shared<const inference::ModelInferRequest>(std::move(request)),
             std::move(callback));
}

void InferenceClient::AsyncInfer(std::shared_ptr<const inference::ModelInferRequest> request,
                                 InferCallback callback) {
  CHECK(request != nullptr);
  CHECK(callback != nullptr);
  // Everything the RPC needs until its completion; freed by the completion, after the callback.
  struct Call {
    grpc::ClientContext context;
    std::shared_ptr<const inference::ModelInferRequest> request;
    inference::ModelInferResponse response;
    InferCallback callback;
    std::shared_ptr<AsyncTracker> tracker;
  };
  auto call = std::make_unique<Call>();
  PrepareContext(call->context);
  call->request = std::move(request);
  call->callback = std::move(callback);
  call->tracker = tracker_;
  tracker_->Started();
  Call* raw = call.release();
  stub_->async()->ModelInfer(
      &raw->context, raw->request.get(), &raw->response, [raw](grpc::Status grpc_status) {
        std::unique_ptr<Call> call(raw);
        absl::Status status = FromGrpcStatus(grpc_status, "ModelInfer", call->tracker->target);
        call->callback(status.ok() ? InferResult(std::move(call->response))
                                   : InferResult(std::move(status)));
        // Free the call before WaitForAsync() can return, so nothing of it outlives the wait.
        std::shared_ptr<AsyncTracker> tracker = std::move(call->tracker);
        call.reset();
        tracker->Finished();
      });
}

void InferenceClient::WaitForAsync() { tracker_->WaitIdle(); }

int64_t InferenceClient::AsyncInFlight() const { return tracker_->InFlight(); }

absl::StatusOr<std::unique_ptr<InferStream>> InferenceClient::StartStream(
    InferCallback on_response) {
  if (on_response == nullptr) {
    return absl::InvalidArgumentError("StartStream needs a response callback");
  }
  auto reactor = std::make_unique<InferStream::Reactor>(std::move(on_response), url_);
  reactor->Start(*stub_, options_.stream_timeout_ms);
  return std::unique_ptr<InferStream>(new InferStream(std::move(reactor)));
}

}  // namespace sluice::client
