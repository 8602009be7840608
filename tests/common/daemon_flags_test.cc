// The daemons' flag parsers (common/daemon_flags.h, common/host_port.h, common/device.h) and exit
// codes (common/exit_code.h): what they accept, and that bad input is rejected with the message
// the daemons print.
#include "common/daemon_flags.h"

#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/device.h"
#include "common/exit_code.h"
#include "common/host_port.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

ABSL_FLAG(absl::Duration, test_timeout, absl::Seconds(30), "a Duration flag");
ABSL_FLAG(bool, test_switch, true, "a bool flag");
ABSL_FLAG(std::string, test_address, "", "a string flag");

namespace pp::common {
namespace {

// argv for ParseDaemonFlags: "prog" and `args`, kept alive by the vector of strings.
class Argv {
 public:
  explicit Argv(std::vector<std::string> args) : strings_(std::move(args)) {
    strings_.insert(strings_.begin(), "prog");
    for (std::string& s : strings_) pointers_.push_back(s.data());
    pointers_.push_back(nullptr);
  }
  int argc() const { return static_cast<int>(strings_.size()); }
  char** argv() { return pointers_.data(); }

 private:
  std::vector<std::string> strings_;
  std::vector<char*> pointers_;
};

absl::Status ParseError(std::vector<std::string> args) {
  Argv a(std::move(args));
  return ParseDaemonFlags(a.argc(), a.argv());
}

TEST(ParseDaemonFlagsTest, BadFlagsAreUsageErrorsWithOneLine) {
  const absl::Status bare = ParseError({"--test_timeout=30"});
  EXPECT_EQ(bare.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bare.message()),
              ::testing::StartsWith("bad value '30' for --test_timeout"));
  EXPECT_EQ(ExitCodeFor(bare), kExitUsage);

  const absl::Status separate = ParseError({"--test_timeout", "5"});  // value as the next token
  EXPECT_THAT(std::string(separate.message()),
              ::testing::StartsWith("bad value '5' for --test_timeout"));

  EXPECT_EQ(ParseError({"--no_such_flag=1"}).message(), "unknown flag --no_such_flag (see --help)");
  EXPECT_EQ(ParseError({"-no_such_flag"}).message(), "unknown flag --no_such_flag (see --help)");
  EXPECT_EQ(ParseError({"--notest_address"}).message(),
            "unknown flag --notest_address (see --help)");
  EXPECT_THAT(std::string(ParseError({"--test_switch=maybe"}).message()),
              ::testing::StartsWith("bad value 'maybe' for --test_switch"));
  EXPECT_EQ(ParseError({"--test_address"}).message(),
            "flag --test_address needs a value (see --help)");
}

// One test, as absl::ParseCommandLine sets the flags for the rest of the process.
TEST(ParseDaemonFlagsTest, SetsGoodFlagsAndRefusesPositionals) {
  Argv good({"--test_timeout=1500ms", "--notest_switch", "-test_address", "h:1"});
  ASSERT_TRUE(ParseDaemonFlags(good.argc(), good.argv()).ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_test_timeout), absl::Milliseconds(1500));
  EXPECT_FALSE(absl::GetFlag(FLAGS_test_switch));
  EXPECT_EQ(absl::GetFlag(FLAGS_test_address), "h:1");

  const absl::Status stray = ParseError({"--test_switch", "stray"});
  EXPECT_EQ(stray.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(stray.message(), "unexpected argument \"stray\" (see --help)");
  EXPECT_EQ(ParseError({"--", "--test_switch"}).message(),
            "unexpected argument \"--test_switch\" (see --help)");
}

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
  for (const char* device : {"", "gpu", "CPU", "cuda", "cuda:", "cuda:x", "cuda:-1", "cuda:+1",
                             "cuda:1 ", "cuda:0x1", "cuda:1:2", "cuda:9999999999", " cpu"}) {
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
