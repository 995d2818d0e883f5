#pragma once

// Test-only fault injection: the hook behind SLUICE_TEST_FAULT_INJECT, which lets integration
// tests drive the executor fault path (ExecutorOptions::on_fault) through the real server on any
// build, CPU included. Nothing here runs unless that variable is set: the server reads it once at
// start-up and logs a warning that says fault injection is armed. Never set it in production.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/core/device_fault.h"

namespace sluice::engine {

// The environment variable the server reads: "<model>:<after_n_batches>[:<cuda error name>]".
inline constexpr char kFaultInjectionEnvVar[] = "SLUICE_TEST_FAULT_INJECT";

struct FaultInjectionSpec {
  // The model whose executor faults (every version and instance count towards the batches).
  std::string model;
  // Batches of that model that run normally first; the next one faults. Fires once per process,
  // so a reload of the model recovers for good.
  int64_t after_batches = 0;
  // The CUDA error the fault stands for (engine/core/device_fault.h), e.g. cudaErrorIllegalAddress:
  // a sticky one makes the fault process-fatal (the server drains and exits non-zero), a
  // recoverable one (or none) faults only the instance. The same on every build.
  std::optional<CudaErrorCode> cuda_error;
};

// Parses "<model>:<after_n_batches>[:<cuda error name>]" (after_n_batches >= 0; the name one of
// FindCudaErrorCode's). InvalidArgument names the variable and what is wrong.
absl::StatusOr<FaultInjectionSpec> ParseFaultInjectionSpecForTest(absl::string_view text);

// An EngineOptions::before_batch_for_test hook for `spec`: returns OK for every batch except the
// (after_batches + 1)-th batch of `spec.model` since the hook was made, for which it returns an
// error naming the hook, the model, version and instance. Thread-safe (an atomic count).
std::function<absl::Status(absl::string_view model, int64_t version, int instance)>
MakeFaultInjectionHookForTest(FaultInjectionSpec spec);

}  // namespace sluice::engine
