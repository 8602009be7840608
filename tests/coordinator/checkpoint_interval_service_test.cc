// checkpoint.autoEverySteps through ppcoord in-process with fake workers: the next attempt of an
// auto job after step reports and a failure carries Daly's interval from the measured checkpoint
// cost and the failure rate; a job without the flag keeps its interval.
#include <string>

#include "coordinator/checkpoint_interval.h"
#include "gtest/gtest.h"
#include "pp/v1/coordinator.grpc.pb.h"
#include "tests/coordinator/server_fixture.h"
#include "tests/coordinator/test_support.h"

namespace pp::coordinator {
namespace {

using ::pp::coordinator::testing::FakeWorker;
using ::pp::coordinator::testing::WaitUntil;

class CheckpointIntervalServiceTest : public testing::CoordinatorServerTest {
 protected:
  // Submits a 2-rank job of 1000 steps checkpointing after every 4th, one automatic restart, and
  // waits until workers w1 and w0 (workers_[0] and [1]) hold its first attempt.
  std::string RunningJob(bool auto_every_steps) {
    pp::v1::JobSpec spec = ValidSpec();
    spec.mutable_train()->set_steps(1000);
    spec.mutable_checkpoint()->set_every_steps(4);
    spec.mutable_checkpoint()->set_auto_every_steps(auto_every_steps);
    spec.set_max_restarts(1);
    return RunOnTwoWorkers(spec);
  }

  // Both ranks of attempt 0 report steps 1..12: 2 s each, but 5 s for steps 5 and 9, the steps
  // right after the checkpoints of steps 4 and 8. The reports take milliseconds, so the
  // step_seconds decide (the wall time between steps is shorter).
  void ReportSteps(const std::string& id) {
    for (int step = 1; step <= 12; ++step) {
      for (int rank = 0; rank < 2; ++rank) {
        pp::v1::StepReport report;
        report.set_job_id(id);
        report.set_rank(rank);
        report.set_step(step);
        report.set_step_seconds(step == 5 || step == 9 ? 5.0 : 2.0);
        report.set_busy_seconds(1.0);
        report.set_has_loss(rank == 1);
        report.set_loss(4.0);
        pp::v1::ReportResponse response;
        grpc::ClientContext context;
        ASSERT_TRUE(workers_[0]->registry().ReportStep(&context, report, &response).ok());
        ASSERT_FALSE(response.abort());
      }
    }
  }

  // Rank 1 fails; waits until both workers hold attempt 1, and returns its plan's interval.
  int NextAttemptsEverySteps() {
    FakeWorker& w1 = *workers_[0];
    FakeWorker& w0 = *workers_[1];
    w1.FinishTask(false, "out of memory");
    EXPECT_TRUE(WaitUntil([&] { return w0.tasks().size() == 2 && w1.tasks().size() == 2; },
                          absl::Seconds(10)));
    if (w0.tasks().size() != 2) return -1;
    EXPECT_EQ(w0.tasks().back().attempt(), 1);
    EXPECT_EQ(w1.tasks().back().spec().checkpoint().every_steps(),
              w0.tasks().back().spec().checkpoint().every_steps());
    return w0.tasks().back().spec().checkpoint().every_steps();
  }
};

TEST_F(CheckpointIntervalServiceTest, TheNextAttemptOfAnAutoJobTakesDalysInterval) {
  const std::string id = RunningJob(/*auto_every_steps=*/true);
  // The first attempt: the submitted interval (no cost measured yet).
  EXPECT_EQ(workers_[0]->tasks().back().spec().checkpoint().every_steps(), 4);
  ASSERT_NO_FATAL_FAILURE(ReportSteps(id));

  // C = 5 - 2 = 3 s, step 2 s. One failure over the worker-seconds of attempt 0 (a few at most)
  // with the prior's one per 604800: the worker MTBF is ~302400 s, the 2-worker job's ~151200 s.
  // Daly 2006: sqrt(2 * 3 * 151200) * (1 + sqrt(3 / 302400) / 3 + ...) - 3 = 950.47 s, / 2 s =
  // 475.2 -> 475 steps (the attempt's few worker-seconds move it by ~1e-5).
  const int every = NextAttemptsEverySteps();
  EXPECT_EQ(every, 475);
  FailureRate one_failure;
  one_failure.AddFailure();
  EXPECT_EQ(every, IntervalSteps(3.0, one_failure.JobMtbfSeconds(2), 2.0, 1, 1000));
  // The job's row says so too: GetJob shows the interval of the live attempt.
  EXPECT_EQ(GetJob(id).spec().checkpoint().every_steps(), 475);
  EXPECT_TRUE(GetJob(id).spec().checkpoint().auto_every_steps());
}

TEST_F(CheckpointIntervalServiceTest, AJobWithoutTheFlagKeepsItsInterval) {
  const std::string id = RunningJob(/*auto_every_steps=*/false);
  ASSERT_NO_FATAL_FAILURE(ReportSteps(id));
  EXPECT_EQ(NextAttemptsEverySteps(), 4);
  EXPECT_EQ(GetJob(id).spec().checkpoint().every_steps(), 4);
}

}  // namespace
}  // namespace pp::coordinator
