// The store, the data folder and the scheduler under trouble, with real processes (ppcoord +
// ppworker on loopback): ppcoord killed right after it pruned old checkpoints restarts from the
// new one; a second ppcoord on the same data folder is refused; a job too large for the cluster
// waits with its reason while later jobs that fit run; a checkpoint whose slice metadata overflows
// int fails the resume with DataLoss and leaves every daemon up.
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/checkpoint.h"
#include "common/file_io.h"
#include "common/safetensors.h"
#include "common/sha256.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/cluster.h"
#include "tests/support/fixture.h"
#include "tests/support/process.h"

namespace pp::robustness {
namespace {

using ::pp::testing_support::CommandResult;
using ::pp::testing_support::GetJob;
using ::pp::testing_support::JobWatch;
using ::pp::testing_support::Process;
using ::pp::testing_support::RunCommand;
using ::pp::testing_support::SubmitJob;
using ::pp::testing_support::WaitForJob;
using ::pp::testing_support::WaitSucceeded;
using ::testing::HasSubstr;

constexpr absl::Duration kJobTimeout = absl::Seconds(60);

class RobustnessTest : public testing_support::ClusterTest {
 protected:
  RobustnessTest() : ClusterTest(/*corpus_seed=*/13, /*corpus_bytes=*/50000) {}

  // `pipeline` stages, one layer each, checkpoints every 5 steps.
  pp::v1::JobSpec Spec(int pipeline, int steps, int keep = 3) const {
    pp::v1::JobSpec spec = SpecFrom(R"pb(
      name: "robust"
      model { seq_len: 32 d_model: 64 n_heads: 4 }
      train { microbatches: 8 microbatch_size: 4 seed: 5 }
      checkpoint { every_steps: 5 }
    )pb");
    spec.mutable_model()->set_n_layers(pipeline);
    spec.mutable_parallel()->set_pipeline(pipeline);
    spec.mutable_train()->set_steps(steps);
    spec.mutable_checkpoint()->set_keep(keep);
    return spec;
  }
};

// The job row that names the new checkpoint is stored before the older ones are pruned, so
// ppcoord dying right after the prune restarts the job from the new checkpoint (were the prune
// first, the row would still name step 5, whose folder is gone, and the job would start over).
TEST_F(RobustnessTest, PpcoordKilledRightAfterAPruneResumesFromTheNewCheckpoint) {
  testing_support::ClusterOptions options;
  options.bin_dir = PP_BIN_DIR;
  options.dir = (dir_ / "cluster").string();
  options.coordinator_flags = {"--worker_timeout=2s", "--heartbeat_interval=200ms"};
  options.coordinator_env = {{"PP_TEST_EXIT_AFTER_PRUNE", "10"}};
  options.worker_flags = {"--comm_timeout=10s"};
  absl::StatusOr<std::unique_ptr<testing_support::Cluster>> cluster =
      testing_support::Cluster::Start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  cluster_ = *std::move(cluster);
  ASSERT_TRUE(cluster_->AddWorkers(2).ok()) << cluster_->Logs();

  const pp::v1::JobSpec spec = Spec(/*pipeline=*/2, /*steps=*/20, /*keep=*/1);
  absl::StatusOr<std::string> id = SubmitJob(cluster_->stub(), spec);
  ASSERT_TRUE(id.ok()) << id.status();
  absl::StatusOr<int> exited = cluster_->coordinator_process().Wait(kJobTimeout);
  ASSERT_TRUE(exited.ok()) << exited.status() << cluster_->Logs();
  ASSERT_EQ(*exited, 3) << "the test hook ends ppcoord with 3\n" << cluster_->Logs();
  const std::string root = cluster_->checkpoint_root();
  ASSERT_TRUE(std::filesystem::exists(common::StepDir(root, *id, 10) + "/manifest.json"));
  ASSERT_FALSE(std::filesystem::exists(common::StepDir(root, *id, 5)));  // pruned (keep 1)

  ASSERT_TRUE(cluster_->RestartCoordinator().ok()) << cluster_->Logs();
  absl::StatusOr<pp::v1::Job> done = WaitSucceeded(cluster_->stub(), *id, kJobTimeout);
  ASSERT_TRUE(done.ok()) << done.status() << cluster_->Logs();
  ASSERT_GE(done->restart_log_size(), 1);
  EXPECT_EQ(done->restart_log(done->restart_log_size() - 1).from_step(), 10);
  EXPECT_EQ(done->start_step(), 10);
  ClusterTest::ExpectMatchesReference(spec, *id, testing_support::Match::kBitwise);
}

TEST_F(RobustnessTest, ASecondPpcoordOnTheSameDataFolderIsRefused) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(0));
  const std::string log = (dir_ / "second-ppcoord.log").string();
  absl::StatusOr<std::unique_ptr<Process>> second =
      Process::Start({std::string(PP_BIN_DIR) + "/ppcoord", "--grpc=127.0.0.1:0",
                      "--metrics=127.0.0.1:0", "--data_dir=" + cluster_->data_dir()},
                     log);
  ASSERT_TRUE(second.ok()) << second.status();
  absl::StatusOr<int> exited = (*second)->Wait(absl::Seconds(20));
  ASSERT_TRUE(exited.ok()) << "the second ppcoord still runs: " << (*second)->LogTail();
  EXPECT_EQ(*exited, 1);
  const std::string said = (*second)->Log();
  EXPECT_THAT(said, HasSubstr(cluster_->data_dir()));
  EXPECT_THAT(said, HasSubstr(absl::StrCat("pid ", cluster_->coordinator_process().pid())));
  EXPECT_THAT(said, HasSubstr("ppcoord.lock"));
  // The first one goes on serving.
  EXPECT_TRUE(testing_support::ListWorkers(cluster_->stub()).ok());
}

// Backfill: a job that needs 8 workers on a 2-worker cluster waits, saying why, and does not hold
// back a later job that fits.
TEST_F(RobustnessTest, AJobTooLargeForTheClusterWaitsWithItsReasonWhileALaterOneRuns) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(2));
  absl::StatusOr<std::string> large = SubmitJob(cluster_->stub(), Spec(/*pipeline=*/8, 10));
  ASSERT_TRUE(large.ok()) << large.status();
  absl::StatusOr<std::unique_ptr<JobWatch>> watch =
      JobWatch::Open(cluster_->stub(), *large, absl::Seconds(10));
  ASSERT_TRUE(watch.ok()) << watch.status();
  absl::StatusOr<std::string> small = SubmitJob(cluster_->stub(), Spec(/*pipeline=*/2, 10));
  ASSERT_TRUE(small.ok()) << small.status();
  absl::StatusOr<pp::v1::Job> done = WaitSucceeded(cluster_->stub(), *small, kJobTimeout);
  ASSERT_TRUE(done.ok()) << done.status() << cluster_->Logs();

  absl::StatusOr<pp::v1::Job> waiting = GetJob(cluster_->stub(), *large);
  ASSERT_TRUE(waiting.ok()) << waiting.status();
  EXPECT_EQ(waiting->state(), pp::v1::QUEUED);
  EXPECT_THAT(waiting->reason(), HasSubstr("needs 8 workers, 2 registered, "));
  absl::StatusOr<CommandResult> get = RunCommand(
      {cluster_->ppctl(), "--coordinator=" + cluster_->coordinator().grpc, "get", *large},
      absl::Seconds(20));
  ASSERT_TRUE(get.ok()) << get.status();
  EXPECT_EQ(get->exit_code, 0) << get->err;
  EXPECT_THAT(get->out, HasSubstr("needs 8 workers, 2 registered, "));

  // The watch saw the reason too: cancel the job to end the stream.
  absl::StatusOr<CommandResult> cancel = RunCommand(
      {cluster_->ppctl(), "--coordinator=" + cluster_->coordinator().grpc, "cancel", *large},
      absl::Seconds(20));
  ASSERT_TRUE(cancel.ok()) << cancel.status();
  absl::StatusOr<std::vector<pp::v1::JobEvent>> events = (*watch)->Rest();
  ASSERT_TRUE(events.ok()) << events.status();
  bool told = false;
  for (const pp::v1::JobEvent& e : *events) {
    told = told || (e.kind() == pp::v1::EVENT_QUEUED &&
                    absl::StrContains(e.message(), "needs 8 workers, 2 registered, "));
  }
  EXPECT_TRUE(told) << "no QUEUED event said why the job waits";
}

// Rewrites rank 1's shard of `step_dir` with the slice of h.0.attn.qkv.weight at offset 2^32
// (past int) and the manifest to match it (bytes, sha256), so that only the slice check can catch it.
void WriteOverflowingSlice(const std::string& step_dir) {
  absl::StatusOr<pp::v1::CheckpointManifest> manifest = common::VerifyCheckpoint(step_dir);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  const std::string path = step_dir + "/" + common::ShardFileName(1);
  absl::StatusOr<std::string> bytes = common::ReadFile(path);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<common::SafetensorsFile> shard = common::ParseSafetensors(*bytes, path);
  ASSERT_TRUE(shard.ok()) << shard.status();
  const std::string key = common::SliceKey("h.0.attn.qkv.weight");
  ASSERT_EQ(shard->metadata.count(key), 1u);
  shard->metadata[key] = "0 3 4294967296 16 96 32";  // dim parts offset length full_shape
  absl::StatusOr<std::string> hostile =
      common::SerializeSafetensors(shard->tensors, shard->metadata);
  ASSERT_TRUE(hostile.ok()) << hostile.status();
  ASSERT_TRUE(common::WriteFileAtomic(path, *hostile).ok());
  for (pp::v1::CheckpointShard& s : *manifest->mutable_shards()) {
    if (s.file() != common::ShardFileName(1)) continue;
    s.set_bytes(static_cast<int64_t>(hostile->size()));
    s.set_sha256(common::Sha256Hex(*hostile));
  }
  ASSERT_TRUE(common::CommitManifest(step_dir, *manifest).ok());
}

TEST_F(RobustnessTest, ASliceOffsetPastIntFailsTheResumeWithDataLossAndEveryDaemonLivesOn) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(2));
  pp::v1::JobSpec spec = SpecFrom(R"pb(
    name: "slices"
    model { seq_len: 16 d_model: 32 n_heads: 4 n_layers: 2 }
    parallel { pipeline: 1 tensor: 2 }
    train { steps: 5 microbatches: 2 microbatch_size: 2 seed: 5 }
    checkpoint { every_steps: 5 }
  )pb");
  const std::string job = Run(spec);
  ASSERT_FALSE(job.empty());
  ASSERT_NO_FATAL_FAILURE(
      WriteOverflowingSlice(common::StepDir(cluster_->checkpoint_root(), job, 5)));

  pp::v1::ResumeJobRequest request;
  request.set_job_id(job);
  request.set_steps(10);
  ASSERT_TRUE(testing_support::ResumeJob(cluster_->stub(), request).ok());
  absl::StatusOr<pp::v1::Job> ended = WaitForJob(
      cluster_->stub(), job, [](const pp::v1::Job& j) { return j.state() == pp::v1::FAILED; },
      kJobTimeout);
  ASSERT_TRUE(ended.ok()) << ended.status() << cluster_->Logs();
  EXPECT_THAT(ended->reason(), HasSubstr("slice \"0 3 4294967296 16 96 32\" does not fit"));
  EXPECT_THAT(ended->reason(), HasSubstr(common::ShardFileName(1)));

  // Nobody crashed: both workers are back to IDLE and the next job trains.
  absl::StatusOr<std::vector<pp::v1::WorkerInfo>> workers =
      testing_support::ListWorkers(cluster_->stub());
  ASSERT_TRUE(workers.ok()) << workers.status();
  for (const pp::v1::WorkerInfo& w : *workers) EXPECT_NE(w.state(), pp::v1::DOWN) << w.name();
  spec.set_name("after");
  EXPECT_FALSE(Run(spec).empty()) << cluster_->Logs();
}

}  // namespace
}  // namespace pp::robustness
