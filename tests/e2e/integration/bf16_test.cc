// train.precision bf16 on the CPU cluster: every schedule at every D in 1..4 gives the step losses and final weights of the single-process reference trainer in
// bf16 bit for bit; that reference is not the fp32 one (the precision took effect). One cluster
// runs every job, and the reference (which no layout changes) is trained once.
#include <cstring>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "common/checkpoint.h"
#include "common/job_spec.h"
#include "gtest/gtest.h"
#include "tests/e2e/integration/fixture.h"
#include "tests/support/cluster.h"
#include "tests/support/results.h"
#include "worker/trainer/trainer.h"

namespace pp::integration {
namespace {

using ::pp::testing_support::StoredLosses;

constexpr int kSteps = 3;

struct DepthLayout {
  const char* schedule;
  int chunks;
  int pipeline;
};

class Bf16Test : public IntegrationTest {
 protected:
  // Runs `spec` on the cluster and expects the reference's losses and final weights, bitwise.
  // The losses come from ppcoord's store: a watch opened after the submission starts from the
  // job's state at that moment, and on a busy machine a one-rank job had run 2 of its 3 steps.
  void ExpectReferenceBits(const pp::v1::JobSpec& spec, const trainer::TrainResult& want,
                           const std::string& what) {
    const std::string id = Run(spec);
    ASSERT_FALSE(id.empty()) << what << "\n" << cluster_->Logs();
    absl::StatusOr<std::vector<double>> losses = StoredLosses(cluster_->data_dir(), id);
    ASSERT_TRUE(losses.ok()) << what << ": " << losses.status();
    ASSERT_EQ(losses->size(), want.losses.size()) << what;
    for (size_t k = 0; k < losses->size(); ++k) {
      EXPECT_EQ(std::memcmp(&(*losses)[k], &want.losses[k], sizeof(double)), 0)
          << what << " step " << k + 1 << ": " << (*losses)[k] << " vs " << want.losses[k];
    }
    absl::StatusOr<common::Checkpoint> saved =
        common::LoadCheckpoint(common::StepDir(cluster_->checkpoint_root(), id, kSteps));
    ASSERT_TRUE(saved.ok()) << what << ": " << saved.status();
    for (const auto& [name, values] : want.weights) {
      ASSERT_EQ(saved->tensors.count(name), 1u) << what << ": " << name;
      const std::vector<float>& got = saved->tensors.at(name).data;
      ASSERT_EQ(got.size(), values.size()) << what << " " << name;
      EXPECT_EQ(std::memcmp(got.data(), values.data(), values.size() * sizeof(float)), 0)
          << what << ": " << name << " differs";
    }
  }
};

TEST_F(Bf16Test, EveryScheduleAndDepthTrainsTheReferenceBits) {
  pp::v1::JobSpec spec = TinySpec("1f1b", 1, kSteps);
  common::ApplyDefaults(&spec);
  const absl::StatusOr<trainer::TrainResult> fp32 = trainer::Train(spec, {});
  ASSERT_TRUE(fp32.ok()) << fp32.status();
  spec.mutable_train()->set_precision("bf16");
  ASSERT_TRUE(common::ValidateJobSpec(spec).ok()) << common::ValidateJobSpec(spec);
  const absl::StatusOr<trainer::TrainResult> bf16 = trainer::Train(spec, {});
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  // The first step's loss is the initial weights' forward, where the rounding shows already.
  for (int k = 0; k < kSteps; ++k) EXPECT_NE(bf16->losses[k], fp32->losses[k]) << "step " << k;

  std::vector<DepthLayout> layouts;
  for (int pipeline = 4; pipeline >= 1; --pipeline) {
    for (const Layout& every : TrainingLayouts()) {
      layouts.push_back({every.schedule, every.chunks, pipeline});
    }
  }
  ASSERT_NO_FATAL_FAILURE(StartCluster(4));
  int trained = 0;
  for (const DepthLayout& layout : layouts) {
    pp::v1::JobSpec job = spec;
    job.mutable_parallel()->set_schedule(layout.schedule);
    job.mutable_parallel()->set_chunks(layout.chunks);
    job.mutable_parallel()->set_pipeline(layout.pipeline);
    const std::string what =
        absl::StrCat(layout.schedule, " D=", layout.pipeline, " V=", layout.chunks);
    ASSERT_TRUE(common::ValidateJobSpec(job).ok()) << what << ": " << common::ValidateJobSpec(job);
    ASSERT_NO_FATAL_FAILURE(ExpectReferenceBits(job, *bf16, what));
    ++trained;
  }
  EXPECT_EQ(trained, 36);
  std::cout << trained << " layouts trained the bf16 reference's bits\n";
}

}  // namespace
}  // namespace pp::integration
