// common/epoch.h: the epoch of a data position, the first step of an epoch (exact past int64
// products), train.epochs resolved into train.steps, and the text ppctl prints.
#include "common/epoch.h"

#include <cstdint>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pp::common {
namespace {

using ::testing::HasSubstr;

// M=2 per replica, R=2 replicas, B=4: 16 sequences a step; T=16.
pp::v1::JobSpec Spec(int steps, int epochs) {
  pp::v1::JobSpec spec;
  spec.mutable_model()->set_seq_len(16);
  spec.mutable_parallel()->set_data(2);
  spec.mutable_train()->set_microbatches(2);
  spec.mutable_train()->set_microbatch_size(4);
  spec.mutable_train()->set_steps(steps);
  spec.mutable_train()->set_epochs(epochs);
  return spec;
}

TEST(EpochTest, PositionSplitsIntoCompletePassesAndSequencesIntoTheNext) {
  const pp::v1::EpochPosition at = EpochAt(/*position=*/150, /*train_windows=*/60);
  EXPECT_EQ(at.completed(), 2);
  EXPECT_EQ(at.sequence(), 30);
  EXPECT_EQ(at.windows(), 60);
  EXPECT_DOUBLE_EQ(at.epoch(), 2.5);
  EXPECT_EQ(EpochAt(0, 60).completed(), 0);
  EXPECT_EQ(EpochAt(120, 60).sequence(), 0);
}

TEST(EpochTest, StepEpochUsesEveryReplicasSequences) {
  // Step 5: position 5 x 16 = 80 = 1 x 60 + 20.
  const pp::v1::EpochPosition at = EpochAtStep(Spec(10, 0), 5, 60);
  EXPECT_EQ(at.completed(), 1);
  EXPECT_EQ(at.sequence(), 20);
  EXPECT_FALSE(EpochAtStep(Spec(10, 0), 5, 0).windows() > 0) << "K unknown: no epoch";
}

TEST(EpochTest, EpochStartsAtTheFirstStepWhosePositionReachesIt) {
  EXPECT_EQ(EpochStartStep(0, 60, 16), 0);
  EXPECT_EQ(EpochStartStep(1, 60, 16), 4);   // 60 / 16 = 3.75
  EXPECT_EQ(EpochStartStep(2, 60, 16), 8);   // 120 / 16 = 7.5
  EXPECT_EQ(EpochStartStep(4, 60, 16), 15);  // 240 / 16 exactly
}

TEST(EpochTest, EpochStartStepIsExactWhereTheProductOverflowsInt64) {
  const int64_t epoch = std::numeric_limits<int32_t>::max();
  const int64_t windows = int64_t{1} << 40;
  // epoch x K = (2^31 - 1) x 2^40 > 2^63, the result (2^31 - 1) x 2^20 fits.
  EXPECT_EQ(EpochStartStep(epoch, windows, int64_t{1} << 20), epoch << 20);
  EXPECT_EQ(EpochStartStep(epoch, windows + 1, int64_t{1} << 40), epoch + 1);  // rounds up
}

TEST(EpochTest, TrainWindowsLeaveOutTheHoldout) {
  pp::v1::JobSpec spec = Spec(10, 0);
  EXPECT_EQ(TrainWindowCount(spec, 1016), 1000);  // W = N - T
  spec.mutable_eval()->set_holdout_fraction(0.1);
  // H = floor(1000 x 0.1) = 100 held out, T = 16 between: K = 1000 - 100 - 16.
  EXPECT_EQ(TrainWindowCount(spec, 1016), 884);
}

TEST(EpochTest, EpochsResolveIntoTheDocumentedSteps) {
  absl::StatusOr<pp::v1::JobSpec> resolved = ResolveEpochs(Spec(0, 2), 60);
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ(resolved->train().steps(), 8);  // ceil(2 x 60 / 16)
  EXPECT_EQ(resolved->train().epochs(), 2);
  absl::StatusOr<pp::v1::JobSpec> steps = ResolveEpochs(Spec(7, 0), 60);
  ASSERT_TRUE(steps.ok());
  EXPECT_EQ(steps->train().steps(), 7);
}

TEST(EpochTest, ExactlyOneOfStepsAndEpochs) {
  for (auto [steps, epochs] : {std::pair{5, 2}, std::pair{0, 0}}) {
    absl::StatusOr<pp::v1::JobSpec> refused = ResolveEpochs(Spec(steps, epochs), 60);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(refused.status().message()),
                HasSubstr("train.steps, train.epochs: set exactly one"));
  }
  absl::StatusOr<pp::v1::JobSpec> negative = ResolveEpochs(Spec(0, -1), 60);
  EXPECT_THAT(std::string(negative.status().message()), HasSubstr("train.epochs: must be >= 0"));
}

TEST(EpochTest, EpochsWhoseStepsExceedAnInt32AreRefusedNamingTheField) {
  absl::StatusOr<pp::v1::JobSpec> refused =
      ResolveEpochs(Spec(0, 1'000'000), int64_t{1} << 40);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("train.epochs: 1000000 epochs"));
}

TEST(EpochTest, TextTruncatesToHundredths) {
  EXPECT_EQ(EpochText(EpochAt(150, 60)), "2.50");
  EXPECT_EQ(EpochText(EpochAt(1999, 1000)), "1.99") << "never rounded up to the next pass";
  EXPECT_EQ(EpochText(pp::v1::EpochPosition()), "");
}

}  // namespace
}  // namespace pp::common
