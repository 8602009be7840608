// The CUDA backend's behaviour where there may be no GPU (CI): asking for a device gives a clear
// status, never an abort, and the presence check agrees with it.
#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "kernels/ops.h"

namespace pp::kernels {
namespace {

TEST(CudaOps, MissingDeviceIsAClearError) {
  if (CudaDeviceAvailable()) GTEST_SKIP() << "a CUDA device is present";
  const auto ops = MakeOps("cuda:0");
  ASSERT_FALSE(ops.ok());
  EXPECT_NE(ops.status().message().find("cuda:0"), std::string::npos) << ops.status();
  // a build without nvcc answers Unavailable too
  EXPECT_EQ(ops.status().code(), absl::StatusCode::kUnavailable) << ops.status();
}

TEST(CudaOps, DeviceIndexOutOfRangeIsRefused) {
  const auto ops = MakeOps("cuda:4096");
  ASSERT_FALSE(ops.ok());
  EXPECT_NE(ops.status().message().find("cuda:4096"), std::string::npos) << ops.status();
}

TEST(CudaOps, PresenceAgreesWithMakeOps) {
  EXPECT_EQ(CudaDeviceAvailable(), MakeOps("cuda:0").ok());
}

TEST(CudaOps, NameNamesTheDevice) {
  if (!CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device";
  const auto ops = MakeOps("cuda:0");
  ASSERT_TRUE(ops.ok()) << ops.status();
  EXPECT_EQ((*ops)->Name(), "cuda:0");
}

}  // namespace
}  // namespace pp::kernels
