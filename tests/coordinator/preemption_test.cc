// ppcoord in-process on a shared cluster (docs/jobs.md "Priorities, quotas and preemption"), with
// bearer tokens for owners and fake workers: preemption at a checkpoint (stop step,
// EVENT_PREEMPTED, requeue, the preempting job placed), the preemption grace, and the jobs never
// preempted (same class, preemptible: false) or preempted because they borrow past their owner's
// quota. Quotas, priority classes, policy reloads and fair share: shared_cluster_test.cc.
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordinator/shared_cluster_fixture.h"
#include "tests/coordinator/test_support.h"

namespace pp::coordinator {
namespace {

using ::pp::coordinator::testing::FakeWorker;
using ::pp::coordinator::testing::kAdmin;
using ::pp::coordinator::testing::kAlice;
using ::pp::coordinator::testing::kBob;
using ::pp::coordinator::testing::SharedClusterServiceTest;
using ::pp::coordinator::testing::WaitUntil;
using ::testing::Contains;
using ::testing::HasSubstr;

TEST_F(SharedClusterServiceTest, AHigherPriorityJobPreemptsALowerOneAtACheckpoint) {
  Start("", 4);
  const std::string low = RunningLowJob();
  // A watcher of the low job, until it sees the preemption; cancelled and joined on every exit.
  testing::EventWatch watch(*client_, low, pp::v1::EVENT_PREEMPTED, kAdmin);
  ASSERT_TRUE(watch.WaitSubscribed(absl::Seconds(10)));
  std::string high;
  ASSERT_TRUE(SubmitAs(kBob, Spec(2, "high"), &high).ok());
  ASSERT_TRUE(WaitUntil([&] { return Get(low).preemptions() == 1; }, absl::Seconds(5)));
  EXPECT_EQ(Get(high).state(), pp::v1::QUEUED);
  EXPECT_THAT(Get(high).reason(), HasSubstr("4 workers being freed by preemption"));
  // Every rank is told to stop after the step after the newest reported one.
  ExpectToldToStopAfter(low, 2, 4);
  ASSERT_NO_FATAL_FAILURE(ExpectPreemptedEvent(watch, high, 2));
  EXPECT_TRUE(MetricsHave("\npp_preemptions_total 1\n"));

  ASSERT_NO_FATAL_FAILURE(DrainVictim(low, 2, 4));
  WaitRunning(high, 2);
  const pp::v1::Job running = Get(high);
  EXPECT_EQ(running.placement_size(), 2);
  EXPECT_EQ(running.priority(), 200);
  // High's first step at 0.5 s: it ends in 9 x 0.5 s, when its 2 workers and the 2 idle ones
  // make the 4 the low job needs.
  for (int rank = 0; rank < 2; ++rank) ReportStep(high, rank, 1, 2);
  ASSERT_TRUE(WaitUntil([&] { return Get(high).step() == 1; }, absl::Seconds(5)));
  const pp::v1::Job waiting = Get(low);
  ASSERT_NO_FATAL_FAILURE(ExpectRequeuedByPreemption(waiting, high, 2));
  EXPECT_EQ(waiting.queue_position(), 1);
  EXPECT_NEAR(waiting.estimated_start_seconds(), 4.5, 1e-6);
  EXPECT_EQ(IdleWorkers(), 2);
  // The low job does not preempt back: nothing runs below its class.
  EXPECT_EQ(Get(high).preemptions(), 0);
}

TEST_F(SharedClusterServiceTest, AVictimThatDoesNotStopWithinTheGraceIsStopped) {
  Start("preemption { grace_seconds: 1 }\n", 4);
  const std::string low = RunningLowJob();
  std::string high;
  ASSERT_TRUE(SubmitAs(kBob, Spec(2, "high"), &high).ok());
  ASSERT_TRUE(WaitUntil([&] { return Get(low).preemptions() == 1; }, absl::Seconds(5)));
  const absl::Time asked = absl::Now();
  // The low job's ranks never stop; the grace runs out.
  ASSERT_TRUE(WaitForState(low, pp::v1::QUEUED));
  EXPECT_GE(absl::Now() - asked, absl::Milliseconds(800));
  const pp::v1::Job requeued = Get(low);
  ASSERT_GE(requeued.restart_log_size(), 1);
  const std::string reason = requeued.restart_log(requeued.restart_log_size() - 1).reason();
  EXPECT_THAT(reason, HasSubstr(absl::StrCat("preempted by job ", high)));
  EXPECT_THAT(reason, HasSubstr("did not stop within 1 s"));
  EXPECT_EQ(requeued.restarts(), 0);
  for (auto& w : workers_) {
    EXPECT_TRUE(WaitUntil([&] { return !w->aborted_jobs().empty(); }, absl::Seconds(5)));
    EXPECT_THAT(w->aborted_jobs(), Contains(low)) << w->name();
  }
  WaitRunning(high, 2);
}

TEST_F(SharedClusterServiceTest, AJobOfTheSamePriorityDoesNotPreempt) {
  Start("", 4);
  pp::v1::JobSpec spec = Spec(4, "normal");
  std::string running, waiting;
  ASSERT_TRUE(SubmitAs(kAlice, spec, &running).ok());
  WaitRunning(running, 4);
  for (int rank = 0; rank < 4; ++rank) ReportStep(running, rank, 1, 4);
  ASSERT_TRUE(SubmitAs(kBob, Spec(2, "normal"), &waiting).ok());
  // The reason is written after the preemption was considered, in the same pass.
  ASSERT_TRUE(WaitUntil([&] { return !Get(waiting).reason().empty(); }, absl::Seconds(5)));
  EXPECT_EQ(Get(waiting).reason(), "needs 2 workers, 4 registered, 0 idle");
  EXPECT_EQ(Get(running).preemptions(), 0);
  EXPECT_EQ(ReportStep(running, 0, 2, 4).stop_after_step(), 0);
  EXPECT_TRUE(MetricsHave("\npp_preemptions_total 0\n"));
}

TEST_F(SharedClusterServiceTest, APreemptibleFalseJobIsNeverPreempted) {
  Start("", 4);
  const std::string low = RunningLowJob(kAdmin, /*protect=*/true);
  std::string high;
  ASSERT_TRUE(SubmitAs(kBob, Spec(2, "high"), &high).ok());
  ASSERT_TRUE(WaitUntil([&] { return !Get(high).reason().empty(); }, absl::Seconds(5)));
  EXPECT_EQ(Get(high).reason(), "needs 2 workers, 4 registered, 0 idle");
  EXPECT_EQ(Get(low).preemptions(), 0);
  EXPECT_EQ(ReportStep(low, 0, 2, 4).stop_after_step(), 0);
  EXPECT_TRUE(MetricsHave("\npp_preemptions_total 0\n"));
  // It ends on its own: then the high job runs.
  for (FakeWorker* w : Holders(low)) w->FinishTask(true, "");
  ASSERT_TRUE(WaitForState(low, pp::v1::SUCCEEDED));
  WaitRunning(high, 2);
}

TEST_F(SharedClusterServiceTest, ABorrowingJobIsPreemptedForAJobWithinItsOwnersQuota) {
  Start("quota { owner: \"alice\" max_workers: 2 borrow: true }\n", 4);
  std::string own, borrowing, bobs;
  ASSERT_TRUE(SubmitAs(kAlice, Spec(2, ""), &own).ok());
  WaitRunning(own, 2);
  ASSERT_TRUE(SubmitAs(kAlice, Spec(2, ""), &borrowing).ok());
  WaitRunning(borrowing, 2);  // past her quota, on workers nobody waits for
  ASSERT_TRUE(SubmitAs(kBob, Spec(2, ""), &bobs).ok());  // same class: only borrowing yields
  ASSERT_TRUE(WaitUntil([&] { return Get(borrowing).preemptions() == 1; }, absl::Seconds(5)));
  EXPECT_EQ(Get(own).preemptions(), 0);
  for (FakeWorker* w : Holders(borrowing)) {
    w->FinishTask(true, "", absl::StatusCode::kInternal, /*drained=*/true);
  }
  WaitRunning(bobs, 2);
  EXPECT_EQ(Get(borrowing).state(), pp::v1::QUEUED);
  EXPECT_EQ(Get(own).state(), pp::v1::RUNNING);
}

}  // namespace
}  // namespace pp::coordinator
