// ppcoord in-process with fake workers whose Calibrate answers fixed figures
// (test_support.h): a parallel.schedule "auto" job's trial steps report messages that wait 50 ms,
// which the calibration's 10 us link did not show; the refit finds fewer chunks shorter at the
// same M, and the job re-plans once, from its refitted calibration (no second Calibrate), at
// the next checkpoint.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordinator/server_fixture.h"
#include "tests/coordinator/test_support.h"

namespace pp::coordinator {
namespace {

using ::pp::coordinator::testing::WaitUntil;
using ::testing::HasSubstr;

class TrialTest : public testing::CoordinatorServerTest {
 protected:
  // Both ranks report `step` (rank 0 first): rank 0 sends stage 0's activation at 1 ms, rank 1 waits for it
  // from 0 and has it at 51 ms; the step takes 60 ms. The coordinator's stop_after_step answer
  // to rank 1.
  int ReportStep(const std::string& id, int attempt, int step) {
    int stop = 0;
    for (int rank : {0, 1}) {
      pp::v1::StepReport report;
      report.set_job_id(id);
      report.set_attempt(attempt);
      report.set_rank(rank);
      report.set_step(step);
      report.set_step_seconds(0.06);
      report.set_busy_seconds(0.001);
      report.set_has_loss(rank == 1);
      report.set_loss(5);
      pp::v1::TimedAction* a = report.mutable_trace()->add_actions();
      a->mutable_action()->set_kind(rank == 0 ? pp::v1::SEND_ACTIVATION : pp::v1::RECV_ACTIVATION);
      a->mutable_action()->set_stage(rank);
      a->set_start(0);
      a->set_end(rank == 0 ? 0.001 : 0.051);
      pp::v1::ReportResponse response;
      grpc::ClientContext context;
      EXPECT_TRUE(workers_[0]->registry().ReportStep(&context, report, &response).ok());
      EXPECT_FALSE(response.abort());
      stop = response.stop_after_step();
    }
    return stop;
  }
};

TEST_F(TrialTest, SlowMessagesInTheTrialRePlanOnceFromTheRefittedCalibration) {
  pp::v1::JobSpec spec = ValidSpec();
  spec.mutable_parallel()->set_schedule("auto");
  spec.mutable_train()->set_steps(20);
  spec.mutable_train()->set_microbatches(4);
  spec.mutable_train()->set_microbatch_size(1);
  std::string id;
  ASSERT_TRUE(Submit(spec, &id).ok());
  AddWorker("w0");
  AddWorker("w1");
  ASSERT_TRUE(workers_[0]->WaitForTask(absl::Seconds(10)));
  ASSERT_TRUE(workers_[1]->WaitForTask(absl::Seconds(10)));
  const pp::v1::Job first = GetJob(id);
  // Free messages: more chunks shrink the bubble.
  ASSERT_GT(first.spec().parallel().chunks(), 1) << first.plan().chosen();

  for (int step = 1; step <= 3; ++step) EXPECT_EQ(ReportStep(id, 0, step), 0) << step;
  // Step 4 ends the trial (steps 2..4): the 50 ms waits make every extra chunk's messages cost.
  // The report that completes a step was answered before the step's check.
  ReportStep(id, 0, 4);
  pp::v1::Job job = GetJob(id);
  ASSERT_TRUE(job.plan().calibration().has_trial()) << job.plan().ShortDebugString();
  EXPECT_NEAR(job.plan().calibration().trial().latency_seconds(), 0.05, 1e-3);
  EXPECT_THAT(job.plan().reason(), HasSubstr("\ntrial steps to 4: "));
  EXPECT_GT(job.plan().predicted_step_seconds(), job.plan().first_predicted_step_seconds());

  EXPECT_EQ(ReportStep(id, 0, 5), 5);
  Checkpoint(id, /*attempt=*/0, /*step=*/5, /*ranks=*/2);
  for (auto& worker : workers_) {
    worker->FinishTask(true, "", absl::StatusCode::kInternal, /*drained=*/true);
  }
  ASSERT_TRUE(WaitUntil(
      [&] { return workers_[0]->tasks().size() == 2 && workers_[1]->tasks().size() == 2; },
      absl::Seconds(10)));
  job = GetJob(id);
  EXPECT_EQ(job.plan().replans(), 1);
  EXPECT_TRUE(job.plan().calibration().cached());
  EXPECT_EQ(workers_[0]->calibrations() + workers_[1]->calibrations(), 2);  // the first only
  EXPECT_LT(job.spec().parallel().chunks(), first.spec().parallel().chunks())
      << first.plan().chosen() << " -> " << job.plan().chosen();
  EXPECT_EQ(job.spec().train().microbatches(), first.spec().train().microbatches());
  EXPECT_EQ(job.start_step(), 5);
  EXPECT_EQ(job.restarts(), 0);
  ASSERT_EQ(job.restart_log_size(), 1);
  EXPECT_THAT(job.restart_log(0).reason(), HasSubstr("trial steps: "));
  EXPECT_THAT(job.restart_log(0).reason(), HasSubstr("re-planning from the checkpoint of step 5"));
  EXPECT_EQ(workers_[0]->tasks().back().start_step(), 5);
}

}  // namespace
}  // namespace pp::coordinator
