#include "engine/cuda/cublaslt_api.h"

#include <dlfcn.h>

#include <atomic>
#include <mutex>

#include "absl/strings/str_cat.h"

namespace sluice::engine::cuda {
namespace {

constexpr char kLibrary[] = "libcublasLt.so.13";

std::atomic<const CublasLtApi*> loaded{nullptr};

template <typename F>
bool Resolve(void* library, const char* name, F* function, std::string* missing) {
  *function = reinterpret_cast<F>(dlsym(library, name));
  if (*function == nullptr) absl::StrAppend(missing, missing->empty() ? "" : ", ", name);
  return *function != nullptr;
}

absl::StatusOr<const CublasLtApi*> Load() {
  // Never closed: the API stays valid for the process's life.
  void* library = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* error = dlerror();
    return absl::FailedPreconditionError(
        absl::StrCat("cannot load ", kLibrary, " (CUDA 13's cuBLASLt, needed by the mlp backend ",
                     "on a GPU): ", error == nullptr ? "unknown error" : error));
  }
  static CublasLtApi api;
  std::string missing;
  Resolve(library, "cublasLtCreate", &api.Create, &missing);
  Resolve(library, "cublasLtDestroy", &api.Destroy, &missing);
  Resolve(library, "cublasLtMatmulDescCreate", &api.MatmulDescCreate, &missing);
  Resolve(library, "cublasLtMatmulDescDestroy", &api.MatmulDescDestroy, &missing);
  Resolve(library, "cublasLtMatmulDescSetAttribute", &api.MatmulDescSetAttribute, &missing);
  Resolve(library, "cublasLtMatrixLayoutCreate", &api.MatrixLayoutCreate, &missing);
  Resolve(library, "cublasLtMatrixLayoutDestroy", &api.MatrixLayoutDestroy, &missing);
  Resolve(library, "cublasLtMatmulPreferenceCreate", &api.MatmulPreferenceCreate, &missing);
  Resolve(library, "cublasLtMatmulPreferenceDestroy", &api.MatmulPreferenceDestroy, &missing);
  Resolve(library, "cublasLtMatmulPreferenceSetAttribute", &api.MatmulPreferenceSetAttribute,
          &missing);
  Resolve(library, "cublasLtMatmulAlgoGetHeuristic", &api.MatmulAlgoGetHeuristic, &missing);
  Resolve(library, "cublasLtMatmul", &api.Matmul, &missing);
  Resolve(library, "cublasLtGetStatusString", &api.GetStatusString, &missing);
  Resolve(library, "cublasLtGetStatusName", &api.GetStatusName, &missing);
  if (!missing.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(kLibrary, " lacks ", missing, " (not CUDA 13's cuBLASLt?)"));
  }
  return &api;
}

}  // namespace

absl::StatusOr<const CublasLtApi*> LoadCublasLt() {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (const CublasLtApi* api = loaded.load(std::memory_order_acquire); api != nullptr) return api;
  absl::StatusOr<const CublasLtApi*> api = Load();
  if (api.ok()) loaded.store(*api, std::memory_order_release);
  return api;
}

const CublasLtApi* LoadedCublasLt() { return loaded.load(std::memory_order_acquire); }

}  // namespace sluice::engine::cuda
