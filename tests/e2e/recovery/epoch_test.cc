// Epochs end to end (docs/jobs.md "Data windows"), with real processes: a file of K = 60 training
// windows read 8 sequences a step, so an epoch is 7.5 steps. 2.5 epochs at D=1 and at D=2 equal
// the reference trainer bit for bit, and every checkpoint manifest's epoch (and GetJob's) is the
// definition's; `resume --epoch=2` starts from the newest checkpoint at or before epoch 2's first
// step and ends, on DP=2, close to the uninterrupted one-process run (data parallelism reorders
// the gradient sums) and bitwise equal between resumes of the D=1 and D=2 runs; `train.epochs: 2`
// runs exactly ceil(2 x 60 / 8) = 15 steps.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint.h"
#include "gtest/gtest.h"
#include "tests/support/cluster.h"
#include "tests/support/fixture.h"
#include "tests/support/results.h"

namespace pp::recovery {
namespace {

using ::pp::testing_support::Match;

constexpr int kWindows = 60;   // K = N - T: 76 tokens, T = 16
constexpr int kPerStep = 8;    // M x B = 2 x 4 sequences
constexpr int kSteps = 19;     // 2.5 epochs: ceil(150 / 8)
constexpr int kEpoch2Start = 15;  // ceil(2 x 60 / 8)

class EpochTest : public testing_support::ClusterTest {
 protected:
  EpochTest() : ClusterTest(/*corpus_seed=*/3, /*corpus_bytes=*/76) {}

  void SetUp() override {
    ClusterTest::SetUp();
    ASSERT_NO_FATAL_FAILURE(StartCluster(2));
  }

  // Checkpoints every 4 steps (none on an epoch's first step), all kept.
  pp::v1::JobSpec Spec(int pipeline) const {
    pp::v1::JobSpec spec = SpecFrom(R"pb(
      name: "epochs"
      model { seq_len: 16 d_model: 32 n_heads: 2 n_layers: 2 }
      train { microbatches: 2 microbatch_size: 4 seed: 9 }
      checkpoint { every_steps: 4 keep: 10 }
    )pb");
    spec.mutable_parallel()->set_pipeline(pipeline);
    spec.mutable_train()->set_steps(kSteps);
    return spec;
  }

  // The definition, written out: position = step x 8, completed = position / K, sequence =
  // position mod K.
  static void ExpectEpoch(const pp::v1::EpochPosition& epoch, int step) {
    const int64_t position = int64_t{step} * kPerStep;
    EXPECT_EQ(epoch.windows(), kWindows) << "step " << step;
    EXPECT_EQ(epoch.completed(), position / kWindows) << "step " << step;
    EXPECT_EQ(epoch.sequence(), position % kWindows) << "step " << step;
    EXPECT_DOUBLE_EQ(epoch.epoch(), static_cast<double>(position) / kWindows) << "step " << step;
  }

  void ExpectManifestEpochs(const std::string& job) {
    for (int step : {4, 8, 12, 16, kSteps}) {
      absl::StatusOr<pp::v1::CheckpointManifest> manifest = common::VerifyCheckpoint(
          common::StepDir(cluster_->checkpoint_root(), job, step));
      ASSERT_TRUE(manifest.ok()) << manifest.status();
      EXPECT_EQ(manifest->data_position(), int64_t{step} * kPerStep);
      ExpectEpoch(manifest->epoch(), step);
    }
  }
};

TEST_F(EpochTest, EpochsAtEveryCheckpointAndResumeAtEpochTwoOntoDataParallelIsBitwise) {
  std::vector<std::string> resumed;
  for (int pipeline : {1, 2}) {
    SCOPED_TRACE(absl::StrCat("D=", pipeline));
    const std::string id = Run(Spec(pipeline));
    ASSERT_FALSE(id.empty());
    ExpectMatchesReference(Spec(pipeline), id, Match::kBitwise);
    ASSERT_NO_FATAL_FAILURE(ExpectManifestEpochs(id));
    absl::StatusOr<pp::v1::Job> job = testing_support::GetJob(cluster_->stub(), id);
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(job->train_windows(), kWindows);
    ExpectEpoch(job->epoch(), kSteps);

    // Global batch kept: DP=2 of one microbatch each.
    pp::v1::ResumeJobRequest request;
    request.set_job_id(id);
    request.set_epoch(2);
    request.mutable_parallel()->set_pipeline(1);
    request.mutable_parallel()->set_data(2);
    request.mutable_parallel()->set_schedule("1f1b");
    absl::StatusOr<pp::v1::Job> done = ResumeToEnd(request);
    ASSERT_TRUE(done.ok()) << done.status();
    EXPECT_EQ(done->start_step(), 12) << "the newest checkpoint at or before step "
                                      << kEpoch2Start;
    EXPECT_EQ(done->step(), kSteps);
    EXPECT_EQ(done->placement_size(), 2);
    // Data parallelism sums the replicas' gradients in another order than the one-process
    // reference: close to it, and bitwise equal between the two resumed runs below.
    ExpectMatchesReference(Spec(pipeline), id, Match::kClose);
    ASSERT_NO_FATAL_FAILURE(ExpectManifestEpochs(id));
    resumed.push_back(id);
  }
  // The D=1 and D=2 runs wrote the same epoch-2 checkpoint bit for bit, so their DP=2 resumes
  // end bitwise equal: losses and every tensor with its moments.
  ASSERT_EQ(resumed.size(), 2u);
  const absl::Status same = testing_support::SameBits(
      cluster_->data_dir(), cluster_->checkpoint_root(), resumed[0], resumed[1], kSteps);
  EXPECT_TRUE(same.ok()) << same;
}

TEST_F(EpochTest, TrainEpochsRunsExactlyTheDocumentedSteps) {
  pp::v1::JobSpec spec = Spec(1);
  spec.mutable_train()->clear_steps();
  spec.mutable_train()->set_epochs(2);
  const std::string id = Run(spec);
  ASSERT_FALSE(id.empty());
  absl::StatusOr<pp::v1::Job> job = testing_support::GetJob(cluster_->stub(), id);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->spec().train().steps(), kEpoch2Start);
  EXPECT_EQ(job->spec().train().epochs(), 2);
  EXPECT_EQ(job->step(), kEpoch2Start);
  EXPECT_EQ(job->last_checkpoint_step(), kEpoch2Start);
  EXPECT_EQ(job->epoch().completed(), 2);
  EXPECT_EQ(job->epoch().sequence(), 0) << "120 sequences: two whole passes of 60";

  pp::v1::JobSpec both = Spec(1);
  both.mutable_train()->set_epochs(2);
  absl::StatusOr<std::string> refused = testing_support::SubmitJob(cluster_->stub(), both);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("train.steps, train.epochs: set exactly one"),
            std::string::npos)
      << refused.status();
}

}  // namespace
}  // namespace pp::recovery
