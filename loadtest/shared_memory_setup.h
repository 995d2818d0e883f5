#pragma once

// --shared-memory system (perf_analyzer's flag): the load tester moves every input of its request
// into one POSIX shared-memory region and places every output in another, registers both with
// the server (SystemSharedMemoryRegister), and sends requests that name them, as perf_analyzer
// does. All concurrent requests share the regions: inputs are only read, and outputs overwrite
// one another, which a load test does not read. The regions are unregistered and unlinked when
// the SharedMemorySetup is destroyed.

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "proto/grpc_service.grpc.pb.h"

namespace sluice::loadtest {

class SharedMemorySetup {
 public:
  // Rewrites `request` (raw_input_contents inputs; outputs as the metadata lists them when the
  // request names none) to use shared memory, each output getting `output_byte_size` bytes.
  // `channel` reaches the server. Errors name the step (shm_open, register) and the server's
  // reason.
  static absl::StatusOr<std::unique_ptr<SharedMemorySetup>> Create(
      std::shared_ptr<grpc::Channel> channel, const inference::ModelMetadataResponse& metadata,
      int64_t output_byte_size, inference::ModelInferRequest& request);
  ~SharedMemorySetup();
  SharedMemorySetup(const SharedMemorySetup&) = delete;
  SharedMemorySetup& operator=(const SharedMemorySetup&) = delete;

  // "system shared memory: inputs 4194304 B in /sluice_lt_123_in, outputs 4194304 B".
  const std::string& description() const { return description_; }

 private:
  struct Region;
  SharedMemorySetup() = default;

  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
  std::unique_ptr<Region> input_;
  std::unique_ptr<Region> output_;
  std::string description_;
};

}  // namespace sluice::loadtest
