// Issue 30's acceptance with a re-plannable victim (docs/jobs.md "Priorities, quotas and
// preemption", recovery.md "Elastic jobs"), with real processes (ppcoord + 4 ppworkers on
// loopback): an elastic low-priority job on 4 workers, preempted by a high-priority job that needs
// 2, is requeued, re-planned onto the 2 workers left free (D=4 -> D=2, its microbatches and so its
// global batch kept) and runs there while the high job runs; it grows back to D=4 once the high job
// ended, and ends bitwise equal (per-step losses, final weights) to the single-process reference
// trainer's run of its spec.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/e2e/recovery/shared_cluster_fixture.h"
#include "tests/support/cluster.h"

namespace pp::recovery {
namespace {

using ::pp::testing_support::JobWatch;
using ::pp::testing_support::Match;
using ::pp::testing_support::SubmitJob;
using ::pp::testing_support::WaitForJob;
using ::pp::testing_support::WaitSucceeded;
using ::testing::HasSubstr;
using ::testing::Not;

using Events = std::vector<pp::v1::JobEvent>;

// `low_done`, at its end, was preempted once for job `high` after step `stop` (> `running_step`,
// its step before the submit), re-planned for 2 workers in the attempt after, and grew back to its
// own 4 in the next one; neither is a restart.
void ExpectReplannedAndGrownBack(const pp::v1::Job& low_done, const std::string& high,
                                 int running_step, int* stop) {
  EXPECT_EQ(low_done.preemptions(), 1);
  EXPECT_EQ(low_done.restarts(), 0);
  EXPECT_EQ(low_done.resizes(), 2);
  EXPECT_EQ(low_done.attempt(), 2);
  EXPECT_EQ(low_done.placement_size(), 4);
  EXPECT_EQ(low_done.spec().parallel().pipeline(), 4);
  ASSERT_EQ(low_done.restart_log_size(), 2);
  *stop = low_done.restart_log(0).from_step();
  EXPECT_GT(*stop, running_step);
  EXPECT_THAT(low_done.restart_log(0).reason(),
              HasSubstr(absl::StrCat("preempted by job ", high, " after step ", *stop,
                                     "; resized from 1f1b D=4 V=1 T=1 R=1 M=4 (4 workers) to "
                                     "1f1b D=2 V=1 T=1 R=1 M=4 (2 workers)")));
  EXPECT_THAT(low_done.restart_log(1).reason(), HasSubstr("to grow to 4 workers"));
  EXPECT_FALSE(low_done.restart_log(0).automatic());
  EXPECT_FALSE(low_done.restart_log(1).automatic());
}

// The low job's events (`low`, from before the preemption to its end) against the high job's
// (`high`, from before its placement to its end; `high_done` at its end): preempted once, requeued
// from `stop`, resized to D=2 and placed on 2 workers the high job does not hold, after the high
// job was placed and before it finished; resized back to D=4 and placed only after that; finished.
void ExpectReplannedWhileTheHighJobRan(const Events& low, const Events& high,
                                       const pp::v1::Job& high_done, int stop) {
  const std::string by = absl::StrCat("preempted by job ", high_done.id());
  const int preempt =
      FindEvent(low, 0, pp::v1::EVENT_PREEMPTED, absl::StrCat(by, " (priority high"));
  ASSERT_GE(preempt, 0);
  EXPECT_THAT(low[preempt].message(), HasSubstr(absl::StrCat("checkpoints after step ", stop)));
  EXPECT_EQ(FindEvent(low, preempt + 1, pp::v1::EVENT_PREEMPTED), -1);
  const int requeued = FindEvent(low, preempt + 1, pp::v1::EVENT_RESTARTED,
                                 absl::StrCat("from step ", stop, ": ", by));
  ASSERT_GT(requeued, preempt);
  const int shrink = FindEvent(low, requeued + 1, pp::v1::EVENT_RESIZED, "(2 workers)");
  ASSERT_GT(shrink, requeued);
  EXPECT_EQ(low[shrink].resized_from().pipeline(), 4);
  EXPECT_EQ(low[shrink].resized_to().pipeline(), 2);
  const int small =
      FindEvent(low, shrink + 1, pp::v1::EVENT_PLACED, absl::StrCat("from step ", stop));
  ASSERT_GT(small, shrink);
  EXPECT_EQ(FindEvent(low, requeued + 1, pp::v1::EVENT_PLACED),
            small);  // not placed on 4 first
  const int high_placed = FindEvent(high, 0, pp::v1::EVENT_PLACED);
  ASSERT_GE(high_placed, 0) << "the high job's watch began after it was placed";
  ASSERT_EQ(high.back().kind(), pp::v1::EVENT_FINISHED);
  const double high_finished = high.back().time_unix();
  EXPECT_GE(low[small].time_unix(), high[high_placed].time_unix());
  EXPECT_LT(low[small].time_unix(), high_finished)
      << "the victim was not placed on the free workers while the high job ran";
  for (const pp::v1::RankPlacement& p : high_done.placement()) {
    EXPECT_THAT(low[small].message(), Not(HasSubstr(p.worker() + " (rank")));
  }
  const int grow = FindEvent(low, small + 1, pp::v1::EVENT_RESIZED, "(4 workers)");
  ASSERT_GT(grow, small);
  EXPECT_EQ(low[grow].resized_to().pipeline(), 4);
  EXPECT_GE(low[grow].time_unix(), high_finished);
  EXPECT_GT(FindEvent(low, grow + 1, pp::v1::EVENT_PLACED), grow);
  EXPECT_EQ(low.back().kind(), pp::v1::EVENT_FINISHED);
}

// Waits until job `low` (of `low_spec`) runs resized, then expects it re-planned for the 2 free
// workers: D=2, preempted once, the same microbatches (so the same global batch).
void ExpectRunningOnTwo(testing_support::Cluster& cluster, const std::string& low,
                        const pp::v1::JobSpec& low_spec) {
  absl::StatusOr<pp::v1::Job> shrunk = WaitForJob(
      cluster.stub(), low,
      [](const pp::v1::Job& j) { return j.resizes() >= 1 && j.state() == pp::v1::RUNNING; },
      kJobTimeout);
  ASSERT_TRUE(shrunk.ok()) << shrunk.status();
  EXPECT_EQ(shrunk->resizes(), 1);
  EXPECT_EQ(shrunk->preemptions(), 1);
  EXPECT_EQ(shrunk->placement_size(), 2);
  EXPECT_EQ(shrunk->spec().parallel().pipeline(), 2);
  EXPECT_EQ(shrunk->spec().train().microbatches(), low_spec.train().microbatches());
  EXPECT_EQ(shrunk->base_parallel().pipeline(), 4);
}

TEST_F(SharedClusterTest, PreemptedElasticJobRunsReplannedOnTheFreeWorkersAndStaysBitwise) {
  ASSERT_NO_FATAL_FAILURE(StartWorkers());
  pp::v1::JobSpec low_spec = LongSpec("low");
  low_spec.mutable_train()->set_steps(80);  // steps left to grow back after the high job
  low_spec.mutable_elastic()->set_min_workers(2);
  low_spec.mutable_elastic()->set_grace_seconds(0.2);
  low_spec.mutable_elastic()->set_grow_after_seconds(0.3);
  pp::v1::JobSpec high_spec = ShortSpec("high");
  high_spec.mutable_train()->set_steps(60);  // about 1.3 s: far longer than the victim's grace
  absl::StatusOr<pp::v1::Job> running = SubmitAndRunTo(low_spec, 3);
  ASSERT_TRUE(running.ok()) << running.status();
  const std::string low = running->id();
  EXPECT_EQ(running->placement_size(), 4);
  absl::StatusOr<std::unique_ptr<JobWatch>> low_watch =
      JobWatch::Open(cluster_->stub(), low, kJobTimeout);
  ASSERT_TRUE(low_watch.ok()) << low_watch.status();
  absl::StatusOr<std::string> high = SubmitJob(cluster_->stub(), high_spec);
  ASSERT_TRUE(high.ok()) << high.status();
  absl::StatusOr<std::unique_ptr<JobWatch>> high_watch =
      JobWatch::Open(cluster_->stub(), *high, kJobTimeout);
  ASSERT_TRUE(high_watch.ok()) << high_watch.status();

  ASSERT_NO_FATAL_FAILURE(ExpectRunningOnTwo(*cluster_, low, low_spec));

  absl::StatusOr<pp::v1::Job> high_done = WaitSucceeded(cluster_->stub(), *high, kJobTimeout);
  ASSERT_TRUE(high_done.ok()) << high_done.status();
  EXPECT_EQ(high_done->preemptions(), 0);
  EXPECT_EQ(high_done->attempt(), 0);
  absl::StatusOr<pp::v1::Job> low_done = WaitSucceeded(cluster_->stub(), low, kJobTimeout);
  ASSERT_TRUE(low_done.ok()) << low_done.status();
  int stop = 0;
  ASSERT_NO_FATAL_FAILURE(ExpectReplannedAndGrownBack(*low_done, *high, running->step(), &stop));
  absl::StatusOr<Events> low_events = (*low_watch)->Rest();
  ASSERT_TRUE(low_events.ok()) << low_events.status();
  absl::StatusOr<Events> high_events = (*high_watch)->Rest();
  ASSERT_TRUE(high_events.ok()) << high_events.status();
  ASSERT_NO_FATAL_FAILURE(
      ExpectReplannedWhileTheHighJobRan(*low_events, *high_events, *high_done, stop));

  ExpectMatchesReference(high_spec, *high, Match::kBitwise);
  ExpectMatchesReference(low_spec, low, Match::kBitwise);
}

}  // namespace
}  // namespace pp::recovery
