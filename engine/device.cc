#include "engine/device.h"

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

#if SLUICE_HAVE_CUDA
#include "engine/cuda/device_info.h"
#include "engine/cuda/ipc_memory.h"
#endif

namespace sluice::engine {
namespace {

// Describes the GPUs this process sees, or why it sees none; `count` gets how many.
absl::StatusOr<std::string> ProbeGpus(int* count) {
#if SLUICE_HAVE_CUDA
  absl::StatusOr<std::vector<cuda::DeviceInfo>> devices = cuda::ListDevices();
  if (!devices.ok()) return devices.status();
  *count = static_cast<int>(devices->size());
  std::string text;
  for (const cuda::DeviceInfo& d : *devices) {
    absl::StrAppend(&text, text.empty() ? "" : ", ", "cuda:", d.index, " ", d.name, " (sm_",
                    d.compute_major, d.compute_minor, ", ", d.total_memory_bytes >> 20, " MiB)");
  }
  return text;
#else
  return absl::UnimplementedError("this build has no CUDA support (SLUICE_ENABLE_CUDA=OFF)");
#endif
}

}  // namespace

absl::StatusOr<DeviceSelection> SelectDevice(absl::string_view flag) {
  DeviceSelection selection;
  if (flag == "cpu") {
    selection.description = "device=cpu: models run on the CPU backend";
    return selection;
  }
  int count = 0;
  if (flag == "auto") {
    absl::StatusOr<std::string> gpus = ProbeGpus(&count);
    if (absl::IsNotFound(gpus.status())) {
      // The ordinary case of a machine without a GPU: one calm line, no CUDA error text (which
      // reads like a fault to an operator who never asked for a GPU). --device=cuda:N keeps it.
      selection.description = "device=auto: no GPU found; models run on the CPU backend";
    } else if (!gpus.ok()) {
      // A GPU that is there but unusable (an old driver, a broken install): the detail helps.
      selection.description = absl::StrCat("device=auto: no usable GPU (", gpus.status().message(),
                                           "); models run on the CPU backend");
    } else {
      selection.kind = DeviceSelection::Kind::kCuda;
      selection.cuda_device = 0;
      selection.description = absl::StrCat("device=auto: found ", *gpus,
                                           "; models run on cuda:0 (instance_group gpus may "
                                           "place instances on others)");
    }
    return selection;
  }
  int index = -1;
  if (absl::StartsWith(flag, "cuda:") && absl::SimpleAtoi(flag.substr(5), &index) && index >= 0) {
    absl::StatusOr<std::string> gpus = ProbeGpus(&count);
    if (!gpus.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("--device=", flag, ": no usable GPU (", gpus.status().message(), ")"));
    }
    if (index >= count) {
      return absl::FailedPreconditionError(
          absl::StrCat("--device=", flag, ": this process sees only ", *gpus));
    }
    selection.kind = DeviceSelection::Kind::kCuda;
    selection.cuda_device = index;
    selection.description = absl::StrCat("device=", flag, ": models run on ", *gpus);
    return selection;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--device=", flag, " is not one of auto, cpu, cuda:N"));
}

absl::StatusOr<std::unique_ptr<ImportedDeviceMemory>> OpenCudaIpcMemory(
    std::span<const std::byte> handle, int device, uint64_t byte_size) {
#if SLUICE_HAVE_CUDA
  return cuda::OpenIpcMemory(handle, device, byte_size);
#else
  (void)handle;
  (void)device;
  (void)byte_size;
  return absl::FailedPreconditionError(
      "CUDA shared memory needs a GPU build: this sluice was built without the CUDA backend "
      "(SLUICE_ENABLE_CUDA=OFF)");
#endif
}

}  // namespace sluice::engine
