#include "engine/fault_injection.h"

#include <atomic>
#include <memory>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace sluice::engine {

absl::StatusOr<FaultInjectionSpec> ParseFaultInjectionSpecForTest(absl::string_view full_text) {
  absl::string_view text = full_text;
  FaultInjectionSpec spec;
  // An optional CUDA error name last: "<model>:<n>:cudaError...".
  if (const size_t last = text.rfind(':');
      last != absl::string_view::npos && absl::StartsWith(text.substr(last + 1), "cudaError")) {
    spec.cuda_error = FindCudaErrorCode(text.substr(last + 1));
    if (!spec.cuda_error.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          kFaultInjectionEnvVar, "='", full_text, "': unknown CUDA error '", text.substr(last + 1),
          "' (a name such as cudaErrorIllegalAddress, sticky, or "
          "cudaErrorLaunchOutOfResources, recoverable)"));
    }
    text = text.substr(0, last);
  }
  const size_t colon = text.rfind(':');
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(text.substr(colon + 1), &spec.after_batches) || spec.after_batches < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(kFaultInjectionEnvVar, "='", full_text,
                     "' is not <model>:<after_n_batches>[:<cuda error name>] (a model name, a "
                     "colon, a count >= 0, optionally a colon and a cudaError name)"));
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
    absl::Status fault = absl::InternalError(absl::StrCat(
        kFaultInjectionEnvVar, "=", spec.model, ":", spec.after_batches, " fired in batch ",
        spec.after_batches + 1, " (version ", version, ", instance ", instance, ")",
        spec.cuda_error.has_value()
            ? absl::StrCat(": ", spec.cuda_error->name, " (", spec.cuda_error->code, ", ",
                           spec.cuda_error->sticky ? "sticky: the device context is unusable"
                                                   : "recoverable",
                           ")")
            : std::string()));
    // Classified as engine/cuda/cuda_check.cc classifies a real error of that code.
    if (spec.cuda_error.has_value() && spec.cuda_error->sticky) return MarkProcessFatal(fault);
    return fault;
  };
}

}  // namespace sluice::engine
