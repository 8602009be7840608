// The shared cluster end to end (docs/jobs.md "Priorities, quotas and preemption"), with real
// processes (ppcoord under its default policy + 4 ppworkers on loopback): a high-priority job
// preempts a running low-priority one at a checkpoint after the victim's next step, runs, and the
// victim resumes on its own layout afterwards; ppcoord killed while the victim drains loses neither
// job; two jobs of one class never preempt each other. Every job must end bitwise equal (per-step
// losses, final weights) to the single-process reference trainer's run of its spec, whether it was
// preempted or not. An elastic victim: shared_cluster_replan_test.cc.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "tests/e2e/recovery/shared_cluster_fixture.h"
#include "tests/support/cluster.h"

namespace pp::recovery {
namespace {

using ::pp::testing_support::GetJob;
using ::pp::testing_support::JobWatch;
using ::pp::testing_support::Match;
using ::pp::testing_support::SubmitJob;
using ::pp::testing_support::WaitForJob;
using ::pp::testing_support::WaitSucceeded;
using ::testing::HasSubstr;
using ::testing::Not;

TEST_F(SharedClusterTest, HighPriorityJobPreemptsALowOneAtACheckpointAndBothEndBitwise) {
  ASSERT_NO_FATAL_FAILURE(StartWorkers());
  const pp::v1::JobSpec low_spec = LongSpec("low");
  const pp::v1::JobSpec high_spec = ShortSpec("high");
  absl::StatusOr<pp::v1::Job> running = SubmitAndRunTo(low_spec, 3);
  ASSERT_TRUE(running.ok()) << running.status();
  const std::string low = running->id();
  EXPECT_EQ(running->priority(), 0);
  absl::StatusOr<std::unique_ptr<JobWatch>> low_watch =
      JobWatch::Open(cluster_->stub(), low, kJobTimeout);
  ASSERT_TRUE(low_watch.ok()) << low_watch.status();

  absl::StatusOr<std::string> high = SubmitJob(cluster_->stub(), high_spec);
  ASSERT_TRUE(high.ok()) << high.status();
  absl::StatusOr<std::unique_ptr<JobWatch>> high_watch =
      JobWatch::Open(cluster_->stub(), *high, kJobTimeout);
  ASSERT_TRUE(high_watch.ok()) << high_watch.status();
  // The submit preempts it; its step when that is seen bounds its step at the preemption.
  absl::StatusOr<pp::v1::Job> preempted = WaitForJob(
      cluster_->stub(), low, [](const pp::v1::Job& j) { return j.preemptions() >= 1; },
      kJobTimeout);
  ASSERT_TRUE(preempted.ok()) << preempted.status();

  absl::StatusOr<pp::v1::Job> high_done = WaitSucceeded(cluster_->stub(), *high, kJobTimeout);
  ASSERT_TRUE(high_done.ok()) << high_done.status();
  EXPECT_EQ(high_done->priority(), 200);
  EXPECT_EQ(high_done->preemptions(), 0);
  absl::StatusOr<pp::v1::Job> low_done = WaitSucceeded(cluster_->stub(), low, kJobTimeout);
  ASSERT_TRUE(low_done.ok()) << low_done.status();

  int stop = 0;
  ASSERT_NO_FATAL_FAILURE(ExpectPreemptedOnceAtACheckpoint(*low_done, *high, running->step(),
                                                           preempted->step(), &stop));
  // Its events: preempted (naming the high job), requeued, placed again after the high job was.
  ASSERT_NO_FATAL_FAILURE(ExpectPreemptionEvents(**low_watch, **high_watch, *high, stop));

  ExpectMatchesReference(high_spec, *high, Match::kBitwise);
  ExpectMatchesReference(low_spec, low, Match::kBitwise);
}

// Submits `high_spec` and SIGKILLs ppcoord as soon as job `low` is told to drain for it, while it
// still drains: its EVENT_PREEMPTED came with no requeue before it, and GetJob, the call before the
// kill, still shows it RUNNING on its first attempt, preempted once, not yet requeued (no
// restart-log entry), at most at its stop step. Sets `*high` to the high job and `*stop` to the
// stop step of the preemption.
void SubmitAndKillWhileTheVictimDrains(testing_support::Cluster& cluster, const std::string& low,
                                       const pp::v1::JobSpec& high_spec, std::string* high,
                                       int* stop) {
  // The victim's events one by one (JobWatch reads only to the end), from before the submit.
  grpc::ClientContext watch_context;
  watch_context.set_deadline(absl::ToChronoTime(absl::Now() + kJobTimeout));
  pp::v1::WatchJobRequest watch_request;
  watch_request.set_job_id(low);
  std::unique_ptr<grpc::ClientReader<pp::v1::JobEvent>> watch =
      cluster.stub().WatchJob(&watch_context, watch_request);
  pp::v1::JobEvent event;
  ASSERT_TRUE(watch->Read(&event)) << "WatchJob " << low;  // its state: the watch has begun
  absl::StatusOr<std::string> submitted = SubmitJob(cluster.stub(), high_spec);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  *high = *submitted;
  bool preempted = false;
  while (!preempted && watch->Read(&event)) {
    ASSERT_NE(event.kind(), pp::v1::EVENT_RESTARTED) << event.message();
    preempted = event.kind() == pp::v1::EVENT_PREEMPTED;
  }
  ASSERT_TRUE(preempted) << "the watch of " << low << " ended without EVENT_PREEMPTED";
  absl::StatusOr<pp::v1::Job> draining = GetJob(cluster.stub(), low);
  cluster.KillCoordinator();
  watch_context.TryCancel();
  (void)watch->Finish();
  EXPECT_THAT(event.message(), HasSubstr(absl::StrCat("preempted by job ", *high)));
  const std::string after = "checkpoints after step ";
  const size_t at = event.message().find(after);
  ASSERT_NE(at, std::string::npos) << event.message();
  *stop = std::atoi(event.message().c_str() + at + after.size());
  ASSERT_TRUE(draining.ok()) << draining.status();
  EXPECT_EQ(draining->state(), pp::v1::RUNNING);
  EXPECT_EQ(draining->attempt(), 0);
  EXPECT_EQ(draining->preemptions(), 1);
  EXPECT_EQ(draining->restart_log_size(), 0);
  EXPECT_GE(draining->last_checkpoint_step(), 5);
  EXPECT_LE(draining->step(), *stop);
}

// `low_done`, at its end, killed while it drained for a preemption that ended at `stop`: the
// restarted ppcoord found it RUNNING and requeued it from its newest committed checkpoint (the
// drain's own, or an older one); its drain never ended in a requeue of its own, nothing is its
// fault, and it was not preempted again.
void ExpectRequeuedByTheRestartOnly(const pp::v1::Job& low_done, int stop) {
  EXPECT_EQ(low_done.attempt(), 1);  // placed before the kill and once after it
  EXPECT_EQ(low_done.restarts(), 0);
  ASSERT_EQ(low_done.restart_log_size(), 1);
  EXPECT_THAT(low_done.restart_log(0).reason(),
              HasSubstr("ppcoord restarted while the job was running"));
  EXPECT_GE(low_done.restart_log(0).from_step(), 5);
  EXPECT_LE(low_done.restart_log(0).from_step(), stop);
  EXPECT_EQ(low_done.start_step(), low_done.restart_log(0).from_step());
  EXPECT_LE(low_done.preemptions(), 1);
}

// The events after the restart of the low job (`low_watch`) and the high one (`high_watch`), both
// to their end: the high job, still first in the order, ran before the low one resumed, which
// was not preempted again.
void ExpectTheHighJobRanFirst(JobWatch& low_watch, JobWatch& high_watch) {
  absl::StatusOr<std::vector<pp::v1::JobEvent>> low_events = low_watch.Rest();
  ASSERT_TRUE(low_events.ok()) << low_events.status();
  absl::StatusOr<std::vector<pp::v1::JobEvent>> high_events = high_watch.Rest();
  ASSERT_TRUE(high_events.ok()) << high_events.status();
  EXPECT_EQ(FindEvent(*low_events, 0, pp::v1::EVENT_PREEMPTED), -1);
  // Unseen only when the daemons ran far ahead of the test, and the watches began after the
  // low job was placed again or the high job neared its end.
  const std::optional<double> high_placed = PlacedBy(*high_events);
  if (low_events->front().kind() == pp::v1::EVENT_QUEUED && high_placed.has_value()) {
    const int placed = FindEvent(*low_events, 0, pp::v1::EVENT_PLACED);
    ASSERT_GE(placed, 0);
    EXPECT_GE((*low_events)[placed].time_unix(), *high_placed);
  }
}

TEST_F(SharedClusterTest, CoordinatorKilledDuringAPreemptionLosesNothing) {
  // Once a worker completed 5 steps each compute action takes 4 times as long
  // (worker/executor/slowdown.h): the victim's drain, from its EVENT_PREEMPTED until every rank
  // checkpointed after the stop step and ended, lasts a slowed step or more, a wide window for the
  // kill. 30 steps: the slowed ones after the restart stay few.
  ASSERT_NO_FATAL_FAILURE(StartWorkers({"--test_slow_after_steps=5", "--test_slow_factor=4"}));
  pp::v1::JobSpec low_spec = LongSpec("low");
  low_spec.mutable_train()->set_steps(30);
  const pp::v1::JobSpec high_spec = ShortSpec("high");
  // After a committed checkpoint: the restarted ppcoord resumes the victim from one.
  absl::StatusOr<pp::v1::Job> running = SubmitAndRunTo(low_spec, 5, /*checkpoint=*/5);
  ASSERT_TRUE(running.ok()) << running.status();
  const std::string low = running->id();
  std::string high;
  int stop = 0;
  ASSERT_NO_FATAL_FAILURE(
      SubmitAndKillWhileTheVictimDrains(*cluster_, low, high_spec, &high, &stop));

  ASSERT_TRUE(cluster_->RestartCoordinator().ok());
  // The first call on a channel whose connection the kill broke may fail ("Broken pipe");
  // WaitForJob polls past that until the restarted ppcoord answers.
  auto any = [](const pp::v1::Job&) { return true; };
  ASSERT_TRUE(WaitForJob(cluster_->stub(), low, any, kJobTimeout).ok());
  absl::StatusOr<std::unique_ptr<JobWatch>> low_watch =
      JobWatch::Open(cluster_->stub(), low, kJobTimeout);
  ASSERT_TRUE(low_watch.ok()) << low_watch.status();
  absl::StatusOr<std::unique_ptr<JobWatch>> high_watch =
      JobWatch::Open(cluster_->stub(), high, kJobTimeout);
  ASSERT_TRUE(high_watch.ok()) << high_watch.status();
  absl::StatusOr<pp::v1::Job> high_done = WaitSucceeded(cluster_->stub(), high, kJobTimeout);
  ASSERT_TRUE(high_done.ok()) << high_done.status();
  EXPECT_EQ(high_done->restarts(), 0);
  EXPECT_EQ(high_done->attempt(), 0);  // placed once, after the restart
  absl::StatusOr<pp::v1::Job> low_done = WaitSucceeded(cluster_->stub(), low, kJobTimeout);
  ASSERT_TRUE(low_done.ok()) << low_done.status();
  ASSERT_NO_FATAL_FAILURE(ExpectRequeuedByTheRestartOnly(*low_done, stop));

  ASSERT_NO_FATAL_FAILURE(ExpectTheHighJobRanFirst(**low_watch, **high_watch));
  for (const std::string& id : {low, high}) {
    SCOPED_TRACE(id);
    EXPECT_TRUE(GetJob(cluster_->stub(), id).ok());
    EXPECT_EQ(Listed(id), 1);
  }
  ExpectMatchesReference(high_spec, high, Match::kBitwise);
  ExpectMatchesReference(low_spec, low, Match::kBitwise);
}

TEST_F(SharedClusterTest, EqualPriorityJobsDoNotPreempt) {
  ASSERT_NO_FATAL_FAILURE(StartWorkers());
  const pp::v1::JobSpec first_spec = LongSpec("normal");
  const pp::v1::JobSpec second_spec = ShortSpec("normal");
  absl::StatusOr<pp::v1::Job> running = SubmitAndRunTo(first_spec, 3);
  ASSERT_TRUE(running.ok()) << running.status();
  const std::string first = running->id();
  EXPECT_EQ(running->priority(), 100);
  absl::StatusOr<std::unique_ptr<JobWatch>> first_watch =
      JobWatch::Open(cluster_->stub(), first, kJobTimeout);
  ASSERT_TRUE(first_watch.ok()) << first_watch.status();

  absl::StatusOr<std::string> second = SubmitJob(cluster_->stub(), second_spec);
  ASSERT_TRUE(second.ok()) << second.status();
  absl::StatusOr<std::unique_ptr<JobWatch>> second_watch =
      JobWatch::Open(cluster_->stub(), *second, kJobTimeout);
  ASSERT_TRUE(second_watch.ok()) << second_watch.status();
  // The first job has 20 steps or more to go: the second one waits for its workers.
  absl::StatusOr<pp::v1::Job> waiting = GetJob(cluster_->stub(), *second);
  ASSERT_TRUE(waiting.ok()) << waiting.status();
  EXPECT_EQ(waiting->state(), pp::v1::QUEUED);
  EXPECT_EQ(waiting->queue_position(), 1);
  EXPECT_THAT(waiting->reason(), HasSubstr("needs 2 workers"));
  EXPECT_THAT(waiting->reason(), Not(HasSubstr("preemption")));
  absl::StatusOr<pp::v1::Job> still = GetJob(cluster_->stub(), first);
  ASSERT_TRUE(still.ok()) << still.status();
  EXPECT_EQ(still->state(), pp::v1::RUNNING);
  EXPECT_EQ(still->preemptions(), 0);

  absl::StatusOr<pp::v1::Job> first_done = WaitSucceeded(cluster_->stub(), first, kJobTimeout);
  ASSERT_TRUE(first_done.ok()) << first_done.status();
  EXPECT_EQ(first_done->preemptions(), 0);
  EXPECT_EQ(first_done->restart_log_size(), 0);
  EXPECT_EQ(first_done->attempt(), 0);
  absl::StatusOr<pp::v1::Job> second_done = WaitSucceeded(cluster_->stub(), *second, kJobTimeout);
  ASSERT_TRUE(second_done.ok()) << second_done.status();

  // The second job was placed once the first one's workers were free: after every rank of it
  // reported its second-to-last step (a rank ends only after the last step, which every rank
  // finishes only once all of them reported the one before).
  absl::StatusOr<std::vector<pp::v1::JobEvent>> first_events = (*first_watch)->Rest();
  ASSERT_TRUE(first_events.ok()) << first_events.status();
  absl::StatusOr<std::vector<pp::v1::JobEvent>> second_events = (*second_watch)->Rest();
  ASSERT_TRUE(second_events.ok()) << second_events.status();
  EXPECT_EQ(FindEvent(*first_events, 0, pp::v1::EVENT_PREEMPTED), -1);
  auto second_to_last =
      std::find_if(first_events->begin(), first_events->end(), [](const pp::v1::JobEvent& e) {
        return e.kind() == pp::v1::EVENT_STEP && e.step() == kLongSteps - 1;
      });
  ASSERT_NE(second_to_last, first_events->end());
  const int placed = FindEvent(*second_events, 0, pp::v1::EVENT_PLACED);
  ASSERT_GE(placed, 0);
  EXPECT_GE((*second_events)[placed].time_unix(), second_to_last->time_unix());

  ExpectMatchesReference(second_spec, *second, Match::kBitwise);
  ExpectMatchesReference(first_spec, first, Match::kBitwise);
}

}  // namespace
}  // namespace pp::recovery
