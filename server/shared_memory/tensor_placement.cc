#include "server/shared_memory/tensor_placement.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/core/device_memory.h"
#include "server/shared_memory/shared_memory_registry.h"

namespace sluice::server::shm {

absl::Status ResolveInput(const SharedMemoryRegistry& registry, const TensorRegionRef& ref,
                          int64_t elements, engine::TensorView& view, RequestRegions& holder) {
  const std::string& name = view.name;
  const engine::DataType dtype = view.dtype;
  const std::string what = absl::StrCat("input '", name, "'");
  ASSIGN_OR_RETURN(std::shared_ptr<Region> region, registry.Find(ref.region, what));
  const std::string where = absl::StrCat(what, " in shared-memory region '", ref.region, "' (",
                                         region->byte_size(), " bytes)");
  RETURN_IF_ERROR(CheckRange(where, ref.offset, ref.byte_size, region->byte_size()));
  if (dtype != engine::DataType::kBytes) {
    absl::StatusOr<int64_t> needed = engine::FixedByteSize(dtype, elements);
    if (!needed.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": ", needed.status().message()));
    }
    if (static_cast<uint64_t>(*needed) != ref.byte_size) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": shared_memory_byte_size is ", ref.byte_size, " but ", elements, " ",
                       engine::DataTypeName(dtype), " elements need ", *needed, " bytes (region '",
                       ref.region, "')"));
    }
  }
  if (const engine::ImportedDeviceMemory* memory = region->device_memory(); memory != nullptr) {
    if (dtype == engine::DataType::kBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " is BYTES in CUDA shared-memory region '", ref.region,
          "'; BYTES elements are checked on the host when a request arrives: send it inline or "
          "in system shared memory"));
    }
    // No copy here (the RPC thread never waits for a device): the executor that runs the batch
    // reads the device memory, and the region stays mapped while anything holds this reference.
    view.data = {};
    view.device = engine::DeviceBytes{.memory = memory,
                                      .offset = ref.offset,
                                      .byte_size = ref.byte_size,
                                      .keepalive = std::shared_ptr<const void>(region)};
  } else {
    ASSIGN_OR_RETURN(view.data, region->ReadView(ref.offset, ref.byte_size));
    view.device.reset();
  }
  holder.leases.push_back(std::move(region));
  return absl::OkStatus();
}

absl::StatusOr<OutputPlacement> ResolveOutput(const SharedMemoryRegistry& registry,
                                              const TensorRegionRef& ref, absl::string_view name) {
  const std::string what = absl::StrCat("output '", name, "'");
  ASSIGN_OR_RETURN(std::shared_ptr<Region> region, registry.Find(ref.region, what));
  RETURN_IF_ERROR(CheckRange(absl::StrCat(what, " in shared-memory region '", ref.region, "' (",
                                          region->byte_size(), " bytes)"),
                             ref.offset, ref.byte_size, region->byte_size()));
  return OutputPlacement{.output = std::string(name), .ref = ref, .region = std::move(region)};
}

const OutputPlacement* FindPlacement(const std::vector<OutputPlacement>& placements,
                                     absl::string_view name) {
  for (const OutputPlacement& placement : placements) {
    if (placement.output == name) return &placement;
  }
  return nullptr;
}

absl::StatusOr<std::vector<std::optional<uint64_t>>> WriteOutputs(
    const std::vector<OutputPlacement>& placements, std::vector<engine::Tensor>& outputs) {
  std::vector<std::optional<uint64_t>> written(outputs.size());
  if (placements.empty()) return written;
  // Every size first, so that a result that does not fit leaves every region untouched.
  for (const engine::Tensor& tensor : outputs) {
    const OutputPlacement* placement = FindPlacement(placements, tensor.name);
    if (placement == nullptr) continue;
    if (tensor.data.size() > placement->ref.byte_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("output '", tensor.name, "' is ", tensor.data.size(), " bytes (shape ",
                       engine::ShapeToString(tensor.shape), " ", engine::DataTypeName(tensor.dtype),
                       ") but its shared_memory_byte_size in region '", placement->ref.region,
                       "' is only ", placement->ref.byte_size));
    }
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    engine::Tensor& tensor = outputs[i];
    const OutputPlacement* placement = FindPlacement(placements, tensor.name);
    if (placement == nullptr) continue;
    RETURN_IF_ERROR(placement->region->Write(placement->ref.offset, tensor.data));
    written[i] = tensor.data.size();
    std::vector<std::byte>().swap(tensor.data);
  }
  return written;
}

}  // namespace sluice::server::shm
