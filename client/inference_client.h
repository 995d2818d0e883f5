#pragma once

// InferenceClient: a KServe v2 gRPC client (inference.GRPCInferenceService) with an
// absl::Status/StatusOr API, for sluice or any other KServe v2 / Triton server.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<InferenceClient> client,
//                    InferenceClient::Create("localhost:8001"));
//   inference::ModelInferRequest request;
//   request.set_model_name("simple");
//   RETURN_IF_ERROR(AddInput(request, "INPUT0", {1, 16}, std::vector<int32_t>(16, 1)));
//   RETURN_IF_ERROR(AddInput(request, "INPUT1", {1, 16}, std::vector<int32_t>(16, 2)));
//   ASSIGN_OR_RETURN(inference::ModelInferResponse response, client->Infer(request));
//   ASSIGN_OR_RETURN(OutputTensor sum, DecodeOutput(response, "OUTPUT0"));
//
// (AddInput, DecodeOutput and friends are in client/tensor_codec.h.)
//
// Errors: a failed RPC returns the gRPC status as an absl::Status with the same code and the
// server's message (see client/status_convert.h); UNAVAILABLE messages are prefixed with the RPC
// and the address, e.g. "ModelInfer to localhost:8001: failed to connect to all addresses ...".
// RPCs fail fast: a server that is down answers UNAVAILABLE at once rather than after the deadline.
//
// Threads: the client starts none of its own. Callbacks (AsyncInfer, InferStream) run on gRPC's
// callback threads; they must not block (no waiting, no synchronous RPCs), or they stall other
// calls' completions.

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/grpc_service.grpc.pb.h"

namespace sluice::client {

// Options for InferenceClient::Create.
// TLS for the channel. Files are PEM and are read by InferenceClient::Create.
struct TlsOptions {
  // On: TLS with the system's roots (unless ca_file says otherwise). Giving any file or a
  // server name below turns TLS on too. Off and nothing given: a plaintext channel.
  bool enabled = false;
  // CA certificates that verify the server; empty: the system's roots.
  std::string ca_file;
  // A client certificate and its key, for servers that require mutual TLS (both or neither).
  std::string cert_file;
  std::string key_file;
  // The name checked against the server's certificate instead of the url's host (for a server
  // reached by an address its certificate does not name). Empty: the host.
  std::string server_name;
};

struct ClientOptions {
  // Deadline of each unary RPC (including Infer and AsyncInfer), from when it starts. 0 = none.
  int64_t timeout_ms = 60'000;

  // Deadline of a whole stream from StartStream, in milliseconds. 0 = none (streams are usually
  // long-lived; per-request timeouts belong to the server's queue policy).
  int64_t stream_timeout_ms = 0;

  // Largest message the client sends or accepts, in bytes. gRPC's own default receive limit
  // (4 MiB) is too small for tensors; this matches the server's default (2 GiB - 1).
  int max_message_bytes = std::numeric_limits<int32_t>::max();

  TlsOptions tls;
};

// The result of one inference: the response, or why there is none.
using InferResult = absl::StatusOr<inference::ModelInferResponse>;
using InferCallback = std::function<void(InferResult)>;

class InferStream;

// A connection to one server. Create() builds the channel (plaintext, or TLS per options.tls) and
// does not connect: the first RPC does (so Create succeeds even if the server is not up yet).
//
// Thread-safety: every method may be called concurrently from any number of threads.
class InferenceClient {
 public:
  // `url` is "host:port" (any gRPC target works, e.g. "unix:/tmp/sluice.sock").
  // InvalidArgument for an empty url or negative/zero limits in `options`.
  static absl::StatusOr<std::unique_ptr<InferenceClient>> Create(const std::string& url,
                                                                 ClientOptions options = {});

  InferenceClient(const InferenceClient&) = delete;
  InferenceClient& operator=(const InferenceClient&) = delete;

  // Waits for outstanding AsyncInfer calls (as WaitForAsync). Streams hold their own reference to
  // the channel and may outlive the client.
  ~InferenceClient();

  // The target given to Create.
  const std::string& url() const { return url_; }

  // ---- Health and metadata ----------------------------------------------------------------------
  // Each returns the server's answer, or the RPC's error.

  absl::StatusOr<bool> ServerLive();
  absl::StatusOr<bool> ServerReady();
  // `version` "" means the server's choice (the latest ready version).
  absl::StatusOr<bool> ModelReady(absl::string_view name, absl::string_view version = "");
  absl::StatusOr<inference::ServerMetadataResponse> ServerMetadata();
  absl::StatusOr<inference::ModelMetadataResponse> ModelMetadata(absl::string_view name,
                                                                 absl::string_view version = "");
  absl::StatusOr<inference::ModelConfig> ModelConfig(absl::string_view name,
                                                     absl::string_view version = "");
  // `name` "" means every model; `version` "" every version.
  absl::StatusOr<inference::ModelStatisticsResponse> ModelStatistics(
      absl::string_view name = "", absl::string_view version = "");
  // All models in the repository, or only the ready ones.
  absl::StatusOr<inference::RepositoryIndexResponse> RepositoryIndex(bool ready_only = false);

  // ---- Model control (the server must run with --model-control-mode=explicit) -----------------

  absl::Status LoadModel(absl::string_view name);
  absl::Status UnloadModel(absl::string_view name);

  // ---- Inference
  // ---------------------------------------------------------------------------------

  // Synchronous ModelInfer: blocks the calling thread until the response, an error or the
  // deadline. REQUIRES: not called from a gRPC callback (AsyncInfer/stream callbacks).
  InferResult Infer(const inference::ModelInferRequest& request);

  // Asynchronous ModelInfer (gRPC callback API): returns at once; `callback` runs exactly once, on
  // a gRPC thread, with the response or the error. The callback may start further AsyncInfer
  // calls (closed-loop load) but must not block. The request is kept alive until then; pass a
  // shared_ptr to send one request many times without copying it.
  // REQUIRES: `callback` is non-empty and `request` non-null (checked: a broken caller aborts).
  void AsyncInfer(inference::ModelInferRequest request, InferCallback callback);
  void AsyncInfer(std::shared_ptr<const inference::ModelInferRequest> request,
                  InferCallback callback);

  // Blocks until every AsyncInfer started so far (and any started by their callbacks) has run
  // its callback to completion. REQUIRES: not called from a callback.
  void WaitForAsync();

  // Number of AsyncInfer calls whose callback has not finished yet.
  int64_t AsyncInFlight() const;

  // Opens a ModelStreamInfer stream. `on_response` is called once per response the server sends,
  // in order, never concurrently with itself, on a gRPC thread; it must not block (a slow callback
  // delays the next read). A response whose `error_message` is set arrives as
  // absl::UnknownError(error_message), with its request id (if any) attached: see RequestIdOf().
  // The stream's own final status comes from InferStream::Finish(), not from the callback.
  // Fails only for a null callback; connection errors surface through Finish().
  absl::StatusOr<std::unique_ptr<InferStream>> StartStream(InferCallback on_response);

 private:
  struct AsyncTracker;

  InferenceClient(std::string url, ClientOptions options, std::shared_ptr<grpc::Channel> channel);

  // Applies the per-call deadline.
  void PrepareContext(grpc::ClientContext& context) const;

  const std::string url_;
  const ClientOptions options_;
  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
  // Shared with each in-flight AsyncInfer so that its final unlock never touches freed memory.
  const std::shared_ptr<AsyncTracker> tracker_;
};

// One ModelStreamInfer call. Created by InferenceClient::StartStream; the caller owns it.
//
// Usage: Write() any number of requests (from any threads), then Finish() to half-close the stream
// and wait until the server has sent its last response and its status. Responses arrive through
// the callback given to StartStream, possibly before Write() returns.
//
// Thread-safety: Write() and WritesDone() may be called concurrently with each other and with
// responses arriving. Finish() may be called from any thread other than the response callback.
// Destroying the stream while another thread is inside one of its methods is not allowed.
class InferStream {
 public:
  InferStream(const InferStream&) = delete;
  InferStream& operator=(const InferStream&) = delete;

  // If Finish() has not returned yet: cancels the stream and waits for it to end (the callback
  // may still run meanwhile). REQUIRES: not called from the response callback.
  ~InferStream();

  // Queues `request` to be sent; requests go out one at a time, in the order Write() was called.
  // Returns at once. FailedPrecondition after WritesDone()/Finish()/Cancel() or once the stream has
  // ended (its status is then available from Finish()).
  absl::Status Write(inference::ModelInferRequest request);

  // Half-closes the stream once every queued request has been sent: the server then finishes
  // its remaining responses and ends the stream. Idempotent; does not block.
  void WritesDone();

  // Cancels the stream: queued requests are dropped and Finish() returns CANCELLED (unless the
  // stream had already ended). Does not block.
  void Cancel();

  // WritesDone(), then blocks until the stream has ended and every callback has returned.
  // Returns the stream's status (OK after a clean end, else the gRPC error as an absl::Status).
  // May be called more than once; later calls return the same status at once.
  // REQUIRES: not called from the response callback.
  absl::Status Finish();

 private:
  friend class InferenceClient;
  class Reactor;

  explicit InferStream(std::unique_ptr<Reactor> reactor);

  std::unique_ptr<Reactor> reactor_;
};

// The request id attached to an error delivered by an InferStream callback (the `id` of the failed
// request, when the server sent one), or "" if there is none.
std::string RequestIdOf(const absl::Status& status);

}  // namespace sluice::client
