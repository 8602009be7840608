// Packed variable-length microbatches (train.tokens_per_microbatch, issue 33): ppcoord and the
// workers (under the fifo transport's NCCL matching rules, as every cluster test) train a job
// whose microbatches differ in length from one to the next, at every schedule and at depths 1 to
// 4, bitwise what the single-process reference trains and evaluates (packed rows of the held-out
// tokens); with data parallelism within kClose.
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/step_math.h"
#include "gtest/gtest.h"
#include "tests/e2e/integration/fixture.h"
#include "tests/support/cluster.h"
#include "worker/data/data.h"
#include "worker/trainer/trainer.h"

namespace pp::integration {
namespace {

constexpr int kSteps = 3;

struct PackedLayout {
  const char* schedule;
  int chunks;
  int pipeline;
  int data = 1;
};

void PrintTo(const PackedLayout& layout, std::ostream* os) {
  *os << layout.schedule << " V=" << layout.chunks << " D=" << layout.pipeline
      << " R=" << layout.data;
}

// Every training schedule at D=4, one- and two-chunk schedules at D=1..3, and D=2 x R=2.
std::vector<PackedLayout> PackedLayouts() {
  std::vector<PackedLayout> layouts;
  for (const Layout& layout : TrainingLayouts()) {
    layouts.push_back({layout.schedule, layout.chunks, 4});
  }
  for (const PackedLayout& shallow :
       {PackedLayout{"1f1b", 1, 1}, PackedLayout{"zb-h1", 1, 2},
        PackedLayout{"interleaved-1f1b", 2, 2}, PackedLayout{"gpipe", 1, 3},
        PackedLayout{"zb-v", 2, 3}, PackedLayout{"1f1b", 1, 2, 2}}) {
    layouts.push_back(shallow);
  }
  return layouts;
}

class PackedMicrobatchesTest : public IntegrationTest,
                               public ::testing::WithParamInterface<PackedLayout> {
 protected:
  // The tiny job (T = 16, 8 microbatches) on \0-separated documents of 0 to 70 bytes, packed into
  // rows of at most 40 tokens: pieces of 16, documents split and joined.
  pp::v1::JobSpec PackedSpec(const PackedLayout& layout) {
    const std::string path = (dir_ / "documents.bin").string();
    std::ifstream corpus(corpus_, std::ios::binary);
    std::ofstream(path, std::ios::binary)
        << PackDocuments(std::string(std::istreambuf_iterator<char>(corpus), {}));
    pp::v1::JobSpec spec = TinySpec(layout.schedule, layout.chunks, kSteps);
    spec.mutable_parallel()->set_pipeline(layout.pipeline);
    spec.mutable_parallel()->set_data(layout.data);
    spec.mutable_train()->set_microbatches(8 / layout.data);
    spec.mutable_train()->clear_microbatch_size();
    spec.mutable_train()->set_tokens_per_microbatch(40);
    spec.mutable_data()->set_path(path);
    spec.mutable_data()->set_documents("mask");
    spec.mutable_model()->set_positions("document");
    // Evaluated on packed rows of the held-out tokens after steps 2 and 3.
    spec.mutable_eval()->set_every_steps(2);
    spec.mutable_eval()->set_batches(2);
    spec.mutable_eval()->set_holdout_fraction(0.1);
    common::ApplyDefaults(&spec);
    EXPECT_TRUE(common::ValidateJobSpec(spec).ok()) << common::ValidateJobSpec(spec);
    return spec;
  }
};

// The lengths differ within a step and between steps: the test trains what it claims to.
TEST_F(PackedMicrobatchesTest, TheStepsMicrobatchesDifferInLength) {
  const pp::v1::JobSpec spec = PackedSpec({"1f1b", 1, 4});
  absl::StatusOr<data::TrainData> data = data::TrainData::Open(spec);
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_NE(data->packed(), nullptr);
  std::set<int64_t> lengths;
  for (int64_t s = 0; s < kSteps * 8; ++s) {
    const int64_t n = data->RowTokens(s);
    EXPECT_GE(n, 1);
    EXPECT_LE(n, 40);
    lengths.insert(n);
  }
  EXPECT_GE(lengths.size(), 4u) << "the rows are nearly all one length";
}

TEST_P(PackedMicrobatchesTest, TrainsBitwiseAsTheReferenceTrainer) {
  const PackedLayout layout = GetParam();
  const pp::v1::JobSpec spec = PackedSpec(layout);
  ASSERT_NO_FATAL_FAILURE(StartCluster(layout.pipeline * layout.data));
  const std::string job_id = Run(spec);
  ASSERT_FALSE(job_id.empty());
  const bool bitwise = layout.data == 1;
  ExpectMatchesReference(
      spec, job_id, bitwise ? testing_support::Match::kBitwise : testing_support::Match::kClose);
  // The eval of the last step: the reference's, on one process fed every replica's rows.
  pp::v1::JobSpec one = spec;
  one.mutable_parallel()->set_data(1);
  one.mutable_train()->set_microbatches(spec.train().microbatches() * layout.data);
  absl::StatusOr<trainer::TrainResult> reference = trainer::Train(one, {});
  ASSERT_TRUE(reference.ok()) << reference.status();
  ASSERT_EQ(reference->evals.size(), 2u);
  absl::StatusOr<pp::v1::Job> job = testing_support::GetJob(cluster_->stub(), job_id);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->eval_step(), kSteps);
  const double got = job->eval_loss(), want = reference->evals.back().loss;
  if (bitwise) {
    EXPECT_EQ(std::memcmp(&got, &want, sizeof(double)), 0)
        << "eval: pipeline " << got << " reference " << want;
  } else {
    EXPECT_NEAR(got, want, 1e-5 * want);
  }
}

INSTANTIATE_TEST_SUITE_P(SchedulesAndDepths, PackedMicrobatchesTest,
                         ::testing::ValuesIn(PackedLayouts()),
                         [](const ::testing::TestParamInfo<PackedLayout>& info) {
                           std::string name =
                               absl::StrCat(info.param.schedule, "_D", info.param.pipeline, "_R",
                                            info.param.data);
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace pp::integration
