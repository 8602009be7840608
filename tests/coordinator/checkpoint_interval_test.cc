// checkpoint.autoEverySteps's pure parts (coordinator/checkpoint_interval.h): Young's and Daly's
// intervals on known inputs, their conversion to steps and clamps, the checkpoint cost from
// synthetic completed steps, and the failure rate's prior and its update.
#include "coordinator/checkpoint_interval.h"

#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pp::coordinator {
namespace {

using ::testing::HasSubstr;

constexpr double kWeek = 7 * 24 * 3600.0;

// 100 steps, a checkpoint after every 10th, no eval.
pp::v1::JobSpec Spec(int every_steps = 10) {
  pp::v1::JobSpec spec;
  spec.mutable_train()->set_steps(100);
  spec.mutable_checkpoint()->set_every_steps(every_steps);
  spec.mutable_checkpoint()->set_auto_every_steps(true);
  return spec;
}

TEST(CheckpointIntervalTest, YoungIsTheSquareRootOfTwiceCostTimesMtbf) {
  // C = 10 s, M = 1 h: sqrt(2 * 10 * 3600) = sqrt(72000).
  EXPECT_NEAR(YoungIntervalSeconds(10, 3600), 268.328, 1e-3);
  EXPECT_NEAR(YoungIntervalSeconds(2, 50), 14.142, 1e-3);
  EXPECT_EQ(YoungIntervalSeconds(0, 3600), 0);
  EXPECT_EQ(YoungIntervalSeconds(10, 0), 0);
}

TEST(CheckpointIntervalTest, DalyCorrectsYoungByTheHigherOrderTerms) {
  // sqrt(72000) * (1 + sqrt(10/7200)/3 + (10/7200)/9) - 10.
  EXPECT_NEAR(DalyIntervalSeconds(10, 3600), 261.703, 1e-3);
  // C = 1 min, M = 1 h: 657.267 * 1.031357 - 60.
  EXPECT_NEAR(DalyIntervalSeconds(60, 3600), 617.876, 1e-3);
  // For C << M the two agree: the correction is about -C.
  EXPECT_NEAR(DalyIntervalSeconds(1, 1e6), YoungIntervalSeconds(1, 1e6) - 1, 1.0);
  // C >= 2M: once per MTBF.
  EXPECT_EQ(DalyIntervalSeconds(100, 40), 40);
  EXPECT_EQ(DalyIntervalSeconds(80, 40), 40);
  EXPECT_EQ(DalyIntervalSeconds(0, 3600), 0);
}

TEST(CheckpointIntervalTest, IntervalStepsDividesByTheStepTimeAndRounds) {
  // 261.703 s / 2 s = 130.85 -> 131 steps; / 3 s = 87.23 -> 87.
  EXPECT_EQ(IntervalSteps(10, 3600, 2.0, 1, 1000), 131);
  EXPECT_EQ(IntervalSteps(10, 3600, 3.0, 1, 1000), 87);
}

TEST(CheckpointIntervalTest, IntervalStepsClamps) {
  EXPECT_EQ(IntervalSteps(10, 3600, 0.1, 1, 1000), 1000);  // 2617 steps
  EXPECT_EQ(IntervalSteps(10, 3600, 2.0, 1, 100), 100);
  EXPECT_EQ(IntervalSteps(10, 3600, 2.0, 200, 1000), 200);
  EXPECT_EQ(IntervalSteps(0, 3600, 2.0, 1, 1000), 1);       // a free checkpoint: after every step
  EXPECT_EQ(IntervalSteps(10, 3600, 1e-9, 1, 1000), 1000);  // no int overflow on the way
  EXPECT_EQ(IntervalSteps(10, std::numeric_limits<double>::infinity(), 2.0, 1, 500), 500);
}

TEST(CheckpointIntervalTest, IntervalStepsIsUnknownWithoutACostOrAStepTime) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(IntervalSteps(-1, 3600, 2.0, 1, 1000), std::nullopt);
  EXPECT_EQ(IntervalSteps(nan, 3600, 2.0, 1, 1000), std::nullopt);
  EXPECT_EQ(IntervalSteps(10, 3600, 0, 1, 1000), std::nullopt);
  EXPECT_EQ(IntervalSteps(10, 3600, nan, 1, 1000), std::nullopt);
  EXPECT_EQ(IntervalSteps(10, 0, 2.0, 1, 1000), std::nullopt);
}

// Steps first..last of `attempt`, each completing `wall` seconds after the one before, reporting
// `seconds`, and `after_checkpoint` seconds for a step right after a checkpoint.
void Feed(CheckpointCost& cost, const pp::v1::JobSpec& spec, int attempt, int first, int last,
          double seconds, double after_checkpoint, double wall, double* now) {
  for (int step = first; step <= last; ++step) {
    const bool after = (step - 1) % spec.checkpoint().every_steps() == 0 && step > 1;
    *now += wall;
    cost.AddStep(spec, attempt, step, after ? after_checkpoint : seconds, *now);
  }
}

TEST(CheckpointCostTest, MediansOfTheStepsAfterCheckpointsAndOfTheOthers) {
  const pp::v1::JobSpec spec = Spec();
  CheckpointCost cost;
  EXPECT_EQ(cost.CostSeconds(), std::nullopt);
  EXPECT_EQ(cost.StepSeconds(), std::nullopt);
  double now = 1000;
  // Steps 11, 21 and 31 follow the checkpoints after 10, 20 and 30; step 1 (the attempt's first)
  // counts for neither; the checkpoint steps themselves (10, 20, 30) are plain ones.
  Feed(cost, spec, 0, 1, 40, 2.0, 5.0, 0.001, &now);
  EXPECT_EQ(cost.after_checkpoint_samples(), 3u);
  EXPECT_EQ(cost.plain_samples(), 36u);
  EXPECT_DOUBLE_EQ(*cost.StepSeconds(), 2.0);
  EXPECT_DOUBLE_EQ(*cost.CostSeconds(), 3.0);
}

TEST(CheckpointCostTest, OneSlowStepDoesNotMoveTheMedian) {
  const pp::v1::JobSpec spec = Spec();
  CheckpointCost cost;
  double now = 0;
  Feed(cost, spec, 0, 1, 30, 2.0, 5.0, 0.001, &now);
  now += 0.001;
  cost.AddStep(spec, 0, 31, 60.0, now);  // after a checkpoint, a minute-long hiccup
  cost.AddStep(spec, 0, 32, 40.0, now + 0.001);
  EXPECT_DOUBLE_EQ(*cost.StepSeconds(), 2.0);
  EXPECT_DOUBLE_EQ(*cost.CostSeconds(), 3.0);  // median of 5, 5, 60
}

// The copy of the shards delays every rank alike, so their step_seconds miss it: the wall time
// between the completions at ppcoord shows it.
TEST(CheckpointCostTest, WallTimeBetweenCompletionsCountsWhenLonger) {
  const pp::v1::JobSpec spec = Spec();
  CheckpointCost cost;
  double now = 0;
  for (int step = 1; step <= 40; ++step) {
    now += step > 1 && (step - 1) % 10 == 0 ? 4.5 : 1.5;  // 3 s between steps 10 and 11, ...
    cost.AddStep(spec, 0, step, 1.0, now);                // every rank measured 1 s
  }
  EXPECT_DOUBLE_EQ(*cost.StepSeconds(), 1.5);
  EXPECT_DOUBLE_EQ(*cost.CostSeconds(), 3.0);
}

TEST(CheckpointCostTest, CostIsNeverNegative) {
  const pp::v1::JobSpec spec = Spec();
  CheckpointCost cost;
  double now = 0;
  Feed(cost, spec, 0, 1, 40, 2.0, 1.5, 0.001, &now);  // steps after checkpoints ran faster
  EXPECT_DOUBLE_EQ(*cost.CostSeconds(), 0.0);
}

TEST(CheckpointCostTest, SkipsEachAttemptsFirstStepGapsAndEvalSteps) {
  pp::v1::JobSpec spec = Spec();
  CheckpointCost cost;
  double now = 0;
  Feed(cost, spec, 0, 1, 10, 2.0, 5.0, 0.001, &now);
  EXPECT_EQ(cost.plain_samples(), 9u);  // 2..10
  // Attempt 1 resumes from step 10: its first step 11 follows no step of its own.
  Feed(cost, spec, 1, 11, 11, 2.0, 99.0, 0.001, &now);
  EXPECT_EQ(cost.after_checkpoint_samples(), 0u);
  // A gap (step 13 never completed): 14 follows nothing.
  now += 0.001;
  cost.AddStep(spec, 1, 14, 99.0, now);
  EXPECT_EQ(cost.plain_samples(), 9u);
  // An eval after step 15: its time holds the eval.
  spec.mutable_eval()->set_batches(1);
  spec.mutable_eval()->set_every_steps(5);
  Feed(cost, spec, 1, 15, 15, 99.0, 99.0, 0.001, &now);
  EXPECT_EQ(cost.plain_samples(), 9u);
  Feed(cost, spec, 1, 16, 16, 2.0, 99.0, 0.001, &now);
  EXPECT_EQ(cost.plain_samples(), 10u);
}

TEST(CheckpointCostTest, KeepsTheNewestSamplesOfEachKind) {
  const pp::v1::JobSpec spec = Spec(/*every_steps=*/1000);  // none due before step 100
  CheckpointCost cost;
  double now = 0;
  for (int step = 1; step <= 99; ++step) cost.AddStep(spec, 0, step, 1.0, now += 0.001);
  for (int step = 1; step <= static_cast<int>(kCostSamples) + 1; ++step) {
    cost.AddStep(spec, 1, step, 7.0, now += 0.001);  // the first of attempt 1 does not count
  }
  EXPECT_EQ(cost.plain_samples(), kCostSamples);
  EXPECT_DOUBLE_EQ(*cost.StepSeconds(), 7.0);  // every older 1 s step dropped
}

TEST(FailureRateTest, ThePriorIsOneFailurePerWorkerWeek) {
  const FailureRate rate;
  EXPECT_EQ(rate.failures(), 0);
  EXPECT_DOUBLE_EQ(rate.WorkerMtbfSeconds(), kWeek);
  EXPECT_DOUBLE_EQ(rate.JobMtbfSeconds(4), kWeek / 4);  // 151200 s: 42 h
  EXPECT_DOUBLE_EQ(rate.JobMtbfSeconds(0), kWeek);
}

TEST(FailureRateTest, FailuresAndWorkerSecondsUpdateThePosteriorMean) {
  FailureRate rate;
  rate.AddWorkerSeconds(kWeek);
  EXPECT_DOUBLE_EQ(rate.WorkerMtbfSeconds(), 2 * kWeek);  // two weeks, one (prior) failure
  for (int i = 0; i < 3; ++i) rate.AddFailure();
  EXPECT_DOUBLE_EQ(rate.WorkerMtbfSeconds(), 2 * kWeek / 4);  // 302400 s
  EXPECT_DOUBLE_EQ(rate.JobMtbfSeconds(2), 2 * kWeek / 8);
  rate.AddWorkerSeconds(-5);
  rate.AddWorkerSeconds(std::numeric_limits<double>::quiet_NaN());
  EXPECT_DOUBLE_EQ(rate.worker_seconds(), kWeek);
  // Many failures in little time: the observations dominate the prior. 199 failures in 32
  // worker-hours: (604800 + 115200) / (1 + 199) = 3600 s, where the data alone say 579 s.
  FailureRate flaky;
  for (int i = 0; i < 199; ++i) flaky.AddFailure();
  flaky.AddWorkerSeconds(32 * 3600.0);
  EXPECT_DOUBLE_EQ(flaky.WorkerMtbfSeconds(), 3600.0);
}

// A measured job: C = 3 s, step 2 s, on 2 workers under the prior alone (M = 302400 s):
// Daly's 1344.997 s / 2 s = 672.499 -> 672 steps, within train.steps 1000.
IntervalChoice MeasuredChoice(const pp::v1::JobSpec& spec, double after, double plain) {
  CheckpointCost cost;
  double now = 0;
  Feed(cost, spec, 0, 1, 40, plain, after, 0.001, &now);
  return ChooseEverySteps(spec, cost, FailureRate(), 2);
}

TEST(ChooseEveryStepsTest, UsesDalyOnTheMeasuredCostAndTheJobsMtbf) {
  pp::v1::JobSpec spec = Spec();
  spec.mutable_train()->set_steps(1000);
  const IntervalChoice choice = MeasuredChoice(spec, 5.0, 2.0);
  EXPECT_TRUE(choice.measured);
  EXPECT_DOUBLE_EQ(choice.cost_seconds, 3.0);
  EXPECT_DOUBLE_EQ(choice.step_seconds, 2.0);
  EXPECT_DOUBLE_EQ(choice.mtbf_seconds, kWeek / 2);
  EXPECT_NEAR(DalyIntervalSeconds(3.0, kWeek / 2), 1344.997, 1e-3);
  EXPECT_EQ(choice.every_steps, 672);
  // Clamped to train.steps.
  spec.mutable_train()->set_steps(300);
  EXPECT_EQ(MeasuredChoice(spec, 5.0, 2.0).every_steps, 300);
}

TEST(ChooseEveryStepsTest, ACostTooSmallToMeasureCountsAsOnePercentOfAStep) {
  pp::v1::JobSpec spec = Spec();
  spec.mutable_train()->set_steps(1000);
  const IntervalChoice choice = MeasuredChoice(spec, 2.0, 2.0);
  EXPECT_DOUBLE_EQ(choice.cost_seconds, 0.0);
  EXPECT_DOUBLE_EQ(choice.used_cost_seconds, 0.02);
  EXPECT_EQ(choice.every_steps, 55);  // Daly(0.02 s, 302400 s) = 109.97 s
  EXPECT_THAT(DescribeChoice(choice, FailureRate(), 2), HasSubstr("measured 0.000 s"));
}

TEST(ChooseEveryStepsTest, WithoutMeasurementsKeepsTheIntervalOrTakesTheDefault) {
  const IntervalChoice kept = ChooseEverySteps(Spec(7), CheckpointCost(), FailureRate(), 2);
  EXPECT_FALSE(kept.measured);
  EXPECT_EQ(kept.every_steps, 7);
  EXPECT_EQ(ChooseEverySteps(Spec(0), CheckpointCost(), FailureRate(), 2).every_steps,
            kDefaultAutoEverySteps);
  EXPECT_THAT(DescribeChoice(kept, FailureRate(), 2), HasSubstr("no checkpoint cost measured"));
}

TEST(ApplyAutoEveryStepsTest, SetsTheSpecOfAnAutoJobOnly) {
  pp::v1::Job job;
  job.set_id("tiny-1");
  job.set_attempt(1);
  *job.mutable_spec() = Spec();
  job.mutable_spec()->mutable_train()->set_steps(1000);
  job.add_placement()->set_worker("w0");
  job.add_placement()->set_worker("w1");
  CheckpointCost cost;
  double now = 0;
  Feed(cost, job.spec(), 0, 1, 40, 2.0, 5.0, 0.001, &now);

  const std::string line = ApplyAutoEverySteps(job, cost, FailureRate());
  EXPECT_EQ(job.spec().checkpoint().every_steps(), 672);
  EXPECT_THAT(line, HasSubstr("job tiny-1: attempt 1: checkpoint every 672 steps"));
  EXPECT_THAT(line, HasSubstr("cost 3.000 s"));
  EXPECT_THAT(line, HasSubstr("MTBF 302400 s of 2 worker(s)"));
  EXPECT_THAT(line, HasSubstr("step 2.000 s"));

  job.mutable_spec()->mutable_checkpoint()->set_auto_every_steps(false);
  job.mutable_spec()->mutable_checkpoint()->set_every_steps(10);
  EXPECT_EQ(ApplyAutoEverySteps(job, cost, FailureRate()), "");
  EXPECT_EQ(job.spec().checkpoint().every_steps(), 10);
}

}  // namespace
}  // namespace pp::coordinator
