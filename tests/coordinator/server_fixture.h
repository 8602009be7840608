// The fixture of the tests that run ppcoord in-process on loopback port 0 (CoordinatorServer with
// its real SQLite store under a folder of the test's own) and talk to it over gRPC, with fake
// workers (test_support.h). Header-only; test code only.
#ifndef PP_TESTS_COORDINATOR_SERVER_FIXTURE_H_
#define PP_TESTS_COORDINATOR_SERVER_FIXTURE_H_

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/checkpoint.h"
#include "coordinator/coordinator.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "pp/v1/coordinator.grpc.pb.h"
#include "tests/coordinator/test_support.h"

namespace pp::coordinator::testing {

class CoordinatorServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           absl::StrCat("ppcoord_", ::getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    data_ = (dir_ / "corpus.txt").string();
    std::ofstream(data_) << std::string(4096, 'a');
    StartServer();
  }
  void TearDown() override {
    workers_.clear();
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  // (Re)starts ppcoord on the test's data folder: fast heartbeats, so workers go DOWN in 0.6 s.
  void StartServer() {
    CoordinatorOptions options;
    options.data_dir = (dir_ / "data").string();
    options.worker_timeout = absl::Milliseconds(600);
    options.heartbeat_interval = absl::Milliseconds(50);
    options.retain_jobs = retain_jobs_;
    absl::StatusOr<std::unique_ptr<CoordinatorServer>> server = CoordinatorServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    channel_ = grpc::CreateChannel(server_->grpc_address(), grpc::InsecureChannelCredentials());
    client_ = pp::v1::Coordinator::NewStub(channel_);
  }

  // The example job of docs/jobs.md, scaled down.
  pp::v1::JobSpec ValidSpec(int pipeline = 2) {
    pp::v1::JobSpec spec;
    spec.set_name("tiny");
    pp::v1::ModelSpec* m = spec.mutable_model();
    m->set_vocab_size(256);
    m->set_seq_len(16);
    m->set_d_model(32);
    m->set_n_heads(4);
    m->set_n_layers(4);
    spec.mutable_parallel()->set_pipeline(pipeline);
    spec.mutable_parallel()->set_schedule("1f1b");
    pp::v1::TrainSpec* t = spec.mutable_train();
    t->set_steps(3);
    t->set_microbatches(4);
    t->set_microbatch_size(2);
    t->set_lr(3e-4);
    t->set_seed(1);
    spec.mutable_data()->set_path(data_);
    return spec;
  }

  grpc::Status Submit(const pp::v1::JobSpec& spec, std::string* id = nullptr) {
    pp::v1::SubmitJobRequest request;
    *request.mutable_spec() = spec;
    pp::v1::SubmitJobResponse response;
    grpc::ClientContext context;
    grpc::Status status = client_->SubmitJob(&context, request, &response);
    if (id != nullptr) *id = response.job_id();
    return status;
  }

  pp::v1::Job GetJob(const std::string& id) {
    pp::v1::GetJobRequest request;
    request.set_job_id(id);
    pp::v1::Job job;
    grpc::ClientContext context;
    EXPECT_TRUE(client_->GetJob(&context, request, &job).ok());
    return job;
  }

  std::vector<std::string> JobIds() {
    pp::v1::ListJobsResponse response;
    grpc::ClientContext context;
    EXPECT_TRUE(client_->ListJobs(&context, {}, &response).ok());
    std::vector<std::string> ids;
    for (const pp::v1::Job& job : response.jobs()) ids.push_back(job.id());
    return ids;
  }

  std::map<std::string, pp::v1::WorkerInfo> Workers() {
    pp::v1::ListWorkersResponse response;
    grpc::ClientContext context;
    EXPECT_TRUE(client_->ListWorkers(&context, {}, &response).ok());
    std::map<std::string, pp::v1::WorkerInfo> by_name;
    for (const auto& w : response.workers()) by_name[w.name()] = w;
    return by_name;
  }

  // Every rank of `job` writes a one-tensor shard of `step` and reports it.
  void ReportShards(const std::string& job, int attempt, int step, int ranks) {
    const std::string step_dir =
        common::StepDir((dir_ / "data" / "checkpoints").string(), job, step);
    for (int rank = 0; rank < ranks; ++rank) {
      absl::StatusOr<pp::v1::CheckpointShard> shard = common::WriteShard(
          step_dir, common::ShardFileName(rank),
          {common::Tensor{.name = absl::StrCat("t", rank), .shape = {1}, .data = {1.0f}}});
      ASSERT_TRUE(shard.ok()) << shard.status();
      pp::v1::CheckpointReport report;
      report.set_job_id(job);
      report.set_attempt(attempt);
      report.set_rank(rank);
      report.set_step(step);
      report.set_shard(shard->file());
      report.set_bytes(shard->bytes());
      report.set_sha256(shard->sha256());
      report.set_ok(true);
      pp::v1::ReportResponse response;
      grpc::ClientContext context;
      ASSERT_TRUE(workers_[0]->registry().ReportCheckpoint(&context, report, &response).ok());
    }
  }

  // ReportShards, then waits for the checkpoint's commit.
  void Checkpoint(const std::string& job, int attempt, int step, int ranks) {
    ASSERT_NO_FATAL_FAILURE(ReportShards(job, attempt, step, ranks));
    ASSERT_TRUE(
        WaitUntil([&] { return GetJob(job).last_checkpoint_step() == step; }, absl::Seconds(5)));
  }

  // Submits `spec`, brings up workers w1 and w0 (workers_[0] and [1]), and waits until both hold
  // a task; the job's id.
  std::string RunOnTwoWorkers(const pp::v1::JobSpec& spec) {
    std::string id;
    EXPECT_TRUE(Submit(spec, &id).ok());
    AddWorker("w1");
    AddWorker("w0");
    EXPECT_TRUE(workers_[0]->WaitForTask(absl::Seconds(10)));
    EXPECT_TRUE(workers_[1]->WaitForTask(absl::Seconds(10)));
    return id;
  }

  FakeWorker& AddWorker(const std::string& name, int64_t memory_bytes = 0) {
    return *workers_.emplace_back(
        std::make_unique<FakeWorker>(name, server_->grpc_address(), memory_bytes));
  }

  std::filesystem::path dir_;
  std::string data_;
  absl::Duration retain_jobs_ = kDefaultRetainJobs;  // at the next StartServer
  std::unique_ptr<CoordinatorServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pp::v1::Coordinator::Stub> client_;
  std::vector<std::unique_ptr<FakeWorker>> workers_;
};

}  // namespace pp::coordinator::testing

#endif  // PP_TESTS_COORDINATOR_SERVER_FIXTURE_H_
