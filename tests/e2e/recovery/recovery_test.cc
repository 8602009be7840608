// Checkpoints, resume and failures end to end, with real processes (ppcoord + ppworker on loopback): resume onto the same
// and another layout, a worker killed mid-run and mid-checkpoint, the coordinator killed and
// restarted, a worker drained with SIGTERM, a tampered shard. Every run must end bitwise equal
// (per-step losses, final weights) to the single-process reference trainer, which the
// distributed runtime matches bit for bit (tests/worker/daemon/task_test.cc).
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/cluster.h"
#include "tests/support/fixture.h"
#include "tests/support/process.h"

namespace pp::recovery {
namespace {

namespace fs = std::filesystem;
using ::pp::testing_support::SubmitJob;
using ::pp::testing_support::WaitForJob;
using ::pp::testing_support::WaitSucceeded;
using ::testing::HasSubstr;

constexpr int kSteps = 20;
constexpr absl::Duration kJobTimeout = absl::Seconds(60);

class RecoveryTest : public testing_support::ClusterTest {
 protected:
  RecoveryTest() : ClusterTest(/*corpus_seed=*/11, /*corpus_bytes=*/50000) {}

  void SetUp() override {
    ClusterTest::SetUp();
    ASSERT_NO_FATAL_FAILURE(StartCluster(0));
  }

  // `slow` (when named) has a slow disk: its shard of step 10 takes 2 s more, and its next save
  // (step 15) waits for it, so for 2 s no rank completes step 16, however fast steps are.
  void StartWorkers(const std::vector<std::string>& names, const std::string& slow = "") {
    for (const std::string& name : names) {
      testing_support::WorkerOptions options;
      if (name == slow) options.env["PP_TEST_SHARD_WRITE_PAUSE"] = "10:2";
      absl::Status started = cluster_->StartWorker(name, options);
      ASSERT_TRUE(started.ok()) << started;
    }
  }

  // A model small enough for a quick suite, with steps long enough (tens of ms) to hit mid-run.
  pp::v1::JobSpec Spec(int steps, int max_restarts = 0) const {
    pp::v1::JobSpec spec = SpecFrom(R"pb(
      name: "recovery"
      model { seq_len: 32 d_model: 64 n_heads: 4 n_layers: 4 }
      parallel { pipeline: 4 }
      train {
        microbatches: 4 microbatch_size: 4 seed: 5
        # decay_steps explicit: a resume that extends steps keeps every step's rate.
        warmup_steps: 4 decay: "cosine" decay_steps: 16 min_lr: 3e-5
      }
      checkpoint { every_steps: 5 keep: 3 }
    )pb");
    spec.mutable_train()->set_steps(steps);
    spec.set_max_restarts(max_restarts);
    return spec;
  }

  // Per-step losses and step-20 weights of `job` equal the reference's bit for bit.
  void ExpectMatchesReference(const std::string& job) {
    ClusterTest::ExpectMatchesReference(Spec(kSteps), job, testing_support::Match::kBitwise);
  }

  std::string StepDir(const std::string& job, int step) {
    return common::StepDir(cluster_->checkpoint_root(), job, step);
  }

  int ShardsIn(const std::string& step_dir) {
    int shards = 0;
    std::error_code ec;
    for (fs::directory_iterator it(step_dir, ec), end; !ec && it != end; it.increment(ec)) {
      shards += it->path().extension() == ".safetensors";
    }
    return shards;
  }
};

TEST_F(RecoveryTest, StopAndResumeIsBitwiseEqualOnTheSameAndAnotherLayout) {
  StartWorkers({"w0", "w1", "w2", "w3"});
  for (bool new_layout : {false, true}) {
    SCOPED_TRACE(new_layout ? "D=2 V=2 interleaved-1f1b" : "same layout");
    const std::string id = Run(Spec(kSteps / 2));
    ASSERT_FALSE(id.empty());

    pp::v1::ResumeJobRequest request;
    request.set_job_id(id);
    request.set_steps(kSteps);
    if (new_layout) {
      request.mutable_parallel()->set_pipeline(2);
      request.mutable_parallel()->set_chunks(2);
      request.mutable_parallel()->set_schedule("interleaved-1f1b");
    }
    absl::StatusOr<pp::v1::Job> done = ResumeToEnd(request);
    ASSERT_TRUE(done.ok()) << done.status();
    EXPECT_EQ(done->start_step(), kSteps / 2);
    EXPECT_EQ(done->step(), kSteps);
    EXPECT_EQ(done->placement_size(), new_layout ? 2 : 4);
    ExpectMatchesReference(id);
  }
}

TEST_F(RecoveryTest, KilledWorkerIsReplacedByASpareAndTheRunStaysBitwiseEqual) {
  StartWorkers({"w0", "w1", "w2", "w3", "w4"}, "w3");  // w4: the spare
  absl::StatusOr<std::string> id = SubmitJob(cluster_->stub(), Spec(kSteps, /*max_restarts=*/2));
  ASSERT_TRUE(id.ok()) << id.status();
  // Mid-run: after the first checkpoint committed, before the job ends.
  absl::StatusOr<pp::v1::Job> running = WaitForJob(
      cluster_->stub(), *id, [](const pp::v1::Job& j) { return j.last_checkpoint_step() >= 5; },
      kJobTimeout);
  ASSERT_TRUE(running.ok()) << running.status();
  ASSERT_LT(running->step(), kSteps) << "the job ended before the kill";
  cluster_->worker(running->placement(1).worker()).Signal(SIGKILL);

  absl::StatusOr<pp::v1::Job> done = WaitSucceeded(cluster_->stub(), *id, kJobTimeout);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_GE(done->restarts(), 1);
  ASSERT_GE(done->restart_log_size(), 1);
  EXPECT_TRUE(done->restart_log(0).automatic());
  EXPECT_GE(done->restart_log(0).from_step(), 5);
  for (const pp::v1::RankPlacement& p : done->placement()) {
    EXPECT_NE(p.worker(), running->placement(1).worker());
  }
  ExpectMatchesReference(*id);
}

TEST_F(RecoveryTest, WorkerKilledWhileWritingACheckpointLeavesItUncommitted) {
  StartWorkers({"w0", "w2", "w3", "w4"});
  // w1 sorts second: it holds rank 1 and pauses before writing its shard of step 10.
  testing_support::WorkerOptions paused;
  paused.env["PP_TEST_SHARD_WRITE_PAUSE"] = "10:60";
  ASSERT_TRUE(cluster_->StartWorker("w1", paused).ok());
  StartWorkers({"w5"});  // the spare
  absl::StatusOr<std::string> id = SubmitJob(cluster_->stub(), Spec(kSteps, /*max_restarts=*/1));
  ASSERT_TRUE(id.ok()) << id.status();
  const std::string step10 = StepDir(*id, 10);
  ASSERT_TRUE(WaitForJob(
                  cluster_->stub(), *id, [&](const pp::v1::Job&) { return ShardsIn(step10) >= 3; },
                  kJobTimeout)
                  .ok());
  absl::StatusOr<pp::v1::Job> before = testing_support::GetJob(cluster_->stub(), *id);
  ASSERT_TRUE(before.ok());
  ASSERT_EQ(before->placement(1).worker(), "w1");
  cluster_->worker("w1").Signal(SIGKILL);
  EXPECT_FALSE(fs::exists(fs::path(step10) / common::kManifestFile));
  EXPECT_EQ(before->last_checkpoint_step(), 5);

  absl::StatusOr<pp::v1::Job> done = WaitSucceeded(cluster_->stub(), *id, kJobTimeout);
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_EQ(done->restart_log_size(), 1);
  EXPECT_EQ(done->restart_log(0).from_step(), 5);  // step 10 never committed
  ExpectMatchesReference(*id);
}

TEST_F(RecoveryTest, RestartedCoordinatorRecoversTheRunningJob) {
  StartWorkers({"w0", "w1", "w2", "w3"}, "w3");
  absl::StatusOr<std::string> id = SubmitJob(cluster_->stub(), Spec(kSteps));
  ASSERT_TRUE(id.ok()) << id.status();
  absl::StatusOr<pp::v1::Job> running = WaitForJob(
      cluster_->stub(), *id, [](const pp::v1::Job& j) { return j.last_checkpoint_step() >= 5; },
      kJobTimeout);
  ASSERT_TRUE(running.ok()) << running.status();
  cluster_->KillCoordinator();
  ASSERT_TRUE(cluster_->RestartCoordinator().ok());

  absl::StatusOr<pp::v1::Job> done = WaitSucceeded(cluster_->stub(), *id, kJobTimeout);
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_GE(done->restart_log_size(), 1);
  EXPECT_THAT(done->restart_log(0).reason(), HasSubstr("ppcoord restarted"));
  EXPECT_EQ(done->restarts(), 0);  // not the job's fault: no automatic restart used
  ExpectMatchesReference(*id);
}

TEST_F(RecoveryTest, SigtermDrainsAWorkerAtACheckpointAndTheJobMovesOn) {
  StartWorkers({"w0", "w1", "w2", "w3", "w4"}, "w3");
  absl::StatusOr<std::string> id = SubmitJob(cluster_->stub(), Spec(kSteps));  // max_restarts 0
  ASSERT_TRUE(id.ok()) << id.status();
  absl::StatusOr<pp::v1::Job> running = WaitForJob(
      cluster_->stub(), *id, [](const pp::v1::Job& j) { return j.last_checkpoint_step() >= 5; },
      kJobTimeout);
  ASSERT_TRUE(running.ok()) << running.status();
  ASSERT_LT(running->step(), 16) << "the job went past the slow checkpoint before the drain";
  testing_support::Process& drained = cluster_->worker(running->placement(2).worker());
  drained.Signal(SIGTERM);
  absl::StatusOr<int> exit = drained.Wait(absl::Seconds(30));
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_EQ(*exit, 0);

  absl::StatusOr<pp::v1::Job> done = WaitSucceeded(cluster_->stub(), *id, kJobTimeout);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->restarts(), 0);
  ASSERT_EQ(done->restart_log_size(), 1);
  EXPECT_THAT(done->restart_log(0).reason(), HasSubstr("drained"));
  // The stop step is a checkpoint, whether or not every_steps falls on it.
  EXPECT_GT(done->restart_log(0).from_step(), running->step());
  EXPECT_LE(done->restart_log(0).from_step(), 17);  // the drained rank reports step 16 at most
  for (const pp::v1::RankPlacement& p : done->placement()) {
    EXPECT_NE(p.worker(), running->placement(2).worker());
  }
  ExpectMatchesReference(*id);
}

TEST_F(RecoveryTest, TamperedShardIsRefusedByNameAndResumeFallsBack) {
  StartWorkers({"w0", "w1", "w2", "w3"});
  const std::string id = Run(Spec(kSteps / 2));
  ASSERT_FALSE(id.empty());

  const std::string shard = StepDir(id, 10) + "/" + common::ShardFileName(1);
  {
    std::fstream file(shard, std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(-3, std::ios::end);
    const char byte = static_cast<char>(file.get() ^ 0x40);
    file.seekp(-3, std::ios::end);
    file.put(byte);
  }
  absl::StatusOr<common::Checkpoint> loaded = common::LoadCheckpoint(StepDir(id, 10));
  ASSERT_FALSE(loaded.ok());
  EXPECT_THAT(loaded.status().message(), HasSubstr(shard));

  pp::v1::ResumeJobRequest request;
  request.set_job_id(id);
  request.set_steps(kSteps);
  request.set_step(10);  // asked for by number: refused, naming the file
  absl::StatusOr<pp::v1::Job> refused = testing_support::ResumeJob(cluster_->stub(), request);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr(shard));
  request.set_step(0);  // the newest that verifies
  absl::StatusOr<pp::v1::Job> done = ResumeToEnd(request);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->start_step(), 5);
  ExpectMatchesReference(id);
}

}  // namespace
}  // namespace pp::recovery
