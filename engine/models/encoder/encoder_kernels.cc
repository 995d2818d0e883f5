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
namespace avx512 {
extern const KernelTable kTable;
}  // namespace avx512
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

const KernelTable* Avx512() {
#if SLUICE_ENCODER_AVX2
  static const bool supported = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
  return supported ? &avx512::kTable : nullptr;
#else
  return nullptr;
#endif
}

const KernelTable& Get() {
  static const KernelTable& chosen = []() -> const KernelTable& {
    const KernelTable* best = Avx512() != nullptr ? Avx512() : Avx2Fma();
    if (best == nullptr) best = &Generic();
    // SLUICE_ENCODER_KERNELS=generic|avx2-fma|avx512f forces that table where the CPU has it (an
    // A/B measurement, or a CPU that reports instructions it should not use); anything else, or a
    // table the CPU lacks, keeps the best.
    const char* forced = std::getenv("SLUICE_ENCODER_KERNELS");
    if (forced != nullptr) {
      for (const KernelTable* table : {Avx512(), Avx2Fma(), &Generic()}) {
        if (table != nullptr && std::strcmp(forced, table->name) == 0) return *table;
      }
    }
    return *best;
  }();
  return chosen;
}

}  // namespace sluice::engine::models::encoder::kernels
