#include "common/step_math.h"

#include <vector>

#include "gtest/gtest.h"

namespace pp::common {
namespace {

// lr 1e-2, min_lr 1e-3, 2 warm-up steps, then 4 steps of decay, in a run of `steps` steps.
pp::v1::TrainSpec Schedule(const char* decay, int decay_steps, int steps = 20) {
  pp::v1::TrainSpec train;
  train.set_steps(steps);
  train.set_lr(1e-2);
  train.set_min_lr(1e-3);
  train.set_warmup_steps(2);
  train.set_decay(decay);
  train.set_decay_steps(decay_steps);
  return train;
}

// Expected rates of steps 1..8, evaluated independently (Python, math.cos) from the formula in
// step_math.h: warm-up lr*s/W, then q = min(1, (s - W)/D).
TEST(LearningRateTest, CosineWarmsUpThenDecaysToMinLrAndStays) {
  const std::vector<double> want = {0.005, 0.01, 0.008681980515339464, 0.0055,
                                    0.0023180194846605367, 0.001, 0.001, 0.001};
  const pp::v1::TrainSpec train = Schedule("cosine", 4);
  for (int s = 1; s <= 8; ++s) EXPECT_DOUBLE_EQ(LearningRateAt(train, s), want[s - 1]) << s;
}

TEST(LearningRateTest, LinearWarmsUpThenDecaysToMinLrAndStays) {
  const std::vector<double> want = {0.005, 0.01, 0.00775, 0.0055, 0.00325, 0.001, 0.001, 0.001};
  const pp::v1::TrainSpec train = Schedule("linear", 4);
  for (int s = 1; s <= 8; ++s) EXPECT_DOUBLE_EQ(LearningRateAt(train, s), want[s - 1]) << s;
}

TEST(LearningRateTest, ConstantHoldsLrAfterTheWarmUp) {
  for (const char* decay : {"", "constant"}) {
    const pp::v1::TrainSpec train = Schedule(decay, 4);
    EXPECT_DOUBLE_EQ(LearningRateAt(train, 1), 0.005);
    for (int s = 2; s <= 20; ++s) EXPECT_EQ(LearningRateAt(train, s), 1e-2) << s;
  }
  pp::v1::TrainSpec no_schedule;
  no_schedule.set_steps(5);
  no_schedule.set_lr(3e-4);
  for (int s = 1; s <= 5; ++s) EXPECT_EQ(LearningRateAt(no_schedule, s), 3e-4) << s;
}

TEST(LearningRateTest, DecayStepsDefaultsToTheStepsAfterTheWarmUp) {
  // steps 6, warm-up 2: decay over the 4 remaining steps, the same as decay_steps 4.
  for (int s = 1; s <= 6; ++s) {
    EXPECT_EQ(LearningRateAt(Schedule("cosine", 0, 6), s), LearningRateAt(Schedule("cosine", 4), s))
        << s;
  }
  EXPECT_EQ(LearningRateAt(Schedule("linear", 0, 6), 6), 1e-3);
  // A warm-up as long as the run: decay over at least one step, never a division by zero.
  EXPECT_EQ(LearningRateAt(Schedule("linear", 0, 2), 3), 1e-3);
}

}  // namespace
}  // namespace pp::common
