#include "server/shared_memory/shared_memory_registry.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/shared_memory/system_region.h"
#include "server/shared_memory/tensor_placement.h"

namespace sluice::server::shm {
namespace {

using ::testing::HasSubstr;

// A POSIX shared-memory object the test owns, as a client makes one (shm_open + ftruncate +
// mmap), unlinked at the end.
class ClientObject {
 public:
  explicit ClientObject(size_t size, mode_t mode = 0600)
      : key_(absl::StrCat("/sluice_shm_test_", getpid(), "_", counter_++)), size_(size) {
    fd_ = shm_open(key_.c_str(), O_CREAT | O_EXCL | O_RDWR, mode);
    EXPECT_GE(fd_, 0) << std::strerror(errno);
    EXPECT_EQ(ftruncate(fd_, static_cast<off_t>(size)), 0);
    base_ =
        static_cast<std::byte*>(mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0));
    EXPECT_NE(base_, MAP_FAILED);
  }
  ~ClientObject() {
    munmap(base_, size_);
    close(fd_);
    shm_unlink(key_.c_str());
  }
  const std::string& key() const { return key_; }
  std::byte* data() { return base_; }
  void Truncate(size_t size) { ASSERT_EQ(ftruncate(fd_, static_cast<off_t>(size)), 0); }

 private:
  static inline int counter_ = 0;
  std::string key_;
  size_t size_;
  int fd_ = -1;
  std::byte* base_ = nullptr;
};

// The permissions ("r--s", "rw-s") of the mapping that holds `address`, from /proc/self/maps.
std::string MappingPermissions(const void* address) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  const auto target = reinterpret_cast<uintptr_t>(address);
  while (std::getline(maps, line)) {
    std::istringstream in(line);
    std::string range;
    std::string perms;
    in >> range >> perms;
    const size_t dash = range.find('-');
    const uintptr_t begin = std::stoull(range.substr(0, dash), nullptr, 16);
    const uintptr_t end = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (target >= begin && target < end) return perms;
  }
  return "";
}

// ResolveInput for an input `name` of `dtype`: its host view (system regions).
absl::StatusOr<std::span<const std::byte>> ResolveHostInput(
    const SharedMemoryRegistry& registry, const TensorRegionRef& ref, absl::string_view name,
    engine::DataType dtype, int64_t elements, RequestRegions& holder) {
  engine::TensorView view{.name = std::string(name), .dtype = dtype};
  absl::Status status = ResolveInput(registry, ref, elements, view, holder);
  if (!status.ok()) return status;
  EXPECT_FALSE(view.on_device());
  return view.data;
}

std::vector<float> Floats(std::span<const std::byte> bytes) {
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

TEST(ShmKeyTest, AcceptsPosixNamesOnly) {
  EXPECT_TRUE(ValidateShmKey("/input_simple").ok());
  EXPECT_TRUE(ValidateShmKey("/a.b-c_1").ok());
  for (const char* bad : {"", "/", "name", "/dev/shm/x", "/../etc/passwd", "/..", "/.", "/a b",
                          "/a\nb", "//x", "x/y"}) {
    absl::Status status = ValidateShmKey(bad);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_TRUE(ValidateShmKey("/" + std::string(255, 'k')).ok());
  EXPECT_EQ(ValidateShmKey("/" + std::string(256, 'k')).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateRegionName("").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateRegionName(std::string(256, 'n')).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateRegionName("a\x01").code(), absl::StatusCode::kInvalidArgument);
}

TEST(ShmRangeTest, OverflowIsCaught) {
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  EXPECT_TRUE(CheckRange("r", 0, 16, 16).ok());
  EXPECT_TRUE(CheckRange("r", 16, 0, 16).ok());
  EXPECT_FALSE(CheckRange("r", 1, 16, 16).ok());
  EXPECT_FALSE(CheckRange("r", 17, 0, 16).ok());
  // offset + size wraps to a small number: must still be refused.
  EXPECT_FALSE(CheckRange("r", 8, max - 4, 16).ok());
  EXPECT_FALSE(CheckRange("r", max, 2, 16).ok());
}

TEST(SharedMemoryRegistryTest, RegisterErrorsAreClear) {
  SharedMemoryRegistry registry({.max_regions = 2, .max_mapped_bytes = 1 << 20});
  ClientObject object(4096);
  absl::Status missing = registry.RegisterSystem("r", "/sluice_no_such_object_xyz", 0, 64);
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), HasSubstr("/sluice_no_such_object_xyz"));
  EXPECT_EQ(registry.RegisterSystem("r", "/etc/passwd", 0, 64).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.RegisterSystem("r", object.key(), 0, 0).code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status too_big = registry.RegisterSystem("r", object.key(), 4000, 200);
  EXPECT_EQ(too_big.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_big.message(), HasSubstr("runs past its 4096 bytes"));
  EXPECT_EQ(
      registry.RegisterSystem("r", object.key(), std::numeric_limits<uint64_t>::max(), 2).code(),
      absl::StatusCode::kInvalidArgument);

  ASSERT_TRUE(registry.RegisterSystem("r", object.key(), 0, 4096).ok());
  absl::Status twice = registry.RegisterSystem("r", object.key(), 0, 64);
  EXPECT_EQ(twice.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(twice.message(), HasSubstr("'r' is already registered"));
  ASSERT_TRUE(registry.RegisterSystem("r2", object.key(), 0, 64).ok());
  absl::Status full = registry.RegisterSystem("r3", object.key(), 0, 64);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(full.message(), HasSubstr("--shared-memory-max-regions"));

  EXPECT_EQ(registry.Unregister(RegionKind::kSystem, "nope").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(registry.Unregister(RegionKind::kCuda, "r").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(registry.Status(RegionKind::kSystem, "nope").status().code(),
            absl::StatusCode::kNotFound);
  absl::StatusOr<std::vector<RegionInfo>> all = registry.Status(RegionKind::kSystem, "");
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].name, "r");
  EXPECT_EQ((*all)[0].key, object.key());
  EXPECT_EQ((*all)[0].byte_size, 4096u);
  EXPECT_TRUE(registry.Unregister(RegionKind::kSystem, "").ok());
  EXPECT_EQ(registry.Stats().system_regions, 0);
  EXPECT_EQ(registry.Stats().mapped_bytes, 0u);
}

TEST(SharedMemoryRegistryTest, MappedBytesAreBounded) {
  SharedMemoryRegistry registry({.max_regions = 8, .max_mapped_bytes = 8192});
  ClientObject object(16384);
  ASSERT_TRUE(registry.RegisterSystem("a", object.key(), 0, 8192).ok());
  EXPECT_EQ(registry.Stats().mapped_bytes, 8192u);
  absl::Status over = registry.RegisterSystem("b", object.key(), 8192, 4096);
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(over.message(), HasSubstr("--shared-memory-max-bytes"));
  // An output into "a" needs a second (writable) mapping: past the bound too.
  std::vector<engine::Tensor> outputs(1);
  outputs[0] = {.name = "y", .dtype = engine::DataType::kUint8, .shape = {4}, .data = {}};
  outputs[0].data.resize(4);
  absl::StatusOr<OutputPlacement> placement =
      ResolveOutput(registry, {.region = "a", .byte_size = 4}, "y");
  ASSERT_TRUE(placement.ok());
  EXPECT_EQ(WriteOutputs({*placement}, outputs).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(SharedMemoryRegistryTest, ZeroRegionsTurnsTheExtensionOff) {
  SharedMemoryRegistry registry({.max_regions = 0});
  ClientObject object(4096);
  absl::Status off = registry.RegisterSystem("r", object.key(), 0, 64);
  EXPECT_EQ(off.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(off.message(), HasSubstr("turned off"));
}

TEST(SharedMemoryRegistryTest, InputsAreReadOnlyViewsOutputsAreWritten) {
  SharedMemoryRegistry registry({});
  ClientObject object(3 * 4096);
  // A region that starts mid-page (offset 4100): the mapping starts on the page below.
  const uint64_t offset = 4100;
  ASSERT_TRUE(registry.RegisterSystem("io", object.key(), offset, 64).ok());
  const float values[4] = {1.5f, -2.f, 3.25f, 1e6f};
  std::memcpy(object.data() + offset + 16, values, sizeof(values));

  RequestRegions holder;
  absl::StatusOr<std::span<const std::byte>> view =
      ResolveHostInput(registry, {.region = "io", .byte_size = 16, .offset = 16}, "x",
                       engine::DataType::kFp32, 4, holder);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_THAT(Floats(*view), ::testing::ElementsAre(1.5f, -2.f, 3.25f, 1e6f));
  // Zero-copy: the view points into a mapping of the client's object, and that mapping is
  // read-only (nothing maps a region writable that is only read).
  EXPECT_EQ(MappingPermissions(view->data()), "r--s");
  // The client's later writes are visible through the same view (no copy was taken).
  const float changed = 42.f;
  std::memcpy(object.data() + offset + 16, &changed, sizeof(changed));
  EXPECT_EQ(Floats(*view)[0], 42.f);
  ASSERT_EQ(holder.leases.size(), 1u);
  auto* system = dynamic_cast<SystemRegion*>(holder.leases[0].get());
  ASSERT_NE(system, nullptr);
  EXPECT_FALSE(system->writable_mapped());

  // An output written into the region lands in the client's object.
  std::vector<engine::Tensor> outputs(2);
  outputs[0].name = "y";
  outputs[0].dtype = engine::DataType::kFp32;
  outputs[0].shape = {2};
  outputs[0].data.resize(8);
  std::memcpy(outputs[0].data.data(), values, 8);
  outputs[1].name = "inline";
  outputs[1].data.resize(3);
  absl::StatusOr<OutputPlacement> placement =
      ResolveOutput(registry, {.region = "io", .byte_size = 16, .offset = 40}, "y");
  ASSERT_TRUE(placement.ok()) << placement.status();
  absl::StatusOr<std::vector<std::optional<uint64_t>>> written =
      WriteOutputs({*placement}, outputs);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ((*written)[0], 8u);
  EXPECT_EQ((*written)[1], std::nullopt);
  EXPECT_TRUE(outputs[0].data.empty());
  EXPECT_EQ(outputs[1].data.size(), 3u);
  EXPECT_THAT(Floats(std::span<const std::byte>(object.data() + offset + 40, 8)),
              ::testing::ElementsAre(1.5f, -2.f));
  EXPECT_TRUE(system->writable_mapped());
  // Two mappings of 4 + 64 bytes rounded to the page they start in.
  EXPECT_EQ(registry.Stats().mapped_bytes, 2u * (4 + 64));
}

TEST(SharedMemoryRegistryTest, TensorSizesAreChecked) {
  SharedMemoryRegistry registry({});
  ClientObject object(4096);
  ASSERT_TRUE(registry.RegisterSystem("r", object.key(), 0, 64).ok());
  RequestRegions holder;
  // Region too small for the declared tensor: 32 floats need 128 bytes, the region has 64.
  absl::Status small = ResolveHostInput(registry, {.region = "r", .byte_size = 128}, "x",
                                        engine::DataType::kFp32, 32, holder)
                           .status();
  EXPECT_EQ(small.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(small.message(), HasSubstr("input 'x' in shared-memory region 'r' (64 bytes)"));
  // Byte size that does not match the shape.
  absl::Status mismatch = ResolveHostInput(registry, {.region = "r", .byte_size = 12}, "x",
                                           engine::DataType::kFp32, 4, holder)
                              .status();
  EXPECT_EQ(mismatch.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(mismatch.message(), HasSubstr("4 FP32 elements need 16 bytes"));
  // Offset + size wrapping around.
  EXPECT_EQ(ResolveHostInput(registry, {.region = "r", .byte_size = 16, .offset = ~uint64_t{0} - 7},
                             "x", engine::DataType::kFp32, 4, holder)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status unknown = ResolveHostInput(registry, {.region = "nope", .byte_size = 16}, "x",
                                          engine::DataType::kFp32, 4, holder)
                             .status();
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.message(), HasSubstr("no shared-memory region named 'nope'"));
  EXPECT_TRUE(holder.leases.empty());

  // An output region too small for the result: nothing is written.
  std::memset(object.data(), 0x7f, 64);
  std::vector<engine::Tensor> outputs(1);
  outputs[0].name = "y";
  outputs[0].dtype = engine::DataType::kFp32;
  outputs[0].shape = {8};
  outputs[0].data.resize(32);
  absl::StatusOr<OutputPlacement> placement =
      ResolveOutput(registry, {.region = "r", .byte_size = 16}, "y");
  ASSERT_TRUE(placement.ok());
  absl::Status too_small = WriteOutputs({*placement}, outputs).status();
  EXPECT_EQ(too_small.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_small.message(), HasSubstr("output 'y' is 32 bytes"));
  EXPECT_THAT(too_small.message(), HasSubstr("is only 16"));
  EXPECT_EQ(object.data()[0], std::byte{0x7f});
  EXPECT_EQ(ResolveOutput(registry, {.region = "r", .byte_size = 65}, "y").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SharedMemoryRegistryTest, UnregisterKeepsTheMappingUntilTheLastUserFinishes) {
  SharedMemoryRegistry registry({});
  ClientObject object(4096);
  ASSERT_TRUE(registry.RegisterSystem("r", object.key(), 0, 4096).ok());
  const float value = 7.f;
  std::memcpy(object.data(), &value, sizeof(value));
  RequestRegions in_flight;
  absl::StatusOr<std::span<const std::byte>> view = ResolveHostInput(
      registry, {.region = "r", .byte_size = 4}, "x", engine::DataType::kFp32, 1, in_flight);
  ASSERT_TRUE(view.ok());
  ASSERT_TRUE(registry.Unregister(RegionKind::kSystem, "r").ok());
  // Gone from the table (new requests cannot name it), still mapped for the one in flight.
  EXPECT_EQ(registry.Stats().system_regions, 0);
  EXPECT_EQ(registry.Stats().draining_regions, 1);
  EXPECT_EQ(registry.Stats().mapped_bytes, 4096u);
  EXPECT_EQ(Floats(*view)[0], 7.f);
  EXPECT_EQ(MappingPermissions(view->data()), "r--s");
  RequestRegions later;
  EXPECT_FALSE(ResolveHostInput(registry, {.region = "r", .byte_size = 4}, "x",
                                engine::DataType::kFp32, 1, later)
                   .ok());
  // The name is free again at once; the old mapping is still the request's.
  ASSERT_TRUE(registry.RegisterSystem("r", object.key(), 0, 64).ok());
  EXPECT_EQ(registry.Stats().mapped_bytes, 4096u + 64u);
  const void* address = view->data();
  in_flight = {};  // the request completed
  EXPECT_EQ(registry.Stats().draining_regions, 0);
  EXPECT_EQ(registry.Stats().mapped_bytes, 64u);
  EXPECT_EQ(MappingPermissions(address), "");
}

TEST(SharedMemoryRegistryTest, ShrunkObjectIsRefusedNotTouched) {
  SharedMemoryRegistry registry({});
  ClientObject object(8192);
  ASSERT_TRUE(registry.RegisterSystem("r", object.key(), 4096, 4096).ok());
  object.Truncate(4096);  // reading the region's page now would raise SIGBUS
  RequestRegions holder;
  absl::Status status = ResolveHostInput(registry, {.region = "r", .byte_size = 4}, "x",
                                         engine::DataType::kFp32, 1, holder)
                            .status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("shrank to 4096 bytes"));
}

TEST(SharedMemoryRegistryTest, ReadOnlyObjectCannotReceiveOutputs) {
  SharedMemoryRegistry registry({});
  ClientObject object(4096, 0400);
  if (geteuid() == 0) GTEST_SKIP() << "root opens a 0400 object read-write anyway";
  ASSERT_TRUE(registry.RegisterSystem("ro", object.key(), 0, 64).ok());
  std::vector<engine::Tensor> outputs(1);
  outputs[0].name = "y";
  outputs[0].data.resize(4);
  absl::StatusOr<OutputPlacement> placement =
      ResolveOutput(registry, {.region = "ro", .byte_size = 4}, "y");
  ASSERT_TRUE(placement.ok());
  EXPECT_EQ(WriteOutputs({*placement}, outputs).status().code(),
            absl::StatusCode::kPermissionDenied);
}

// CUDA regions through a fake opener (the real one needs a GPU: tests/gpu).
class FakeDeviceMemory final : public engine::ImportedDeviceMemory {
 public:
  explicit FakeDeviceMemory(uint64_t size) : bytes_(size) {}
  int device() const override { return 0; }
  uint64_t byte_size() const override { return bytes_.size(); }
  const void* device_address() const override { return bytes_.data(); }
  absl::Status CopyToHost(uint64_t offset, std::span<std::byte> out) const override {
    std::memcpy(out.data(), bytes_.data() + offset, out.size());
    ++copies_to_host;
    return absl::OkStatus();
  }
  absl::Status CopyFromHost(uint64_t offset, std::span<const std::byte> data) override {
    std::memcpy(bytes_.data() + offset, data.data(), data.size());
    return absl::OkStatus();
  }

  mutable int copies_to_host = 0;

 private:
  std::vector<std::byte> bytes_;
};

TEST(SharedMemoryRegistryTest, CudaRegionsNeedAGpu) {
  SharedMemoryRegistry cpu_only({.cuda_unavailable_reason = "the server runs on the CPU"});
  const std::vector<std::byte> handle(kCudaIpcHandleBytes);
  absl::Status status = cpu_only.RegisterCuda("g", handle, 0, 64);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("the server runs on the CPU"));

  FakeDeviceMemory* opened = nullptr;
  SharedMemoryRegistry gpu(
      {.open_cuda_ipc = [&opened](std::span<const std::byte>, int, uint64_t size) {
        auto memory = std::make_unique<FakeDeviceMemory>(size);
        opened = memory.get();
        return absl::StatusOr<std::unique_ptr<engine::ImportedDeviceMemory>>(std::move(memory));
      }});
  EXPECT_EQ(gpu.RegisterCuda("g", std::vector<std::byte>(10), 0, 64).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(gpu.RegisterCuda("g", handle, 0, 64).ok());
  ASSERT_NE(opened, nullptr);
  EXPECT_EQ(gpu.Stats().cuda_regions, 1);
  EXPECT_EQ(gpu.Stats().mapped_bytes, 64u);
  EXPECT_EQ(gpu.Unregister(RegionKind::kSystem, "g").code(), absl::StatusCode::kNotFound);
  std::vector<engine::Tensor> outputs(1);
  outputs[0].name = "y";
  outputs[0].dtype = engine::DataType::kFp32;
  outputs[0].shape = {1};
  outputs[0].data.resize(4);
  const float value = 9.5f;
  std::memcpy(outputs[0].data.data(), &value, 4);
  absl::StatusOr<OutputPlacement> placement =
      ResolveOutput(gpu, {.region = "g", .byte_size = 4, .offset = 8}, "y");
  ASSERT_TRUE(placement.ok());
  ASSERT_TRUE(WriteOutputs({*placement}, outputs).ok());

  // An input in a CUDA region is a reference to the device memory, not a copy: resolving it (on
  // the RPC thread) copies nothing; the executor that runs it reads it.
  RequestRegions holder;
  engine::TensorView input{.name = "x", .dtype = engine::DataType::kFp32, .shape = {1}};
  ASSERT_TRUE(
      ResolveInput(gpu, {.region = "g", .byte_size = 4, .offset = 8}, 1, input, holder).ok());
  ASSERT_TRUE(input.on_device());
  EXPECT_TRUE(input.data.empty());
  EXPECT_EQ(opened->copies_to_host, 0);
  EXPECT_EQ(input.device->memory, opened);
  EXPECT_EQ(input.device->offset, 8u);
  EXPECT_EQ(input.device->byte_size, 4u);
  EXPECT_EQ(input.byte_size(), 4u);
  EXPECT_EQ(input.device->device(), 0);
  EXPECT_EQ(input.device->address(), static_cast<const std::byte*>(opened->device_address()) + 8);
  EXPECT_TRUE(engine::ValidateDeviceBytes("x", *input.device).ok());
  float read = 0;
  ASSERT_TRUE(input.device->memory
                  ->CopyToHost(input.device->offset, std::as_writable_bytes(std::span(&read, 1)))
                  .ok());
  EXPECT_EQ(read, 9.5f);

  // BYTES cannot be in a CUDA region (their framing is checked on the host at submit).
  engine::TensorView text{.name = "t", .dtype = engine::DataType::kBytes, .shape = {1}};
  absl::Status bytes = ResolveInput(gpu, {.region = "g", .byte_size = 8}, 1, text, holder);
  EXPECT_EQ(bytes.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bytes.message(), HasSubstr("BYTES in CUDA shared-memory region 'g'"));

  // The region stays mapped while anything holds it: the request's lease, the output placement
  // and the input's own DeviceBytes keepalive (which the CUDA executor keeps until its copies ran).
  ASSERT_TRUE(gpu.Unregister(RegionKind::kCuda, "").ok());
  EXPECT_EQ(gpu.Stats().mapped_bytes, 64u);
  EXPECT_EQ(gpu.Stats().draining_regions, 1);
  holder = {};
  placement->region.reset();
  EXPECT_EQ(gpu.Stats().mapped_bytes, 64u);  // still held by the input's DeviceBytes
  input.device.reset();
  EXPECT_EQ(gpu.Stats().mapped_bytes, 0u);
  EXPECT_EQ(gpu.Stats().draining_regions, 0);
}

}  // namespace
}  // namespace sluice::server::shm
