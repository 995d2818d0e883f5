#include "loadtest/shared_memory_setup.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace sluice::loadtest {

// One client-side region: the object (unlinked at the end), its mapping, its registration.
struct SharedMemorySetup::Region {
  std::string name;
  std::string key;
  size_t size = 0;
  char* base = nullptr;
  bool registered = false;

  ~Region() {
    if (base != nullptr) munmap(base, size);
    if (!key.empty()) shm_unlink(key.c_str());
  }
};

namespace {

absl::Status Call(const char* what, const std::string& name, const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(
      static_cast<absl::StatusCode>(status.error_code()),
      absl::StrCat(what, " of shared-memory region '", name, "': ", status.error_message()));
}

void SetRegion(google::protobuf::Map<std::string, inference::InferParameter>& parameters,
               const std::string& region, int64_t byte_size, int64_t offset) {
  parameters["shared_memory_region"].set_string_param(region);
  parameters["shared_memory_byte_size"].set_int64_param(byte_size);
  if (offset != 0) parameters["shared_memory_offset"].set_int64_param(offset);
}

}  // namespace

absl::StatusOr<std::unique_ptr<SharedMemorySetup>> SharedMemorySetup::Create(
    std::shared_ptr<grpc::Channel> channel, const inference::ModelMetadataResponse& metadata,
    int64_t output_byte_size, inference::ModelInferRequest& request) {
  if (request.raw_input_contents_size() != request.inputs_size()) {
    return absl::InvalidArgumentError(
        "--shared-memory needs raw inputs (every input in raw_input_contents)");
  }
  std::unique_ptr<SharedMemorySetup> setup(new SharedMemorySetup());
  setup->stub_ = inference::GRPCInferenceService::NewStub(std::move(channel));
  if (request.outputs_size() == 0) {
    for (const auto& output : metadata.outputs()) request.add_outputs()->set_name(output.name());
  }
  const std::string prefix = absl::StrCat("sluice_loadtest_", getpid());
  size_t input_bytes = 0;
  for (const std::string& raw : request.raw_input_contents()) input_bytes += raw.size();
  const size_t output_bytes = static_cast<size_t>(output_byte_size) * request.outputs_size();

  auto make = [&](const std::string& suffix,
                  size_t size) -> absl::StatusOr<std::unique_ptr<Region>> {
    auto region = std::make_unique<Region>();
    region->name = absl::StrCat(prefix, "_", suffix);
    region->key = absl::StrCat("/", region->name);
    region->size = std::max<size_t>(size, 1);
    shm_unlink(region->key.c_str());  // a leftover of a killed run
    const int fd = shm_open(region->key.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
      const int error = errno;
      region->key.clear();
      return absl::InternalError(
          absl::StrCat("shm_open(", prefix, "_", suffix, "): ", std::strerror(error)));
    }
    const bool sized = ftruncate(fd, static_cast<off_t>(region->size)) == 0;
    void* base =
        sized ? mmap(nullptr, region->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    const int error = errno;
    close(fd);
    if (base == MAP_FAILED) {
      return absl::InternalError(
          absl::StrCat("sizing/mapping ", region->key, ": ", std::strerror(error)));
    }
    region->base = static_cast<char*>(base);
    inference::SystemSharedMemoryRegisterRequest reg;
    reg.set_name(region->name);
    reg.set_key(region->key);
    reg.set_byte_size(region->size);
    inference::SystemSharedMemoryRegisterResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (absl::Status status =
            Call("registration", region->name,
                 setup->stub_->SystemSharedMemoryRegister(&context, reg, &response));
        !status.ok()) {
      return status;
    }
    region->registered = true;
    return region;
  };
  absl::StatusOr<std::unique_ptr<Region>> input = make("in", input_bytes);
  if (!input.ok()) return input.status();
  setup->input_ = *std::move(input);
  absl::StatusOr<std::unique_ptr<Region>> output = make("out", output_bytes);
  if (!output.ok()) return output.status();
  setup->output_ = *std::move(output);

  size_t offset = 0;
  for (int i = 0; i < request.inputs_size(); ++i) {
    const std::string& raw = request.raw_input_contents(i);
    std::memcpy(setup->input_->base + offset, raw.data(), raw.size());
    SetRegion(*request.mutable_inputs(i)->mutable_parameters(), setup->input_->name,
              static_cast<int64_t>(raw.size()), static_cast<int64_t>(offset));
    offset += raw.size();
  }
  request.clear_raw_input_contents();
  for (int i = 0; i < request.outputs_size(); ++i) {
    SetRegion(*request.mutable_outputs(i)->mutable_parameters(), setup->output_->name,
              output_byte_size, static_cast<int64_t>(i) * output_byte_size);
  }
  setup->description_ =
      absl::StrCat("system shared memory: inputs ", input_bytes, " B in ", setup->input_->key,
                   ", outputs ", output_byte_size, " B each in ", setup->output_->key);
  return setup;
}

SharedMemorySetup::~SharedMemorySetup() {
  for (Region* region : {input_.get(), output_.get()}) {
    if (region == nullptr || !region->registered) continue;
    inference::SystemSharedMemoryUnregisterRequest request;
    request.set_name(region->name);
    inference::SystemSharedMemoryUnregisterResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    stub_->SystemSharedMemoryUnregister(&context, request, &response);  // best effort at exit
  }
}

}  // namespace sluice::loadtest
