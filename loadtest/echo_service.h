#pragma once

// EchoService: a bare KServe v2 GRPCInferenceService that answers ModelInfer with the request's
// own inputs. No engine, no queue, no batcher, no model: the cost of the network path and of
// gRPC itself, i.e. the ceiling any server on this machine can reach for a given payload and
// concurrency. sluice-loadtest (or perf_analyzer) drives it exactly as it drives sluice.
//
// Every model name is served: ModelReady is true for any name, and ModelMetadata / ModelConfig
// describe whatever name is asked as a one-input, one-output model built from EchoModelOptions
// (by default it looks like sluice's `identity`: INPUT0 -> OUTPUT0, FP32, shape [-1, -1],
// max_batch_size 64).
//
// Echo rule: each input becomes an output with the same datatype, shape and bytes, named by
// replacing the first "INPUT" in its name with "OUTPUT" (INPUT0 -> OUTPUT0; a name without
// "INPUT" stays the same). Raw inputs come back in raw_output_contents (one entry per output, as
// sluice and Triton answer); typed `contents` come back as typed contents. `outputs` requested by
// name are ignored (every input is echoed). The request id is echoed.
//
// RPCs answered: ServerLive, ServerReady, ModelReady, ServerMetadata, ModelMetadata, ModelConfig,
// ModelStatistics (one entry with zero counters), RepositoryIndex (no entries: the echo server
// has no repository), ModelInfer, ModelStreamInfer. The rest are UNIMPLEMENTED.
//
// Thread-safety: handlers run on gRPC's callback threads and share only immutable options.
// Handlers never block.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/grpc_service.grpc.pb.h"

namespace sluice::loadtest {

struct EchoModelOptions {
  // Name of the one input the metadata declares (the output is its echo name).
  std::string input_name = "INPUT0";
  // KServe v2 datatype of the input and output.
  std::string datatype = "FP32";
  // The input's shape as ModelMetadata reports it: with the leading -1 batch dimension when
  // max_batch_size > 0 (-1 = any size).
  std::vector<int64_t> metadata_shape = {-1, -1};
  // Reported by ModelConfig; > 0 requires metadata_shape to start with -1.
  int64_t max_batch_size = 64;
  // Reported by ServerMetadata.
  std::string server_name = "sluice-echo";
  std::string server_version = "0.1.0";
  // A stream holds at most this many answers not yet written before it stops reading.
  int max_stream_pending = 256;
};

// InvalidArgument if `options` is inconsistent (unknown datatype, empty name, a dimension below
// -1, max_batch_size > 0 without a leading -1, ...).
absl::Status ValidateEchoModelOptions(const EchoModelOptions& options);

// The output name that echoes input `input_name` (see the echo rule above).
std::string EchoOutputName(absl::string_view input_name);

// Fills `response` with the echo of `request` (pure; used by the service and by tests).
// InvalidArgument if the request mixes raw and typed inputs or has a raw entry count that does
// not match its inputs.
absl::Status EchoInfer(const inference::ModelInferRequest& request,
                       inference::ModelInferResponse& response);

class EchoService final : public inference::GRPCInferenceService::CallbackService {
 public:
  // REQUIRES: ValidateEchoModelOptions(options).ok().
  explicit EchoService(EchoModelOptions options);

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* context,
                                       const inference::ServerLiveRequest* request,
                                       inference::ServerLiveResponse* response) override;
  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* context,
                                        const inference::ServerReadyRequest* request,
                                        inference::ServerReadyResponse* response) override;
  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* context,
                                       const inference::ModelReadyRequest* request,
                                       inference::ModelReadyResponse* response) override;
  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* context,
                                           const inference::ServerMetadataRequest* request,
                                           inference::ServerMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* context,
                                          const inference::ModelMetadataRequest* request,
                                          inference::ModelMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelConfig(grpc::CallbackServerContext* context,
                                        const inference::ModelConfigRequest* request,
                                        inference::ModelConfigResponse* response) override;
  grpc::ServerUnaryReactor* ModelStatistics(grpc::CallbackServerContext* context,
                                            const inference::ModelStatisticsRequest* request,
                                            inference::ModelStatisticsResponse* response) override;
  grpc::ServerUnaryReactor* RepositoryIndex(grpc::CallbackServerContext* context,
                                            const inference::RepositoryIndexRequest* request,
                                            inference::RepositoryIndexResponse* response) override;
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* context,
                                       const inference::ModelInferRequest* request,
                                       inference::ModelInferResponse* response) override;
  grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
  ModelStreamInfer(grpc::CallbackServerContext* context) override;

 private:
  class StreamReactor;

  const EchoModelOptions options_;
};

}  // namespace sluice::loadtest
