// ppcoord in-process with its real SQLite store, the store made to fail or damaged from a second
// connection (a trigger that refuses writes, a row overwritten with garbage): nothing is
// acknowledged that is not stored, job ids never repeat, a damaged row is quarantined and ppcoord
// starts; and with fake workers, a restart waits out its backoff and a waiting job says why.
#include <sqlite3.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "coordinator/coordinator.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "pp/v1/coordinator.grpc.pb.h"
#include "tests/coordinator/test_support.h"

namespace pp::coordinator {
namespace {

using ::pp::coordinator::testing::FakeWorker;
using ::pp::coordinator::testing::WaitUntil;
using ::testing::HasSubstr;

class DurabilityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           absl::StrCat("ppcoord_durability_", ::getpid(), "_",
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

  void StartServer() {
    CoordinatorOptions options;
    options.data_dir = (dir_ / "data").string();
    options.worker_timeout = absl::Milliseconds(600);
    options.heartbeat_interval = absl::Milliseconds(50);
    absl::StatusOr<std::unique_ptr<CoordinatorServer>> server = CoordinatorServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    client_ = pp::v1::Coordinator::NewStub(
        grpc::CreateChannel(server_->grpc_address(), grpc::InsecureChannelCredentials()));
  }

  // Runs `sql` on ppcoord's store through a connection of the test's own.
  void Sql(const std::string& sql) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((dir_ / "data" / "ppcoord.db").c_str(), &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    char* error = nullptr;
    const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error);
    EXPECT_EQ(rc, SQLITE_OK) << sql << ": " << (error ? error : "");
    sqlite3_free(error);
    sqlite3_close(db);
  }
  // The one number `sql` selects, -1 on an error.
  int64_t SqlCount(const std::string& sql) {
    sqlite3* db = nullptr;
    sqlite3_stmt* stmt = nullptr;
    int64_t count = -1;
    if (sqlite3_open((dir_ / "data" / "ppcoord.db").c_str(), &db) == SQLITE_OK &&
        sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK &&
        sqlite3_step(stmt) == SQLITE_ROW) {
      count = sqlite3_column_int64(stmt, 0);
    }
    sqlite3_finalize(stmt);
    sqlite3_close(db);
    return count;
  }
  // From now on every write of a job row fails, as on a full or read-only disk.
  void RefuseJobWrites() {
    Sql("CREATE TRIGGER refuse BEFORE INSERT ON jobs BEGIN SELECT RAISE(ABORT, 'disk is full');"
        " END;");
  }

  pp::v1::JobSpec ValidSpec(int max_restarts = 0) {
    pp::v1::JobSpec spec;
    spec.set_name("tiny");
    pp::v1::ModelSpec* m = spec.mutable_model();
    m->set_vocab_size(256);
    m->set_seq_len(16);
    m->set_d_model(32);
    m->set_n_heads(4);
    m->set_n_layers(4);
    spec.mutable_parallel()->set_pipeline(2);
    spec.mutable_parallel()->set_schedule("1f1b");
    pp::v1::TrainSpec* t = spec.mutable_train();
    t->set_steps(3);
    t->set_microbatches(4);
    t->set_microbatch_size(2);
    t->set_lr(3e-4);
    t->set_seed(1);
    spec.mutable_data()->set_path(data_);
    spec.set_max_restarts(max_restarts);
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

  std::vector<std::string> JobIds() {
    pp::v1::ListJobsResponse response;
    grpc::ClientContext context;
    EXPECT_TRUE(client_->ListJobs(&context, {}, &response).ok());
    std::vector<std::string> ids;
    for (const pp::v1::Job& job : response.jobs()) ids.push_back(job.id());
    return ids;
  }

  pp::v1::Job GetJob(const std::string& id) {
    pp::v1::GetJobRequest request;
    request.set_job_id(id);
    pp::v1::Job job;
    grpc::ClientContext context;
    EXPECT_TRUE(client_->GetJob(&context, request, &job).ok());
    return job;
  }

  FakeWorker& AddWorker(const std::string& name) {
    return *workers_.emplace_back(std::make_unique<FakeWorker>(name, server_->grpc_address()));
  }

  std::filesystem::path dir_;
  std::string data_;
  std::unique_ptr<CoordinatorServer> server_;
  std::unique_ptr<pp::v1::Coordinator::Stub> client_;
  std::vector<std::unique_ptr<FakeWorker>> workers_;
};

TEST_F(DurabilityTest, ASubmitTheStoreDoesNotSaveFailsAndLeavesNoJob) {
  RefuseJobWrites();
  std::string id;
  const grpc::Status status = Submit(ValidSpec(), &id);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(status.error_message(), HasSubstr("not submitted"));
  EXPECT_THAT(status.error_message(), HasSubstr("disk is full"));  // the store's own error
  EXPECT_TRUE(JobIds().empty());
}

TEST_F(DurabilityTest, ACancelTheStoreDoesNotSaveFails) {
  std::string id;
  ASSERT_TRUE(Submit(ValidSpec(), &id).ok());
  RefuseJobWrites();
  pp::v1::CancelJobRequest cancel;
  cancel.set_job_id(id);
  pp::v1::Job cancelled;
  grpc::ClientContext context;
  const grpc::Status status = client_->CancelJob(&context, cancel, &cancelled);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(status.error_message(), HasSubstr("disk is full"));
}

TEST_F(DurabilityTest, JobIdsAreNeverReusedAfterAFailedSubmitOrARestart) {
  std::string first;
  ASSERT_TRUE(Submit(ValidSpec(), &first).ok());
  EXPECT_EQ(first, "tiny-1");
  RefuseJobWrites();
  ASSERT_FALSE(Submit(ValidSpec()).ok());  // number 2 was handed out, its job not stored
  Sql("DROP TRIGGER refuse;");
  server_.reset();
  StartServer();
  std::string next;
  ASSERT_TRUE(Submit(ValidSpec(), &next).ok());
  EXPECT_EQ(next, "tiny-3");
  EXPECT_THAT(JobIds(), ::testing::ElementsAre("tiny-1", "tiny-3"));
}

TEST_F(DurabilityTest, ARowThatDoesNotDecodeIsQuarantinedAndPpcoordStarts) {
  std::string damaged;
  std::string intact;
  ASSERT_TRUE(Submit(ValidSpec(), &damaged).ok());
  ASSERT_TRUE(Submit(ValidSpec(), &intact).ok());
  server_.reset();
  Sql(absl::StrCat("UPDATE jobs SET job_json = '{\"id\": \"", damaged,
                   "\", \"state\": 12345' WHERE id = '", damaged, "';"));
  StartServer();
  EXPECT_THAT(JobIds(), ::testing::ElementsAre(intact));
  EXPECT_EQ(GetJob(intact).state(), pp::v1::QUEUED);
  // The row is kept aside, with why, and its number is not handed out again.
  EXPECT_EQ(SqlCount(absl::StrCat("SELECT COUNT(*) FROM quarantine WHERE id = '", damaged,
                                  "' AND error != '' AND job_json LIKE '%12345%'")),
            1);
  std::string next;
  ASSERT_TRUE(Submit(ValidSpec(), &next).ok());
  EXPECT_EQ(next, "tiny-3");
}

TEST_F(DurabilityTest, AnAutomaticRestartIsPlacedOnlyAfterItsBackoff) {
  std::string id;
  ASSERT_TRUE(Submit(ValidSpec(/*max_restarts=*/2), &id).ok());
  FakeWorker& w1 = AddWorker("w1");
  FakeWorker& w0 = AddWorker("w0");
  ASSERT_TRUE(w0.WaitForTask(absl::Seconds(10)));
  ASSERT_TRUE(w1.WaitForTask(absl::Seconds(10)));
  // Restart n waits 1 s * 2^(n-1) (the default backoff) before it is placed again.
  for (int restart : {1, 2}) {
    SCOPED_TRACE(absl::StrCat("restart ", restart));
    const size_t tasks = w1.tasks().size();
    const absl::Time failed = absl::Now();
    w1.FinishTask(false, "out of memory");
    ASSERT_TRUE(WaitUntil([&] { return w0.tasks().size() > tasks && w1.tasks().size() > tasks; },
                          absl::Seconds(10)));
    EXPECT_GE(absl::Now() - failed, absl::Seconds(1 << (restart - 1)));
    const pp::v1::Job job = GetJob(id);
    EXPECT_EQ(job.restarts(), restart);
    EXPECT_EQ(job.state(), pp::v1::RUNNING);
  }
}

TEST_F(DurabilityTest, AWaitingJobSaysWhyUntilItRuns) {
  std::string id;
  ASSERT_TRUE(Submit(ValidSpec(), &id).ok());
  FakeWorker& w0 = AddWorker("w0");
  EXPECT_TRUE(
      WaitUntil([&] { return GetJob(id).reason() == "needs 2 workers, 1 registered, 1 idle"; },
                absl::Seconds(10)))
      << GetJob(id).reason();
  AddWorker("w1");
  ASSERT_TRUE(w0.WaitForTask(absl::Seconds(10)));
  const pp::v1::Job running = GetJob(id);
  EXPECT_EQ(running.state(), pp::v1::RUNNING);
  EXPECT_EQ(running.reason(), "");  // the first attempt began for no reason of its own
}

TEST_F(DurabilityTest, MaxRestartsAboveTheCeilingIsRefused) {
  const grpc::Status status = Submit(ValidSpec(/*max_restarts=*/101));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("max_restarts: must be <= 100"));
  EXPECT_TRUE(Submit(ValidSpec(/*max_restarts=*/100)).ok());
}

}  // namespace
}  // namespace pp::coordinator
