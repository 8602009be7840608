// `ppctl logs` (client/logs_command.h) against an in-process ppcoord and two real in-process
// ppworker daemons whose tasks fail (the job's data file is gone when they start it).
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/job_commands.h"
#include "coordinator/coordinator.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "pp/v1/coordinator.grpc.pb.h"
#include "tests/client/local_coordinator.h"
#include "tests/coordinator/test_support.h"
#include "worker/daemon/daemon.h"

ABSL_DECLARE_FLAG(std::string, coordinator);
ABSL_DECLARE_FLAG(absl::Duration, rpc_timeout);
ABSL_DECLARE_FLAG(int32_t, rank);
ABSL_DECLARE_FLAG(bool, follow);

namespace pp::client {
namespace {

using ::pp::coordinator::testing::WaitUntil;
using ::testing::HasSubstr;
using ::testing::Not;

struct Output {
  int code;
  std::string out;
  std::string err;
};

Output Logs(const std::string& job) {
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const int code = RunJobCommand("logs", {job});
  return Output{code, ::testing::internal::GetCapturedStdout(),
                ::testing::internal::GetCapturedStderr()};
}

// SIGINT is ignored until the command installs its stop signals (once per process: a later test
// in the same process keeps that handler), so a test may send it early.
void IgnoreSigintUntilHandled() {
  struct sigaction current {};
  sigaction(SIGINT, nullptr, &current);
  if (current.sa_handler == SIG_DFL) signal(SIGINT, SIG_IGN);
}

class LogsCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(coordinator_.Start("ppctl_logs_"));
    absl::SetFlag(&FLAGS_coordinator, coordinator_.address());
    absl::SetFlag(&FLAGS_rpc_timeout, absl::Seconds(5));
    absl::SetFlag(&FLAGS_rank, -1);
    absl::SetFlag(&FLAGS_follow, false);
  }
  void TearDown() override {
    for (auto& worker : workers_) worker->Shutdown();
    workers_.clear();
    coordinator_.Stop();
  }

  // A two-rank job that waits QUEUED until workers come (no restarts).
  std::string Submitted() {
    pp::v1::SubmitJobRequest request;
    pp::v1::JobSpec& spec = *request.mutable_spec();
    spec.set_name("tiny");
    spec.set_max_restarts(0);
    spec.mutable_model()->set_vocab_size(256);
    spec.mutable_model()->set_seq_len(16);
    spec.mutable_model()->set_d_model(32);
    spec.mutable_model()->set_n_heads(4);
    spec.mutable_model()->set_n_layers(2);
    spec.mutable_parallel()->set_pipeline(2);
    spec.mutable_parallel()->set_schedule("1f1b");
    spec.mutable_train()->set_steps(2);
    spec.mutable_train()->set_microbatches(4);
    spec.mutable_train()->set_microbatch_size(1);
    spec.mutable_train()->set_lr(1e-3);
    spec.mutable_data()->set_path(coordinator_.corpus);
    pp::v1::SubmitJobResponse response;
    grpc::ClientContext context;
    const grpc::Status status = coordinator_.stub->SubmitJob(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.job_id();
  }

  // Removes the job's data file, then starts workers w0 and w1: each task fails in its set-up.
  void StartFailingWorkers() {
    std::filesystem::remove(coordinator_.corpus);
    for (const char* name : {"w0", "w1"}) {
      daemon::DaemonOptions options;
      options.coordinator = coordinator_.address();
      options.name = name;
      options.comm_timeout = absl::Seconds(5);
      absl::StatusOr<std::unique_ptr<daemon::WorkerDaemon>> worker =
          daemon::WorkerDaemon::Start(options);
      ASSERT_TRUE(worker.ok()) << worker.status();
      workers_.push_back(*std::move(worker));
    }
  }

  pp::v1::JobState State(const std::string& id) {
    pp::v1::GetJobRequest request;
    request.set_job_id(id);
    pp::v1::Job job;
    grpc::ClientContext context;
    EXPECT_TRUE(coordinator_.stub->GetJob(&context, request, &job).ok());
    return job.state();
  }

  // Both workers wrote their task's last line: they are IDLE again, the job FAILED.
  bool Ended(const std::string& id) {
    pp::v1::ListWorkersResponse response;
    grpc::ClientContext context;
    if (!coordinator_.stub->ListWorkers(&context, {}, &response).ok()) return false;
    int idle = 0;
    for (const pp::v1::WorkerInfo& w : response.workers()) idle += w.state() == pp::v1::IDLE;
    return idle == 2 && State(id) == pp::v1::FAILED;
  }

  // Runs `ppctl logs JOB` (with the flags set) on a thread; at most `timeout`, after which it is
  // stopped as by Ctrl-C, and the test fails.
  Output FollowAtMost(
      const std::string& id, absl::Duration timeout,
      const std::function<void()>& meanwhile = [] {}) {
    IgnoreSigintUntilHandled();
    std::future<Output> run = std::async(std::launch::async, [&] { return Logs(id); });
    meanwhile();
    if (run.wait_for(absl::ToChronoSeconds(timeout)) != std::future_status::ready) {
      ADD_FAILURE() << "ppctl logs --follow did not end within " << timeout;
    }
    while (run.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
      kill(getpid(), SIGINT);
    }
    return run.get();
  }

  testing::LocalCoordinator coordinator_;
  std::vector<std::unique_ptr<daemon::WorkerDaemon>> workers_;
};

TEST_F(LogsCommandTest, PrintsEachWorkersLinesAndOneRankWithRank) {
  const std::string id = Submitted();
  ASSERT_NO_FATAL_FAILURE(StartFailingWorkers());
  ASSERT_TRUE(WaitUntil([&] { return Ended(id); }, absl::Seconds(30)));
  Output all = Logs(id);
  ASSERT_EQ(all.code, 0) << all.err;
  EXPECT_THAT(all.err, Not(HasSubstr("ppctl logs:")));
  std::map<int, int> lines_of_rank;
  for (absl::string_view line : absl::StrSplit(all.out, '\n', absl::SkipEmpty())) {
    EXPECT_TRUE(absl::StartsWith(line, "w0 rank ") || absl::StartsWith(line, "w1 rank ")) << line;
    EXPECT_THAT(std::string(line), HasSubstr(" attempt 0 | "));
    ++lines_of_rank[absl::StrContains(line, " rank 1 attempt") ? 1 : 0];
  }
  EXPECT_GE(lines_of_rank[0], 2);
  EXPECT_GE(lines_of_rank[1], 2);
  EXPECT_THAT(all.out, HasSubstr("rank 0 attempt 0 | task started: attempt 0, rank 0 of 2"));
  // Rank 1 fails on the missing file itself, or is aborted first because rank 0 did: its line
  // names the file either way.
  int failed_lines_of_rank_1 = 0;
  for (absl::string_view line : absl::StrSplit(all.out, '\n', absl::SkipEmpty())) {
    if (!absl::StrContains(line, "rank 1 attempt 0 | task failed: ")) continue;
    ++failed_lines_of_rank_1;
    EXPECT_THAT(std::string(line), HasSubstr("spec.data.path: cannot open " + coordinator_.corpus));
  }
  EXPECT_EQ(failed_lines_of_rank_1, 1) << all.out;

  absl::SetFlag(&FLAGS_rank, 1);
  Output one = Logs(id);
  ASSERT_EQ(one.code, 0) << one.err;
  EXPECT_THAT(one.out, HasSubstr("task failed:"));
  for (absl::string_view line : absl::StrSplit(one.out, '\n', absl::SkipEmpty())) {
    EXPECT_TRUE(absl::StrContains(line, " rank 1 attempt 0 | ")) << line;
  }
  EXPECT_EQ(Logs("no-such-job").code, 1);
}

TEST_F(LogsCommandTest, FollowPrintsLinesAsTheyComeAndEndsWhenTheJobEnds) {
  const std::string id = Submitted();
  absl::SetFlag(&FLAGS_follow, true);
  // Following starts while the job is queued; the workers come and fail while it polls.
  Output followed = FollowAtMost(id, absl::Seconds(60), [&] { StartFailingWorkers(); });
  EXPECT_EQ(followed.code, 0) << followed.err;
  EXPECT_EQ(State(id), pp::v1::FAILED);
  EXPECT_THAT(followed.out, HasSubstr("rank 0 attempt 0 | task failed: "));
  EXPECT_THAT(followed.out, HasSubstr("rank 1 attempt 0 | task failed: "));
}

TEST_F(LogsCommandTest, CtrlCStopsFollowingCleanly) {
  const std::string id = Submitted();  // no workers: it stays queued
  absl::SetFlag(&FLAGS_follow, true);
  IgnoreSigintUntilHandled();
  std::future<Output> run = std::async(std::launch::async, [&] { return Logs(id); });
  // Ctrl-C until it stops (ignored until the command installed its stop signals).
  while (run.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
    kill(getpid(), SIGINT);
  }
  const Output stopped = run.get();
  EXPECT_EQ(stopped.code, 0) << stopped.err;
  EXPECT_EQ(stopped.out, "");
  EXPECT_EQ(State(id), pp::v1::QUEUED);
}

}  // namespace
}  // namespace pp::client
