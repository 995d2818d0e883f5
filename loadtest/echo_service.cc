#include "loadtest/echo_service.h"

#include <deque>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/tensor_codec.h"
#include "common/check.h"

namespace sluice::loadtest {
namespace {

grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* context,
                                    const grpc::Status& status = grpc::Status::OK) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

// The model_config.proto enum value of a KServe v2 datatype name ("FP32" -> TYPE_FP32; BYTES is
// TYPE_STRING there).
inference::DataType ConfigDataType(absl::string_view datatype) {
  inference::DataType type = inference::TYPE_INVALID;
  const std::string name =
      datatype == "BYTES" ? std::string("TYPE_STRING") : absl::StrCat("TYPE_", datatype);
  return inference::DataType_Parse(name, &type) ? type : inference::TYPE_INVALID;
}

}  // namespace

absl::Status ValidateEchoModelOptions(const EchoModelOptions& options) {
  if (options.input_name.empty()) return absl::InvalidArgumentError("empty input name");
  if (!client::DataTypeSize(options.datatype).ok()) {
    return absl::InvalidArgumentError(absl::StrCat("unknown datatype '", options.datatype,
                                                   "' (expected a KServe v2 name, e.g. FP32)"));
  }
  if (options.metadata_shape.empty()) {
    return absl::InvalidArgumentError("the input shape needs at least one dimension");
  }
  for (int64_t dim : options.metadata_shape) {
    if (dim < -1) return absl::InvalidArgumentError(absl::StrCat("bad dimension ", dim));
  }
  if (options.max_batch_size < 0) {
    return absl::InvalidArgumentError("max_batch_size must be >= 0");
  }
  if (options.max_batch_size > 0 && options.metadata_shape.front() != -1) {
    return absl::InvalidArgumentError(
        "with max_batch_size > 0 the input shape starts with the batch dimension -1");
  }
  if (options.max_stream_pending < 1) {
    return absl::InvalidArgumentError("max_stream_pending must be >= 1");
  }
  return absl::OkStatus();
}

std::string EchoOutputName(absl::string_view input_name) {
  std::string name(input_name);
  const size_t at = name.find("INPUT");
  if (at != std::string::npos) name.replace(at, 5, "OUTPUT");
  return name;
}

absl::Status EchoInfer(const inference::ModelInferRequest& request,
                       inference::ModelInferResponse& response) {
  const bool raw = request.raw_input_contents_size() > 0;
  if (raw && request.raw_input_contents_size() != request.inputs_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request has ", request.inputs_size(), " inputs but ",
                     request.raw_input_contents_size(), " raw_input_contents entries"));
  }
  response.set_model_name(request.model_name());
  response.set_model_version(request.model_version().empty() ? "1" : request.model_version());
  response.set_id(request.id());
  for (int i = 0; i < request.inputs_size(); ++i) {
    const inference::ModelInferRequest::InferInputTensor& input = request.inputs(i);
    if (raw && input.has_contents()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", input.name(), "' has typed contents in a request with raw inputs"));
    }
    inference::ModelInferResponse::InferOutputTensor* output = response.add_outputs();
    output->set_name(EchoOutputName(input.name()));
    output->set_datatype(input.datatype());
    *output->mutable_shape() = input.shape();
    if (raw) {
      response.add_raw_output_contents(request.raw_input_contents(i));
    } else {
      *output->mutable_contents() = input.contents();
    }
  }
  return absl::OkStatus();
}

// ---- ModelStreamInfer ---------------------------------------------------------------------------
// Reads requests one after another and echoes each at once; answers are written in order, one
// StartWrite in flight at a time (gRPC's rule). When max_stream_pending answers wait to be
// written, reading pauses until a write completes, so a client that does not read its answers
// cannot make the echo server buffer without bound. Deletes itself in OnDone.
class EchoService::StreamReactor final
    : public grpc::ServerBidiReactor<inference::ModelInferRequest,
                                     inference::ModelStreamInferResponse> {
 public:
  explicit StreamReactor(size_t max_pending) : max_pending_(max_pending) { StartRead(&request_); }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client half-closed, or the call ended
      bool finish = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        reads_done_ = true;
        finish = !writing_ && TakeFinishLocked();
      }
      if (finish) Finish(grpc::Status::OK);
      return;
    }
    inference::ModelStreamInferResponse response;
    absl::Status echoed = EchoInfer(request_, *response.mutable_infer_response());
    if (!echoed.ok()) {
      response.Clear();
      response.set_error_message(std::string(echoed.message()));
      response.mutable_infer_response()->set_id(request_.id());
      response.mutable_infer_response()->set_model_name(request_.model_name());
    }
    const inference::ModelStreamInferResponse* to_write = nullptr;
    bool read_more = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (finished_) return;  // a write failed: the call is over
      pending_.push_back(std::move(response));
      if (!writing_) {
        writing_ = true;
        to_write = &pending_.front();
      }
      read_more = pending_.size() < max_pending_;
      read_paused_ = !read_more;
    }
    if (to_write != nullptr) StartWrite(to_write);
    if (read_more) StartRead(&request_);
  }

  void OnWriteDone(bool ok) override {
    const inference::ModelStreamInferResponse* to_write = nullptr;
    bool resume_read = false;
    bool finish = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_.pop_front();
      if (!ok) {  // the client is gone
        pending_.clear();
        writing_ = false;
        finish = TakeFinishLocked();
      } else if (!pending_.empty()) {
        to_write = &pending_.front();
      } else {
        writing_ = false;
        finish = reads_done_ && TakeFinishLocked();
      }
      if (ok && read_paused_ && !reads_done_ && pending_.size() < max_pending_) {
        read_paused_ = false;
        resume_read = true;
      }
    }
    // Finish() last: OnDone (which deletes this reactor) may follow it on another thread.
    if (to_write != nullptr) StartWrite(to_write);
    if (resume_read) StartRead(&request_);
    if (finish) {
      Finish(ok ? grpc::Status::OK
                : grpc::Status(grpc::StatusCode::UNAVAILABLE, "stream write failed"));
    }
  }

  void OnDone() override { delete this; }

 private:
  // True the first time only: whoever gets true calls Finish(), outside the lock.
  bool TakeFinishLocked() {
    if (finished_) return false;
    finished_ = true;
    return true;
  }

  const size_t max_pending_;
  inference::ModelInferRequest request_;  // the read buffer; one read in flight at a time

  std::mutex mu_;
  // Answers not yet written; front() is being written while writing_. A deque keeps references
  // to its elements valid across push_back.
  std::deque<inference::ModelStreamInferResponse> pending_;
  bool writing_ = false;
  bool reads_done_ = false;
  bool read_paused_ = false;
  bool finished_ = false;
};

// ---- EchoService
// ----------------------------------------------------------------------------------

EchoService::EchoService(EchoModelOptions options) : options_(std::move(options)) {
  CHECK(ValidateEchoModelOptions(options_).ok());
}

grpc::ServerUnaryReactor* EchoService::ServerLive(grpc::CallbackServerContext* context,
                                                  const inference::ServerLiveRequest* /*request*/,
                                                  inference::ServerLiveResponse* response) {
  response->set_live(true);
  return FinishNow(context);
}

grpc::ServerUnaryReactor* EchoService::ServerReady(grpc::CallbackServerContext* context,
                                                   const inference::ServerReadyRequest* /*request*/,
                                                   inference::ServerReadyResponse* response) {
  response->set_ready(true);
  return FinishNow(context);
}

grpc::ServerUnaryReactor* EchoService::ModelReady(grpc::CallbackServerContext* context,
                                                  const inference::ModelReadyRequest* /*request*/,
                                                  inference::ModelReadyResponse* response) {
  response->set_ready(true);
  return FinishNow(context);
}

grpc::ServerUnaryReactor* EchoService::ServerMetadata(
    grpc::CallbackServerContext* context, const inference::ServerMetadataRequest* /*request*/,
    inference::ServerMetadataResponse* response) {
  response->set_name(options_.server_name);
  response->set_version(options_.server_version);
  response->add_extensions("statistics");
  return FinishNow(context);
}

grpc::ServerUnaryReactor* EchoService::ModelMetadata(grpc::CallbackServerContext* context,
                                                     const inference::ModelMetadataRequest* request,
                                                     inference::ModelMetadataResponse* response) {
  response->set_name(request->name());
  response->add_versions("1");
  response->set_platform("echo");
  inference::ModelMetadataResponse::TensorMetadata* input = response->add_inputs();
  input->set_name(options_.input_name);
  input->set_datatype(options_.datatype);
  for (int64_t dim : options_.metadata_shape) input->add_shape(dim);
  inference::ModelMetadataResponse::TensorMetadata* output = response->add_outputs();
  *output = *input;
  output->set_name(EchoOutputName(options_.input_name));
  return FinishNow(context);
}

grpc::ServerUnaryReactor* EchoService::ModelConfig(grpc::CallbackServerContext* context,
                                                   const inference::ModelConfigRequest* request,
                                                   inference::ModelConfigResponse* response) {
  inference::ModelConfig* config = response->mutable_config();
  config->set_name(request->name());
  config->set_backend("echo");
  config->set_max_batch_size(static_cast<int32_t>(options_.max_batch_size));
  // Config dims leave out the batch dimension that metadata shows.
  const size_t first_dim = options_.max_batch_size > 0 ? 1 : 0;
  inference::ModelInput* input = config->add_input();
  input->set_name(options_.input_name);
  input->set_data_type(ConfigDataType(options_.datatype));
  inference::ModelOutput* output = config->add_output();
  output->set_name(EchoOutputName(options_.input_name));
  output->set_data_type(input->data_type());
  for (size_t i = first_dim; i < options_.metadata_shape.size(); ++i) {
    input->add_dims(options_.metadata_shape[i]);
    output->add_dims(options_.metadata_shape[i]);
  }
  return FinishNow(context);
}

grpc::ServerUnaryReactor* EchoService::ModelStatistics(
    grpc::CallbackServerContext* context, const inference::ModelStatisticsRequest* request,
    inference::ModelStatisticsResponse* response) {
  // One entry with zero counters: the echo server keeps no statistics, and a client that asks
  // gets well-formed zeros rather than an error.
  if (!request->name().empty()) {
    inference::ModelStatistics* stats = response->add_model_stats();
    stats->set_name(request->name());
    stats->set_version(request->version().empty() ? "1" : request->version());
    stats->mutable_inference_stats();
  }
  return FinishNow(context);
}

grpc::ServerUnaryReactor* EchoService::RepositoryIndex(
    grpc::CallbackServerContext* context, const inference::RepositoryIndexRequest* /*request*/,
    inference::RepositoryIndexResponse* /*response*/) {
  return FinishNow(context);
}

grpc::ServerUnaryReactor* EchoService::ModelInfer(grpc::CallbackServerContext* context,
                                                  const inference::ModelInferRequest* request,
                                                  inference::ModelInferResponse* response) {
  absl::Status echoed = EchoInfer(*request, *response);
  if (!echoed.ok()) {
    return FinishNow(
        context, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::string(echoed.message())));
  }
  return FinishNow(context);
}

grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
EchoService::ModelStreamInfer(grpc::CallbackServerContext* /*context*/) {
  return new StreamReactor(static_cast<size_t>(options_.max_stream_pending));
}

}  // namespace sluice::loadtest
