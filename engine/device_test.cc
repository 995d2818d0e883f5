#include "engine/device.h"

#include "gtest/gtest.h"

namespace sluice::engine {
namespace {

TEST(SelectDeviceTest, CpuIsAlwaysTheCpuBackend) {
  absl::StatusOr<DeviceSelection> selection = SelectDevice("cpu");
  ASSERT_TRUE(selection.ok()) << selection.status();
  EXPECT_EQ(selection->kind, DeviceSelection::Kind::kCpu);
  EXPECT_FALSE(selection->description.empty());
}

TEST(SelectDeviceTest, AutoPicksAGpuOrSaysWhyNot) {
  absl::StatusOr<DeviceSelection> selection = SelectDevice("auto");
  ASSERT_TRUE(selection.ok()) << selection.status();
  if (selection->kind == DeviceSelection::Kind::kCpu) {
    // One line that says why: no GPU, or no CUDA in this build.
    EXPECT_NE(selection->description.find("CPU backend"), std::string::npos)
        << selection->description;
  } else {
    EXPECT_EQ(selection->cuda_device, 0);
  }
}

TEST(SelectDeviceTest, RejectsUnknownDevicesAndMissingGpus) {
  EXPECT_TRUE(absl::IsInvalidArgument(SelectDevice("tpu:0").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(SelectDevice("cuda:-1").status()));
  EXPECT_TRUE(absl::IsFailedPrecondition(SelectDevice("cuda:4096").status()));
}

}  // namespace
}  // namespace sluice::engine
