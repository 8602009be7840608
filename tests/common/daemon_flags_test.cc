// The daemons' flag parsers (common/host_port.h, common/device.h) and exit codes
// (common/exit_code.h): what they accept, and that bad input is rejected with the message the
// daemons print.
#include "absl/strings/str_cat.h"
#include "common/device.h"
#include "common/exit_code.h"
#include "common/host_port.h"
#include "gtest/gtest.h"

namespace pp::common {
namespace {

TEST(ParseHostPortTest, SplitsAtTheLastColon) {
  absl::StatusOr<HostPort> a = ParseHostPort("127.0.0.1:50051");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 50051);
  EXPECT_EQ(a->ToString(), "127.0.0.1:50051");
  EXPECT_FALSE(a->IsWildcard());

  absl::StatusOr<HostPort> v6 = ParseHostPort("[::1]:0");
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(v6->host, "[::1]");
  EXPECT_EQ(v6->port, 0);

  absl::StatusOr<HostPort> name = ParseHostPort("ppcoord:65535");
  ASSERT_TRUE(name.ok()) << name.status();
  EXPECT_EQ(name->host, "ppcoord");
  EXPECT_EQ(name->port, 65535);
}

TEST(ParseHostPortTest, WildcardHosts) {
  for (const char* address : {"0.0.0.0:9090", "[::]:9090", ":::9090", ":9090"}) {
    absl::StatusOr<HostPort> a = ParseHostPort(address);
    ASSERT_TRUE(a.ok()) << address << ": " << a.status();
    EXPECT_TRUE(a->IsWildcard()) << address;
    EXPECT_EQ(a->port, 9090) << address;
  }
}

TEST(ParseHostPortTest, RejectsBadPortsNamingTheFlag) {
  for (const char* address : {"not-an-address", "host:", "host:port", "host:-1", "host:+80",
                              "host: 80", "host:80 ", "host:65536", "host:123456", ""}) {
    absl::StatusOr<HostPort> a = ParseHostPort(address, "grpc");
    ASSERT_FALSE(a.ok()) << address;
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument) << address;
    EXPECT_EQ(a.status().message(),
              absl::StrCat("--grpc=", address, ": want HOST:PORT (port 0 picks a free port)"));
  }
  absl::StatusOr<HostPort> unnamed = ParseHostPort("nope");
  ASSERT_FALSE(unnamed.ok());
  EXPECT_EQ(unnamed.status().message(),
            "address 'nope': want HOST:PORT (port 0 picks a free port)");
}

TEST(ParseDeviceTest, CpuAndCudaN) {
  absl::StatusOr<Device> cpu = ParseDevice("cpu");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_FALSE(cpu->cuda);
  EXPECT_EQ(cpu->ToString(), "cpu");

  absl::StatusOr<Device> gpu = ParseDevice("cuda:3");
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_TRUE(gpu->cuda);
  EXPECT_EQ(gpu->cuda_index, 3);
  EXPECT_EQ(gpu->ToString(), "cuda:3");

  absl::StatusOr<Device> big = ParseDevice("cuda:4096");  // existence is the plugin's to check
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(big->cuda_index, 4096);
}

TEST(ParseDeviceTest, RejectsOtherSpellingsNamingTheFlag) {
  for (const char* device :
       {"", "gpu", "CPU", "cuda", "cuda:", "cuda:x", "cuda:-1", "cuda:+1", "cuda:1 ", "cuda:0x1",
        "cuda:1:2", "cuda:9999999999", " cpu"}) {
    absl::StatusOr<Device> d = ParseDevice(device, "device");
    ASSERT_FALSE(d.ok()) << device;
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << device;
    EXPECT_EQ(d.status().message(), absl::StrCat("--device=", device, ": want cpu or cuda:N"));
  }
  absl::StatusOr<Device> unnamed = ParseDevice("tpu:0");
  ASSERT_FALSE(unnamed.ok());
  EXPECT_EQ(unnamed.status().message(), "device 'tpu:0': want cpu or cuda:N");
}

TEST(ExitCodeTest, UsageErrorsAreTwoRuntimeFailuresOne) {
  EXPECT_EQ(ExitCodeFor(absl::OkStatus()), 0);
  EXPECT_EQ(ExitCodeFor(ParseHostPort("x", "grpc").status()), kExitUsage);
  EXPECT_EQ(ExitCodeFor(ParseDevice("x", "device").status()), kExitUsage);
  EXPECT_EQ(kExitUsage, 2);
  EXPECT_EQ(ExitCodeFor(absl::UnavailableError("--grpc=h:1: cannot listen")), 1);
  EXPECT_EQ(ExitCodeFor(absl::InternalError("sqlite: disk I/O error")), 1);
  EXPECT_EQ(ExitCodeFor(absl::NotFoundError("no such file")), 1);
}

}  // namespace
}  // namespace pp::common
