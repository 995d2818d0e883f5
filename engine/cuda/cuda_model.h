#pragma once

// CudaModelInstance: one copy of a model on one GPU, as the CUDA executor drives it. It owns its
// weights and scratch on the device; the executor owns the slots' input and output buffers and
// hands them in per batch. Implementations: `simple`, `identity` (fixed dims) and `mlp`
// (cuda_models.cc, cuda_mlp.cc). Sequence models with ragged batches (the encoder,
// cuda_encoder.cc) are a CudaRaggedModel instead (below).
//
// Thread-safety: Enqueue() is called by one thread at a time (the executor's issuing thread, or
// the loader during warm-up and graph capture), always on the same compute stream: the stream
// orders the batches, so scratch is shared by all slots.

#include <cuda_runtime_api.h>

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/backend.h"
#include "engine/core/executor.h"

namespace sluice::engine::cuda {

class CudaModelInstance {
 public:
  virtual ~CudaModelInstance() = default;

  // Enqueues the model's kernels for `rows` rows (one of the buckets given at creation) on
  // `stream`. inputs[i] holds rows x (item bytes of config input i), contiguous, on the device;
  // outputs[o] receives rows x (item bytes of config output o). Only enqueues: no host
  // synchronization and no allocation, so it can be captured into a CUDA graph. INTERNAL (naming
  // the CUDA or cuBLASLt call) if an enqueue fails.
  virtual absl::Status Enqueue(cudaStream_t stream, std::span<const void* const> inputs,
                               std::span<void* const> outputs, int rows) = 0;

  // Whether output 0 is FP32: the counter kernel then counts its non-finite values.
  virtual bool counts_non_finite() const = 0;
};

// The fixed-shape GPU instances, one per backend that has one: each creates the instance of `spec`
// on `device`, ready to Enqueue any row count in `buckets` (cuda_models.cc: simple, identity;
// cuda_mlp.cc: mlp). The backend registry reaches them through cuda_backends.h. Unimplemented when
// the config has no GPU implementation (variable dims, BYTES tensors): the engine then runs that
// model on the CPU backend. Other errors as the CPU backend's CreateModel, or INTERNAL /
// RESOURCE_EXHAUSTED for a CUDA failure.
using CudaInstanceFactory = absl::StatusOr<std::unique_ptr<CudaModelInstance>> (*)(
    const ModelSpec& spec, int device, std::span<const int> buckets);
absl::StatusOr<std::unique_ptr<CudaModelInstance>> CreateCudaSimpleInstance(
    const ModelSpec& spec, int device, std::span<const int> buckets);
absl::StatusOr<std::unique_ptr<CudaModelInstance>> CreateCudaIdentityInstance(
    const ModelSpec& spec, int device, std::span<const int> buckets);
absl::StatusOr<std::unique_ptr<CudaModelInstance>> CreateCudaMlpInstance(
    const ModelSpec& spec, int device, std::span<const int> buckets);

// Unimplemented naming the first tensor of `config` the CUDA backend cannot run as fixed rows.
absl::Status CheckFixedShapes(const ModelConfig& config);

// One CUDA graph bucket of a ragged model: batches of at most `sequences` sequences holding at
// most `tokens` real tokens.
struct RaggedBucket {
  int sequences = 0;
  int64_t tokens = 0;
};

// What a ragged model keeps on the host about the batch in one slot (its packing, its requests'
// shapes) from Pack to Scatter. One per slot, owned by the executor.
class RaggedBatchState {
 public:
  virtual ~RaggedBatchState() = default;
  // The bucket Pack chose.
  int bucket = -1;
  // Real sequences and tokens of the batch.
  int sequences = 0;
  int64_t tokens = 0;
};

// A byte range of a slot's output block.
struct BlockRange {
  size_t offset = 0;
  size_t bytes = 0;
};

// A ragged (sequence) model on the GPU: requests of different lengths share a batch as packed
// tokens, no padding rows (the encoder: cuda_encoder.cc). The executor owns the slots, streams,
// graphs, events and counters; the model says how a batch lies in a slot's input and output
// blocks, packs it on the host, enqueues its kernels for a bucket (capturable: the real lengths
// are read from the input block on the device) and scatters each request's own outputs.
//
// Every input block begins with two int32: the batch's real sequence and token counts (the
// executor's counter kernel reads them there, so the tokens counted are the ones the device saw).
//
// Thread-safety: Pack, OutputRanges and Enqueue on the executor's issuing thread (or the loader),
// Scatter on its completion thread, each on its own slot's state; the model's device scratch is
// shared by all slots, ordered by the one compute stream.
class CudaRaggedModel {
 public:
  virtual ~CudaRaggedModel() = default;
  // Ascending; the last holds a full batch (max_batch_size sequences, max_batch_tokens tokens).
  virtual const std::vector<RaggedBucket>& buckets() const = 0;
  // Bytes of a slot's input / output block at `bucket`.
  virtual size_t input_bytes(int bucket) const = 0;
  virtual size_t output_bytes(int bucket) const = 0;
  virtual std::unique_ptr<RaggedBatchState> NewBatchState() const = 0;
  // Packs `batch` into `staging` (pinned, at least input_bytes(largest bucket)) for the smallest
  // bucket that holds it, recorded in `state`. Host only. InvalidArgument when no bucket holds it
  // (a lone request above the largest bucket: the batcher lets one through alone), naming the
  // request's tokens and the limit; INTERNAL for a request the model's validation should have
  // refused.
  virtual absl::Status Pack(const Batch& batch, RaggedBatchState& state, void* staging) = 0;
  // An empty batch of `bucket` (zero sequences) in `staging`, for the warm-up at load.
  virtual void PackEmpty(int bucket, RaggedBatchState& state, void* staging) = 0;
  // The ranges of the output block to copy back for the batch in `state`: the outputs some
  // request wants, their real rows only.
  virtual void OutputRanges(const RaggedBatchState& state,
                            std::vector<BlockRange>& ranges) const = 0;
  // Enqueues the forward pass for `bucket` on `stream`, reading `inputs` (the slot's device
  // input block) and writing `outputs` (its device output block). Only enqueues: no host
  // synchronization, no allocation, so it can be captured into a CUDA graph. INTERNAL (naming the
  // call) if an enqueue fails.
  virtual absl::Status Enqueue(cudaStream_t stream, const void* inputs, void* outputs,
                               int bucket) = 0;
  // One response per request of `batch`, from `outputs` (the slot's pinned copy of the output
  // block, where OutputRanges landed). INTERNAL on an inconsistency (a fault).
  virtual absl::Status Scatter(const Batch& batch, const RaggedBatchState& state,
                               const void* outputs,
                               std::vector<InferenceResponse>& responses) const = 0;
  // The FP32 range of the output block the counter kernel scans for non-finite values for the
  // batch in `state` (bytes 0: none).
  virtual BlockRange NonFiniteRange(const RaggedBatchState& state) const = 0;
  // One line for the load log: precision, buckets, which fused epilogues cuBLASLt refused on this
  // GPU, device memory.
  virtual std::string Summary() const = 0;
};

// The ragged GPU implementation of `model` (already loaded by the CPU backend's factory: its
// weights are read from there, not again) on `device`. Unimplemented when the backend has none or
// the model's shape is one the kernels do not run (a head size other than 16/32/64/128...): the
// engine then runs the model on the CPU backend. InvalidArgument for bad GPU parameters;
// INTERNAL / RESOURCE_EXHAUSTED for a CUDA failure.
absl::StatusOr<std::unique_ptr<CudaRaggedModel>> CreateCudaRaggedModel(const Model& model,
                                                                       int device);

// Bytes of one item (one row) of `tensor`: its fixed dims times its element size. Unimplemented
// for variable dims or BYTES, which the CUDA backend does not run.
absl::StatusOr<size_t> FixedItemBytes(const TensorSpec& tensor);

}  // namespace sluice::engine::cuda
