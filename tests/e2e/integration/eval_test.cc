// Held-out evaluation through the pipeline: ppcoord + D ppworker processes on loopback run the
// forward-only schedule every eval.every_steps steps; the eval losses (from WatchJob and GetJob)
// must be bitwise those of the single-process reference trainer for every schedule and D, and the
// training (step losses, final weights) must stay bitwise the reference's.
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "common/checkpoint.h"
#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "gtest/gtest.h"
#include "tests/e2e/integration/fixture.h"
#include "tests/support/cluster.h"
#include "worker/trainer/trainer.h"

namespace pp::integration {
namespace {

using ::pp::testing_support::GetJob;
using ::pp::testing_support::JobWatch;
using ::pp::testing_support::SubmitJob;

constexpr int kSteps = 4;

struct EvalLayout {
  const char* schedule;
  int chunks;
  int pipeline;
};

void PrintTo(const EvalLayout& layout, std::ostream* os) {
  *os << layout.schedule << " V=" << layout.chunks << " D=" << layout.pipeline;
}

class EvalTest : public IntegrationTest, public ::testing::WithParamInterface<EvalLayout> {};

bool SameBits(double a, double b) { return std::memcmp(&a, &b, sizeof(double)) == 0; }

TEST_P(EvalTest, EvalLossesAreBitwiseTheReferenceTrainersAndTrainingIsUnchanged) {
  const EvalLayout layout = GetParam();
  pp::v1::JobSpec spec = TinySpec(layout.schedule, layout.chunks, kSteps);
  spec.mutable_parallel()->set_pipeline(layout.pipeline);
  spec.mutable_eval()->set_every_steps(3);  // after step 3 and after the last, 4
  spec.mutable_eval()->set_batches(2);
  spec.mutable_eval()->set_holdout_fraction(0.1);
  common::ApplyDefaults(&spec);
  ASSERT_TRUE(common::ValidateJobSpec(spec).ok()) << common::ValidateJobSpec(spec);

  absl::StatusOr<trainer::TrainResult> reference = trainer::Train(spec, {});
  ASSERT_TRUE(reference.ok()) << reference.status();
  ASSERT_EQ(reference->evals.size(), 2u);

  ASSERT_NO_FATAL_FAILURE(StartCluster(0));
  absl::StatusOr<std::string> job_id = SubmitJob(cluster_->stub(), spec);
  ASSERT_TRUE(job_id.ok()) << job_id.status();
  absl::StatusOr<std::unique_ptr<JobWatch>> watch =
      JobWatch::Open(cluster_->stub(), *job_id, absl::Seconds(60));
  ASSERT_TRUE(watch.ok()) << watch.status();
  ASSERT_TRUE(cluster_->AddWorkers(layout.pipeline).ok()) << cluster_->Logs();
  absl::StatusOr<std::vector<pp::v1::JobEvent>> events = (*watch)->Rest();
  ASSERT_TRUE(events.ok()) << events.status() << "\n" << cluster_->Logs();
  ASSERT_EQ(events->back().kind(), pp::v1::EVENT_FINISHED) << events->back().message() << "\n"
                                                           << cluster_->Logs();

  std::vector<trainer::TrainResult::Eval> evals;
  int steps = 0;
  for (const pp::v1::JobEvent& e : *events) {
    if (e.kind() != pp::v1::EVENT_STEP) continue;
    ASSERT_LT(steps, kSteps);
    EXPECT_TRUE(SameBits(e.loss(), reference->losses[steps])) << "step " << e.step();
    ++steps;
    if (e.has_eval()) evals.push_back({e.step(), e.eval_loss()});
  }
  EXPECT_EQ(steps, kSteps);
  ASSERT_EQ(evals.size(), 2u);
  for (size_t i = 0; i < evals.size(); ++i) {
    EXPECT_EQ(evals[i].step, reference->evals[i].step);
    EXPECT_TRUE(SameBits(evals[i].loss, reference->evals[i].loss))
        << "eval after step " << evals[i].step << ": pipeline " << evals[i].loss
        << " reference " << reference->evals[i].loss;
  }

  absl::StatusOr<pp::v1::Job> job = GetJob(cluster_->stub(), *job_id);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->eval_step(), kSteps);
  EXPECT_TRUE(SameBits(job->eval_loss(), reference->evals.back().loss));

  absl::StatusOr<common::Checkpoint> got =
      common::LoadCheckpoint(common::StepDir(cluster_->checkpoint_root(), *job_id, kSteps));
  ASSERT_TRUE(got.ok()) << got.status();
  for (const auto& [name, values] : reference->weights) {
    ASSERT_EQ(got->tensors.count(name), 1u) << name;
    const std::vector<float>& saved = got->tensors.at(name).data;
    ASSERT_EQ(saved.size(), values.size()) << name;
    EXPECT_EQ(std::memcmp(saved.data(), values.data(), values.size() * sizeof(float)), 0) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    SchedulesAndDepths, EvalTest,
    ::testing::Values(EvalLayout{"gpipe", 1, 4}, EvalLayout{"1f1b", 1, 4},
                      EvalLayout{"interleaved-1f1b", 2, 4}, EvalLayout{"zb-h1", 1, 4},
                      EvalLayout{"zb-v", 2, 4}, EvalLayout{"1f1b", 1, 1},
                      EvalLayout{"1f1b", 1, 2}, EvalLayout{"zb-h1", 1, 3}),
    [](const ::testing::TestParamInfo<EvalLayout>& info) {
      std::string name = absl::StrCat(info.param.schedule, "_D", info.param.pipeline);
      for (char& c : name) {
        if (c == '-') c = '_';
      }
      return name;
    });

}  // namespace
}  // namespace pp::integration
