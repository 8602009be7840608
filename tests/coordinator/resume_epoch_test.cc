// Resuming by epoch (coordinator/resume_checkpoint.h, resume_logic.h): the step bound of
// `--epoch=N`, the newest committed checkpoint at or before it, the refusals, and a spec of
// train.epochs whose steps are derived again on resume.
#include <filesystem>
#include <string>

#include "common/checkpoint.h"
#include "common/manifest.h"
#include "coordinator/resume_checkpoint.h"
#include "coordinator/resume_logic.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pp::coordinator {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// 2 x 4 = 8 sequences a step.
pp::v1::JobSpec Spec() {
  pp::v1::JobSpec spec;
  spec.set_name("epochs");
  spec.mutable_model()->set_seq_len(16);
  spec.mutable_parallel()->set_data(1);
  spec.mutable_train()->set_microbatches(2);
  spec.mutable_train()->set_microbatch_size(4);
  spec.mutable_train()->set_steps(19);
  return spec;
}

pp::v1::ResumeJobRequest ByEpoch(int epoch) {
  pp::v1::ResumeJobRequest request;
  request.set_job_id("job-1");
  request.set_epoch(epoch);
  return request;
}

TEST(ResumeEpochTest, BoundIsTheFirstStepOfTheEpoch) {
  // K = 60: epoch 2 starts at position 120, step ceil(120 / 8) = 15.
  absl::StatusOr<int64_t> bound = ResumeStepBound(ByEpoch(2), Spec(), 60);
  ASSERT_TRUE(bound.ok()) << bound.status();
  EXPECT_EQ(*bound, 15);
  EXPECT_EQ(*ResumeStepBound(ByEpoch(0), Spec(), 60), 0) << "no epoch: no bound";
}

TEST(ResumeEpochTest, EpochWithoutKnownWindowsIsRefused) {
  absl::StatusOr<int64_t> bound = ResumeStepBound(ByEpoch(2), Spec(), 0);
  EXPECT_EQ(bound.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(bound.status().message()), HasSubstr("resume by step"));
}

TEST(ResumeEpochTest, StepAndEpochAreExclusive) {
  pp::v1::ResumeJobRequest request = ByEpoch(2);
  request.set_step(4);
  EXPECT_EQ(CheckResumeRequest(request).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckResumeRequest(ByEpoch(-1)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(CheckResumeRequest(ByEpoch(2)).ok());
}

TEST(ResumeEpochTest, EpochSpecHasItsStepsDerivedAgainUnlessStepsAreAsked) {
  pp::v1::JobSpec spec = Spec();
  spec.mutable_train()->set_epochs(2);
  absl::StatusOr<pp::v1::JobSpec> again = ResumedSpec(spec, ByEpoch(1));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->train().steps(), 0);
  EXPECT_EQ(again->train().epochs(), 2);
  pp::v1::ResumeJobRequest longer = ByEpoch(1);
  longer.set_steps(40);
  absl::StatusOr<pp::v1::JobSpec> steps = ResumedSpec(spec, longer);
  ASSERT_TRUE(steps.ok());
  EXPECT_EQ(steps->train().steps(), 40);
  EXPECT_EQ(steps->train().epochs(), 0);
}

class ResumeCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = (fs::temp_directory_path() /
             ("pp_resume_epoch_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed())))
                .string();
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // A committed checkpoint of `step` with one one-value shard.
  void Commit(int step) {
    const std::string dir = common::StepDir(root_, "job-1", step);
    fs::create_directories(dir);
    absl::StatusOr<pp::v1::CheckpointShard> shard =
        common::WriteShard(dir, common::ShardFileName(0), {{"x", {1}, {1.0f}}});
    ASSERT_TRUE(shard.ok()) << shard.status();
    pp::v1::CheckpointManifest manifest = common::BuildManifest(
        "job-1", step, Spec(), common::MeshLayout(Spec(), {4}), {*shard}, 0, /*train_windows=*/60);
    absl::Status committed = common::CommitManifest(dir, manifest);
    ASSERT_TRUE(committed.ok()) << committed;
  }

  std::string root_;
};

TEST_F(ResumeCheckpointTest, NewestCheckpointAtOrBeforeTheEpochStart) {
  for (int step : {4, 8, 12, 16, 19}) ASSERT_NO_FATAL_FAILURE(Commit(step));
  ResumeCheckpoint found = FindResumeCheckpoint(root_, ByEpoch(2), Spec(), 60);
  ASSERT_TRUE(found.manifest.ok()) << found.manifest.status();
  EXPECT_EQ(found.manifest->step(), 12) << "epoch 2 starts at step 15";
  EXPECT_EQ(found.manifest->epoch().completed(), 1);  // 96 sequences of 60
  EXPECT_EQ(found.manifest->epoch().sequence(), 36);
  ResumeCheckpoint at_start = FindResumeCheckpoint(root_, ByEpoch(1), Spec(), 64);
  ASSERT_TRUE(at_start.manifest.ok());
  EXPECT_EQ(at_start.manifest->step(), 8) << "epoch 1 of K=64 starts exactly at step 8";
}

TEST_F(ResumeCheckpointTest, NoCheckpointBeforeTheEpochIsRefusedNamingIt) {
  ASSERT_NO_FATAL_FAILURE(Commit(16));
  ResumeCheckpoint found = FindResumeCheckpoint(root_, ByEpoch(2), Spec(), 60);
  ASSERT_FALSE(found.manifest.ok());
  EXPECT_THAT(std::string(found.manifest.status().message()),
              HasSubstr("epoch 2 starts at step 15 and no committed checkpoint at or before it"));
}

}  // namespace
}  // namespace pp::coordinator
