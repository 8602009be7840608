// model.init_from: a job starts from a Hugging Face GPT-2 folder (as `ppctl export` writes it)
// instead of its seeded initialisation, here with a padded vocabulary (model.real_vocab_size). On
// the CPU cluster the losses and final weights are bitwise those of the single-process trainer
// started from the same folder; tensor-parallel ranks cut their slices from the folder's whole
// tensors (their all-reduces sum in another order, so that job matches within the fixture's
// Match::kClose); a folder whose weights do not load fails the job naming model.init_from.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "common/checkpoint.h"
#include "common/hf_gpt2.h"
#include "common/job_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/e2e/integration/fixture.h"
#include "tests/support/cluster.h"
#include "worker/trainer/train_from.h"
#include "worker/trainer/trainer.h"

namespace pp::integration {
namespace {

using ::pp::testing_support::Match;
using ::pp::testing_support::SubmitJob;
using ::pp::testing_support::WaitForJob;
using ::testing::HasSubstr;

constexpr int kSteps = 3;

class InitFromTest : public IntegrationTest {
 protected:
  // An HF folder holding the weights of a short seeded run of `spec`'s model (not the seeded
  // values a job would start from anyway).
  std::string ExportTrained(pp::v1::JobSpec spec) {
    common::ApplyDefaults(&spec);
    trainer::TrainOptions options;
    options.checkpoint_root = (dir_ / "source").string();
    absl::StatusOr<trainer::TrainResult> trained = trainer::Train(spec, options);
    EXPECT_TRUE(trained.ok()) << trained.status();
    absl::StatusOr<common::Checkpoint> saved = common::LoadCheckpoint(
        common::StepDir(options.checkpoint_root, spec.name(), spec.train().steps()));
    EXPECT_TRUE(saved.ok()) << saved.status();
    const std::string hf = (dir_ / "hf").string();
    if (saved.ok()) EXPECT_TRUE(common::WriteHfGpt2(hf, spec.model(), saved->tensors).ok());
    return hf;
  }

};

void ExpectBitwise(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    EXPECT_EQ(std::memcmp(&got[k], &want[k], sizeof(double)), 0)
        << "step " << k + 1 << ": " << got[k] << " vs " << want[k];
  }
}

// The model pads its vocabulary (320 rows, 300 real ids; the bytes are ids < 256): the folder
// holds the 300 real rows, every loader adds the same zero rows, and the masked loss gives the
// same bits on every pipeline stage layout as in the reference.
TEST_F(InitFromTest, JobStartsFromTheFolderLikeTheReference) {
  pp::v1::JobSpec source = TinySpec("1f1b", 1, 2);
  source.set_name("source");
  source.mutable_model()->set_vocab_size(320);
  source.mutable_model()->set_real_vocab_size(300);
  const std::string hf = ExportTrained(source);

  // Another seed: only the folder can make its losses the reference's.
  pp::v1::JobSpec spec = TinySpec("1f1b", 1, kSteps);
  spec.mutable_train()->set_seed(11);
  spec.mutable_model()->set_vocab_size(320);
  spec.mutable_model()->set_real_vocab_size(300);
  spec.mutable_model()->set_init_from(hf);
  pp::v1::JobSpec defaulted = spec;
  common::ApplyDefaults(&defaulted);
  ASSERT_TRUE(common::ValidateJobSpec(defaulted).ok()) << common::ValidateJobSpec(defaulted);
  trainer::TrainOptions options;
  options.checkpoint_root = (dir_ / "reference").string();
  absl::StatusOr<trainer::TrainResult> reference = trainer::Train(defaulted, options);
  ASSERT_TRUE(reference.ok()) << reference.status();

  // The field is `ppctl import`'s path (TrainFrom with the folder's tensors), and not the seed's.
  pp::v1::JobSpec seeded = defaulted;
  seeded.mutable_model()->clear_init_from();
  absl::StatusOr<common::HfGpt2Model> folder = common::ReadHfGpt2(hf);
  ASSERT_TRUE(folder.ok()) << folder.status();
  common::PadVocabRows(seeded.model(), &folder->tensors);  // as ppctl import does
  options.checkpoint_root = (dir_ / "imported").string();
  absl::StatusOr<trainer::TrainResult> imported =
      trainer::TrainFrom(seeded, options, folder->tensors);
  ASSERT_TRUE(imported.ok()) << imported.status();
  ExpectBitwise(imported->losses, reference->losses);
  options.checkpoint_root = (dir_ / "seeded").string();
  absl::StatusOr<trainer::TrainResult> from_seed = trainer::Train(seeded, options);
  ASSERT_TRUE(from_seed.ok()) << from_seed.status();
  EXPECT_NE(from_seed->losses[0], reference->losses[0]);

  ASSERT_NO_FATAL_FAILURE(StartCluster(4));
  const std::string pipelined = Run(spec);
  ASSERT_FALSE(pipelined.empty()) << cluster_->Logs();
  ExpectMatchesReference(spec, pipelined, Match::kBitwise);
  // D=2 x TP=2: a wrong slice would start from other weights and miss by far more than rounding.
  spec.mutable_parallel()->set_pipeline(2);
  spec.mutable_parallel()->set_tensor(2);
  const std::string sliced = Run(spec);
  ASSERT_FALSE(sliced.empty()) << cluster_->Logs();
  ExpectMatchesReference(spec, sliced, Match::kClose);
}

TEST_F(InitFromTest, FolderThatDoesNotLoadIsRefusedOrFailsTheJob) {
  pp::v1::JobSpec spec = TinySpec("1f1b", 1, kSteps);
  spec.mutable_parallel()->set_pipeline(2);
  const std::string hf = (dir_ / "broken").string();
  ASSERT_NO_FATAL_FAILURE(StartCluster(2));
  // No config.json: refused at submission.
  spec.mutable_model()->set_init_from(hf);
  absl::StatusOr<std::string> refused = SubmitJob(cluster_->stub(), spec);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("model.init_from: "));
  // The config fits, the weights are not safetensors: the workers fail the attempt, and with no
  // restarts left the job, naming the field.
  std::filesystem::create_directories(hf);
  std::ofstream(hf + "/config.json") << common::HfGpt2ConfigJson(spec.model());
  std::ofstream(hf + "/model.safetensors") << "not safetensors";
  absl::StatusOr<std::string> id = SubmitJob(cluster_->stub(), spec);
  ASSERT_TRUE(id.ok()) << id.status();
  absl::StatusOr<pp::v1::Job> job = WaitForJob(
      cluster_->stub(), *id,
      [](const pp::v1::Job& j) { return j.state() == pp::v1::FAILED || j.state() == pp::v1::SUCCEEDED; },
      absl::Seconds(60));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), pp::v1::FAILED);
  EXPECT_THAT(job->reason(), HasSubstr("model.init_from: "));
}

}  // namespace
}  // namespace pp::integration
