// A job on a glob of three llm.c shards (docs/jobs.md "Data windows"), with real processes:
// ppcoord stores the glob resolved to the three files; D=1 and D=2 train bitwise as `ppctl
// train` does on the same glob (losses) and as the reference trainer (weights); a fourth shard
// matching the glob afterwards changes nothing, and a resume from a checkpoint whose next window
// lies inside the second shard continues onto DP=2 bitwise equally from both runs. A weighted mix
// of the shards and a generated corpus trains bitwise as the reference trainer.
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file_io.h"
#include "common/llmc_shard.h"
#include "common/proto_io.h"
#include "gtest/gtest.h"
#include "tests/support/cluster.h"
#include "tests/support/fixture.h"
#include "tests/support/process.h"
#include "tests/support/results.h"
#include "worker/data/data.h"

namespace pp::recovery {
namespace {

using ::pp::testing_support::Match;

constexpr int kShardTokens[] = {60, 70, 50};  // N = 180; shard 2 holds tokens [60, 130)
constexpr int kSeqLen = 16;                   // W = 164 starts
constexpr int kPerStep = 8;                   // M x B = 2 x 4 sequences
constexpr int kSteps = 12;
constexpr int kResumeStep = 6;

class ShardsTest : public testing_support::ClusterTest {
 protected:
  void SetUp() override {
    ClusterTest::SetUp();
    const std::string shards = (dir_ / "shards").string();
    ASSERT_TRUE(common::MakeDirs(shards).ok());
    // Ids: the generated corpus's bytes; shard k named so that byte order is k's order.
    const std::string text = data::GenerateCorpus(21, 180);
    int at = 0;
    for (int k = 0; k < 3; ++k) {
      WriteShard(absl::StrCat(shards, "/train-", k, ".bin"), text.substr(at, kShardTokens[k]));
      at += kShardTokens[k];
    }
    glob_ = shards + "/train-*.bin";
    ASSERT_NO_FATAL_FAILURE(StartCluster(2));
  }

  static void WriteShard(const std::string& path, const std::string& bytes) {
    std::string shard = common::LlmcHeader(static_cast<int64_t>(bytes.size()));
    for (unsigned char c : bytes) shard += std::string{static_cast<char>(c), '\0'};
    ASSERT_TRUE(common::WriteFileAtomic(path, shard).ok()) << path;
  }

  pp::v1::JobSpec Spec(int pipeline) const {
    pp::v1::JobSpec spec = SpecFrom(R"pb(
      name: "shards"
      model { seq_len: 16 d_model: 32 n_heads: 2 n_layers: 2 }
      train { microbatches: 2 microbatch_size: 4 seed: 3 }
      checkpoint { every_steps: 3 keep: 10 }
    )pb");
    spec.mutable_data()->set_format("llmc");
    spec.mutable_data()->set_path(glob_);
    spec.mutable_parallel()->set_pipeline(pipeline);
    spec.mutable_train()->set_steps(kSteps);
    return spec;
  }

  // `ppctl train` on the spec's file: every step's loss, exactly (%.17g).
  std::vector<double> PpctlTrainLosses(const pp::v1::JobSpec& spec) {
    const std::string file = (dir_ / "train.json").string();
    const std::string losses = (dir_ / "losses.txt").string();
    absl::StatusOr<std::string> json = common::MessageToJson(spec);
    EXPECT_TRUE(json.ok() && common::WriteFileAtomic(file, *json).ok()) << json.status();
    absl::StatusOr<testing_support::CommandResult> run = testing_support::RunCommand(
        {cluster_->ppctl(), "train", file, "--losses=" + losses}, absl::Seconds(60));
    EXPECT_TRUE(run.ok() && run->exit_code == 0) << run.status() << (run.ok() ? run->err : "");
    absl::StatusOr<std::string> text = common::ReadFile(losses);
    EXPECT_TRUE(text.ok()) << text.status();
    std::vector<double> values;
    for (absl::string_view line : absl::StrSplit(text.ok() ? *text : "", '\n', absl::SkipEmpty())) {
      const std::vector<std::string> words = absl::StrSplit(line, ' ');
      values.push_back(std::stod(words.at(1)));
    }
    return values;
  }

  // The stored spec names the glob's three matches, in order, and K counts their tokens.
  void ExpectStoredFiles(const std::string& id) {
    absl::StatusOr<pp::v1::Job> job = testing_support::GetJob(cluster_->stub(), id);
    ASSERT_TRUE(job.ok()) << job.status();
    const std::string d = (dir_ / "shards/").string();
    EXPECT_TRUE(job->spec().data().path().empty());
    EXPECT_EQ(std::vector<std::string>(job->spec().data().paths().begin(),
                                       job->spec().data().paths().end()),
              (std::vector<std::string>{d + "train-0.bin", d + "train-1.bin", d + "train-2.bin"}));
    EXPECT_EQ(job->train_windows(), 180 - kSeqLen);
  }

  std::string glob_;
};

TEST_F(ShardsTest, AGlobOfShardsTrainsBitwiseAndResumesMidShardOntoDataParallel) {
  // The first window the resumed runs read starts inside shard 2 (start(s) = s x 101 mod 164).
  const int64_t resume_start = data::WindowStart(int64_t{kResumeStep} * kPerStep, 180, kSeqLen);
  ASSERT_GE(resume_start, kShardTokens[0]);
  ASSERT_LT(resume_start + kSeqLen + 1, kShardTokens[0] + kShardTokens[1]);

  const std::vector<double> ppctl = PpctlTrainLosses(Spec(1));
  ASSERT_EQ(ppctl.size(), static_cast<size_t>(kSteps));
  std::vector<std::string> jobs;
  for (int pipeline : {1, 2}) {
    SCOPED_TRACE(absl::StrCat("D=", pipeline));
    const std::string id = Run(Spec(pipeline));
    ASSERT_FALSE(id.empty());
    ExpectMatchesReference(Spec(pipeline), id, Match::kBitwise);
    absl::StatusOr<std::vector<double>> losses =
        testing_support::StoredLosses(cluster_->data_dir(), id);
    ASSERT_TRUE(losses.ok()) << losses.status();
    EXPECT_EQ(std::memcmp(losses->data(), ppctl.data(), ppctl.size() * sizeof(double)), 0);
    ASSERT_NO_FATAL_FAILURE(ExpectStoredFiles(id));
    jobs.push_back(id);
  }
  // A shard that matches the glob now is no part of the jobs' streams.
  WriteShard((dir_ / "shards/train-3.bin").string(), data::GenerateCorpus(5, 40));
  for (const std::string& id : jobs) {
    pp::v1::ResumeJobRequest request;
    request.set_job_id(id);
    request.set_step(kResumeStep);
    request.mutable_parallel()->set_pipeline(1);
    request.mutable_parallel()->set_data(2);
    request.mutable_parallel()->set_schedule("1f1b");
    absl::StatusOr<pp::v1::Job> done = ResumeToEnd(request);
    ASSERT_TRUE(done.ok()) << done.status();
    EXPECT_EQ(done->start_step(), kResumeStep);
    EXPECT_EQ(done->placement_size(), 2);
    EXPECT_EQ(done->spec().data().paths_size(), 3);
    // Data parallelism sums the gradients in another order: close to the reference.
    ExpectMatchesReference(Spec(1), id, Match::kClose);
  }
  // Both resumed the same checkpoint bits onto the same layout: equal bit for bit.
  const absl::Status same = testing_support::SameBits(
      cluster_->data_dir(), cluster_->checkpoint_root(), jobs[0], jobs[1], kSteps);
  EXPECT_TRUE(same.ok()) << same;
}

// A weighted mix (the shards 3 : a generated corpus 1) on D=2 reads what the reference trainer
// reads, bit for bit; ppcoord stores the source's glob resolved and counts K = sum K_i.
TEST_F(ShardsTest, AMixTrainsBitwiseAsTheReferenceTrainer) {
  pp::v1::JobSpec spec = Spec(2);
  spec.set_name("mix");
  spec.mutable_train()->set_steps(4);
  pp::v1::DataSpec* data = spec.mutable_data();
  data->clear_path();
  pp::v1::WeightedData* shards = data->add_mix();
  shards->set_weight(3);
  shards->mutable_data()->set_path(glob_);
  pp::v1::WeightedData* text = data->add_mix();
  text->set_weight(1);
  text->mutable_data()->set_format("generated");
  text->mutable_data()->set_generated_tokens(500);
  const std::string id = Run(spec);
  ASSERT_FALSE(id.empty());
  ExpectMatchesReference(spec, id, Match::kBitwise);
  absl::StatusOr<pp::v1::Job> job = testing_support::GetJob(cluster_->stub(), id);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->spec().data().mix(0).data().paths_size(), 3);
  EXPECT_EQ(job->spec().data().mix(0).data().format(), "llmc");
  EXPECT_EQ(job->train_windows(), (180 - kSeqLen) + (500 - kSeqLen));
}

}  // namespace
}  // namespace pp::recovery
