#include "engine/models/encoder/encoder_kernels.h"

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
  static const KernelTable& best = Avx2Fma() != nullptr ? *Avx2Fma() : Generic();
  return best;
}

}  // namespace sluice::engine::models::encoder::kernels
