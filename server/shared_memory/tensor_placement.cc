#include "server/shared_memory/tensor_placement.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/shared_memory/shared_memory_registry.h"

namespace sluice::server::shm {

absl::StatusOr<std::span<const std::byte>> ResolveInput(const SharedMemoryRegistry& registry,
                                                        const TensorRegionRef& ref,
                                                        absl::string_view name,
                                                        engine::DataType dtype, int64_t elements,
                                                        RequestRegions& holder) {
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
  std::span<const std::byte> data;
  if (region->kind() == RegionKind::kSystem) {
    ASSIGN_OR_RETURN(data, region->ReadView(ref.offset, ref.byte_size));
  } else {
    std::vector<std::byte>& staged = holder.staged.emplace_back(ref.byte_size);
    RETURN_IF_ERROR(region->CopyToHost(ref.offset, staged));
    data = staged;  // the vector is not resized again; moving `staged` keeps its buffer
  }
  holder.leases.push_back(std::move(region));
  return data;
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
