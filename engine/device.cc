#include "engine/device.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

#if SLUICE_HAVE_CUDA
#include "engine/cuda/device_info.h"
#endif

namespace sluice::engine {
namespace {

// Describes the GPUs this process sees, or why it sees none.
absl::StatusOr<std::string> ProbeGpus() {
#if SLUICE_HAVE_CUDA
  absl::StatusOr<std::vector<cuda::DeviceInfo>> devices = cuda::ListDevices();
  if (!devices.ok()) return devices.status();
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
  if (flag == "auto") {
    absl::StatusOr<std::string> gpus = ProbeGpus();
    if (!gpus.ok()) {
      selection.description = absl::StrCat("device=auto: no usable GPU (", gpus.status().message(),
                                           "); models run on the CPU backend");
    } else {
      selection.description = absl::StrCat("device=auto: found ", *gpus,
                                           ", but the CUDA executor is not built yet; models run "
                                           "on the CPU backend");
    }
    return selection;
  }
  int index = -1;
  if (absl::StartsWith(flag, "cuda:") && absl::SimpleAtoi(flag.substr(5), &index) && index >= 0) {
    absl::StatusOr<std::string> gpus = ProbeGpus();
    if (!gpus.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("--device=", flag, ": no usable GPU (", gpus.status().message(), ")"));
    }
    return absl::UnimplementedError(absl::StrCat(
        "--device=", flag, ": found ", *gpus,
        ", but the CUDA executor is not built yet (use --device=auto or --device=cpu)"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--device=", flag, " is not one of auto, cpu, cuda:N"));
}

}  // namespace sluice::engine
