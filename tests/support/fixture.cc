#include "tests/support/fixture.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "google/protobuf/text_format.h"
#include "tests/support/results.h"
#include "worker/data/data.h"
#include "worker/trainer/trainer.h"

namespace pp::testing_support {
namespace {

namespace fs = std::filesystem;

constexpr absl::Duration kJobTimeout = absl::Seconds(60);

constexpr char kSharedSettings[] = R"pb(
  model { vocab_size: 256 }
  parallel { chunks: 1 schedule: "1f1b" }
  train { lr: 1e-3 weight_decay: 0.1 grad_clip: 0.5 }
)pb";

// The reference trainer's run of `spec` (layout ignored), computed once per process.
const trainer::TrainResult& Reference(const pp::v1::JobSpec& spec) {
  static auto* cache = new std::map<std::string, trainer::TrainResult>();
  auto [it, added] = cache->try_emplace(spec.SerializeAsString());
  if (added) {
    absl::StatusOr<trainer::TrainResult> result = trainer::Train(spec, {});
    EXPECT_TRUE(result.ok()) << result.status();
    if (result.ok()) it->second = *std::move(result);
  }
  return it->second;
}

bool SameLoss(double got, double want, Match match) {
  if (match == Match::kBitwise) return std::memcmp(&got, &want, sizeof(double)) == 0;
  return std::fabs(got - want) <= 1e-5 * std::fabs(want);
}

// Whether `got` is `want` (as `match` asks) for the tensor `name` of a run of `spec`.
bool SameTensor(const std::string& name, const std::vector<float>& got,
                const std::vector<float>& want, const pp::v1::JobSpec& spec, Match match) {
  if (match == Match::kBitwise) {
    return std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0;
  }
  // AdamW moves an element by about lr a step whatever its gradient's size, so an element whose
  // gradient is rounding noise (it sums to nearly zero) can end up to 2 lr a step away under
  // another summation order (tests/worker/parallel/training_test.cc). The key biases' gradient
  // is exactly zero: all of them are such. Elsewhere a few elements are: at most 1% may use that
  // bound, the others keep within 1e-4 of the tensor's largest value.
  const bool noise = name.find("attn.qkv.bias") != std::string::npos;
  const double adamw_noise = 2 * spec.train().lr() * spec.train().steps();
  double scale = 1e-30;
  for (float w : want) scale = std::max(scale, std::fabs(static_cast<double>(w)));
  size_t noisy = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double diff = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (diff > adamw_noise) return false;
    noisy += diff > 1e-4 * scale;
  }
  return noise || noisy <= want.size() / 100;
}

}  // namespace

fs::path FreshTestDir() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = absl::StrCat("pp_", info->test_suite_name(), "_", info->name(), "_", getpid());
  std::replace(name.begin(), name.end(), '/', '_');
  const fs::path dir = fs::temp_directory_path() / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void ClusterTest::SetUp() {
  dir_ = FreshTestDir();
  corpus_ = (dir_ / "corpus.txt").string();
  std::ofstream(corpus_) << data::GenerateCorpus(corpus_seed_, corpus_bytes_);
}

void ClusterTest::TearDown() {
  if (HasFailure() && cluster_) std::cerr << cluster_->Logs();
  cluster_.reset();  // stop the processes before their folder goes
  fs::remove_all(dir_);
}

void ClusterTest::StartCluster(int workers) {
  ClusterOptions options;
  options.bin_dir = PP_BIN_DIR;
  options.dir = (dir_ / "cluster").string();
  options.coordinator_flags = {"--worker_timeout=2s", "--heartbeat_interval=200ms"};
  options.worker_flags = {"--comm_timeout=10s", "--drain_timeout=30s"};
  // Every cluster test runs under NCCL's matching rules: a program or executor that only tag
  // matching would save fails here as it would on GPUs (docs/testing.md "Transports").
  options.worker_env = {{"PP_TEST_TRANSPORT", "fifo"}};
  absl::StatusOr<std::unique_ptr<Cluster>> cluster = Cluster::Start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  cluster_ = *std::move(cluster);
  absl::Status added = cluster_->AddWorkers(workers);
  ASSERT_TRUE(added.ok()) << added;
}

pp::v1::JobSpec ClusterTest::SpecFrom(absl::string_view text) const {
  pp::v1::JobSpec spec;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(kSharedSettings, &spec));
  spec.mutable_data()->set_path(corpus_);
  EXPECT_TRUE(google::protobuf::TextFormat::MergeFromString(std::string(text), &spec)) << text;
  return spec;
}

std::string ClusterTest::Run(const pp::v1::JobSpec& spec) {
  absl::StatusOr<std::string> job = SubmitJob(cluster_->stub(), spec);
  EXPECT_TRUE(job.ok()) << job.status();
  if (!job.ok()) return "";
  absl::StatusOr<pp::v1::Job> ended = WaitSucceeded(cluster_->stub(), *job, kJobTimeout);
  EXPECT_TRUE(ended.ok()) << ended.status();
  return ended.ok() ? *job : "";
}

absl::StatusOr<pp::v1::Job> ClusterTest::ResumeToEnd(const pp::v1::ResumeJobRequest& request) {
  absl::StatusOr<pp::v1::Job> resumed = ResumeJob(cluster_->stub(), request);
  if (!resumed.ok()) return resumed.status();
  return WaitSucceeded(cluster_->stub(), request.job_id(), kJobTimeout);
}

void ClusterTest::ExpectMatchesReference(const pp::v1::JobSpec& spec, const std::string& job,
                                         Match match) {
  const pp::v1::JobSpec single = SingleProcessSpec(spec);
  const trainer::TrainResult& reference = Reference(single);
  ASSERT_FALSE(reference.losses.empty()) << "no reference run";

  absl::StatusOr<std::vector<double>> losses = StoredLosses(cluster_->data_dir(), job);
  ASSERT_TRUE(losses.ok()) << losses.status();
  ASSERT_EQ(losses->size(), reference.losses.size());
  for (size_t k = 0; k < losses->size(); ++k) {
    EXPECT_TRUE(SameLoss((*losses)[k], reference.losses[k], match))
        << "step " << k + 1 << ": " << (*losses)[k] << " vs " << reference.losses[k];
  }

  absl::StatusOr<std::map<std::string, std::vector<float>>> weights =
      CheckpointValues(cluster_->checkpoint_root(), job, spec.train().steps());
  ASSERT_TRUE(weights.ok()) << weights.status();
  ASSERT_EQ(weights->size(), 3 * reference.weights.size());  // values and two AdamW moments
  for (const auto& [name, want] : reference.weights) {
    auto it = weights->find(name);
    ASSERT_NE(it, weights->end()) << name;
    ASSERT_EQ(it->second.size(), want.size()) << name;
    EXPECT_TRUE(SameTensor(name, it->second, want, spec, match)) << name;
  }
}

}  // namespace pp::testing_support
