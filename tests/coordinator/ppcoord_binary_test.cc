// The ppcoord binary: address file, health over the network, bad flags, clean exit on SIGTERM.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "tests/coordinator/test_support.h"

extern char** environ;

namespace pp::coordinator {
namespace {

using ::testing::HasSubstr;

// A child process, killed if the test forgets it.
class Child {
 public:
  explicit Child(const std::vector<std::string>& args, const std::string& log) {
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    EXPECT_EQ(posix_spawn(&pid_, PPCOORD_PATH, &actions, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&actions);
  }
  ~Child() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  // Exit status once it ends, or -1 if it is still running after `timeout`.
  int Wait(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return -1;
  }
  void Signal(int signal) { kill(pid_, signal); }

 private:
  pid_t pid_ = -1;
};

std::string Slurp(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class PpcoordBinaryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           absl::StrCat("ppcoord_bin_", ::getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string log() const { return (dir_ / "stderr.txt").string(); }
  std::filesystem::path dir_;
};

TEST_F(PpcoordBinaryTest, WritesItsAddressesServesAndStopsOnSigterm) {
  const std::filesystem::path address_file = dir_ / "addr.json";
  Child ppcoord({"ppcoord", "--grpc=127.0.0.1:0", "--metrics=127.0.0.1:0",
                 absl::StrCat("--data_dir=", (dir_ / "data").string()),
                 absl::StrCat("--address_file=", address_file.string())},
                log());
  ASSERT_TRUE(
      testing::WaitUntil([&] { return std::filesystem::exists(address_file); }, absl::Seconds(15)))
      << Slurp(log());
  google::protobuf::Struct addresses;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(Slurp(address_file), &addresses).ok());
  const std::string grpc_address = addresses.fields().at("grpc").string_value();
  const std::string metrics_address = addresses.fields().at("metrics").string_value();
  EXPECT_THAT(grpc_address, HasSubstr("127.0.0.1:"));
  EXPECT_NE(grpc_address, "127.0.0.1:0");

  absl::StatusOr<int> health =
      testing::HealthCheck(grpc::CreateChannel(grpc_address, grpc::InsecureChannelCredentials()));
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, 1);
  absl::StatusOr<std::string> metrics = testing::HttpGet(metrics_address, "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_THAT(*metrics, HasSubstr("pp_workers{state=\"IDLE\"} 0"));
  EXPECT_TRUE(std::filesystem::exists(dir_ / "data" / "ppcoord.db"));

  ppcoord.Signal(SIGTERM);
  EXPECT_EQ(ppcoord.Wait(absl::Seconds(10)), 0) << Slurp(log());
}

TEST_F(PpcoordBinaryTest, BadFlagsGiveOneLineAndNonZeroExit) {
  {
    Child ppcoord({"ppcoord", "--grpc=127.0.0.1:0", "--metrics=127.0.0.1:0"}, log());
    EXPECT_EQ(ppcoord.Wait(absl::Seconds(10)), 2);  // usage errors exit 2
    EXPECT_THAT(Slurp(log()), HasSubstr("--data_dir"));
  }
  {
    Child ppcoord({"ppcoord", "--grpc=not-an-address", "--metrics=127.0.0.1:0",
                   absl::StrCat("--data_dir=", dir_.string())},
                  log());
    EXPECT_EQ(ppcoord.Wait(absl::Seconds(10)), 2);
    EXPECT_THAT(Slurp(log()), HasSubstr("--grpc"));
  }
  {
    Child ppcoord({"ppcoord", "stray", absl::StrCat("--data_dir=", dir_.string())}, log());
    EXPECT_EQ(ppcoord.Wait(absl::Seconds(10)), 2);
    EXPECT_THAT(Slurp(log()), HasSubstr("stray"));
  }
  {
    Child ppcoord({"ppcoord", "--grpc=127.0.0.1:0", "--metrics=127.0.0.1:0", "--retain_jobs=-3d",
                   absl::StrCat("--data_dir=", dir_.string())},
                  log());
    EXPECT_EQ(ppcoord.Wait(absl::Seconds(10)), 2);
    EXPECT_THAT(Slurp(log()), HasSubstr("--retain_jobs: \"-3d\" is not a retention"));
  }
}

}  // namespace
}  // namespace pp::coordinator
