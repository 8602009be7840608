// The ppcoord binary: address file, health over the network, bad flags, clean exit on SIGTERM, a
// crash's stack in its log, and
// its --policy file: refused at start with its line, read again on SIGHUP.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "pp/v1/coordinator.grpc.pb.h"
#include "tests/coordinator/test_support.h"

extern char** environ;

namespace pp::coordinator {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;

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

// The non-empty lines of `text`.
std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

// Submits a 2-rank job of class `priority` on `data` to the ppcoord at `address` (no security).
grpc::Status SubmitAt(const std::string& address, const std::string& data,
                      const std::string& priority) {
  pp::v1::SubmitJobRequest request;
  pp::v1::JobSpec& spec = *request.mutable_spec();
  spec.set_name("tiny");
  spec.set_priority(priority);
  pp::v1::ModelSpec& m = *spec.mutable_model();
  m.set_vocab_size(256);
  m.set_seq_len(16);
  m.set_d_model(32);
  m.set_n_heads(4);
  m.set_n_layers(4);
  spec.mutable_parallel()->set_pipeline(2);
  spec.mutable_parallel()->set_schedule("1f1b");
  spec.mutable_train()->set_steps(3);
  spec.mutable_train()->set_microbatches(4);
  spec.mutable_train()->set_microbatch_size(2);
  spec.mutable_train()->set_lr(3e-4);
  spec.mutable_data()->set_path(data);
  auto stub = pp::v1::Coordinator::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  pp::v1::SubmitJobResponse response;
  return stub->SubmitJob(&context, request, &response);
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
  std::filesystem::path address_file() const { return dir_ / "addr.json"; }

  // ppcoord on free loopback ports, announcing them in address_file(), with `flags` after.
  std::unique_ptr<Child> StartPpcoord(const std::vector<std::string>& flags = {}) {
    std::vector<std::string> argv = {"ppcoord", "--grpc=127.0.0.1:0", "--metrics=127.0.0.1:0",
                                     absl::StrCat("--data_dir=", (dir_ / "data").string()),
                                     absl::StrCat("--address_file=", address_file().string())};
    argv.insert(argv.end(), flags.begin(), flags.end());
    return std::make_unique<Child>(argv, log());
  }

  // The addresses ppcoord announced, once it did (15 s at most; empty fields before).
  google::protobuf::Struct Addresses() {
    google::protobuf::Struct addresses;
    EXPECT_TRUE(testing::WaitUntil([&] { return std::filesystem::exists(address_file()); },
                                   absl::Seconds(15)))
        << Slurp(log());
    EXPECT_TRUE(
        google::protobuf::util::JsonStringToMessage(Slurp(address_file()), &addresses).ok());
    return addresses;
  }

  std::filesystem::path dir_;
};

TEST_F(PpcoordBinaryTest, WritesItsAddressesServesAndStopsOnSigterm) {
  std::unique_ptr<Child> started = StartPpcoord();
  Child& ppcoord = *started;
  const google::protobuf::Struct addresses = Addresses();
  ASSERT_EQ(addresses.fields().count("grpc"), 1u);
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

// A crash (here SIGABRT, what glibc's heap checks raise) leaves the dying thread's stack in the
// log, and the process still dies of the signal (common/daemon_main.h).
TEST_F(PpcoordBinaryTest, ACrashPrintsItsStackToTheLogAndDiesOfTheSignal) {
  const rlimit no_core{0, 0};  // the child inherits it: no core file left in the test's folder
  ASSERT_EQ(setrlimit(RLIMIT_CORE, &no_core), 0);
  std::unique_ptr<Child> ppcoord = StartPpcoord();
  Addresses();
  ppcoord->Signal(SIGABRT);
  EXPECT_EQ(ppcoord->Wait(absl::Seconds(10)), 128 + SIGABRT);
  const std::string log = Slurp(this->log());
  EXPECT_THAT(log, HasSubstr("*** SIGABRT received;"));
  // The unwinding gets past the handler and libc into the daemon's own frames, by name.
  EXPECT_THAT(log, HasSubstr("pp::common::RunDaemonMain")) << log;
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

TEST_F(PpcoordBinaryTest, ABadPolicyFileStopsItWithOneLineNamingTheFileAndLine) {
  const std::string policy = (dir_ / "policy.txt").string();
  std::ofstream(policy) << "priority_class { name: \"low\" value: 0 }\n"
                           "priority_class { name: \"normal\" value: 100 }\n"
                           "priority_class { name: \"low\" value: 5 }\n";
  Child ppcoord(
      {"ppcoord", "--grpc=127.0.0.1:0", "--metrics=127.0.0.1:0",
       absl::StrCat("--data_dir=", (dir_ / "data").string()), absl::StrCat("--policy=", policy)},
      log());
  EXPECT_EQ(ppcoord.Wait(absl::Seconds(10)), 2);  // a bad file is a usage error
  const std::vector<std::string> lines = Lines(Slurp(log()));
  ASSERT_THAT(lines, SizeIs(1)) << Slurp(log());
  EXPECT_EQ(lines[0], absl::StrCat("ppcoord: --policy=", policy,
                                   ":3: priority_class \"low\" is listed twice"));
}

// SIGHUP reads the file again: a bad edit is refused with its line and the policy in force stays
// (ppcoord serving on), a good one applies (a class it adds is accepted from then on).
TEST_F(PpcoordBinaryTest, SighupReloadsThePolicyAndKeepsItOnABadEdit) {
  const std::string data = (dir_ / "corpus.txt").string();
  std::ofstream(data) << std::string(4096, 'a');
  const std::string policy = (dir_ / "policy.txt").string();
  const std::string classes =
      "priority_class { name: \"low\" value: 0 }\n"
      "priority_class { name: \"normal\" value: 100 }\n"
      "priority_class { name: \"high\" value: 200 }\n";
  std::ofstream(policy) << classes;
  std::unique_ptr<Child> started = StartPpcoord({absl::StrCat("--policy=", policy)});
  Child& ppcoord = *started;
  const google::protobuf::Struct addresses = Addresses();
  ASSERT_EQ(addresses.fields().count("grpc"), 1u);
  const std::string grpc_address = addresses.fields().at("grpc").string_value();
  grpc::Status status = SubmitAt(grpc_address, data, "urgent");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("low, normal, high"));

  std::ofstream(policy) << classes << "priority_class { name: \"urgent\" value: -1 }\n";
  ppcoord.Signal(SIGHUP);
  // One line for both files: the deny-list's outcome, then the policy's.
  const std::string refusal =
      absl::StrCat("ppcoord: SIGHUP: no --deny_certs: nothing to reload; --policy=", policy,
                   ":4: priority_class \"urgent\": value -1 is outside");
  EXPECT_TRUE(testing::WaitUntil([&] { return Slurp(log()).find(refusal) != std::string::npos; },
                                 absl::Seconds(10)))
      << Slurp(log());
  absl::StatusOr<int> health =
      testing::HealthCheck(grpc::CreateChannel(grpc_address, grpc::InsecureChannelCredentials()));
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, 1);
  EXPECT_EQ(SubmitAt(grpc_address, data, "urgent").error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);  // the policy in force stayed
  EXPECT_TRUE(SubmitAt(grpc_address, data, "high").ok());

  std::ofstream(policy) << classes << "priority_class { name: \"urgent\" value: 300 }\n";
  ppcoord.Signal(SIGHUP);
  EXPECT_TRUE(testing::WaitUntil(
      [&] { return Slurp(log()).find("scheduling policy reloaded") != std::string::npos; },
      absl::Seconds(10)))
      << Slurp(log());
  status = SubmitAt(grpc_address, data, "urgent");
  EXPECT_TRUE(status.ok()) << status.error_message();

  ppcoord.Signal(SIGTERM);
  EXPECT_EQ(ppcoord.Wait(absl::Seconds(10)), 0) << Slurp(log());
}

}  // namespace
}  // namespace pp::coordinator
