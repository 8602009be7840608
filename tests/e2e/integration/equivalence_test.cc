// ppcoord + 4 ppworker processes on loopback train the same job under every schedule; the losses
// of all 10 steps (from WatchJob) and the final checkpoint (weights and AdamW moments) must be
// bitwise those of the single-process reference trainer, run in this process. Packed documents
// (issue 33) likewise, at every schedule and at depths 1 to 4, with their eval.
#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint.h"
#include "common/job_spec.h"
#include "common/step_math.h"
#include "gtest/gtest.h"
#include "tests/e2e/integration/fixture.h"
#include "tests/support/cluster.h"
#include "worker/trainer/trainer.h"

namespace pp::integration {
namespace {

using ::pp::testing_support::GetJob;
using ::pp::testing_support::JobWatch;
using ::pp::testing_support::SubmitJob;

constexpr int kSteps = 10;

class EquivalenceTest : public IntegrationTest, public ::testing::WithParamInterface<Layout> {};

// Equal names, shapes and bytes.
void ExpectSameTensors(const common::Checkpoint& got, const common::Checkpoint& want) {
  ASSERT_EQ(got.tensors.size(), want.tensors.size());
  for (const auto& [name, tensor] : want.tensors) {
    auto it = got.tensors.find(name);
    ASSERT_NE(it, got.tensors.end()) << name << " missing from the pipeline's checkpoint";
    ASSERT_EQ(it->second.shape, tensor.shape) << name;
    ASSERT_EQ(it->second.data.size(), tensor.data.size()) << name;
    EXPECT_EQ(
        std::memcmp(it->second.data.data(), tensor.data.data(), tensor.data.size() * sizeof(float)),
        0)
        << name << " differs";
  }
}

TEST_P(EquivalenceTest, LossesAndFinalCheckpointAreBitwiseTheReferenceTrainers) {
  const Layout layout = GetParam();
  pp::v1::JobSpec spec = TinySpec(layout.schedule, layout.chunks, kSteps);
  // Warm-up and cosine decay: every layout applies each step's rate as the reference does.
  spec.mutable_train()->set_warmup_steps(3);
  spec.mutable_train()->set_decay("cosine");
  spec.mutable_train()->set_min_lr(3e-5);
  common::ApplyDefaults(&spec);
  ASSERT_TRUE(common::ValidateJobSpec(spec).ok()) << common::ValidateJobSpec(spec);

  trainer::TrainOptions options;
  options.checkpoint_root = (dir_ / "reference").string();
  absl::StatusOr<trainer::TrainResult> reference = trainer::Train(spec, options);
  ASSERT_TRUE(reference.ok()) << reference.status();
  ASSERT_EQ(reference->losses.size(), static_cast<size_t>(kSteps));

  // Submitted and watched before any worker exists, so the watch sees every step.
  ASSERT_NO_FATAL_FAILURE(StartCluster(0));
  absl::StatusOr<std::string> job_id = SubmitJob(cluster_->stub(), spec);
  ASSERT_TRUE(job_id.ok()) << job_id.status();
  absl::StatusOr<std::unique_ptr<JobWatch>> watch =
      JobWatch::Open(cluster_->stub(), *job_id, absl::Seconds(60));
  ASSERT_TRUE(watch.ok()) << watch.status();
  ASSERT_TRUE(cluster_->AddWorkers(4).ok()) << cluster_->Logs();
  absl::StatusOr<std::vector<pp::v1::JobEvent>> events = (*watch)->Rest();
  ASSERT_TRUE(events.ok()) << events.status() << "\n" << cluster_->Logs();
  ASSERT_EQ(events->back().kind(), pp::v1::EVENT_FINISHED) << events->back().message() << "\n"
                                                           << cluster_->Logs();

  std::vector<double> losses;
  for (const pp::v1::JobEvent& e : *events) {
    if (e.kind() != pp::v1::EVENT_STEP) continue;
    EXPECT_EQ(e.step(), static_cast<int>(losses.size()) + 1) << "steps out of order";
    EXPECT_EQ(e.learning_rate(), common::LearningRateAt(spec.train(), e.step()));
    losses.push_back(e.loss());
  }
  ASSERT_EQ(losses.size(), static_cast<size_t>(kSteps));
  for (int k = 0; k < kSteps; ++k) {
    EXPECT_EQ(std::memcmp(&losses[k], &reference->losses[k], sizeof(double)), 0)
        << "step " << k + 1 << ": pipeline " << losses[k] << " reference " << reference->losses[k];
  }

  absl::StatusOr<common::Checkpoint> got =
      common::LoadCheckpoint(common::StepDir(cluster_->checkpoint_root(), *job_id, kSteps));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->manifest.layout().pipeline(), 4);
  EXPECT_EQ(got->manifest.layout().chunks(), layout.chunks);
  EXPECT_EQ(got->manifest.layout().schedule(), layout.schedule);
  EXPECT_EQ(got->manifest.shards_size(), 4);
  absl::StatusOr<common::Checkpoint> want =
      common::LoadCheckpoint(common::StepDir(options.checkpoint_root, spec.name(), kSteps));
  ASSERT_TRUE(want.ok()) << want.status();
  ExpectSameTensors(*got, *want);
  for (const auto& [name, values] : reference->weights) {
    ASSERT_EQ(got->tensors.count(name), 1u) << name;
    const std::vector<float>& saved = got->tensors.at(name).data;
    ASSERT_EQ(saved.size(), values.size()) << name;
    EXPECT_EQ(std::memcmp(saved.data(), values.data(), values.size() * sizeof(float)), 0) << name;
  }

  absl::StatusOr<pp::v1::Job> job = GetJob(cluster_->stub(), *job_id);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), pp::v1::SUCCEEDED);
  EXPECT_EQ(job->step(), kSteps);
}

INSTANTIATE_TEST_SUITE_P(Schedules, EquivalenceTest, EverySchedule(), LayoutName);

// Packed documents (data.documents "mask", model.positions "document"): every rank derives the
// documents from the window it reads, so every schedule and depth trains bitwise what the
// single-process reference trains.
constexpr int kDocumentSteps = 4;

struct DocumentLayout {
  const char* schedule;
  int chunks;
  int pipeline;
};

void PrintTo(const DocumentLayout& layout, std::ostream* os) {
  *os << layout.schedule << " V=" << layout.chunks << " D=" << layout.pipeline;
}

// Every training schedule at D=4, and one- and two-chunk schedules at the shallower depths.
std::vector<DocumentLayout> DocumentLayouts() {
  std::vector<DocumentLayout> layouts;
  for (const Layout& layout : TrainingLayouts()) {
    layouts.push_back({layout.schedule, layout.chunks, 4});
  }
  for (const DocumentLayout& shallow :
       {DocumentLayout{"1f1b", 1, 1}, DocumentLayout{"zb-h1", 1, 2},
        DocumentLayout{"interleaved-1f1b", 2, 2}, DocumentLayout{"gpipe", 1, 3},
        DocumentLayout{"zb-v", 2, 3}}) {
    layouts.push_back(shallow);
  }
  return layouts;
}

class PackedDocumentsTest : public IntegrationTest {
 protected:
  // The tiny job on packed documents, documents masked with document positions, evaluated on a
  // holdout after steps 2 and 4 (the eval path masks too).
  pp::v1::JobSpec PackedSpec(const char* schedule, int chunks, int pipeline) {
    const std::string path = (dir_ / "documents.bin").string();
    std::ifstream corpus(corpus_, std::ios::binary);
    std::ofstream(path, std::ios::binary)
        << PackDocuments(std::string(std::istreambuf_iterator<char>(corpus), {}));
    pp::v1::JobSpec spec = TinySpec(schedule, chunks, kDocumentSteps);
    spec.mutable_parallel()->set_pipeline(pipeline);
    spec.mutable_data()->set_path(path);
    spec.mutable_data()->set_documents("mask");
    spec.mutable_model()->set_positions("document");
    spec.mutable_eval()->set_every_steps(2);
    spec.mutable_eval()->set_batches(1);
    spec.mutable_eval()->set_holdout_fraction(0.1);
    common::ApplyDefaults(&spec);
    EXPECT_TRUE(common::ValidateJobSpec(spec).ok()) << common::ValidateJobSpec(spec);
    return spec;
  }
};

class PackedDocumentsLayoutTest : public PackedDocumentsTest,
                                  public ::testing::WithParamInterface<DocumentLayout> {};

TEST_F(PackedDocumentsTest, TheMaskChangesTheLosses) {
  const pp::v1::JobSpec masked = PackedSpec("1f1b", 1, 1);
  pp::v1::JobSpec plain = masked;
  plain.mutable_data()->clear_documents();
  plain.mutable_model()->clear_positions();
  pp::v1::JobSpec mask_only = masked;
  mask_only.mutable_model()->clear_positions();
  std::vector<std::vector<double>> losses;
  for (const pp::v1::JobSpec& spec : {masked, plain, mask_only}) {
    absl::StatusOr<trainer::TrainResult> result = trainer::Train(spec, {});
    ASSERT_TRUE(result.ok()) << result.status();
    losses.push_back(result->losses);
  }
  EXPECT_NE(losses[0], losses[1]) << "the mask and document positions changed nothing";
  EXPECT_NE(losses[2], losses[1]) << "the mask changed nothing";
  EXPECT_NE(losses[0], losses[2]) << "document positions changed nothing";
}

TEST_P(PackedDocumentsLayoutTest, TrainsAndEvaluatesBitwiseAsTheReferenceTrainer) {
  const DocumentLayout layout = GetParam();
  const pp::v1::JobSpec spec = PackedSpec(layout.schedule, layout.chunks, layout.pipeline);
  absl::StatusOr<trainer::TrainResult> reference = trainer::Train(spec, {});
  ASSERT_TRUE(reference.ok()) << reference.status();
  ASSERT_EQ(reference->evals.size(), 2u);

  ASSERT_NO_FATAL_FAILURE(StartCluster(layout.pipeline));
  const std::string job_id = Run(spec);
  ASSERT_FALSE(job_id.empty());
  ExpectMatchesReference(spec, job_id, testing_support::Match::kBitwise);
  absl::StatusOr<pp::v1::Job> job = GetJob(cluster_->stub(), job_id);
  ASSERT_TRUE(job.ok()) << job.status();
  // ppcoord stored the resolved id (bytes: \0) for the workers.
  EXPECT_TRUE(job->spec().data().has_end_of_text());
  EXPECT_EQ(job->spec().data().end_of_text(), 0);
  EXPECT_EQ(job->eval_step(), kDocumentSteps);
  const double got = job->eval_loss(), want = reference->evals.back().loss;
  EXPECT_EQ(std::memcmp(&got, &want, sizeof(double)), 0)
      << "eval: pipeline " << got << " reference " << want;
}

INSTANTIATE_TEST_SUITE_P(SchedulesAndDepths, PackedDocumentsLayoutTest,
                         ::testing::ValuesIn(DocumentLayouts()),
                         [](const ::testing::TestParamInfo<DocumentLayout>& info) {
                           std::string name =
                               absl::StrCat(info.param.schedule, "_D", info.param.pipeline);
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace pp::integration
