#pragma once

// Tensors in shared memory: what an inference request's `shared_memory_region`,
// `shared_memory_byte_size` and `shared_memory_offset` parameters resolve to. Inputs become
// read-only views into the region's mapping (no copy; an input in a CUDA region becomes a
// reference to device memory that the engine's executor reads, engine::DeviceBytes);
// outputs are written into the client's region when the request completes, and the response then
// carries no bytes for them. Every range is checked, without overflow, against the region and
// against the tensor's declared size before a byte is touched.
//
// Protocol-neutral: the gRPC and HTTP conversion layers parse the parameters in their own wire
// form and call these.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/core/data_type.h"
#include "engine/core/tensor.h"
#include "server/shared_memory/region.h"

namespace sluice::server::shm {

class SharedMemoryRegistry;

// The parameter names, as Triton's clients and perf_analyzer send them.
inline constexpr absl::string_view kRegionParameter = "shared_memory_region";
inline constexpr absl::string_view kByteSizeParameter = "shared_memory_byte_size";
inline constexpr absl::string_view kOffsetParameter = "shared_memory_offset";

// One tensor's place in a region.
struct TensorRegionRef {
  std::string region;
  uint64_t byte_size = 0;
  uint64_t offset = 0;
};

// What a request holds while it runs: a lease on every region it reads or writes (so that an
// unregister cannot unmap them under it). It goes into the request's keep-alive handle, released
// after the request completed. (A CUDA input's DeviceBytes holds its own lease too, which the
// CUDA executor keeps until the batch's device copies are done.)
struct RequestRegions {
  std::vector<std::shared_ptr<Region>> leases;
};

// Places input `view` (its name, dtype and shape set; `elements` elements) at `ref`: a system
// region gives `view.data`, a read-only view into the region's mapping; a CUDA region gives
// `view.device`, the device memory with the region as its keepalive (nothing is copied here: the
// executor reads it). The region's lease is added to `holder`. InvalidArgument, naming the input
// and the region, for an unknown region, a range outside the region, a byte size that is not what
// the declared shape and type need, or a BYTES input in a CUDA region (BYTES framing is checked
// on the host at submit).
absl::Status ResolveInput(const SharedMemoryRegistry& registry, const TensorRegionRef& ref,
                          int64_t elements, engine::TensorView& view, RequestRegions& holder);

// Where one requested output goes; holds the region's lease until the request is answered.
struct OutputPlacement {
  std::string output;
  TensorRegionRef ref;
  std::shared_ptr<Region> region;
};

// The placement of output `name` at `ref`: InvalidArgument for an unknown region or a range
// outside it (the result's own size is checked when it is written).
absl::StatusOr<OutputPlacement> ResolveOutput(const SharedMemoryRegistry& registry,
                                              const TensorRegionRef& ref, absl::string_view name);

// The placement of output `name`, or null.
const OutputPlacement* FindPlacement(const std::vector<OutputPlacement>& placements,
                                     absl::string_view name);

// Writes every output of `outputs` that has a placement into its region, then empties its bytes
// (the response carries none for it). Returns, per output (same order), the bytes written into
// shared memory, or nullopt for an output without a placement. InvalidArgument, naming the
// output, the region and both sizes, if a result is larger than its placement's byte size;
// nothing is written then.
absl::StatusOr<std::vector<std::optional<uint64_t>>> WriteOutputs(
    const std::vector<OutputPlacement>& placements, std::vector<engine::Tensor>& outputs);

}  // namespace sluice::server::shm
