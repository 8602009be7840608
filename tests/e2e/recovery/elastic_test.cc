// Elastic jobs end to end (docs/recovery.md "Elastic jobs"), with real processes (ppcoord + 4
// ppworkers on loopback): a worker killed for good, no spare, so the job goes on with the workers
// it has, then grows back when a new worker registers; it must end SUCCEEDED bitwise equal to the
// run that never lost a worker. D=4 loses a stage (and trains on D=3); DP2 x PP2 keeps its two
// replicas on one stage each (another replica count would sum gradients in another order).
#include <signal.h>

#include <iostream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/cluster.h"
#include "tests/support/fixture.h"
#include "tests/support/results.h"

namespace pp::recovery {
namespace {

using ::pp::testing_support::SubmitJob;
using ::pp::testing_support::WaitForJob;
using ::pp::testing_support::WaitSucceeded;
using ::testing::HasSubstr;

constexpr int kSteps = 32;
constexpr absl::Duration kJobTimeout = absl::Seconds(90);

class ElasticTest : public testing_support::ClusterTest {
 protected:
  ElasticTest() : ClusterTest(/*corpus_seed=*/13, /*corpus_bytes=*/50000) {}

  void SetUp() override {
    ClusterTest::SetUp();
    ASSERT_NO_FATAL_FAILURE(StartCluster(0));
    for (const char* name : {"w0", "w1", "w2", "w3"}) ASSERT_NO_FATAL_FAILURE(StartWorker(name));
  }

  // Each compute action takes 20 times as long (executor/slowdown.h): a step lasts long enough
  // for the job to shrink and grow back before its last step.
  void StartWorker(const std::string& name) {
    testing_support::WorkerOptions options;
    options.flags = {"--test_slow_after_steps=0", "--test_slow_factor=20"};
    absl::Status started = cluster_->StartWorker(name, options);
    ASSERT_TRUE(started.ok()) << started;
  }

  pp::v1::JobSpec Spec(int pipeline, int data) const {
    pp::v1::JobSpec spec = SpecFrom(R"pb(
      name: "elastic"
      model { seq_len: 32 d_model: 64 n_heads: 4 n_layers: 4 }
      train { microbatch_size: 2 seed: 3 }
      checkpoint { every_steps: 4 keep: 3 }
      max_restarts: 2
      elastic { min_workers: 2 grace_seconds: 0.5 grow_after_seconds: 1 }
    )pb");
    spec.mutable_parallel()->set_pipeline(pipeline);
    spec.mutable_parallel()->set_data(data);
    spec.mutable_train()->set_microbatches(8 / data);  // 8 per step either way
    spec.mutable_train()->set_steps(kSteps);
    return spec;
  }

  // Submits `spec`, kills the worker of rank 1 once a checkpoint committed, waits until the job
  // runs on `shrunk_workers`, starts worker w4, and waits for the end. The ended job.
  pp::v1::Job LoseAWorkerAndGrowBack(const pp::v1::JobSpec& spec, int shrunk_workers) {
    absl::StatusOr<std::string> id = SubmitJob(cluster_->stub(), spec);
    EXPECT_TRUE(id.ok()) << id.status();
    if (!id.ok()) return {};
    absl::StatusOr<pp::v1::Job> running = WaitForJob(
        cluster_->stub(), *id, [](const pp::v1::Job& j) { return j.last_checkpoint_step() >= 4; },
        kJobTimeout);
    EXPECT_TRUE(running.ok()) << running.status();
    if (!running.ok()) return {};
    EXPECT_LT(running->step(), kSteps / 2) << "too late a kill to see the job grow back";
    cluster_->worker(running->placement(1).worker()).Signal(SIGKILL);

    absl::StatusOr<pp::v1::Job> shrunk = WaitForJob(
        cluster_->stub(), *id,
        [](const pp::v1::Job& j) { return j.resizes() >= 1 && j.state() == pp::v1::RUNNING; },
        kJobTimeout);
    EXPECT_TRUE(shrunk.ok()) << shrunk.status();
    if (!shrunk.ok()) return {};
    EXPECT_EQ(shrunk->placement_size(), shrunk_workers);
    std::cout << "shrunk: " << shrunk->restart_log(shrunk->restart_log_size() - 1).reason() << "\n";
    EXPECT_LT(shrunk->step(), kSteps - 10) << "too late a shrink to see the job grow back";

    StartWorker("w4");
    absl::StatusOr<pp::v1::Job> done = WaitSucceeded(cluster_->stub(), *id, kJobTimeout);
    EXPECT_TRUE(done.ok()) << done.status();
    if (!done.ok()) return {};
    std::cout << "grown: " << done->restart_log(done->restart_log_size() - 1).reason() << "\n";
    return *done;
  }

  void ExpectShrankAndGrewBack(const pp::v1::Job& done, const std::string& shrunk_layout) {
    EXPECT_EQ(done.resizes(), 2);
    EXPECT_EQ(done.placement_size(), 4);
    EXPECT_EQ(done.restarts(), 1);  // the loss; the grow is not a failure
    ASSERT_GE(done.restart_log_size(), 2);
    const int n = done.restart_log_size();
    EXPECT_THAT(done.restart_log(n - 2).reason(), HasSubstr(absl::StrCat("to ", shrunk_layout)));
    EXPECT_THAT(done.restart_log(n - 1).reason(), HasSubstr("to grow to 4 workers"));
  }
};

TEST_F(ElasticTest, APipelineOfFourLosesAWorkerRunsOnThreeGrowsBackAndStaysBitwise) {
  const pp::v1::JobSpec spec = Spec(/*pipeline=*/4, /*data=*/1);
  const pp::v1::Job done = LoseAWorkerAndGrowBack(spec, /*shrunk_workers=*/3);
  ASSERT_FALSE(done.id().empty());
  ExpectShrankAndGrewBack(done, "1f1b D=3 V=1 T=1 R=1 M=8 (3 workers)");
  ExpectMatchesReference(spec, done.id(), testing_support::Match::kBitwise);
}

TEST_F(ElasticTest, DataTwoByPipelineTwoLosesAWorkerKeepsItsReplicasAndStaysBitwise) {
  const pp::v1::JobSpec spec = Spec(/*pipeline=*/2, /*data=*/2);
  // The run that never lost a worker, on the same four workers first.
  absl::StatusOr<std::string> uninterrupted = SubmitJob(cluster_->stub(), spec);
  ASSERT_TRUE(uninterrupted.ok()) << uninterrupted.status();
  ASSERT_TRUE(WaitSucceeded(cluster_->stub(), *uninterrupted, kJobTimeout).ok());

  const pp::v1::Job done = LoseAWorkerAndGrowBack(spec, /*shrunk_workers=*/2);
  ASSERT_FALSE(done.id().empty());
  ExpectShrankAndGrewBack(done, "1f1b D=1 V=1 T=1 R=2 M=4 (2 workers)");
  const absl::Status same = testing_support::SameBits(
      cluster_->data_dir(), cluster_->checkpoint_root(), *uninterrupted, done.id(), kSteps);
  EXPECT_TRUE(same.ok()) << same;
}

}  // namespace
}  // namespace pp::recovery
