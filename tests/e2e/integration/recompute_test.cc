// Activation recomputation on the CPU cluster: under each schedule, a job trained with recompute
// full and one with selective give the step losses and final weights of the single-process
// reference (without recomputation) bit for bit, and the measured peak activation bytes of the
// last step (GetTrace) are below those of the same job without recomputation: on every rank
// with a fused backward, on the job's highest rank with a split one.
#include <algorithm>
#include <cstring>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "common/checkpoint.h"
#include "common/job_spec.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "tests/e2e/integration/fixture.h"
#include "tests/support/cluster.h"
#include "tests/support/results.h"
#include "worker/trainer/trainer.h"

namespace pp::integration {
namespace {

using ::pp::testing_support::StoredLosses;

constexpr int kSteps = 3;

class RecomputeTest : public IntegrationTest, public ::testing::WithParamInterface<Layout> {
 public:
  struct Run {
    std::vector<double> losses;
    std::map<std::string, std::vector<float>> weights;
    std::vector<int64_t> peak_bytes;  // per pipeline rank, last step
  };

  // Runs `spec` on the running cluster to its end. The losses come from ppcoord's store: a watch
  // opened after the submission starts from the job's state at that moment (bf16_test.cc).
  Run RunJob(const pp::v1::JobSpec& spec) {
    Run run;
    const std::string id = testing_support::ClusterTest::Run(spec);
    if (id.empty()) {
      ADD_FAILURE() << cluster_->Logs();
      return run;
    }
    absl::StatusOr<std::vector<double>> losses = StoredLosses(cluster_->data_dir(), id);
    EXPECT_TRUE(losses.ok()) << losses.status();
    if (losses.ok()) run.losses = *std::move(losses);
    absl::StatusOr<common::Checkpoint> saved =
        common::LoadCheckpoint(common::StepDir(cluster_->checkpoint_root(), id, kSteps));
    EXPECT_TRUE(saved.ok()) << saved.status();
    if (saved.ok()) {
      for (auto& [name, tensor] : saved->tensors) run.weights[name] = tensor.data;
    }
    grpc::ClientContext context;
    pp::v1::GetTraceRequest request;
    request.set_job_id(id);
    request.set_step(kSteps);
    pp::v1::StepTrace trace;
    const grpc::Status status = cluster_->stub().GetTrace(&context, request, &trace);
    EXPECT_TRUE(status.ok()) << status.error_message();
    run.peak_bytes.resize(trace.ranks_size());
    for (const pp::v1::RankTrace& rank : trace.ranks()) {
      if (rank.rank() >= 0 && rank.rank() < trace.ranks_size()) {
        run.peak_bytes[rank.rank()] = rank.peak_activation_bytes();
      }
    }
    return run;
  }
};

void ExpectBitwise(const RecomputeTest::Run& got, const trainer::TrainResult& want,
                   const std::string& what) {
  ASSERT_EQ(got.losses.size(), want.losses.size()) << what;
  for (size_t k = 0; k < got.losses.size(); ++k) {
    EXPECT_EQ(std::memcmp(&got.losses[k], &want.losses[k], sizeof(double)), 0)
        << what << " step " << k + 1 << ": " << got.losses[k] << " vs " << want.losses[k];
  }
  for (const auto& [name, values] : want.weights) {
    ASSERT_EQ(got.weights.count(name), 1u) << what << ": " << name << " not in the checkpoint";
    const std::vector<float>& saved = got.weights.at(name);
    ASSERT_EQ(saved.size(), values.size()) << what << " " << name;
    EXPECT_EQ(std::memcmp(saved.data(), values.data(), values.size() * sizeof(float)), 0)
        << what << ": " << name << " differs";
  }
}

TEST_P(RecomputeTest, FullAndSelectiveTrainTheReferenceBitsInLessMemory) {
  const Layout layout = GetParam();
  pp::v1::JobSpec spec = TinySpec(layout.schedule, layout.chunks, kSteps);
  common::ApplyDefaults(&spec);
  trainer::TrainOptions options;
  options.checkpoint_root = (dir_ / "reference").string();
  absl::StatusOr<trainer::TrainResult> reference = trainer::Train(spec, options);
  ASSERT_TRUE(reference.ok()) << reference.status();

  ASSERT_NO_FATAL_FAILURE(StartCluster(4));
  const Run none = RunJob(spec);
  ASSERT_NO_FATAL_FAILURE(ExpectBitwise(none, *reference, "none"));
  for (const char* mode : {"full", "selective"}) {
    pp::v1::JobSpec recomputing = spec;
    recomputing.mutable_parallel()->set_recompute(mode);
    const Run run = RunJob(recomputing);
    ExpectBitwise(run, *reference, mode);
    ASSERT_EQ(run.peak_bytes.size(), none.peak_bytes.size());
    std::cout << layout.schedule << " recompute " << mode << ": peak activation bytes per rank";
    for (size_t r = 0; r < run.peak_bytes.size(); ++r) {
      std::cout << " " << run.peak_bytes[r] << " (none " << none.peak_bytes[r] << ")";
    }
    std::cout << "\n";
    // With the backward split into I and W (all but gpipe, 1f1b and interleaved-1f1b), a rank
    // may peak while it holds microbatches whose input-gradient rebuilt them, waiting for their
    // W: that state is none's, so such a rank's peak is none's. The job's highest rank holds less.
    const std::string name = layout.schedule;
    const bool split = name != "gpipe" && name != "1f1b" && name != "interleaved-1f1b";
    for (size_t r = 0; r < run.peak_bytes.size(); ++r) {
      EXPECT_GT(run.peak_bytes[r], 0) << mode << " rank " << r;
      if (split) {
        EXPECT_LE(run.peak_bytes[r], none.peak_bytes[r]) << mode << " rank " << r;
      } else {
        EXPECT_LT(run.peak_bytes[r], none.peak_bytes[r]) << mode << " rank " << r;
      }
    }
    EXPECT_LT(*std::max_element(run.peak_bytes.begin(), run.peak_bytes.end()),
              *std::max_element(none.peak_bytes.begin(), none.peak_bytes.end()))
        << mode << ": the job's peak";
  }
}

INSTANTIATE_TEST_SUITE_P(Schedules, RecomputeTest, EverySchedule(), LayoutName);

}  // namespace
}  // namespace pp::integration
