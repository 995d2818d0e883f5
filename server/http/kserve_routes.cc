#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/check.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "nlohmann/json.hpp"
#include "proto/grpc_service.pb.h"
#include "server/http/http_routes.h"
#include "server/http/json_conversion.h"
#include "server/infer_conversion.h"
#include "server/model_config_parser.h"
#include "server/shared_memory/shared_memory_registry.h"
#include "server/status_convert.h"

namespace sluice::server::http {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using nlohmann::json;

HttpResponse Json(int status, const json& body) {
  HttpResponse response;
  response.status = status;
  response.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return response;
}

HttpResponse Error(int status, absl::string_view message) {
  HttpResponse response;
  response.status = status;
  response.body = ErrorJson(message);
  return response;
}

HttpResponse Error(const absl::Status& status) {
  return Error(ToHttpStatusCode(status), status.message());
}

// 200 with no body (health and readiness say yes; load and unload succeeded).
HttpResponse Empty(int status = 200) {
  HttpResponse response;
  response.status = status;
  response.content_type.clear();
  return response;
}

// One field value of `message` as JSON. int64 and uint64 stay numbers (protobuf's own JSON
// printer writes them as strings; Triton's HTTP endpoints write numbers).
json FieldValue(const Message& message, const FieldDescriptor& field, int index);

json MessageToJson(const Message& message) {
  json out = json::object();
  const google::protobuf::Descriptor* descriptor = message.GetDescriptor();
  const Reflection* reflection = message.GetReflection();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor& field = *descriptor->field(i);
    if (field.is_repeated()) {
      const int size = reflection->FieldSize(message, &field);
      if (field.is_map()) {
        json map = json::object();
        for (int j = 0; j < size; ++j) {
          const Message& entry = reflection->GetRepeatedMessage(message, &field, j);
          const FieldDescriptor& key = *entry.GetDescriptor()->field(0);
          const FieldDescriptor& value = *entry.GetDescriptor()->field(1);
          json key_json = FieldValue(entry, key, -1);
          map[key_json.is_string() ? key_json.get<std::string>() : key_json.dump()] =
              FieldValue(entry, value, -1);
        }
        out[field.name()] = std::move(map);
        continue;
      }
      json array = json::array();
      for (int j = 0; j < size; ++j) array.push_back(FieldValue(message, field, j));
      out[field.name()] = std::move(array);
    } else if (field.cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE ||
               field.containing_oneof() != nullptr) {
      if (reflection->HasField(message, &field)) out[field.name()] = FieldValue(message, field, -1);
    } else {
      out[field.name()] = FieldValue(message, field, -1);  // defaults too, as Triton prints them
    }
  }
  return out;
}

json FieldValue(const Message& message, const FieldDescriptor& field, int index) {
  const Reflection* r = message.GetReflection();
  const bool rep = index >= 0;
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return rep ? r->GetRepeatedInt32(message, &field, index) : r->GetInt32(message, &field);
    case FieldDescriptor::CPPTYPE_INT64:
      return rep ? r->GetRepeatedInt64(message, &field, index) : r->GetInt64(message, &field);
    case FieldDescriptor::CPPTYPE_UINT32:
      return rep ? r->GetRepeatedUInt32(message, &field, index) : r->GetUInt32(message, &field);
    case FieldDescriptor::CPPTYPE_UINT64:
      return rep ? r->GetRepeatedUInt64(message, &field, index) : r->GetUInt64(message, &field);
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return rep ? r->GetRepeatedDouble(message, &field, index) : r->GetDouble(message, &field);
    case FieldDescriptor::CPPTYPE_FLOAT:
      return rep ? r->GetRepeatedFloat(message, &field, index) : r->GetFloat(message, &field);
    case FieldDescriptor::CPPTYPE_BOOL:
      return rep ? r->GetRepeatedBool(message, &field, index) : r->GetBool(message, &field);
    case FieldDescriptor::CPPTYPE_ENUM:
      return (rep ? r->GetRepeatedEnum(message, &field, index) : r->GetEnum(message, &field))
          ->name();
    case FieldDescriptor::CPPTYPE_STRING:
      return rep ? r->GetRepeatedString(message, &field, index) : r->GetString(message, &field);
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return MessageToJson(rep ? r->GetRepeatedMessage(message, &field, index)
                               : r->GetMessage(message, &field));
  }
  return nullptr;
}

// A JSON request body that may be empty (then `{}`); InvalidArgument if it is not an object.
absl::StatusOr<json> OptionalJsonObject(const std::string& body) {
  if (body.empty()) return json::object();
  json parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return absl::InvalidArgumentError("request JSON: the body must be a JSON object");
  }
  return parsed;
}

}  // namespace

HttpResponse KServeErrorResponse(const HttpError& error) {
  return Error(error.status, error.message);
}

void HttpRoutes::ServerMetadata(const RouteParams&, HttpRequest&&, Responder respond) {
  json extensions = {"model_repository", "model_configuration", "statistics", "binary_tensor_data"};
  if (options_.shared_memory != nullptr) {
    extensions.push_back("system_shared_memory");
    extensions.push_back("cuda_shared_memory");
  }
  respond(Json(200, {{"name", "sluice"},
                     {"version", options_.server_version},
                     {"extensions", std::move(extensions)}}));
}

// Liveness and readiness as on gRPC (ServingState). A 4xx says no, as the protocol has it.
void HttpRoutes::Live(const RouteParams&, HttpRequest&&, Responder respond) {
  respond(options_.serving->live() ? Empty()
                                   : Error(400,
                                           "server is not live: its gRPC listener stopped "
                                           "accepting, or its device failed (see its log)"));
}

void HttpRoutes::Ready(const RouteParams&, HttpRequest&&, Responder respond) {
  // Only after start-up loading, and not while draining.
  const bool yes = options_.serving->ready() && !engine_->draining();
  respond(yes ? Empty() : Error(400, "server is not ready"));
}

void HttpRoutes::Infer(const std::string& model, const std::string& version, HttpRequest&& request,
                       Responder respond) {
  const auto received = std::chrono::steady_clock::now();
  // Counted from here until the completion below is destroyed: answered, or refused before the
  // engine saw it.
  auto active =
      std::make_shared<const ServingState::ActiveCall>(options_.serving->http_infer_requests());
  // The JSON part is parsed on this (I/O) thread; a large one is refused unparsed.
  if (absl::StatusOr<size_t> json_bytes =
          JsonPartSize(request.body->size(), request.inference_header_content_length);
      json_bytes.ok() && *json_bytes > options_.max_json_bytes) {
    respond(Error(413, absl::StrCat("the JSON part of the request is ", *json_bytes,
                                    " bytes; at most ", options_.max_json_bytes,
                                    " (--http-max-json-bytes). Send large tensors as binary data "
                                    "(Triton's binary tensor extension: binary_data_size and "
                                    "Inference-Header-Content-Length)")));
    return;
  }
  auto encoding = std::make_shared<OutputEncoding>();
  // Runs on the engine's completion thread (or right here if the engine refuses at once): the
  // answer is encoded there and only the write is left to the connection's I/O thread.
  auto on_complete = [respond, encoding, active](absl::StatusOr<engine::InferenceResponse> result) {
    if (!result.ok()) {
      respond(Error(result.status()));
      return;
    }
    absl::StatusOr<EncodedResponse> encoded_or = EncodeResponse(*std::move(result), *encoding);
    if (!encoded_or.ok()) {
      respond(Error(encoded_or.status()));
      return;
    }
    EncodedResponse& encoded = *encoded_or;
    HttpResponse response;
    response.body = std::move(encoded.body);
    if (encoded.header_length.has_value()) {
      response.content_type = "application/octet-stream";
      response.headers.emplace_back("Inference-Header-Content-Length",
                                    absl::StrCat(*encoded.header_length));
    }
    respond(std::move(response));
  };
  absl::StatusOr<std::unique_ptr<engine::InferenceRequest>> converted = ToEngineRequest(
      model, version, std::move(request.body), request.inference_header_content_length,
      std::move(on_complete), encoding.get(), options_.max_json_bytes, options_.shared_memory);
  if (!converted.ok()) {
    respond(Error(converted.status()));
    return;
  }
  (*converted)->received_time = received;
  // A client that closes its connection while the request waits takes it out of the queue
  // unrun, as gRPC's cancellation does (HttpServer watches the socket).
  (*converted)->cancelled = request.client_gone;
  engine_->Submit(*std::move(converted));
}

void HttpRoutes::Model(const std::string& model, const std::string& version_text,
                       const std::string& action, const HttpRequest&, Responder respond) {
  absl::StatusOr<int64_t> version = ParseModelVersion(version_text);
  if (!version.ok()) {
    respond(Error(version.status()));
    return;
  }
  if (action == "ready") {
    respond(engine_->IsModelReady(model, *version)
                ? Empty()
                : Error(400, absl::StrCat("model '", model, "' is not ready")));
    return;
  }
  if (action == "stats") {
    absl::StatusOr<inference::ModelStatisticsResponse> stats =
        StatisticsResponse(*engine_, model, *version);
    if (!stats.ok()) {
      respond(Error(stats.status()));
      return;
    }
    respond(Json(200, MessageToJson(*stats)));
    return;
  }
  absl::StatusOr<engine::Engine::ModelInfo> info = engine_->GetModel(model, *version);
  if (!info.ok()) {
    respond(Error(info.status()));
    return;
  }
  if (action == "config") {
    absl::StatusOr<inference::ModelConfig> config = repository_->GetConfig(model);
    if (!config.ok()) {
      respond(Error(config.status()));
      return;
    }
    ApplyCompletedConfig(*info->config, info->resolved_parameters, *config);
    respond(Json(200, MessageToJson(*config)));
    return;
  }
  // Model metadata.
  const engine::ModelConfig& config = *info->config;
  json versions = json::array();
  for (int64_t v : info->ready_versions) versions.push_back(absl::StrCat(v));
  auto tensors = [&](const std::vector<engine::TensorSpec>& specs) {
    json out = json::array();
    for (const engine::TensorSpec& spec : specs) {
      json shape = json::array();
      if (config.max_batch_size > 0) shape.push_back(-1);
      for (int64_t dim : spec.dims) shape.push_back(dim);
      out.push_back({{"name", spec.name},
                     {"datatype", std::string(engine::DataTypeName(spec.dtype))},
                     {"shape", std::move(shape)}});
    }
    return out;
  };
  respond(Json(200, {{"name", config.name},
                     {"versions", std::move(versions)},
                     {"platform", config.backend},
                     {"inputs", tensors(config.inputs)},
                     {"outputs", tensors(config.outputs)}}));
}

void HttpRoutes::Repository(const std::string& model, const std::string& action,
                            const HttpRequest& request, Responder respond) {
  // These bodies are a few parameters at most; nlohmann builds a node per value with no depth
  // limit, so a large one is refused before it is parsed (on an I/O thread).
  constexpr size_t kMaxRepositoryBodyBytes = 64 * 1024;
  if (request.body->size() > kMaxRepositoryBodyBytes) {
    respond(Error(413, absl::StrCat("repository request body of ", request.body->size(),
                                    " bytes; at most ", kMaxRepositoryBodyBytes)));
    return;
  }
  absl::StatusOr<json> body = OptionalJsonObject(*request.body);
  if (!body.ok()) {
    respond(Error(body.status()));
    return;
  }
  if (action == "index") {
    bool ready_only = false;
    if (auto it = body->find("ready"); it != body->end()) {
      if (!it->is_boolean()) {
        respond(Error(400, "request JSON: 'ready' must be a boolean"));
        return;
      }
      ready_only = it->get<bool>();
    }
    json models = json::array();
    for (const ModelRepository::IndexEntry& entry : repository_->Index(ready_only)) {
      json item = {{"name", entry.name}, {"state", entry.state}};
      if (!entry.version.empty()) item["version"] = entry.version;
      if (!entry.reason.empty()) item["reason"] = entry.reason;
      models.push_back(std::move(item));
    }
    respond(Json(200, models));
    return;
  }
  if (!options_.explicit_model_control) {
    respond(Error(400,
                  "model load/unload needs the server started with --model-control-mode=explicit"));
    return;
  }
  // tritonclient sends {"parameters": {"unload_dependents": false}} with an unload; config or
  // file overrides on a load are what sluice cannot do (as on gRPC).
  if (auto it = body->find("parameters"); it != body->end()) {
    if (!it->is_object()) {
      respond(Error(400, "request JSON: 'parameters' must be an object"));
      return;
    }
    for (const auto& [key, value] : it->items()) {
      if (action == "unload" && key == "unload_dependents") continue;
      respond(Error(400, absl::StrCat("repository ", action, " parameter '", key,
                                      "' (config or file overrides) is not supported by sluice")));
      return;
    }
  }
  if (absl::Status status = ModelRepository::ValidateModelName(model); !status.ok()) {
    respond(Error(status));
    return;
  }
  if (options_.model_control == nullptr) {
    respond(Error(absl::InternalError("model control is not wired to the HTTP front end")));
    return;
  }
  // The same bounded queue as gRPC's load/unload (RESOURCE_EXHAUSTED when full, UNAVAILABLE
  // while draining). An HTTP client that goes away is not seen here: its load still runs.
  const bool load = action == "load";
  absl::Status queued = options_.model_control->Submit(
      {.work = [this, model,
                load] { return load ? repository_->Load(model) : repository_->Unload(model); },
       .answer =
           [respond](const absl::Status& status) {
             respond(status.ok() ? Empty() : Error(status));
           },
       .abandoned = nullptr,
       .what = absl::StrCat(action, " of model '", model, "'")});
  if (!queued.ok()) respond(Error(queued));
}

void HttpRoutes::SharedMemory(bool cuda, const std::string& region, const std::string& action,
                              const HttpRequest& request, Responder respond) {
  const shm::RegionKind kind = cuda ? shm::RegionKind::kCuda : shm::RegionKind::kSystem;
  if (options_.shared_memory == nullptr) {
    respond(Error(501, absl::StrCat("sluice does not serve ", shm::RegionKindName(kind),
                                    " shared memory on this endpoint")));
    return;
  }
  shm::SharedMemoryRegistry& registry = *options_.shared_memory;
  if (action == "status") {
    absl::StatusOr<std::vector<shm::RegionInfo>> regions = registry.Status(kind, region);
    if (!regions.ok()) {
      respond(Error(regions.status()));
      return;
    }
    json out = json::array();
    for (const shm::RegionInfo& info : *regions) {
      if (cuda) {
        out.push_back(
            {{"name", info.name}, {"device_id", info.device_id}, {"byte_size", info.byte_size}});
      } else {
        out.push_back({{"name", info.name},
                       {"key", info.key},
                       {"offset", info.offset},
                       {"byte_size", info.byte_size}});
      }
    }
    respond(Json(200, out));
    return;
  }
  if (action == "unregister") {
    absl::Status status = registry.Unregister(kind, region);
    respond(status.ok() ? Empty() : Error(status));
    return;
  }
  // register: {"key": "/name", "offset": 0, "byte_size": N} (system) or
  // {"raw_handle": {"b64": "..."}, "device_id": 0, "byte_size": N} (CUDA), as tritonclient sends.
  constexpr size_t kMaxRegisterBodyBytes = 64 * 1024;
  if (request.body->size() > kMaxRegisterBodyBytes) {
    respond(Error(413, absl::StrCat("shared-memory register body of ", request.body->size(),
                                    " bytes; at most ", kMaxRegisterBodyBytes)));
    return;
  }
  absl::StatusOr<json> body = OptionalJsonObject(*request.body);
  if (!body.ok()) {
    respond(Error(body.status()));
    return;
  }
  auto unsigned_field = [&](const char* field, bool required) -> absl::StatusOr<uint64_t> {
    auto it = body->find(field);
    if (it == body->end()) {
      if (!required) return 0;
      return absl::InvalidArgumentError(absl::StrCat("request JSON: '", field, "' is missing"));
    }
    if (!it->is_number_unsigned()) {
      return absl::InvalidArgumentError(
          absl::StrCat("request JSON: '", field, "' must be a non-negative integer"));
    }
    return it->get<uint64_t>();
  };
  absl::StatusOr<uint64_t> byte_size = unsigned_field("byte_size", true);
  if (!byte_size.ok()) {
    respond(Error(byte_size.status()));
    return;
  }
  absl::Status status;
  if (!cuda) {
    auto key = body->find("key");
    if (key == body->end() || !key->is_string()) {
      respond(Error(400, "request JSON: 'key' (string) is missing"));
      return;
    }
    absl::StatusOr<uint64_t> offset = unsigned_field("offset", false);
    if (!offset.ok()) {
      respond(Error(offset.status()));
      return;
    }
    status = registry.RegisterSystem(region, key->get<std::string>(), *offset, *byte_size);
  } else {
    auto handle = body->find("raw_handle");
    std::string raw;
    if (handle == body->end() || !handle->is_object() || !handle->contains("b64") ||
        !(*handle)["b64"].is_string() ||
        !absl::Base64Unescape((*handle)["b64"].get<std::string>(), &raw)) {
      respond(Error(400, "request JSON: 'raw_handle' must be {\"b64\": <base64 string>}"));
      return;
    }
    absl::StatusOr<uint64_t> device = unsigned_field("device_id", false);
    if (!device.ok()) {
      respond(Error(device.status()));
      return;
    }
    status = registry.RegisterCuda(
        region,
        std::span<const std::byte>(reinterpret_cast<const std::byte*>(raw.data()), raw.size()),
        static_cast<int64_t>(std::min<uint64_t>(*device, 1u << 20)), *byte_size);
  }
  respond(status.ok() ? Empty() : Error(status));
}

}  // namespace sluice::server::http
