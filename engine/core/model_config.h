#pragma once

// ModelConfig: what the engine needs to know about a model, as plain structs. The server reads
// Triton's config.pbtxt (protobuf text format) and fills this in; the engine never sees protobuf.

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "engine/core/data_type.h"
#include "engine/core/tensor.h"

namespace sluice::engine {

struct TensorSpec {
  std::string name;
  DataType dtype = DataType::kInvalid;
  // Dimensions without the batch dimension; -1 means "any size".
  Shape dims;
  // A classification output's class names, one per entry of its last dimension (the checkpoint's
  // id2label; Triton's label_filename). Empty: none.
  std::vector<std::string> labels;
};

// Triton's dynamic_batching block.
struct DynamicBatchingConfig {
  // How long the oldest request may wait for a fuller batch. 0: batch what is queued when an
  // instance becomes free.
  std::chrono::microseconds max_queue_delay{0};
  // Batch sizes to flush at once when the queue can form them (largest first).
  std::vector<int> preferred_batch_sizes;
};

// Triton's ModelQueuePolicy: default_queue_policy, or one level's entry in priority_queue_policy.
struct QueuePolicyConfig {
  // Requests (not items) that may wait; 0 means "the engine's default" (never unbounded).
  int64_t max_queue_size = 0;
  // A request that waited this long in the queue fails with DEADLINE_EXCEEDED; 0 = no limit.
  std::chrono::microseconds default_timeout{0};
  // Whether a request's "timeout" parameter replaces default_timeout. A client's gRPC deadline
  // always applies regardless.
  bool allow_timeout_override = false;
};

enum class InstanceKind { kAuto, kCpu, kGpu };

struct RaggedBatchingConfig {
  // Real tokens (the sum of the requests' token_count) per batch at most. A request with more
  // tokens than this alone runs in a batch of its own.
  int64_t max_batch_tokens = 0;
  // The longest sequence the model takes, in tokens, special tokens included (a text is
  // truncated to it; the text APIs report it as their max_input_length). 0: not known.
  int64_t max_sequence_tokens = 0;
};

struct ModelConfig {
  std::string name;
  // Which backend runs it: "simple", "identity", ...
  std::string backend;
  // 0: the model takes no batch dimension; > 0: the first dimension of every input and output is
  // the batch, at most this large.
  int max_batch_size = 0;
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  // Absent: each request runs alone, as Triton's default scheduler does.
  std::optional<DynamicBatchingConfig> dynamic_batching;
  // Sequence models (the encoder): requests of different sequence lengths may share a batch,
  // bounded by max_batch_size sequences and max_batch_tokens real tokens. Absent: requests share
  // a batch only when their shapes match.
  std::optional<RaggedBatchingConfig> ragged_batching;
  // Triton's default_queue_policy: the policy of every priority level that has none of its own.
  QueuePolicyConfig queue_policy;
  // Triton's priority_levels: 0 = one queue, no priorities. Otherwise levels 1..priority_levels,
  // level 1 served first; within a level, arrival order. A level's requests may starve while a
  // higher level always has work (Triton's semantics too).
  int priority_levels = 0;
  // The level of requests that name no priority (or 0, or one above priority_levels, as Triton
  // does). In [1, priority_levels] when priority_levels > 0.
  int default_priority_level = 0;
  // Triton's priority_queue_policy: a level's own queue size and timeouts, by level.
  std::map<int, QueuePolicyConfig> priority_queue_policy;
  // Number of model instances (executors), from instance_group.
  int instance_count = 1;
  InstanceKind instance_kind = InstanceKind::kAuto;
  // The GPU of each instance (instance_count entries), from instance_group's `gpus`: as in Triton,
  // a group places `count` instances on each GPU it lists. Empty: every instance runs on the
  // engine's device. Ignored by the CPU backend.
  std::vector<int> instance_gpus;
  // optimization { cuda { graphs } }: whether the CUDA executor captures one CUDA graph per batch
  // bucket at load and replays it. On unless a `cuda` block says `graphs: false` (the proto's
  // bool has no presence, so an absent block keeps sluice's default). Ignored on the CPU.
  bool cuda_graphs = true;
  // Free-form key/value parameters for the backend.
  std::map<std::string, std::string> parameters;

  const TensorSpec* FindInput(absl::string_view input_name) const;
  const TensorSpec* FindOutput(absl::string_view output_name) const;
};

// Longest queue timeout, from a config or a request's "timeout" parameter: a year. Beyond it a
// queue timeout means nothing, and its microseconds would overflow time-point arithmetic.
inline constexpr uint64_t kMaxQueueTimeoutUs = 365ull * 24 * 3600 * 1000 * 1000;

// Most priority levels a model may declare (each level is a queue of its own).
inline constexpr int kMaxPriorityLevels = 1000;

// Checks the parts every backend relies on: a name, at least one input and output, unique tensor
// names, valid data types, dims >= -1, max_batch_size >= 0, preferred sizes within
// [1, max_batch_size], instance count >= 1, priority levels within
// [0, kMaxPriorityLevels] with the default level and every per-level policy inside them,
// max_batch_tokens >= 1 when ragged_batching is present. Messages
// name the model and the field.
absl::Status ValidateModelConfig(const ModelConfig& config);

}  // namespace sluice::engine
