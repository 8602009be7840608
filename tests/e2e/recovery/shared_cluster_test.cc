// The shared cluster end to end (docs/jobs.md "Priorities, quotas and preemption"), with real
// processes (ppcoord under its default policy + 4 ppworkers on loopback): a high-priority job
// preempts a running low-priority one at a checkpoint after the victim's next step, runs, and the
// victim resumes on its own layout afterwards; ppcoord killed while the victim drains loses
// neither job; two jobs of one class never preempt each other. Every job must end bitwise equal
// (per-step losses, final weights) to the single-process reference trainer's run of its spec,
// whether it was preempted or not.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "tests/support/cluster.h"
#include "tests/support/fixture.h"

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

// Long enough that the job is still mid-run (tens of ms a step) when the second one comes.
constexpr int kLongSteps = 60;
constexpr int kShortSteps = 10;
constexpr absl::Duration kJobTimeout = absl::Seconds(60);

// The index of the first of `events` from `from` on of `kind` whose message holds `text`; -1 when
// none is.
int FindEvent(const std::vector<pp::v1::JobEvent>& events, int from, pp::v1::JobEventKind kind,
              absl::string_view text = "") {
  for (int i = std::max(from, 0); i < static_cast<int>(events.size()); ++i) {
    if (events[i].kind() == kind && absl::StrContains(events[i].message(), text)) return i;
  }
  return -1;
}

// When the watched job was placed, at the latest: the time of its PLACED event, or, when the watch
// began after that, of the first event that shows it running short of its last two steps (it
// holds every worker it was placed on then). nullopt when the watch began too late to tell.
std::optional<double> PlacedBy(const std::vector<pp::v1::JobEvent>& events) {
  for (const pp::v1::JobEvent& e : events) {
    if (e.kind() == pp::v1::EVENT_QUEUED) continue;
    const bool running = e.kind() == pp::v1::EVENT_STEP || e.kind() == pp::v1::EVENT_CHECKPOINT;
    if (e.kind() == pp::v1::EVENT_PLACED || (running && e.step() <= e.total_steps() - 2)) {
      return e.time_unix();
    }
    return std::nullopt;
  }
  return std::nullopt;
}

class SharedClusterTest : public testing_support::ClusterTest {
 protected:
  SharedClusterTest() : ClusterTest(/*corpus_seed=*/11, /*corpus_bytes=*/50000) {}

  void SetUp() override {
    ClusterTest::SetUp();
    ASSERT_NO_FATAL_FAILURE(StartCluster(4));  // no --policy: low 0, normal 100, high 200
  }

  // D=4 on all four workers, kLongSteps steps, a checkpoint every 5.
  pp::v1::JobSpec LongSpec(const std::string& priority) const {
    pp::v1::JobSpec spec = SpecFrom(R"pb(
      name: "long"
      model { seq_len: 32 d_model: 64 n_heads: 4 n_layers: 4 }
      parallel { pipeline: 4 }
      train { microbatches: 4 microbatch_size: 4 seed: 5 warmup_steps: 4 decay: "cosine" }
      checkpoint { every_steps: 5 keep: 3 }
    )pb");
    spec.mutable_train()->set_steps(kLongSteps);
    spec.set_priority(priority);
    return spec;
  }

  // D=2, another model and seed, kShortSteps steps.
  pp::v1::JobSpec ShortSpec(const std::string& priority) const {
    pp::v1::JobSpec spec = SpecFrom(R"pb(
      name: "short"
      model { seq_len: 16 d_model: 32 n_heads: 2 n_layers: 2 }
      parallel { pipeline: 2 }
      train { microbatches: 4 microbatch_size: 2 seed: 9 }
      checkpoint { every_steps: 5 keep: 3 }
    )pb");
    spec.mutable_train()->set_steps(kShortSteps);
    spec.set_priority(priority);
    return spec;
  }

  // Submits `spec` and waits until it completed at least `steps` steps (and committed
  // `checkpoint`), far enough from its end that a job submitted next finds it running.
  absl::StatusOr<pp::v1::Job> SubmitAndRunTo(const pp::v1::JobSpec& spec, int steps,
                                             int checkpoint = 0) {
    absl::StatusOr<std::string> id = SubmitJob(cluster_->stub(), spec);
    if (!id.ok()) return id.status();
    absl::StatusOr<pp::v1::Job> running = WaitForJob(
        cluster_->stub(), *id,
        [&](const pp::v1::Job& j) {
          return j.step() >= steps && j.last_checkpoint_step() >= checkpoint;
        },
        kJobTimeout);
    if (running.ok() && running->step() > spec.train().steps() - 20) {
      return absl::InternalError(absl::StrCat("job ", *id, " is at step ", running->step(), " of ",
                                              spec.train().steps(), ": too close to its end"));
    }
    return running;
  }

  // `low_done`, the low job at its end, was preempted once for job `high`, at a checkpoint after
  // its next step, and resumed from that checkpoint on its own layout, once. `running_step`: its
  // step before the high job's submit; `preempted_step`: its step once its preemption was seen.
  // Sets `*stop` to the step it stopped after.
  static void ExpectPreemptedOnceAtACheckpoint(const pp::v1::Job& low_done, const std::string& high,
                                               int running_step, int preempted_step, int* stop) {
    // Preempted once, at a checkpoint after its next step, not counted as a restart.
    EXPECT_EQ(low_done.preemptions(), 1);
    EXPECT_EQ(low_done.restarts(), 0);
    ASSERT_EQ(low_done.restart_log_size(), 1);
    const pp::v1::JobRestart& entry = low_done.restart_log(0);
    *stop = entry.from_step();
    EXPECT_THAT(entry.reason(),
                HasSubstr(absl::StrCat("preempted by job ", high, " after step ", *stop)));
    EXPECT_FALSE(entry.automatic());
    // Drains within one step: the stop step is the newest reported step + 1, and a rank reports
    // step s + 1 only once every rank reported s (the clip norm gathers every step).
    EXPECT_GT(*stop, running_step);
    EXPECT_LE(*stop, preempted_step + 2);
    // It resumed from that checkpoint on its own layout, once.
    EXPECT_EQ(low_done.attempt(), 1);
    EXPECT_EQ(low_done.start_step(), *stop);
    EXPECT_EQ(low_done.placement_size(), 4);
  }

  // The events of the low job (`low_watch`, until its end) preempted for job `high` (`high_watch`)
  // after step `stop`: preempted once (naming the high job and the stop step), requeued, placed
  // again from `stop` no sooner than the high job was placed, finished.
  static void ExpectPreemptionEvents(JobWatch& low_watch, JobWatch& high_watch,
                                     const std::string& high, int stop) {
    absl::StatusOr<std::vector<pp::v1::JobEvent>> low_events = low_watch.Rest();
    ASSERT_TRUE(low_events.ok()) << low_events.status();
    absl::StatusOr<std::vector<pp::v1::JobEvent>> high_events = high_watch.Rest();
    ASSERT_TRUE(high_events.ok()) << high_events.status();
    const int preempt_event =
        FindEvent(*low_events, 0, pp::v1::EVENT_PREEMPTED, absl::StrCat("preempted by job ", high));
    ASSERT_GE(preempt_event, 0);
    EXPECT_THAT((*low_events)[preempt_event].message(),
                HasSubstr(absl::StrCat("checkpoints after step ", stop)));
    EXPECT_EQ(FindEvent(*low_events, preempt_event + 1, pp::v1::EVENT_PREEMPTED), -1);
    const int requeued = FindEvent(*low_events, preempt_event + 1, pp::v1::EVENT_RESTARTED,
                                   absl::StrCat("preempted by job ", high, " after step ", stop));
    ASSERT_GT(requeued, preempt_event);
    const int placed = FindEvent(*low_events, requeued + 1, pp::v1::EVENT_PLACED,
                                 absl::StrCat("from step ", stop));
    ASSERT_GT(placed, requeued);
    const std::optional<double> high_placed = PlacedBy(*high_events);
    ASSERT_TRUE(high_placed.has_value()) << "the watch began after the high job's last steps";
    EXPECT_GE((*low_events)[placed].time_unix(), *high_placed);
    EXPECT_EQ(low_events->back().kind(), pp::v1::EVENT_FINISHED);
  }

  // The number of rows of ListJobs naming `id`.
  int Listed(const std::string& id) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    pp::v1::ListJobsResponse response;
    const grpc::Status status = cluster_->stub().ListJobs(&context, {}, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    EXPECT_TRUE(response.next_page_token().empty());  // two jobs fit one page
    return static_cast<int>(std::count_if(response.jobs().begin(), response.jobs().end(),
                                          [&](const pp::v1::Job& j) { return j.id() == id; }));
  }
};

TEST_F(SharedClusterTest, HighPriorityJobPreemptsALowOneAtACheckpointAndBothEndBitwise) {
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

TEST_F(SharedClusterTest, CoordinatorKilledDuringAPreemptionLosesNothing) {
  const pp::v1::JobSpec low_spec = LongSpec("low");
  const pp::v1::JobSpec high_spec = ShortSpec("high");
  // After a committed checkpoint: the restarted ppcoord resumes the victim from one.
  absl::StatusOr<pp::v1::Job> running = SubmitAndRunTo(low_spec, 5, /*checkpoint=*/5);
  ASSERT_TRUE(running.ok()) << running.status();
  const std::string low = running->id();
  absl::StatusOr<std::string> high = SubmitJob(cluster_->stub(), high_spec);
  ASSERT_TRUE(high.ok()) << high.status();
  absl::StatusOr<pp::v1::Job> preempted = WaitForJob(
      cluster_->stub(), low, [](const pp::v1::Job& j) { return j.preemptions() >= 1; },
      kJobTimeout);
  ASSERT_TRUE(preempted.ok()) << preempted.status();

  cluster_->KillCoordinator();
  ASSERT_TRUE(cluster_->RestartCoordinator().ok());
  absl::StatusOr<std::unique_ptr<JobWatch>> low_watch =
      JobWatch::Open(cluster_->stub(), low, kJobTimeout);
  ASSERT_TRUE(low_watch.ok()) << low_watch.status();
  absl::StatusOr<std::unique_ptr<JobWatch>> high_watch =
      JobWatch::Open(cluster_->stub(), *high, kJobTimeout);
  ASSERT_TRUE(high_watch.ok()) << high_watch.status();

  absl::StatusOr<pp::v1::Job> high_done = WaitSucceeded(cluster_->stub(), *high, kJobTimeout);
  ASSERT_TRUE(high_done.ok()) << high_done.status();
  absl::StatusOr<pp::v1::Job> low_done = WaitSucceeded(cluster_->stub(), low, kJobTimeout);
  ASSERT_TRUE(low_done.ok()) << low_done.status();
  // The high job, still first in the order, ran before the low one resumed, which ran once.
  absl::StatusOr<std::vector<pp::v1::JobEvent>> low_events = (*low_watch)->Rest();
  ASSERT_TRUE(low_events.ok()) << low_events.status();
  absl::StatusOr<std::vector<pp::v1::JobEvent>> high_events = (*high_watch)->Rest();
  ASSERT_TRUE(high_events.ok()) << high_events.status();
  EXPECT_EQ(FindEvent(*low_events, 0, pp::v1::EVENT_PREEMPTED), -1);
  EXPECT_EQ(low_done->attempt(), 1);  // placed before the kill and once after it
  // Unseen only when the daemons ran far ahead of the test, and the watches began after the
  // low job was placed again or the high job neared its end.
  const std::optional<double> high_placed = PlacedBy(*high_events);
  if (low_events->front().kind() == pp::v1::EVENT_QUEUED && high_placed.has_value()) {
    const int placed = FindEvent(*low_events, 0, pp::v1::EVENT_PLACED);
    ASSERT_GE(placed, 0);
    EXPECT_GE((*low_events)[placed].time_unix(), *high_placed);
  }
  EXPECT_EQ(low_done->restarts(), 0);  // neither the preemption nor the restart is its fault
  EXPECT_GE(low_done->restart_log_size(), 1);
  EXPECT_LE(low_done->preemptions(), 1);  // not preempted again after the restart
  EXPECT_EQ(high_done->restarts(), 0);

  for (const std::string& id : {low, *high}) {
    SCOPED_TRACE(id);
    EXPECT_TRUE(GetJob(cluster_->stub(), id).ok());
    EXPECT_EQ(Listed(id), 1);
  }
  ExpectMatchesReference(high_spec, *high, Match::kBitwise);
  ExpectMatchesReference(low_spec, low, Match::kBitwise);
}

TEST_F(SharedClusterTest, EqualPriorityJobsDoNotPreempt) {
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
