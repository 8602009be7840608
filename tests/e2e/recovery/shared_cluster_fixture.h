// The fixture of the shared-cluster end-to-end tests (shared_cluster_test.cc,
// shared_cluster_replan_test.cc; docs/jobs.md "Priorities, quotas and preemption"): ppcoord under
// its default policy (low 0, normal 100, high 200) on loopback, each test starting its 4 workers,
// the two specs the tests run (a long D=4 job, a short D=2 one) and the checks they share.
#ifndef PP_TESTS_E2E_RECOVERY_SHARED_CLUSTER_FIXTURE_H_
#define PP_TESTS_E2E_RECOVERY_SHARED_CLUSTER_FIXTURE_H_

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
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

// Long enough that the job is still mid-run (tens of ms a step) when the second one comes.
inline constexpr int kLongSteps = 60;
inline constexpr int kShortSteps = 10;
inline constexpr absl::Duration kJobTimeout = absl::Seconds(60);

// The index of the first of `events` from `from` on of `kind` whose message holds `text`; -1 when
// none is.
inline int FindEvent(const std::vector<pp::v1::JobEvent>& events, int from,
                     pp::v1::JobEventKind kind, absl::string_view text = "") {
  for (int i = std::max(from, 0); i < static_cast<int>(events.size()); ++i) {
    if (events[i].kind() == kind && absl::StrContains(events[i].message(), text)) return i;
  }
  return -1;
}

// When the watched job was placed, at the latest: the time of its PLACED event, or, when the watch
// began after that, of the first event that shows it running short of its last two steps (it
// holds every worker it was placed on then). nullopt when the watch began too late to tell.
inline std::optional<double> PlacedBy(const std::vector<pp::v1::JobEvent>& events) {
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

  // ppcoord only (no --policy: low 0, normal 100, high 200); each test starts its workers.
  void SetUp() override {
    ClusterTest::SetUp();
    ASSERT_NO_FATAL_FAILURE(StartCluster(0));
  }

  // Workers w0..w3, IDLE on return, each with `flags` (after the cluster's own).
  void StartWorkers(const std::vector<std::string>& flags = {}) {
    if (flags.empty()) {
      const absl::Status added = cluster_->AddWorkers(4);
      ASSERT_TRUE(added.ok()) << added;
      return;
    }
    testing_support::WorkerOptions options;
    options.flags = flags;
    for (const char* name : {"w0", "w1", "w2", "w3"}) {
      const absl::Status started = cluster_->StartWorker(name, options);
      ASSERT_TRUE(started.ok()) << started;
    }
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
    absl::StatusOr<std::string> id = testing_support::SubmitJob(cluster_->stub(), spec);
    if (!id.ok()) return id.status();
    absl::StatusOr<pp::v1::Job> running = testing_support::WaitForJob(
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
    EXPECT_THAT(entry.reason(), ::testing::HasSubstr(absl::StrCat("preempted by job ", high,
                                                                  " after step ", *stop)));
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
  static void ExpectPreemptionEvents(testing_support::JobWatch& low_watch,
                                     testing_support::JobWatch& high_watch, const std::string& high,
                                     int stop) {
    absl::StatusOr<std::vector<pp::v1::JobEvent>> low_events = low_watch.Rest();
    ASSERT_TRUE(low_events.ok()) << low_events.status();
    absl::StatusOr<std::vector<pp::v1::JobEvent>> high_events = high_watch.Rest();
    ASSERT_TRUE(high_events.ok()) << high_events.status();
    const int preempt_event =
        FindEvent(*low_events, 0, pp::v1::EVENT_PREEMPTED, absl::StrCat("preempted by job ", high));
    ASSERT_GE(preempt_event, 0);
    EXPECT_THAT((*low_events)[preempt_event].message(),
                ::testing::HasSubstr(absl::StrCat("checkpoints after step ", stop)));
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

}  // namespace pp::recovery

#endif  // PP_TESTS_E2E_RECOVERY_SHARED_CLUSTER_FIXTURE_H_
