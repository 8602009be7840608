// Issue 5 acceptance with real processes (ppcoord + ppworker on loopback): resume onto the same
// and another layout, a worker killed mid-run and mid-checkpoint, the coordinator killed and
// restarted, a worker drained with SIGTERM, a tampered shard. Every run must end bitwise equal
// (per-step losses, final weights) to the single-process reference trainer, which the
// distributed runtime matches bit for bit (tests/worker/task_test.cc).
#include <signal.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint.h"
#include "common/job_spec.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "tests/recovery/cluster.h"
#include "worker/data/data.h"
#include "worker/trainer/trainer.h"

namespace pp::recovery {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr int kSteps = 20;
constexpr absl::Duration kJobTimeout = absl::Seconds(60);

class RecoveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           absl::StrCat("recovery_test_", ::getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::ofstream(dir_ / "corpus.txt") << data::GenerateCorpus(11, 50000);
    cluster_ = std::make_unique<Cluster>(dir_.string());
    ASSERT_TRUE(cluster_->StartCoordinator().ok());
  }

  void TearDown() override {
    if (HasFailure()) std::cerr << cluster_->LogTails();
    cluster_.reset();
    fs::remove_all(dir_);
  }

  // `slow` (when named) has a slow disk: its shard of step 10 takes 2 s more, and its next save
  // (step 15) waits for it, so for 2 s no rank completes step 16, however fast steps are.
  void StartWorkers(const std::vector<std::string>& names, const std::string& slow = "") {
    for (const std::string& name : names) {
      std::map<std::string, std::string> env;
      if (name == slow) env["PP_TEST_SHARD_WRITE_PAUSE"] = "10:2";
      absl::Status started = cluster_->StartWorker(name, env);
      ASSERT_TRUE(started.ok()) << started;
    }
  }

  // A model small enough for a quick suite, with steps long enough (tens of ms) to hit mid-run.
  pp::v1::JobSpec Spec(int steps, int max_restarts = 0) {
    pp::v1::JobSpec spec;
    spec.set_name("recovery");
    pp::v1::ModelSpec* model = spec.mutable_model();
    model->set_vocab_size(256);
    model->set_seq_len(32);
    model->set_d_model(64);
    model->set_n_heads(4);
    model->set_n_layers(4);
    pp::v1::ParallelSpec* parallel = spec.mutable_parallel();
    parallel->set_pipeline(4);
    parallel->set_chunks(1);
    parallel->set_schedule("1f1b");
    pp::v1::TrainSpec* train = spec.mutable_train();
    train->set_steps(steps);
    train->set_microbatches(4);
    train->set_microbatch_size(4);
    train->set_lr(1e-3);
    train->set_weight_decay(0.1);
    train->set_grad_clip(0.5);
    train->set_seed(5);
    spec.mutable_data()->set_path((dir_ / "corpus.txt").string());
    spec.mutable_checkpoint()->set_every_steps(5);
    spec.mutable_checkpoint()->set_keep(3);
    spec.set_max_restarts(max_restarts);
    return spec;
  }

  // The reference run of Spec(kSteps): losses and final weights.
  const trainer::TrainResult& Reference() {
    static const trainer::TrainResult* reference = [this] {
      pp::v1::JobSpec spec = Spec(kSteps);
      common::ApplyDefaults(&spec);
      absl::StatusOr<trainer::TrainResult> result = trainer::Train(spec, {});
      EXPECT_TRUE(result.ok()) << result.status();
      return new trainer::TrainResult(result.ok() ? *std::move(result) : trainer::TrainResult());
    }();
    return *reference;
  }

  // Per-step losses (from ppcoord's store) and step-20 weights of `job` equal the reference.
  void ExpectMatchesReference(const std::string& job) {
    const trainer::TrainResult& reference = Reference();
    absl::StatusOr<std::vector<double>> losses = StoredLosses(cluster_->data_dir(), job);
    ASSERT_TRUE(losses.ok()) << losses.status();
    ASSERT_EQ(losses->size(), reference.losses.size());
    for (size_t k = 0; k < losses->size(); ++k) {
      EXPECT_EQ(std::memcmp(&(*losses)[k], &reference.losses[k], sizeof(double)), 0)
          << "step " << k + 1 << ": " << (*losses)[k] << " vs " << reference.losses[k];
    }
    absl::StatusOr<std::map<std::string, std::vector<float>>> weights =
        CheckpointValues(cluster_->checkpoint_dir(), job, kSteps);
    ASSERT_TRUE(weights.ok()) << weights.status();
    for (const auto& [name, values] : reference.weights) {
      auto it = weights->find(name);
      ASSERT_NE(it, weights->end()) << name;
      ASSERT_EQ(it->second.size(), values.size()) << name;
      EXPECT_EQ(std::memcmp(it->second.data(), values.data(), values.size() * sizeof(float)), 0)
          << name;
    }
  }

  absl::StatusOr<pp::v1::Job> Resume(const pp::v1::ResumeJobRequest& request) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    pp::v1::Job job;
    grpc::Status status = cluster_->coordinator().ResumeJob(&context, request, &job);
    if (!status.ok()) {
      return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                          status.error_message());
    }
    return job;
  }

  std::string StepDir(const std::string& job, int step) {
    return common::StepDir(cluster_->checkpoint_dir(), job, step);
  }

  int ShardsIn(const std::string& step_dir) {
    int shards = 0;
    std::error_code ec;
    for (fs::directory_iterator it(step_dir, ec), end; !ec && it != end; it.increment(ec)) {
      shards += it->path().extension() == ".safetensors";
    }
    return shards;
  }

  fs::path dir_;
  std::unique_ptr<Cluster> cluster_;
};

TEST_F(RecoveryTest, StopAndResumeIsBitwiseEqualOnTheSameAndAnotherLayout) {
  StartWorkers({"w0", "w1", "w2", "w3"});
  for (bool new_layout : {false, true}) {
    SCOPED_TRACE(new_layout ? "D=2 V=2 interleaved-1f1b" : "same layout");
    absl::StatusOr<std::string> id = cluster_->Submit(Spec(kSteps / 2));
    ASSERT_TRUE(id.ok()) << id.status();
    ASSERT_TRUE(cluster_->WaitSucceeded(*id, kJobTimeout).ok());

    pp::v1::ResumeJobRequest request;
    request.set_job_id(*id);
    request.set_steps(kSteps);
    if (new_layout) {
      request.mutable_parallel()->set_pipeline(2);
      request.mutable_parallel()->set_chunks(2);
      request.mutable_parallel()->set_schedule("interleaved-1f1b");
    }
    absl::StatusOr<pp::v1::Job> resumed = Resume(request);
    ASSERT_TRUE(resumed.ok()) << resumed.status();
    EXPECT_EQ(resumed->start_step(), kSteps / 2);
    absl::StatusOr<pp::v1::Job> done = cluster_->WaitSucceeded(*id, kJobTimeout);
    ASSERT_TRUE(done.ok()) << done.status();
    EXPECT_EQ(done->step(), kSteps);
    EXPECT_EQ(done->placement_size(), new_layout ? 2 : 4);
    ExpectMatchesReference(*id);
  }
}

TEST_F(RecoveryTest, KilledWorkerIsReplacedByASpareAndTheRunStaysBitwiseEqual) {
  StartWorkers({"w0", "w1", "w2", "w3", "w4"}, "w3");  // w4: the spare
  absl::StatusOr<std::string> id = cluster_->Submit(Spec(kSteps, /*max_restarts=*/2));
  ASSERT_TRUE(id.ok()) << id.status();
  // Mid-run: after the first checkpoint committed, before the job ends.
  absl::StatusOr<pp::v1::Job> running = cluster_->WaitFor(
      *id, [](const pp::v1::Job& j) { return j.last_checkpoint_step() >= 5; }, kJobTimeout);
  ASSERT_TRUE(running.ok()) << running.status();
  ASSERT_LT(running->step(), kSteps) << "the job ended before the kill";
  cluster_->worker(running->placement(1).worker()).Signal(SIGKILL);

  absl::StatusOr<pp::v1::Job> done = cluster_->WaitSucceeded(*id, kJobTimeout);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_GE(done->restarts(), 1);
  ASSERT_GE(done->restart_log_size(), 1);
  EXPECT_TRUE(done->restart_log(0).automatic());
  EXPECT_GE(done->restart_log(0).from_step(), 5);
  for (const pp::v1::RankPlacement& p : done->placement()) {
    EXPECT_NE(p.worker(), running->placement(1).worker());
  }
  ExpectMatchesReference(*id);
}

TEST_F(RecoveryTest, WorkerKilledWhileWritingACheckpointLeavesItUncommitted) {
  StartWorkers({"w0", "w2", "w3", "w4"});
  // w1 sorts second: it holds rank 1 and pauses before writing its shard of step 10.
  ASSERT_TRUE(cluster_->StartWorker("w1", {{"PP_TEST_SHARD_WRITE_PAUSE", "10:60"}}).ok());
  StartWorkers({"w5"});  // the spare
  absl::StatusOr<std::string> id = cluster_->Submit(Spec(kSteps, /*max_restarts=*/1));
  ASSERT_TRUE(id.ok()) << id.status();
  const std::string step10 = StepDir(*id, 10);
  ASSERT_TRUE(cluster_->WaitFor(
                          *id, [&](const pp::v1::Job& j) { return ShardsIn(step10) >= 3; },
                          kJobTimeout)
                  .ok());
  absl::StatusOr<pp::v1::Job> before = cluster_->Get(*id);
  ASSERT_TRUE(before.ok());
  ASSERT_EQ(before->placement(1).worker(), "w1");
  cluster_->worker("w1").Signal(SIGKILL);
  EXPECT_FALSE(fs::exists(fs::path(step10) / common::kManifestFile));
  EXPECT_EQ(before->last_checkpoint_step(), 5);

  absl::StatusOr<pp::v1::Job> done = cluster_->WaitSucceeded(*id, kJobTimeout);
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_EQ(done->restart_log_size(), 1);
  EXPECT_EQ(done->restart_log(0).from_step(), 5);  // step 10 never committed
  ExpectMatchesReference(*id);
}

TEST_F(RecoveryTest, RestartedCoordinatorRecoversTheRunningJob) {
  StartWorkers({"w0", "w1", "w2", "w3"}, "w3");
  absl::StatusOr<std::string> id = cluster_->Submit(Spec(kSteps));
  ASSERT_TRUE(id.ok()) << id.status();
  absl::StatusOr<pp::v1::Job> running = cluster_->WaitFor(
      *id, [](const pp::v1::Job& j) { return j.last_checkpoint_step() >= 5; }, kJobTimeout);
  ASSERT_TRUE(running.ok()) << running.status();
  const int port = cluster_->coordinator_port();
  cluster_->KillCoordinator();
  ASSERT_TRUE(cluster_->StartCoordinator(port).ok());

  absl::StatusOr<pp::v1::Job> done = cluster_->WaitSucceeded(*id, kJobTimeout);
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_GE(done->restart_log_size(), 1);
  EXPECT_THAT(done->restart_log(0).reason(), HasSubstr("ppcoord restarted"));
  EXPECT_EQ(done->restarts(), 0);  // not the job's fault: no automatic restart used
  ExpectMatchesReference(*id);
}

TEST_F(RecoveryTest, SigtermDrainsAWorkerAtACheckpointAndTheJobMovesOn) {
  StartWorkers({"w0", "w1", "w2", "w3", "w4"}, "w3");
  absl::StatusOr<std::string> id = cluster_->Submit(Spec(kSteps));  // max_restarts 0
  ASSERT_TRUE(id.ok()) << id.status();
  absl::StatusOr<pp::v1::Job> running = cluster_->WaitFor(
      *id, [](const pp::v1::Job& j) { return j.last_checkpoint_step() >= 5; }, kJobTimeout);
  ASSERT_TRUE(running.ok()) << running.status();
  ASSERT_LT(running->step(), 16) << "the job went past the slow checkpoint before the drain";
  Process& drained = cluster_->worker(running->placement(2).worker());
  drained.Signal(SIGTERM);
  absl::StatusOr<int> exit = drained.Wait(absl::Seconds(30));
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_EQ(*exit, 0);

  absl::StatusOr<pp::v1::Job> done = cluster_->WaitSucceeded(*id, kJobTimeout);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->restarts(), 0);
  ASSERT_EQ(done->restart_log_size(), 1);
  EXPECT_THAT(done->restart_log(0).reason(), HasSubstr("drained"));
  // The stop step is a checkpoint, whether or not every_steps falls on it.
  EXPECT_GT(done->restart_log(0).from_step(), running->step());
  EXPECT_LE(done->restart_log(0).from_step(), 17);  // the drained rank reports step 16 at most
  for (const pp::v1::RankPlacement& p : done->placement()) {
    EXPECT_NE(p.worker(), running->placement(2).worker());
  }
  ExpectMatchesReference(*id);
}

TEST_F(RecoveryTest, TamperedShardIsRefusedByNameAndResumeFallsBack) {
  StartWorkers({"w0", "w1", "w2", "w3"});
  absl::StatusOr<std::string> id = cluster_->Submit(Spec(kSteps / 2));
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE(cluster_->WaitSucceeded(*id, kJobTimeout).ok());

  const std::string shard = StepDir(*id, 10) + "/" + common::ShardFileName(1);
  {
    std::fstream file(shard, std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(-3, std::ios::end);
    const char byte = static_cast<char>(file.get() ^ 0x40);
    file.seekp(-3, std::ios::end);
    file.put(byte);
  }
  absl::StatusOr<common::Checkpoint> loaded = common::LoadCheckpoint(StepDir(*id, 10));
  ASSERT_FALSE(loaded.ok());
  EXPECT_THAT(loaded.status().message(), HasSubstr(shard));

  pp::v1::ResumeJobRequest request;
  request.set_job_id(*id);
  request.set_steps(kSteps);
  request.set_step(10);  // asked for by number: refused, naming the file
  absl::StatusOr<pp::v1::Job> refused = Resume(request);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr(shard));
  request.set_step(0);  // the newest that verifies
  absl::StatusOr<pp::v1::Job> resumed = Resume(request);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->start_step(), 5);
  absl::StatusOr<pp::v1::Job> done = cluster_->WaitSucceeded(*id, kJobTimeout);
  ASSERT_TRUE(done.ok()) << done.status();
  ExpectMatchesReference(*id);
}

}  // namespace
}  // namespace pp::recovery
