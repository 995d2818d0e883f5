#include "engine/models/encoder/encoder_kernels.h"

#include <cstdlib>
#include <cstring>

namespace sluice::engine::models::encoder::kernels {
namespace generic {
extern const KernelTable kTable;
}  // namespace generic
#if SLUICE_ENCODER_AVX2
namespace avx2_fma {
extern const KernelTable kTable;
}  // namespace avx2_fma
#endif

const KernelTable& Generic() { return generic::kTable; }

const KernelTable* Avx2Fma() {
#if SLUICE_ENCODER_AVX2
  static const bool supported = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return supported ? &avx2_fma::kTable : nullptr;
#else
  return nullptr;
#endif
}

const KernelTable& Get() {
  static const KernelTable& chosen = []() -> const KernelTable& {
    // SLUICE_ENCODER_KERNELS=generic forces the baseline table (an A/B measurement, or a CPU that
    // reports AVX2 it should not use); anything else keeps the best.
    const char* forced = std::getenv("SLUICE_ENCODER_KERNELS");
    if (forced != nullptr && std::strcmp(forced, "generic") == 0) return Generic();
    return Avx2Fma() != nullptr ? *Avx2Fma() : Generic();
  }();
  return chosen;
}

}  // namespace sluice::engine::models::encoder::kernels
