// How binaries reach CUDA: only through the plugin libpp_cuda.so, only when a cuda:N device is
// asked for, and with a clear status (never an abort) when the plugin, the driver or the device
// is missing. The loader keeps a loaded plugin for the life of the process, so each case runs in
// a fresh process (a "threadsafe" death test re-executes this binary) with its own
// PP_CUDA_PLUGIN.
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include <unistd.h>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "worker/comm/transport.h"

namespace pp::kernels {
namespace {

// Libraries that only the plugin may bring into a process.
constexpr const char* kCudaLibraries[] = {"libpp_cuda.so", "libcudart.so", "libcublas",
                                          "libnccl.so"};

std::string MappedCudaLibraries() {
  std::ifstream maps("/proc/self/maps");
  std::string line, found;
  while (std::getline(maps, line)) {
    for (const char* name : kCudaLibraries) {
      if (line.find(name) != std::string::npos) found += line + "\n";
    }
  }
  return found;
}

absl::Status ConnectNcclStatus() {
  std::unique_ptr<comm::KvStore> kv = comm::NewMemoryKvStore();
  comm::TransportOptions options;
  options.timeout = absl::Seconds(2);
  return comm::ConnectNccl(*kv, options).status();
}

void UsePlugin(const std::string& path) { ASSERT_EQ(setenv("PP_CUDA_PLUGIN", path.c_str(), 1), 0); }

// Runs `body` in a fresh process; passes when none of its expectations failed. The child's
// gtest output goes to stderr, which EXPECT_EXIT shows when it fails.
template <typename Body>
void InFreshProcess(Body body) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        dup2(STDERR_FILENO, STDOUT_FILENO);
        body();
        std::exit(::testing::Test::HasFailure() ? 1 : 0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(CudaPlugin, CpuPathMapsNoCudaLibrary) {
  InFreshProcess([] {
    auto ops = MakeOps("cpu");
    ASSERT_TRUE(ops.ok()) << ops.status();
    float* x = (*ops)->Alloc(4);
    (*ops)->MatmulForward(x, x, x, nullptr, 2, 2, 2);
    (*ops)->Free(x);
    std::unique_ptr<comm::KvStore> kv = comm::NewMemoryKvStore();
    auto gloo = comm::ConnectGloo(*kv, comm::TransportOptions{});
    ASSERT_TRUE(gloo.ok()) << gloo.status();
    EXPECT_EQ(MappedCudaLibraries(), "");
  });
}

TEST(CudaPlugin, MissingPluginIsAClearError) {
  InFreshProcess([] {
    const std::string path = "/nonexistent/libpp_cuda.so";
    UsePlugin(path);
    auto ops = MakeOps("cuda:0");
    ASSERT_FALSE(ops.ok());
    EXPECT_EQ(ops.status().code(), absl::StatusCode::kUnavailable) << ops.status();
    EXPECT_NE(ops.status().message().find("cuda:0"), std::string::npos) << ops.status();
    EXPECT_NE(ops.status().message().find(path), std::string::npos) << ops.status();
    EXPECT_FALSE(CudaDeviceAvailable());
    const absl::Status nccl = ConnectNcclStatus();
    EXPECT_EQ(nccl.code(), absl::StatusCode::kUnavailable) << nccl;
    EXPECT_NE(nccl.message().find(path), std::string::npos) << nccl;
    EXPECT_TRUE(MakeOps("cpu").ok());
  });
}

TEST(CudaPlugin, UnloadableFileIsAClearError) {
  InFreshProcess([] {
    const std::string path = ::testing::TempDir() + "/not_a_plugin.so";
    std::ofstream(path) << "not an ELF file";
    UsePlugin(path);
    auto ops = MakeOps("cuda:1");
    ASSERT_FALSE(ops.ok());
    EXPECT_EQ(ops.status().code(), absl::StatusCode::kUnavailable) << ops.status();
    EXPECT_NE(ops.status().message().find(path + " does not load"), std::string::npos)
        << ops.status();
    std::remove(path.c_str());
  });
}

TEST(CudaPlugin, AbiMismatchIsRefused) {
  InFreshProcess([] {
    UsePlugin(FAKE_PLUGIN_WRONG_ABI);
    auto ops = MakeOps("cuda:0");
    ASSERT_FALSE(ops.ok());
    EXPECT_EQ(ops.status().code(), absl::StatusCode::kFailedPrecondition) << ops.status();
    EXPECT_NE(ops.status().message().find("ABI version 999"), std::string::npos) << ops.status();
  });
}

TEST(CudaPlugin, PluginStatusesPassThrough) {
  InFreshProcess([] {
    UsePlugin(FAKE_PLUGIN);
    auto ops = MakeOps("cuda:3");
    ASSERT_FALSE(ops.ok());
    EXPECT_EQ(ops.status().code(), absl::StatusCode::kNotFound) << ops.status();
    EXPECT_EQ(ops.status().message(), "fake plugin has no cuda:3");
    EXPECT_FALSE(CudaDeviceAvailable());
    const absl::Status nccl = ConnectNcclStatus();
    EXPECT_EQ(nccl.code(), absl::StatusCode::kUnimplemented) << nccl;
    EXPECT_NE(nccl.message().find("without NCCL"), std::string::npos) << nccl;
  });
}

// The loader sets what the CUDA driver reads when the plugin first initialises it: eager module
// loading always, a hardware queue per stream unless the user chose a number.
TEST(CudaPlugin, LoaderPreparesTheCudaEnvironment) {
  InFreshProcess([] {
    ASSERT_EQ(setenv("CUDA_MODULE_LOADING", "LAZY", 1), 0);
    ASSERT_EQ(unsetenv("CUDA_DEVICE_MAX_CONNECTIONS"), 0);
    UsePlugin(FAKE_PLUGIN);
    EXPECT_FALSE(MakeOps("cuda:0").ok());
    EXPECT_STREQ(std::getenv("CUDA_MODULE_LOADING"), "EAGER");
    EXPECT_STREQ(std::getenv("CUDA_DEVICE_MAX_CONNECTIONS"), "32");
  });
  InFreshProcess([] {
    ASSERT_EQ(setenv("CUDA_DEVICE_MAX_CONNECTIONS", "16", 1), 0);
    UsePlugin(FAKE_PLUGIN);
    EXPECT_FALSE(MakeOps("cuda:0").ok());
    EXPECT_STREQ(std::getenv("CUDA_DEVICE_MAX_CONNECTIONS"), "16");
  });
}

#ifdef REAL_PLUGIN
// The plugin this build made, found the way ppworker finds it (bin/../lib), with no GPU here.
TEST(CudaPlugin, BuiltPluginFailsCleanlyWithoutDevice) {
  InFreshProcess([] {
    ASSERT_EQ(unsetenv("PP_CUDA_PLUGIN"), 0);
    EXPECT_EQ(MappedCudaLibraries(), "");
    auto ops = MakeOps("cuda:0");
    if (ops.ok()) return;  // a device is present: there is no failure to check
    EXPECT_EQ(ops.status().code(), absl::StatusCode::kUnavailable) << ops.status();
    EXPECT_NE(ops.status().message().find("cuda:0: no usable CUDA device"), std::string::npos)
        << ops.status();
    // The status came from the CUDA runtime inside the plugin.
    const std::string mapped = MappedCudaLibraries();
    EXPECT_NE(mapped.find(REAL_PLUGIN), std::string::npos) << mapped;
    EXPECT_NE(mapped.find("libcudart.so"), std::string::npos) << mapped;
    const absl::Status nccl = ConnectNcclStatus();
    EXPECT_EQ(nccl.code(), absl::StatusCode::kFailedPrecondition) << nccl;
    EXPECT_NE(nccl.message().find("cuda:0 not available"), std::string::npos) << nccl;
  });
}
#endif

}  // namespace
}  // namespace pp::kernels
