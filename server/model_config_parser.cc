#include "server/model_config_parser.h"

#include <algorithm>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/echo.h"
#include "common/status_macros.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace sluice::server {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// Collects the text parser's errors with their positions.
class CollectingErrors final : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    errors_.push_back(absl::StrCat("line ", line + 1, ", column ", column + 1, ": ", message));
  }
  void AddWarning(int line, int column, const std::string& message) override {}
  const std::vector<std::string>& errors() const { return errors_; }

 private:
  std::vector<std::string> errors_;
};

// Fields sluice implements, per message type (full name). A set field outside its message's list
// is an error: a config that asks for sequence batching or an ensemble must not load as something
// else. Messages not listed here accept no fields at all.
const std::map<std::string, std::set<std::string>>& SupportedFields() {
  static const auto* fields = new std::map<std::string, std::set<std::string>>{
      {"inference.ModelConfig",
       {"name", "backend", "platform", "max_batch_size", "input", "output", "dynamic_batching",
        "instance_group", "optimization", "parameters", "version_policy"}},
      {"inference.ModelInput", {"name", "data_type", "dims"}},
      {"inference.ModelOutput", {"name", "data_type", "dims"}},
      {"inference.ModelDynamicBatching",
       {"max_queue_delay_microseconds", "preferred_batch_size", "default_queue_policy",
        "priority_levels", "default_priority_level", "priority_queue_policy"}},
      {"inference.ModelDynamicBatching.PriorityQueuePolicyEntry", {"key", "value"}},
      {"inference.ModelQueuePolicy",
       {"max_queue_size", "default_timeout_microseconds", "allow_timeout_override",
        "timeout_action"}},
      {"inference.ModelInstanceGroup", {"name", "count", "kind", "gpus"}},
      {"inference.ModelOptimizationPolicy", {"cuda"}},
      {"inference.ModelOptimizationPolicy.Cuda", {"graphs"}},
      {"inference.ModelParameter", {"string_value"}},
      {"inference.ModelParameters", {"key", "value"}},  // map entries
      {"inference.ModelConfig.ParametersEntry", {"key", "value"}},
      {"inference.ModelVersionPolicy", {"latest", "all", "specific"}},
      {"inference.ModelVersionPolicy.Latest", {"num_versions"}},
      {"inference.ModelVersionPolicy.All", {}},
      {"inference.ModelVersionPolicy.Specific", {"versions"}},
  };
  return *fields;
}

absl::Status CheckSupported(const Message& message, const std::string& path) {
  const Reflection* reflection = message.GetReflection();
  std::vector<const FieldDescriptor*> set_fields;
  reflection->ListFields(message, &set_fields);
  const std::string& type = message.GetDescriptor()->full_name();
  const auto& supported = SupportedFields();
  auto it = supported.find(type);
  for (const FieldDescriptor* field : set_fields) {
    const std::string field_path =
        path.empty() ? field->name() : absl::StrCat(path, ".", field->name());
    if (it == supported.end() || it->second.count(field->name()) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("field '", field_path, "' is not supported by sluice"));
    }
    if (field->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) continue;
    if (field->is_repeated()) {
      for (int i = 0; i < reflection->FieldSize(message, field); ++i) {
        RETURN_IF_ERROR(CheckSupported(reflection->GetRepeatedMessage(message, field, i),
                                       absl::StrCat(field_path, "[", i, "]")));
      }
    } else {
      RETURN_IF_ERROR(CheckSupported(reflection->GetMessage(message, field), field_path));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<engine::TensorSpec> ToTensorSpec(
    const std::string& name, inference::DataType type,
    const google::protobuf::RepeatedField<int64_t>& dims, absl::string_view kind) {
  engine::TensorSpec spec;
  if (name.size() > kMaxConfigNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat(kind, " name '", common::EchoInput(name),
                                                   "' is longer than ", kMaxConfigNameBytes,
                                                   " bytes"));
  }
  spec.name = name;
  spec.dtype = FromProtoDataType(type);
  if (spec.dtype == engine::DataType::kInvalid) {
    return absl::InvalidArgumentError(absl::StrCat(
        kind, " '", name, "': data_type ", inference::DataType_Name(type), " is not supported"));
  }
  spec.dims.assign(dims.begin(), dims.end());
  return spec;
}

// One ModelQueuePolicy; `where` names it in errors.
absl::StatusOr<engine::QueuePolicyConfig> ToQueuePolicy(const inference::ModelQueuePolicy& policy,
                                                        const std::string& where) {
  if (policy.timeout_action() != inference::ModelQueuePolicy::REJECT) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".timeout_action: only REJECT is supported"));
  }
  if (policy.default_timeout_microseconds() > engine::kMaxQueueTimeoutUs) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".default_timeout_microseconds ",
                                                   policy.default_timeout_microseconds(),
                                                   " is over a year"));
  }
  engine::QueuePolicyConfig config;
  config.max_queue_size = policy.max_queue_size();
  config.default_timeout = std::chrono::microseconds(policy.default_timeout_microseconds());
  config.allow_timeout_override = policy.allow_timeout_override();
  return config;
}

}  // namespace

engine::DataType FromProtoDataType(inference::DataType type) {
  using engine::DataType;
  switch (type) {
    case inference::TYPE_BOOL:
      return DataType::kBool;
    case inference::TYPE_UINT8:
      return DataType::kUint8;
    case inference::TYPE_UINT16:
      return DataType::kUint16;
    case inference::TYPE_UINT32:
      return DataType::kUint32;
    case inference::TYPE_UINT64:
      return DataType::kUint64;
    case inference::TYPE_INT8:
      return DataType::kInt8;
    case inference::TYPE_INT16:
      return DataType::kInt16;
    case inference::TYPE_INT32:
      return DataType::kInt32;
    case inference::TYPE_INT64:
      return DataType::kInt64;
    case inference::TYPE_FP16:
      return DataType::kFp16;
    case inference::TYPE_BF16:
      return DataType::kBf16;
    case inference::TYPE_FP32:
      return DataType::kFp32;
    case inference::TYPE_FP64:
      return DataType::kFp64;
    case inference::TYPE_STRING:
      return DataType::kBytes;
    default:
      return DataType::kInvalid;
  }
}

inference::DataType ToProtoDataType(engine::DataType type) {
  using engine::DataType;
  switch (type) {
    case DataType::kBool:
      return inference::TYPE_BOOL;
    case DataType::kUint8:
      return inference::TYPE_UINT8;
    case DataType::kUint16:
      return inference::TYPE_UINT16;
    case DataType::kUint32:
      return inference::TYPE_UINT32;
    case DataType::kUint64:
      return inference::TYPE_UINT64;
    case DataType::kInt8:
      return inference::TYPE_INT8;
    case DataType::kInt16:
      return inference::TYPE_INT16;
    case DataType::kInt32:
      return inference::TYPE_INT32;
    case DataType::kInt64:
      return inference::TYPE_INT64;
    case DataType::kFp16:
      return inference::TYPE_FP16;
    case DataType::kBf16:
      return inference::TYPE_BF16;
    case DataType::kFp32:
      return inference::TYPE_FP32;
    case DataType::kFp64:
      return inference::TYPE_FP64;
    case DataType::kBytes:
      return inference::TYPE_STRING;
    case DataType::kInvalid:
      return inference::TYPE_INVALID;
  }
  return inference::TYPE_INVALID;
}

absl::StatusOr<inference::ModelConfig> ParseModelConfigText(const std::string& text,
                                                            const std::string& source) {
  inference::ModelConfig config;
  google::protobuf::TextFormat::Parser parser;
  CollectingErrors errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, &config)) {
    // The parser's messages quote the text they stopped at, which can be any size.
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": ",
        errors.errors().empty()
            ? std::string("not a valid ModelConfig text")
            : common::EchoInput(absl::StrJoin(errors.errors(), "; "), common::kMaxMessageBytes)));
  }
  return config;
}

absl::StatusOr<engine::ModelConfig> ToEngineModelConfig(const inference::ModelConfig& proto,
                                                        const std::string& model_dir_name,
                                                        const engine::LoadLimits& limits) {
  auto fail = [&](const absl::Status& status) {
    return absl::InvalidArgumentError(absl::StrCat("model '", common::EchoInput(model_dir_name),
                                                   "' config.pbtxt: ", status.message()));
  };
  if (absl::Status status = CheckSupported(proto, ""); !status.ok()) return fail(status);

  engine::ModelConfig config;
  config.name = proto.name().empty() ? model_dir_name : proto.name();
  if (config.name != model_dir_name) {
    return fail(absl::InvalidArgumentError(absl::StrCat("name '", common::EchoInput(proto.name()),
                                                        "' differs from its folder name '",
                                                        common::EchoInput(model_dir_name), "'")));
  }
  if (proto.backend().size() > kMaxConfigNameBytes ||
      proto.platform().size() > kMaxConfigNameBytes) {
    return fail(absl::InvalidArgumentError(absl::StrCat(
        "backend '", common::EchoInput(proto.backend()), "' / platform '",
        common::EchoInput(proto.platform()), "' is longer than ", kMaxConfigNameBytes, " bytes")));
  }
  config.backend = proto.backend();
  if (config.backend.empty()) {
    return fail(absl::InvalidArgumentError(
        proto.platform().empty()
            ? std::string("no backend set (for example backend: \"simple\")")
            : absl::StrCat("platform '", proto.platform(),
                           "' is not supported; set backend to a sluice backend")));
  }
  config.max_batch_size = proto.max_batch_size();
  for (const auto& input : proto.input()) {
    absl::StatusOr<engine::TensorSpec> spec =
        ToTensorSpec(input.name(), input.data_type(), input.dims(), "input");
    if (!spec.ok()) return fail(spec.status());
    config.inputs.push_back(*std::move(spec));
  }
  for (const auto& output : proto.output()) {
    absl::StatusOr<engine::TensorSpec> spec =
        ToTensorSpec(output.name(), output.data_type(), output.dims(), "output");
    if (!spec.ok()) return fail(spec.status());
    config.outputs.push_back(*std::move(spec));
  }
  if (proto.has_dynamic_batching()) {
    const auto& db = proto.dynamic_batching();
    engine::DynamicBatchingConfig batching;
    batching.max_queue_delay = std::chrono::microseconds(db.max_queue_delay_microseconds());
    batching.preferred_batch_sizes.assign(db.preferred_batch_size().begin(),
                                          db.preferred_batch_size().end());
    config.dynamic_batching = batching;
    absl::StatusOr<engine::QueuePolicyConfig> policy =
        ToQueuePolicy(db.default_queue_policy(), "dynamic_batching.default_queue_policy");
    if (!policy.ok()) return fail(policy.status());
    config.queue_policy = *policy;
    // uint64 in the proto; anything above the engine's bound is refused by its validation.
    auto level = [](uint64_t value) {
      return static_cast<int>(std::min<uint64_t>(value, engine::kMaxPriorityLevels + 1));
    };
    config.priority_levels = level(db.priority_levels());
    config.default_priority_level = level(db.default_priority_level());
    for (const auto& [key, level_policy] : db.priority_queue_policy()) {
      policy = ToQueuePolicy(level_policy,
                             absl::StrCat("dynamic_batching.priority_queue_policy[", key, "]"));
      if (!policy.ok()) return fail(policy.status());
      config.priority_queue_policy[level(key)] = *policy;
    }
  }
  int64_t instances = 0;
  config.instance_kind = engine::InstanceKind::kAuto;
  for (const auto& group : proto.instance_group()) {
    if (group.count() < 0) {
      return fail(absl::InvalidArgumentError(
          absl::StrCat("instance_group count ", group.count(), " is negative")));
    }
    const int count = group.count() == 0 ? 1 : group.count();  // Triton: count defaults to 1
    // Bounded before the per-GPU list below is built (count x gpus entries) and before the sum
    // can overflow: a count of 2^31-1 asked for gigabytes here, 1500 for 3,000 threads later.
    const int64_t group_instances = engine::SaturatingMul(count, std::max(group.gpus_size(), 1));
    instances = engine::SaturatingAdd(instances, group_instances);
    if (instances > limits.max_instances) {
      return fail(absl::InvalidArgumentError(
          absl::StrCat("instance_group count asks for ", instances,
                       " instances, over the limit max_instances = ", limits.max_instances,
                       " (raise it with --max-model-instances)")));
    }
    if (group.gpus_size() > 0) {
      // Triton places `count` instances on each listed GPU.
      for (int gpu : group.gpus()) {
        if (gpu < 0) {
          return fail(absl::InvalidArgumentError(
              absl::StrCat("instance_group gpus lists ", gpu, ", which is negative")));
        }
        for (int i = 0; i < count; ++i) config.instance_gpus.push_back(gpu);
      }
    }
    switch (group.kind()) {
      case inference::ModelInstanceGroup::KIND_CPU:
        config.instance_kind = engine::InstanceKind::kCpu;
        break;
      case inference::ModelInstanceGroup::KIND_GPU:
        config.instance_kind = engine::InstanceKind::kGpu;
        break;
      case inference::ModelInstanceGroup::KIND_AUTO:
        break;
      default:
        return fail(absl::InvalidArgumentError(absl::StrCat(
            "instance_group kind ", inference::ModelInstanceGroup::Kind_Name(group.kind()),
            " is not supported (KIND_AUTO, KIND_CPU or KIND_GPU)")));
    }
  }
  config.instance_count = instances > 0 ? static_cast<int>(instances) : 1;
  // A group without `gpus` among groups with them: its instances go on the engine's device, which
  // the per-instance list cannot say; refuse rather than guess.
  if (!config.instance_gpus.empty() &&
      static_cast<int>(config.instance_gpus.size()) != config.instance_count) {
    return fail(
        absl::InvalidArgumentError("instance_group: either every group lists `gpus` or none does"));
  }
  if (proto.has_optimization() && proto.optimization().has_cuda()) {
    config.cuda_graphs = proto.optimization().cuda().graphs();
  }
  for (const auto& [key, value] : proto.parameters()) {
    if (key.size() > kMaxConfigNameBytes || value.string_value().size() > kMaxConfigValueBytes) {
      return fail(absl::InvalidArgumentError(
          absl::StrCat("parameter '", common::EchoInput(key), "' is longer than ",
                       kMaxConfigNameBytes, " bytes, or its value than ", kMaxConfigValueBytes)));
    }
    config.parameters[key] = value.string_value();
  }
  return config;
}

void ApplyCompletedConfig(const engine::ModelConfig& completed,
                          const std::map<std::string, std::string>& resolved_parameters,
                          inference::ModelConfig& proto) {
  auto fill = [](const engine::TensorSpec& spec, auto* out) {
    out->set_name(spec.name);
    out->set_data_type(ToProtoDataType(spec.dtype));
    out->clear_dims();
    for (int64_t dim : spec.dims) out->add_dims(dim);
  };
  if (static_cast<size_t>(proto.input_size()) != completed.inputs.size()) {
    proto.clear_input();
    for (const auto& spec : completed.inputs) fill(spec, proto.add_input());
  }
  if (static_cast<size_t>(proto.output_size()) != completed.outputs.size()) {
    proto.clear_output();
    for (const auto& spec : completed.outputs) fill(spec, proto.add_output());
  } else {
    // Same list: the backend may have resolved dims the file left as -1.
    for (size_t i = 0; i < completed.outputs.size(); ++i) {
      if (proto.output(static_cast<int>(i)).name() == completed.outputs[i].name) {
        fill(completed.outputs[i], proto.mutable_output(static_cast<int>(i)));
      }
    }
  }
  // The parameters the load resolved (engine::Model::ResolvedParameters: the encoder's
  // `precision: auto` shown as the precision it chose, an absent one as fp32), as Triton's
  // auto-completed config shows resolved values; the others stay the file's. They keep the
  // file's own key rather than a new one, so that a config a client copies back into a file
  // loads (an unknown key is refused), in the same precision: pinned, auto's choice is not made
  // again on another CPU.
  for (const auto& [key, value] : resolved_parameters) {
    (*proto.mutable_parameters())[key].set_string_value(value);
  }
}

}  // namespace sluice::server
