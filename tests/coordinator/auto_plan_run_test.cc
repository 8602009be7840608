// The pure parts of an "auto" job's run (coordinator/auto_plan_run.h): the plan decided from a
// calibration and its record, the steps checked against the prediction, the re-plans' bounds,
// and the calibration failures counted. No JobManager, no RPC.
#include "coordinator/auto_plan_run.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "coordinator/plan/plan.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pp::coordinator {
namespace {

using ::testing::HasSubstr;

// 8 blocks of C=64 over 2 ranks, 16 sequences a step; no trial steps unless a test asks.
pp::v1::Job AutoJob() {
  pp::v1::Job job;
  job.set_id("j");
  pp::v1::JobSpec* spec = job.mutable_spec();
  pp::v1::ModelSpec* m = spec->mutable_model();
  m->set_vocab_size(256);
  m->set_seq_len(64);
  m->set_d_model(128);
  m->set_n_heads(4);
  m->set_n_layers(8);
  spec->mutable_parallel()->set_pipeline(2);
  spec->mutable_parallel()->set_schedule("auto");
  pp::v1::AutoPlanSpec* bounds = spec->mutable_parallel()->mutable_auto_plan();
  bounds->set_trial_steps(-1);
  bounds->set_drift_threshold(0.25);
  bounds->set_drift_steps(2);
  bounds->set_max_replans(1);
  spec->mutable_train()->set_steps(100);
  spec->mutable_train()->set_microbatches(8);
  spec->mutable_train()->set_microbatch_size(2);
  spec->mutable_train()->set_lr(1e-3);
  spec->mutable_data()->set_path("/data/corpus.txt");  // never read: PlanJobSpec reads no file
  common::ApplyDefaults(spec);
  return job;
}

// Every unit of every rank timed at each calibration size: a block's forward 1 ms a sequence.
pp::v1::Calibration Calibrate(const pp::v1::JobSpec& spec) {
  pp::v1::Calibration calibration;
  const std::vector<int> sizes = pp::plan::CalibrationSequences(spec);
  for (int r = 0; r < spec.parallel().pipeline(); ++r) {
    pp::v1::RankCalibration* rank = calibration.add_ranks();
    rank->set_rank(r);
    rank->set_worker(absl::StrCat("w", r));
    rank->set_link_latency_seconds(1e-5);
    rank->set_link_bytes_per_second(1e9);
    for (const char* unit : {"embedding", "block", "head"}) {
      for (int n : sizes) {
        pp::v1::UnitCost* c = rank->add_units();
        c->set_unit(unit);
        c->set_sequences(n);
        const double f = 2e-4 + n * 1e-3;
        c->set_forward(f);
        c->set_backward(2 * f);
        c->set_backward_input(f);
        c->set_backward_weight(f);
        c->set_optimizer(1e-4);
      }
    }
  }
  return calibration;
}

StepSummary Step(int step, double seconds) {
  StepSummary summary;
  summary.step = step;
  summary.step_seconds = seconds;
  return summary;
}

TEST(AutoPlanRun, DecidesAndRecordsThePlannersChoice) {
  const pp::v1::Job job = AutoJob();
  absl::StatusOr<Decision> decision = AutoPlanRun::Decide(job, Calibrate(job.spec()));
  ASSERT_TRUE(decision.ok()) << decision.status();
  absl::StatusOr<pp::plan::CalibratedPlan> expected =
      pp::plan::ChooseCalibrated(job.spec(), Calibrate(job.spec()));
  ASSERT_TRUE(expected.ok()) << expected.status();
  EXPECT_EQ(decision->plan.chosen(), expected->chosen);
  EXPECT_EQ(decision->plan.reason(), expected->reason);
  EXPECT_DOUBLE_EQ(decision->plan.predicted_step_seconds(), expected->predicted_step_seconds);
  EXPECT_DOUBLE_EQ(decision->plan.first_predicted_step_seconds(), expected->predicted_step_seconds);
  EXPECT_EQ(decision->plan.replans(), 0);
  EXPECT_EQ(decision->plan.calibration().ranks_size(), 2);
  EXPECT_FALSE(common::IsAutoSchedule(decision->planned.spec.parallel()));
}

TEST(AutoPlanRun, AReplanKeepsMAndCountsIt) {
  pp::v1::Job job = AutoJob();
  absl::StatusOr<Decision> first = AutoPlanRun::Decide(job, Calibrate(job.spec()));
  ASSERT_TRUE(first.ok()) << first.status();
  *job.mutable_spec() = first->planned.spec;
  *job.mutable_plan() = first->plan;
  const CalibrationPlan measure = AutoPlanRun::PlanCalibration(job);
  EXPECT_TRUE(measure.replan);
  EXPECT_TRUE(common::IsAutoSchedule(measure.spec.parallel()));
  absl::StatusOr<Decision> again = AutoPlanRun::Decide(job, Calibrate(job.spec()));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->plan.replans(), 1);
  EXPECT_EQ(again->planned.spec.train().microbatches(), job.spec().train().microbatches());
}

TEST(AutoPlanRun, ACalibrationOfNoRankIsTheJobsFailure) {
  EXPECT_FALSE(AutoPlanRun::Decide(AutoJob(), pp::v1::Calibration()).ok());
}

TEST(AutoPlanRun, ChecksNoStepWithoutAPredictionNorTheAttemptsFirst) {
  AutoPlanRun run;
  pp::v1::Job job = AutoJob();
  EXPECT_FALSE(run.OnStep(job.spec(), 0, Step(5, 1), job.mutable_plan()).error);
  job.mutable_plan()->set_predicted_step_seconds(0.1);
  EXPECT_FALSE(run.OnStep(job.spec(), 4, Step(5, 1), job.mutable_plan()).error);
  EXPECT_TRUE(run.OnStep(job.spec(), 3, Step(5, 1), job.mutable_plan()).error);
}

TEST(AutoPlanRun, DriftStepsInARowCallForAReplan) {
  AutoPlanRun run;
  pp::v1::Job job = AutoJob();
  pp::v1::JobPlan* plan = job.mutable_plan();
  plan->set_predicted_step_seconds(0.1);
  StepOutcome off = run.OnStep(job.spec(), 0, Step(2, 0.2), plan);
  EXPECT_DOUBLE_EQ(*off.error, 1.0);
  EXPECT_DOUBLE_EQ(plan->prediction_error_ratio(), 1.0);
  EXPECT_EQ(plan->drift_run(), 1);
  EXPECT_FALSE(off.drift_replan);
  EXPECT_FALSE(run.OnStep(job.spec(), 0, Step(3, 0.11), plan).drift_replan);  // within 25%
  EXPECT_EQ(plan->drift_run(), 0);
  run.OnStep(job.spec(), 0, Step(4, 0.2), plan);
  StepOutcome drift = run.OnStep(job.spec(), 0, Step(5, 0.2), plan);
  ASSERT_TRUE(drift.drift_replan);
  EXPECT_THAT(*drift.drift_replan, HasSubstr("prediction drift: step 5"));
  EXPECT_FALSE(drift.trial_replan);
  EXPECT_FALSE(drift.refit);
}

TEST(AutoPlanRun, ReplansWithinMaxReplansAndNotAtTheEnd) {
  AutoPlanRun run;
  pp::v1::Job job = AutoJob();
  EXPECT_FALSE(run.Replan(job, 99, "late", false));  // ends before a new plan pays off
  EXPECT_EQ(run.Replan(job, 10, "drift", false), 11);
  ASSERT_TRUE(run.replan());
  EXPECT_THAT(*run.replan(), HasSubstr("drift; re-planning from the checkpoint of step 11"));
  EXPECT_FALSE(run.Replan(job, 12, "again", false));  // one at a time
  EXPECT_FALSE(run.calibrate());
  std::optional<std::string> why = run.TakeReplan();
  ASSERT_TRUE(why);
  EXPECT_THAT(*why, HasSubstr("drift"));
  EXPECT_TRUE(run.calibrate());
  EXPECT_FALSE(run.TakeReplan());
  job.mutable_plan()->set_replans(1);
  EXPECT_FALSE(run.Replan(job, 20, "spent", false));  // max_replans 1
}

TEST(AutoPlanRun, AReplanFromTheRefitChoosesOnceWithoutMeasuring) {
  AutoPlanRun run;
  EXPECT_TRUE(run.Replan(AutoJob(), 10, "trial", /*from_refit=*/true));
  EXPECT_TRUE(run.TakeReplanFromRefit());
  EXPECT_FALSE(run.TakeReplanFromRefit());
}

TEST(AutoPlanRun, CountsCalibrationFailuresInARow) {
  AutoPlanRun run;
  EXPECT_EQ(run.CalibrationFailed(), 1);
  EXPECT_EQ(run.CalibrationFailed(), 2);
  EXPECT_FALSE(run.TooManyFailures());
  run.CalibrationSucceeded();
  EXPECT_EQ(run.CalibrationFailed(), 1);
  EXPECT_EQ(run.CalibrationFailed(), 2);
  EXPECT_EQ(run.CalibrationFailed(), AutoPlanRun::kMaxCalibrationFailures);
  EXPECT_TRUE(run.TooManyFailures());
}

}  // namespace
}  // namespace pp::coordinator
