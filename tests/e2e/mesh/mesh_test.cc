// Data and tensor parallelism end to end, with real processes (ppcoord + one ppworker per rank on loopback): a job on a
// DP x PP (x TP) mesh trains like the single-process reference trainer running the step's M
// microbatches of every replica (losses within 1e-5 relative per step: the replicas' gradient
// sums round differently from one accumulation), and its replicas end bitwise identical (each
// task compares the sha256 of its weights and moments with its replicas' before it succeeds).
// Checkpoints move between one process and any mesh both ways; a resume onto another number of
// replicas keeps the step's global batch (train.microbatches x parallel.data).
#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/substitute.h"
#include "common/checkpoint.h"
#include "common/file_io.h"
#include "common/safetensors.h"
#include "gtest/gtest.h"
#include "tests/support/fixture.h"
#include "tests/support/results.h"
#include "worker/trainer/trainer.h"

namespace pp::mesh {
namespace {

using ::pp::testing_support::Match;

constexpr int kSteps = 10;

// The layout data x pipeline x tensor (V=1).
pp::v1::ParallelSpec Layout(int data, int pipeline, int tensor, const std::string& schedule) {
  pp::v1::ParallelSpec layout;
  layout.set_data(data);
  layout.set_pipeline(pipeline);
  layout.set_tensor(tensor);
  layout.set_chunks(1);
  layout.set_schedule(schedule);
  return layout;
}

// Microbatches of one step over all replicas.
int GlobalBatch(int microbatches, const pp::v1::ParallelSpec& layout) {
  return microbatches * std::max(1, layout.data());
}

class MeshTest : public testing_support::ClusterTest {
 protected:
  MeshTest() : ClusterTest(/*corpus_seed=*/3, /*corpus_bytes=*/50000) {}

  // M microbatches per replica; a checkpoint every 5 steps.
  pp::v1::JobSpec Spec(int data, int pipeline, int tensor, int microbatches) const {
    return SpecFrom(absl::Substitute(
        R"pb(
          name: "mesh"
          model { seq_len: 16 d_model: 32 n_heads: 4 n_layers: 2 }
          parallel { data: $0 pipeline: $1 tensor: $2 }
          train { steps: $3 microbatches: $4 microbatch_size: 2 seed: 5 }
          checkpoint { every_steps: 5 }
        )pb",
        data, pipeline, tensor, kSteps, microbatches));
  }

  // Queues `job` (which ran `spec` to its end) again from its step `step` checkpoint on `layout`
  // and waits for its success there.
  void ResumeOn(const pp::v1::JobSpec& spec, const std::string& job, int step,
                const pp::v1::ParallelSpec& layout) {
    pp::v1::ResumeJobRequest request;
    request.set_job_id(job);
    request.set_step(step);
    *request.mutable_parallel() = layout;
    absl::StatusOr<pp::v1::Job> ended = ResumeToEnd(request);
    ASSERT_TRUE(ended.ok()) << ended.status();
    EXPECT_EQ(ended->start_step(), step);
    const pp::v1::ParallelSpec& got = ended->spec().parallel();
    EXPECT_EQ(std::max(1, got.data()), std::max(1, layout.data()));
    EXPECT_EQ(got.pipeline(), layout.pipeline());
    EXPECT_EQ(std::max(1, got.tensor()), std::max(1, layout.tensor()));
    EXPECT_EQ(ended->placement_size(),
              std::max(1, layout.data()) * layout.pipeline() * std::max(1, layout.tensor()));
    EXPECT_EQ(GlobalBatch(ended->spec().train().microbatches(), got),
              GlobalBatch(spec.train().microbatches(), spec.parallel()));
  }
};

TEST_F(MeshTest, DataTwoPipelineTwoMatchesSingleProcess) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(4));
  const pp::v1::JobSpec spec = Spec(/*data=*/2, /*pipeline=*/2, /*tensor=*/1, /*microbatches=*/2);
  ExpectMatchesReference(spec, Run(spec), Match::kClose);
}

TEST_F(MeshTest, PipelineTwoTensorTwoMatchesSingleProcess) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(4));
  const pp::v1::JobSpec spec = Spec(/*data=*/1, /*pipeline=*/2, /*tensor=*/2, /*microbatches=*/4);
  const std::string job = Run(spec);
  ExpectMatchesReference(spec, job, Match::kClose);
  // Each TP rank wrote its slices (and only rank 0 the replicated tensors).
  absl::StatusOr<std::string> shard = common::ReadFile(absl::StrCat(
      common::StepDir(cluster_->checkpoint_root(), job, kSteps), "/", common::ShardFileName(1)));
  ASSERT_TRUE(shard.ok()) << shard.status();
  absl::StatusOr<common::SafetensorsFile> parsed = common::ParseSafetensors(*shard, "rank 1");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->metadata.count(common::SliceKey("h.0.attn.qkv.weight")), 1u);
  for (const common::Tensor& t : parsed->tensors) {
    EXPECT_EQ(parsed->metadata.count(common::SliceKey(t.name)), 1u) << t.name;
  }
  // The manifest says the same: rank 1's shard holds slices only, and which ones.
  absl::StatusOr<common::Checkpoint> loaded =
      common::LoadCheckpoint(common::StepDir(cluster_->checkpoint_root(), job, kSteps));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  for (const pp::v1::CheckpointShard& s : loaded->manifest.shards()) {
    if (s.file() != common::ShardFileName(1)) continue;
    EXPECT_EQ(s.slices_size(), static_cast<int>(parsed->tensors.size()));
    EXPECT_EQ(s.tensors_size(), static_cast<int>(parsed->tensors.size()));
    for (const pp::v1::TensorSlice& slice : s.slices()) {
      if (slice.tensor() != "h.0.attn.qkv.weight") continue;
      EXPECT_EQ(slice.dim(), 0);
      EXPECT_EQ(slice.parts(), 3);  // q, k and v: rank 1 holds the second half of each
      EXPECT_EQ(slice.offset(), 16);
      EXPECT_EQ(slice.length(), 16);
    }
  }
}

TEST_F(MeshTest, DataTwoPipelineTwoTensorTwoMatchesSingleProcessAndResumesOnOne) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(8));
  const pp::v1::JobSpec spec = Spec(/*data=*/2, /*pipeline=*/2, /*tensor=*/2, /*microbatches=*/2);
  const std::string job = Run(spec);
  ExpectMatchesReference(spec, job, Match::kClose);
  // Its step-5 checkpoint (slices of replica 0 only) loads on one process, which trains on with
  // the same global batch (4 microbatches) and ends where the reference does.
  ResumeOn(spec, job, 5, Layout(1, 1, 1, "gpipe"));
  ExpectMatchesReference(spec, job, Match::kClose);
}

TEST_F(MeshTest, ACheckpointWrittenByOneProcessResumesOnDataTwoPipelineTwoTensorTwo) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(8));
  const pp::v1::JobSpec spec = Spec(/*data=*/1, /*pipeline=*/1, /*tensor=*/1, /*microbatches=*/4);
  const std::string job = Run(spec);
  // M=4 on one process: 2 per replica on two.
  ResumeOn(spec, job, 5, Layout(2, 2, 2, "1f1b"));
  ExpectMatchesReference(spec, job, Match::kClose);
}

TEST_F(MeshTest, CheckpointsMoveBetweenOneProcessAndPipelineTwoTensorTwo) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(4));
  const pp::v1::ParallelSpec mesh = Layout(1, 2, 2, "1f1b");
  const pp::v1::ParallelSpec single = Layout(1, 1, 1, "gpipe");

  // One process for 5 steps, then PP2 x TP2 from its checkpoint, and the other way round: both
  // end where the reference does.
  pp::v1::JobSpec spec = Spec(/*data=*/1, /*pipeline=*/1, /*tensor=*/1, /*microbatches=*/4);
  const std::string first = Run(spec);
  ResumeOn(spec, first, 5, mesh);
  ExpectMatchesReference(spec, first, Match::kClose);

  *spec.mutable_parallel() = mesh;
  const std::string second = Run(spec);
  ResumeOn(spec, second, 5, single);
  ExpectMatchesReference(spec, second, Match::kClose);
}

// Evaluation on a mesh: each replica evaluates its share of every eval batch and the last stages
// gather the losses, so the job's eval loss is the single-process trainer's over the same global
// batch (within the same 1e-5 the training losses keep; the weights differ in rounding).
TEST_F(MeshTest, EvalOnDataAndTensorParallelMeshesMatchesTheSingleProcessTrainer) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(4));
  for (const pp::v1::ParallelSpec& layout :
       {Layout(2, 2, 1, "1f1b"), Layout(1, 2, 2, "1f1b"), Layout(2, 1, 2, "gpipe")}) {
    SCOPED_TRACE(layout.ShortDebugString());
    pp::v1::JobSpec spec = Spec(layout.data(), layout.pipeline(), layout.tensor(), 2);
    spec.set_name(absl::StrCat("eval-d", layout.data(), "-p", layout.pipeline(), "-t",
                               layout.tensor()));
    spec.mutable_eval()->set_every_steps(5);
    spec.mutable_eval()->set_batches(2);
    spec.mutable_eval()->set_holdout_fraction(0.1);
    const std::string job = Run(spec);
    ASSERT_FALSE(job.empty());
    ExpectMatchesReference(spec, job, Match::kClose);
    absl::StatusOr<trainer::TrainResult> reference =
        trainer::Train(testing_support::SingleProcessSpec(spec), {});
    ASSERT_TRUE(reference.ok()) << reference.status();
    ASSERT_EQ(reference->evals.size(), 2u);
    absl::StatusOr<pp::v1::Job> ended = testing_support::GetJob(cluster_->stub(), job);
    ASSERT_TRUE(ended.ok()) << ended.status();
    EXPECT_EQ(ended->eval_step(), kSteps);
    EXPECT_EQ(reference->evals.back().step, kSteps);
    const double want = reference->evals.back().loss;
    EXPECT_NEAR(ended->eval_loss(), want, 1e-5 * std::fabs(want));
  }
}

}  // namespace
}  // namespace pp::mesh
