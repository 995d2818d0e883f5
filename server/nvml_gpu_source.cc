#include "server/nvml_gpu_source.h"

#include <dlfcn.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace sluice::server {
namespace {

// The few NVML declarations used, as nvml.h (NVML's stable C ABI) declares them; declared here so
// that the server builds without the CUDA toolkit's headers.
using nvmlReturn_t = int;
constexpr nvmlReturn_t kNvmlSuccess = 0;
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};
constexpr unsigned int kNvmlUuidBufferSize = 96;

}  // namespace

struct NvmlGpuSource::Api {
  void* library = nullptr;
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  const char* (*error_string)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*device_count)(unsigned int*) = nullptr;
  nvmlReturn_t (*handle_by_index)(unsigned int, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*memory_info)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*uuid)(nvmlDevice_t, char*, unsigned int) = nullptr;

  ~Api() {
    if (library != nullptr) dlclose(library);
  }
  std::string Error(absl::string_view call, nvmlReturn_t code) const {
    return absl::StrCat("NVML ", call,
                        " failed: ", error_string != nullptr ? error_string(code) : "?", " (", code,
                        ")");
  }
};

absl::StatusOr<std::unique_ptr<NvmlGpuSource>> NvmlGpuSource::Open() {
  auto api = std::make_unique<Api>();
  api->library = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (api->library == nullptr) {
    // The common case, a machine without the driver, in plain words; dlerror()'s text only where
    // the library is there but would not load.
    const char* why = dlerror();
    if (why == nullptr || std::strstr(why, "cannot open shared object file") != nullptr) {
      return absl::UnavailableError(
          "no NVIDIA driver here (its libnvidia-ml.so.1 is not installed)");
    }
    return absl::UnavailableError(absl::StrCat("libnvidia-ml.so.1 (NVML) did not load: ", why));
  }
  auto load = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(api->library, name));
    return fn != nullptr;
  };
  if (!load(api->init, "nvmlInit_v2") || !load(api->shutdown, "nvmlShutdown") ||
      !load(api->error_string, "nvmlErrorString") ||
      !load(api->device_count, "nvmlDeviceGetCount_v2") ||
      !load(api->handle_by_index, "nvmlDeviceGetHandleByIndex_v2") ||
      !load(api->memory_info, "nvmlDeviceGetMemoryInfo") ||
      !load(api->utilization, "nvmlDeviceGetUtilizationRates") ||
      !load(api->uuid, "nvmlDeviceGetUUID")) {
    return absl::UnavailableError("libnvidia-ml.so.1 lacks an NVML function sluice uses");
  }
  if (const nvmlReturn_t rc = api->init(); rc != kNvmlSuccess) {
    return absl::UnavailableError(api->Error("nvmlInit_v2", rc));
  }
  unsigned int count = 0;
  if (const nvmlReturn_t rc = api->device_count(&count); rc != kNvmlSuccess) {
    api->shutdown();
    return absl::UnavailableError(api->Error("nvmlDeviceGetCount_v2", rc));
  }
  if (count == 0) {
    api->shutdown();
    return absl::UnavailableError("NVML sees no GPU");
  }
  return std::unique_ptr<NvmlGpuSource>(new NvmlGpuSource(std::move(api), static_cast<int>(count)));
}

NvmlGpuSource::NvmlGpuSource(std::unique_ptr<Api> api, int device_count)
    : api_(std::move(api)), device_count_(device_count) {}

NvmlGpuSource::~NvmlGpuSource() { api_->shutdown(); }

std::vector<GpuSample> NvmlGpuSource::Sample() {
  std::vector<GpuSample> samples;
  for (int i = 0; i < device_count_; ++i) {
    nvmlDevice_t device = nullptr;
    nvmlMemory_t memory{};
    nvmlUtilization_t utilization{};
    char uuid[kNvmlUuidBufferSize] = {};
    if (api_->handle_by_index(static_cast<unsigned int>(i), &device) != kNvmlSuccess ||
        api_->memory_info(device, &memory) != kNvmlSuccess ||
        api_->utilization(device, &utilization) != kNvmlSuccess ||
        api_->uuid(device, uuid, sizeof(uuid)) != kNvmlSuccess) {
      continue;
    }
    samples.push_back(GpuSample{.index = i,
                                .uuid = uuid,
                                .memory_used_bytes = memory.used,
                                .memory_total_bytes = memory.total,
                                .utilization_ratio = utilization.gpu / 100.0});
  }
  return samples;
}

}  // namespace sluice::server
