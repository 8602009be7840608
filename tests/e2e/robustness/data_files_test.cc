// Data files under trouble, with real processes (ppcoord + ppworker on loopback): a FIFO named as
// data.path is refused at submit without blocking ppcoord, also when a queued job's file became
// one before a restart; a data file truncated while its job trains fails the job with a reason
// naming the file, and the worker lives on, idle.
#include <sys/stat.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/support/cluster.h"
#include "tests/support/fixture.h"

namespace pp::robustness {
namespace {

using ::pp::testing_support::GetJob;
using ::pp::testing_support::ListWorkers;
using ::pp::testing_support::SubmitJob;
using ::pp::testing_support::WaitForJob;
using ::testing::HasSubstr;

class DataFilesTest : public testing_support::ClusterTest {
 protected:
  DataFilesTest() : ClusterTest(/*corpus_seed=*/17, /*corpus_bytes=*/50000) {}

  pp::v1::JobSpec Spec(int pipeline, int steps) const {
    pp::v1::JobSpec spec = SpecFrom(R"pb(
      name: "files"
      model { seq_len: 32 d_model: 32 n_heads: 4 }
      train { microbatches: 2 microbatch_size: 2 seed: 5 }
    )pb");
    spec.mutable_model()->set_n_layers(pipeline);
    spec.mutable_parallel()->set_pipeline(pipeline);
    spec.mutable_train()->set_steps(steps);
    return spec;
  }

  // ListJobs answers within 10 s: ppcoord is still serving.
  void ExpectServing() {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    pp::v1::ListJobsResponse response;
    grpc::Status status = cluster_->stub().ListJobs(&context, {}, &response);
    EXPECT_TRUE(status.ok()) << status.error_message() << cluster_->Logs();
  }
};

TEST_F(DataFilesTest, AFifoAsDataPathIsRefusedAtOnceAndPpcoordServesOn) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(0));
  const std::string fifo = (dir_ / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  pp::v1::JobSpec spec = Spec(/*pipeline=*/2, /*steps=*/5);
  spec.mutable_data()->set_path(fifo);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> id = SubmitJob(cluster_->stub(), spec);  // a 10 s deadline
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  ASSERT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument) << id.status();
  EXPECT_THAT(std::string(id.status().message()),
              HasSubstr("data.path: " + fifo + ": not a regular file (a FIFO)"));
  ExpectServing();
}

// A queued job whose data file is replaced by a FIFO: ppcoord restarts on that store and serves.
TEST_F(DataFilesTest, APpcoordRestartedOnAQueuedJobWhoseDataBecameAFifoStarts) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(0));  // no workers: the job stays queued
  const std::string data = (dir_ / "queued.txt").string();
  std::filesystem::copy_file(corpus_, data);
  pp::v1::JobSpec spec = Spec(/*pipeline=*/2, /*steps=*/5);
  spec.mutable_data()->set_path(data);
  absl::StatusOr<std::string> id = SubmitJob(cluster_->stub(), spec);
  ASSERT_TRUE(id.ok()) << id.status();
  std::filesystem::remove(data);
  ASSERT_EQ(::mkfifo(data.c_str(), 0600), 0);
  cluster_->KillCoordinator();
  ASSERT_TRUE(cluster_->RestartCoordinator().ok()) << cluster_->Logs();
  ExpectServing();
  absl::StatusOr<pp::v1::Job> job = GetJob(cluster_->stub(), *id);
  ASSERT_TRUE(job.ok()) << job.status();
}

TEST_F(DataFilesTest, ADataFileTruncatedWhileTheJobTrainsFailsItAndTheWorkerLivesOn) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(2));
  const std::string data = (dir_ / "shrinks.txt").string();
  std::filesystem::copy_file(corpus_, data);
  pp::v1::JobSpec spec = Spec(/*pipeline=*/2, /*steps=*/1000000);  // runs until the truncation
  spec.mutable_data()->set_path(data);
  spec.set_max_restarts(0);
  absl::StatusOr<std::string> id = SubmitJob(cluster_->stub(), spec);
  ASSERT_TRUE(id.ok()) << id.status();
  absl::StatusOr<pp::v1::Job> training = WaitForJob(
      cluster_->stub(), *id, [](const pp::v1::Job& job) { return job.step() >= 2; },
      absl::Seconds(60));
  ASSERT_TRUE(training.ok()) << training.status() << cluster_->Logs();
  std::filesystem::resize_file(data, 16);

  absl::StatusOr<pp::v1::Job> failed = WaitForJob(
      cluster_->stub(), *id,
      [](const pp::v1::Job& job) { return job.state() == pp::v1::FAILED; }, absl::Seconds(60));
  ASSERT_TRUE(failed.ok()) << failed.status() << cluster_->Logs();
  EXPECT_THAT(failed->reason(), HasSubstr(data));
  // The workers survived the read (no SIGBUS) and are free again.
  int idle = 0;
  for (absl::Time deadline = absl::Now() + absl::Seconds(20); absl::Now() < deadline;
       absl::SleepFor(absl::Milliseconds(20))) {
    absl::StatusOr<std::vector<pp::v1::WorkerInfo>> workers = ListWorkers(cluster_->stub());
    ASSERT_TRUE(workers.ok()) << workers.status() << cluster_->Logs();
    idle = 0;
    for (const pp::v1::WorkerInfo& w : *workers) idle += w.state() == pp::v1::IDLE ? 1 : 0;
    if (idle == 2) break;
  }
  EXPECT_EQ(idle, 2) << cluster_->Logs();
  for (const std::string& name : cluster_->worker_names()) {
    EXPECT_FALSE(cluster_->worker(name).Wait(absl::ZeroDuration()).ok()) << name << " exited";
  }
}

}  // namespace
}  // namespace pp::robustness
