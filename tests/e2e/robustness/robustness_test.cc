// The store, the data folder and the scheduler under trouble, with real processes (ppcoord +
// ppworker on loopback): ppcoord killed right after it pruned old checkpoints restarts from the
// new one; a second ppcoord on the same data folder is refused; a job too large for the cluster
// waits with its reason while later jobs that fit run.
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/checkpoint.h"
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

}  // namespace
}  // namespace pp::robustness
