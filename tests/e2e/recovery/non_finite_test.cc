// Non-finite steps end to end, with real processes (ppcoord + 2 ppworkers on loopback): a job whose
// learning rate diverges (lr 1e30: step 1 applies a huge but finite update, step 2's loss is NaN)
// fails at once with the step, the rank and the value, writes no checkpoint after the bad step
// and keeps its good one; a shard holding Inf weights is refused, so never committed; with
// train.max_bad_steps the bad step is skipped on every rank, counted, and the run stays bitwise
// equal to the reference trainer, which skips it too.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/checkpoint.h"
#include "common/job_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordinator/test_support.h"
#include "tests/support/cluster.h"
#include "tests/support/fixture.h"
#include "tests/support/results.h"
#include "worker/trainer/trainer.h"

namespace pp::recovery {
namespace {

namespace fs = std::filesystem;
using ::pp::testing_support::SubmitJob;
using ::pp::testing_support::WaitForJob;
using ::testing::HasSubstr;

constexpr absl::Duration kJobTimeout = absl::Seconds(60);

class NonFiniteTest : public testing_support::ClusterTest {
 protected:
  void SetUp() override {
    ClusterTest::SetUp();
    ASSERT_NO_FATAL_FAILURE(StartCluster(2));
  }

  // Two stages (rank 1 holds the last one), a checkpoint after every step.
  pp::v1::JobSpec DivergingSpec(int steps, int max_bad_steps) const {
    pp::v1::JobSpec spec = SpecFrom(R"pb(
      name: "diverge"
      model { seq_len: 16 d_model: 32 n_heads: 2 n_layers: 2 }
      parallel { pipeline: 2 }
      train { microbatches: 4 microbatch_size: 2 seed: 3 lr: 1e30 }
      checkpoint { every_steps: 1 keep: 10 }
      max_restarts: 2
    )pb");
    spec.mutable_train()->set_steps(steps);
    spec.mutable_train()->set_max_bad_steps(max_bad_steps);
    return spec;
  }

  absl::StatusOr<pp::v1::Job> WaitEnded(const std::string& job) {
    return WaitForJob(
        cluster_->stub(), job,
        [](const pp::v1::Job& j) {
          return j.state() == pp::v1::FAILED || j.state() == pp::v1::SUCCEEDED ||
                 j.state() == pp::v1::CANCELLED;
        },
        kJobTimeout);
  }

  // The steps of `job` with a step folder, and of those the ones with a manifest.
  void StepFolders(const std::string& job, std::vector<int>& folders, std::vector<int>& committed) {
    std::error_code ec;
    for (fs::directory_iterator it(fs::path(cluster_->checkpoint_root()) / job, ec), end;
         !ec && it != end; it.increment(ec)) {
      int step = 0;
      const std::string file = it->path().filename().string();
      absl::string_view name = file;
      if (!absl::ConsumePrefix(&name, "step-") || !absl::SimpleAtoi(name, &step)) continue;
      folders.push_back(step);
      if (fs::exists(it->path() / "manifest.json")) committed.push_back(step);
    }
    std::sort(folders.begin(), folders.end());
    std::sort(committed.begin(), committed.end());
  }

  // The value of the series `name{labels}` in a /metrics text; -1 when absent.
  static double SeriesValue(const std::string& text, const std::string& series) {
    const size_t at = text.find("\n" + series + " ");
    double value = -1;
    if (at == std::string::npos) return value;
    const size_t begin = at + series.size() + 2;
    if (!absl::SimpleAtod(text.substr(begin, text.find('\n', begin) - begin), &value)) return -1;
    return value;
  }
};

TEST_F(NonFiniteTest, ADivergingJobFailsPastMaxBadStepsAndKeepsItsGoodCheckpoints) {
  for (int max_bad_steps : {0, 1}) {
    SCOPED_TRACE(absl::StrCat("max_bad_steps ", max_bad_steps));
    absl::StatusOr<std::string> job = SubmitJob(cluster_->stub(), DivergingSpec(6, max_bad_steps));
    ASSERT_TRUE(job.ok()) << job.status();
    absl::StatusOr<pp::v1::Job> ended = WaitEnded(*job);
    ASSERT_TRUE(ended.ok()) << ended.status();
    EXPECT_EQ(ended->state(), pp::v1::FAILED) << ended->reason();
    // Every step from 2 on is NaN: the (max_bad_steps + 1)-th of them fails the job.
    const int failed_at = 2 + max_bad_steps;
    EXPECT_THAT(ended->reason(),
                HasSubstr(absl::StrCat("step ", failed_at, ": non-finite loss nan on rank 1; ",
                                       max_bad_steps + 1,
                                       " bad steps, more than train.max_bad_steps = ",
                                       max_bad_steps)));
    EXPECT_EQ(ended->restarts(), 0) << "a numeric failure is final, whatever max_restarts says";

    // Checkpoints up to the step before the failing one (a skipped step's holds the weights it
    // kept), none for it or after it.
    std::vector<int> want, folders, committed;
    for (int step = 1; step < failed_at; ++step) want.push_back(step);
    StepFolders(*job, folders, committed);
    EXPECT_EQ(committed, want);
    EXPECT_EQ(folders, want);
    EXPECT_EQ(ended->last_checkpoint_step(), failed_at - 1);
    absl::StatusOr<common::Checkpoint> good = common::LoadCheckpoint(
        common::StepDir(cluster_->checkpoint_root(), *job, failed_at - 1));
    ASSERT_TRUE(good.ok()) << good.status();
    ASSERT_FALSE(good->tensors.empty());
    for (const auto& [name, tensor] : good->tensors) {
      for (float v : tensor.data) ASSERT_TRUE(std::isfinite(v)) << name;
    }
  }
}

TEST_F(NonFiniteTest, AShardWithNonFiniteWeightsIsRefusedAndNothingIsCommitted) {
  // lr 1e39 is Inf in float: step 1's loss and norm are finite, its update makes the weights
  // Inf. Later bad steps are tolerated, so the refused shard is what fails the job.
  pp::v1::JobSpec spec = DivergingSpec(2, 5);
  spec.mutable_train()->set_lr(1e39);
  absl::StatusOr<std::string> job = SubmitJob(cluster_->stub(), spec);
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<pp::v1::Job> ended = WaitEnded(*job);
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_EQ(ended->state(), pp::v1::FAILED) << ended->reason();
  EXPECT_THAT(ended->reason(), HasSubstr("step-1/rank-0000"));
  EXPECT_THAT(ended->reason(), HasSubstr("holds a non-finite value"));
  EXPECT_EQ(ended->restarts(), 0);
  std::vector<int> folders, committed;
  StepFolders(*job, folders, committed);
  EXPECT_TRUE(committed.empty());
  EXPECT_EQ(ended->last_checkpoint_step(), 0);
}

TEST_F(NonFiniteTest, ASkippedStepIsCountedAndMatchesTheReferenceTrainerBitwise) {
  const pp::v1::JobSpec spec = DivergingSpec(2, 1);
  absl::StatusOr<std::string> job = SubmitJob(cluster_->stub(), spec);
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<pp::v1::Job> ended = WaitEnded(*job);
  ASSERT_TRUE(ended.ok()) << ended.status();
  ASSERT_EQ(ended->state(), pp::v1::SUCCEEDED) << ended->reason();

  pp::v1::JobSpec single = spec;
  single.mutable_parallel()->set_pipeline(1);
  common::ApplyDefaults(&single);
  absl::StatusOr<trainer::TrainResult> reference = trainer::Train(single, {});
  ASSERT_TRUE(reference.ok()) << reference.status();
  EXPECT_EQ(reference->skipped_steps, 1);
  for (int step : {1, 2}) {
    // Step 2 was skipped: its checkpoint holds step 1's weights and moments again.
    absl::StatusOr<std::map<std::string, std::vector<float>>> values =
        testing_support::CheckpointValues(cluster_->checkpoint_root(), *job, step);
    ASSERT_TRUE(values.ok()) << values.status();
    for (const auto& [name, want] : reference->weights) {
      const std::vector<float>& got = values->at(name);
      ASSERT_EQ(got.size(), want.size()) << name;
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
          << name << " at step " << step;
    }
  }

  absl::StatusOr<std::string> coordinator =
      coordinator::testing::HttpGet(cluster_->coordinator().metrics, "/metrics");
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  EXPECT_EQ(SeriesValue(*coordinator, absl::StrCat("pp_job_skipped_steps_total{job=\"", *job,
                                                   "\"}")),
            1)
      << *coordinator;
  for (const pp::v1::RankPlacement& p : ended->placement()) {
    absl::StatusOr<std::string> worker =
        coordinator::testing::HttpGet(cluster_->worker_addresses(p.worker()).metrics, "/metrics");
    ASSERT_TRUE(worker.ok()) << worker.status();
    EXPECT_EQ(SeriesValue(*worker, absl::StrCat("pp_skipped_steps_total{job=\"", *job,
                                                "\",rank=\"", p.rank(), "\"}")),
              1)
        << *worker;
  }
}

}  // namespace
}  // namespace pp::recovery
