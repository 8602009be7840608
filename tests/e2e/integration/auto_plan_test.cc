// parallel.schedule "auto" on the CPU cluster: ppcoord calibrates the placed workers, records
// its choice in the job, and the job trains the reference trainer's bits for the chosen layout; a
// second job of the same shape on the same workers reuses the calibration, with the overheads the
// first job's trial steps measured; a worker slowed by the
// test hook (ppworker --test_slow_after_steps, --test_slow_factor) makes the prediction drift,
// and the job re-plans from a checkpoint, once, onto a layout that gives that worker less.
#include <algorithm>
#include <map>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/e2e/integration/fixture.h"
#include "tests/support/cluster.h"

namespace pp::integration {
namespace {

using ::pp::testing_support::GetJob;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class AutoScheduleTest : public IntegrationTest {
 protected:
  pp::v1::JobSpec AutoSpec(int steps) const {
    pp::v1::JobSpec spec = TinySpec("auto", 0, steps);
    spec.mutable_parallel()->set_chunks(0);
    spec.mutable_parallel()->clear_partition();
    spec.mutable_parallel()->mutable_auto_plan()->set_calibration_seconds(2);
    return spec;
  }

  pp::v1::Job Finished(const std::string& id) {
    absl::StatusOr<pp::v1::Job> job = GetJob(cluster_->stub(), id);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : pp::v1::Job{};
  }
};

// Units held by each pipeline rank under the job's layout.
std::map<int, int> UnitsPerRank(const pp::v1::Job& job) {
  std::map<int, int> units;
  for (const pp::v1::RankPlacement& p : job.placement()) {
    for (int s : p.stages()) units[p.pp()] += job.spec().parallel().stage_layers(s);
  }
  return units;
}

TEST_F(AutoScheduleTest, ChoosesRecordsAndTrainsTheReferenceBits) {
  StartCluster(4);
  const std::string id = Run(AutoSpec(4));
  ASSERT_FALSE(id.empty()) << cluster_->Logs();
  const pp::v1::Job job = Finished(id);
  const pp::v1::JobPlan& plan = job.plan();
  EXPECT_THAT(plan.reason(), StartsWith("schedule auto chose " + plan.chosen()));
  EXPECT_THAT(plan.chosen(), StartsWith(job.spec().parallel().schedule() + " V="));
  EXPECT_NE(job.spec().parallel().schedule(), "auto");
  EXPECT_EQ(job.spec().parallel().partition(), "explicit");
  EXPECT_EQ(job.spec().train().microbatches() * job.spec().train().microbatch_size(), 16);
  EXPECT_GT(plan.predicted_step_seconds(), 0);
  EXPECT_GT(plan.candidates(), 10);
  EXPECT_FALSE(plan.runner_up().empty());
  EXPECT_FALSE(plan.runner_up_reason().empty());
  // Calibration: every rank, every unit kind at every size, a link on all but the last rank,
  // within its bound.
  const pp::v1::Calibration& calibration = plan.calibration();
  ASSERT_EQ(calibration.ranks_size(), 4);
  EXPECT_FALSE(calibration.cached());
  EXPECT_GT(calibration.seconds(), 0);
  EXPECT_LT(calibration.seconds(), job.spec().parallel().auto_plan().calibration_seconds() + 5);
  for (const pp::v1::RankCalibration& rank : calibration.ranks()) {
    EXPECT_EQ(rank.worker(), job.placement(rank.rank()).worker());
    EXPECT_FALSE(rank.machine().empty()) << rank.ShortDebugString();
    EXPECT_GE(rank.cores(), 1);
    EXPECT_EQ(rank.units_size(), 3 * 3) << rank.ShortDebugString();  // sizes 1, 2, 4 (M = 16, 8, 4)
    for (const pp::v1::UnitCost& unit : rank.units()) EXPECT_GT(unit.forward(), 0);
    if (rank.rank() < 3) {
      EXPECT_GT(rank.link_latency_seconds(), 0);
      EXPECT_GT(rank.link_bytes_per_second(), 0);
    }
  }
  // Four workers of one machine with fewer cores: the choice was simulated with them shared.
  if (calibration.ranks(0).cores() < 4) {
    EXPECT_NE(plan.reason().find("4 ranks on "), std::string::npos) << plan.reason();
  }
  ExpectMatchesReference(job.spec(), id, testing_support::Match::kBitwise);

  // Trial steps 2..4 (the first pays for warm-up) refitted the prediction: the overheads are in
  // the calibration, the first prediction is kept beside the refitted one, the reason says so.
  ASSERT_TRUE(calibration.has_trial()) << plan.ShortDebugString();
  const pp::v1::StepOverheads& trial = calibration.trial();
  EXPECT_EQ(trial.steps(), 3);
  EXPECT_EQ(trial.plan(), plan.chosen());
  EXPECT_GT(trial.span_seconds(), 0);
  EXPECT_GE(trial.action_seconds(), 0);
  EXPECT_LE(trial.action_seconds(), trial.span_seconds());
  EXPECT_GT(plan.first_predicted_step_seconds(), 0);
  EXPECT_NE(plan.predicted_step_seconds(), plan.first_predicted_step_seconds());
  EXPECT_THAT(plan.reason(), HasSubstr("\ntrial steps to 4: "));

  // The same shape on the same workers: no calibration; the choice is made with the first job's
  // trial overheads, and its own trial refits them.
  const std::string again = Run(AutoSpec(5));
  ASSERT_FALSE(again.empty()) << cluster_->Logs();
  const pp::v1::Job second = Finished(again);
  EXPECT_TRUE(second.plan().calibration().cached());
  EXPECT_THAT(second.plan().reason(), HasSubstr("from 3 trial steps of " + plan.chosen()));
  EXPECT_EQ(second.plan().calibration().trial().plan(), second.plan().chosen());
  ExpectMatchesReference(second.spec(), again, testing_support::Match::kBitwise);
}

TEST_F(AutoScheduleTest, DriftRePlansOnceAwayFromASlowedWorker) {
  StartCluster(3);
  testing_support::WorkerOptions slowed;
  // w3 turns slow after the trial steps (2..4), and drift needs 3 steps in a row: the trial's
  // refit at step 4 absorbs the calibrated prediction's missing overheads (steps 2 and 3 often
  // run 2-5x longer than it) before they count, and every step from 5 is checked against the
  // measured prediction until the re-plan. A slowdown inside the trial is refitted as overhead,
  // leaving only steps 2 and 3 to catch it: once, in CI, neither did. 100x w3's compute (a unit
  // at 16 sequences, 1-2 ms a step) gave 295-470 ms steps against trial predictions of 50-163 ms
  // with 3 CPU hogs and a second copy of the test beside it. At 40x a layout leaving w3 one unit
  // hid the slowdown in the pipeline in 2 of 16 runs of two copies at once. The second
  // calibration times w3 100x slower too, at least two passes whatever its budget: at 2 s it
  // overran, the other ranks gave up waiting for it at the rendezvous, and the job failed.
  slowed.flags = {"--test_slow_after_steps=4", "--test_slow_factor=100"};
  ASSERT_TRUE(cluster_->StartWorker("w3", slowed).ok()) << cluster_->Logs();
  pp::v1::JobSpec spec = AutoSpec(16);
  pp::v1::AutoPlanSpec* bounds = spec.mutable_parallel()->mutable_auto_plan();
  bounds->set_max_chunks(1);  // one stage a rank: units per rank show the re-plan
  bounds->set_max_microbatches(4);  // w3 computes 4 sequences an action: its slowdown shows
  bounds->set_drift_steps(3);
  bounds->set_drift_threshold(0.5);
  bounds->set_trial_gain(1);  // no re-plan from the trial: the one allowed is the drift's
  bounds->set_calibration_seconds(6);
  const std::string id = Run(spec);
  ASSERT_FALSE(id.empty()) << cluster_->Logs();
  const pp::v1::Job job = Finished(id);
  EXPECT_EQ(job.plan().replans(), 1) << job.plan().reason() << "\n" << cluster_->Logs();
  int drift_restarts = 0;
  for (const pp::v1::JobRestart& restart : job.restart_log()) {
    if (restart.reason().find("prediction drift") != std::string::npos) ++drift_restarts;
  }
  EXPECT_EQ(drift_restarts, 1) << job.ShortDebugString();
  EXPECT_EQ(job.restarts(), 0);  // a re-plan is not a failure
  // The second calibration saw w3 slow: w3 now holds less than an even share of the 8 units, and
  // no rank holds fewer (another may hold as few: gpipe 3,1,3,1 was one choice).
  int slow_rank = -1;
  for (const pp::v1::RankPlacement& p : job.placement()) {
    if (p.worker() == "w3") slow_rank = p.pp();
  }
  ASSERT_GE(slow_rank, 0);
  const std::map<int, int> units = UnitsPerRank(job);
  EXPECT_LT(units.at(slow_rank), 8 / 4) << job.plan().chosen();
  for (const auto& [rank, count] : units) {
    EXPECT_LE(units.at(slow_rank), count) << job.plan().chosen();
  }
  ExpectMatchesReference(job.spec(), id, testing_support::Match::kBitwise);
}

}  // namespace
}  // namespace pp::integration
