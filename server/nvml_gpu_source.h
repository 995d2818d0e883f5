#pragma once

// NvmlGpuSource: GPU memory and utilization for /metrics, read through NVML (libnvidia-ml, which
// comes with the NVIDIA driver, not with the toolkit). Loaded with dlopen at start, so the server
// builds and runs where there is no driver at all; there Open() says why and no sluice_gpu_*
// family is exported.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/metrics_exporter.h"

namespace sluice::server {

class NvmlGpuSource final : public GpuMetricsSource {
 public:
  // Loads libnvidia-ml.so.1 and initializes NVML. Unavailable (naming the library or the failed
  // NVML call) when there is no driver or no GPU.
  static absl::StatusOr<std::unique_ptr<NvmlGpuSource>> Open();
  ~NvmlGpuSource() override;

  // Every GPU NVML sees, in index order. A GPU whose query fails is left out of that sample.
  // Thread-safe (NVML is).
  std::vector<GpuSample> Sample() override;
  int device_count() const { return device_count_; }

 private:
  struct Api;
  NvmlGpuSource(std::unique_ptr<Api> api, int device_count);

  std::unique_ptr<Api> api_;
  const int device_count_;
};

}  // namespace sluice::server
