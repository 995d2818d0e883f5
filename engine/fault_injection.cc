#include "engine/fault_injection.h"

#include <atomic>
#include <memory>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace sluice::engine {

absl::StatusOr<FaultInjectionSpec> ParseFaultInjectionSpecForTest(absl::string_view text) {
  const size_t colon = text.rfind(':');
  FaultInjectionSpec spec;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(text.substr(colon + 1), &spec.after_batches) || spec.after_batches < 0) {
    return absl::InvalidArgumentError(absl::StrCat(kFaultInjectionEnvVar, "='", text,
                                                   "' is not <model>:<after_n_batches> (a model "
                                                   "name, a colon, a count >= 0)"));
  }
  spec.model = std::string(text.substr(0, colon));
  return spec;
}

std::function<absl::Status(absl::string_view model, int64_t version, int instance)>
MakeFaultInjectionHookForTest(FaultInjectionSpec spec) {
  auto batches = std::make_shared<std::atomic<int64_t>>(0);
  return [spec = std::move(spec), batches](absl::string_view model, int64_t version,
                                           int instance) -> absl::Status {
    if (model != spec.model) return absl::OkStatus();
    // Exactly one batch sees the count equal to after_batches, whatever the instances' races.
    if (batches->fetch_add(1, std::memory_order_relaxed) != spec.after_batches) {
      return absl::OkStatus();
    }
    return absl::InternalError(absl::StrCat(
        kFaultInjectionEnvVar, "=", spec.model, ":", spec.after_batches, " fired in batch ",
        spec.after_batches + 1, " (version ", version, ", instance ", instance, ")"));
  };
}

}  // namespace sluice::engine
