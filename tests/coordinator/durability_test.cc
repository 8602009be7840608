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
#include "common/spec_bounds.h"
#include "coordinator/coordinator.h"
#include "coordinator/store.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "pp/v1/coordinator.grpc.pb.h"
#include "tests/coordinator/server_fixture.h"
#include "tests/coordinator/test_support.h"

namespace pp::coordinator {
namespace {

using ::pp::coordinator::testing::FakeWorker;
using ::pp::coordinator::testing::WaitUntil;
using ::testing::HasSubstr;

class DurabilityTest : public testing::CoordinatorServerTest {
 protected:
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

  pp::v1::JobSpec SpecWithRestarts(int max_restarts) {
    pp::v1::JobSpec spec = ValidSpec();
    spec.set_max_restarts(max_restarts);
    return spec;
  }

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

// A spec stored under older limits, now over the byte cap (common/spec_bounds.h kMaxSpecBytes),
// does not keep ppcoord from starting: its job is FAILED at reload, saying why.
TEST_F(DurabilityTest, AStoredSpecOverTheByteCapFailsAtReload) {
  std::string id;
  ASSERT_TRUE(Submit(ValidSpec(), &id).ok());
  server_.reset();
  {
    absl::StatusOr<std::unique_ptr<JobStore>> store =
        JobStore::Open((dir_ / "data" / "ppcoord.db").string());
    ASSERT_TRUE(store.ok()) << store.status();
    absl::StatusOr<std::vector<pp::v1::Job>> jobs = (*store)->LoadJobs();
    ASSERT_TRUE(jobs.ok()) << jobs.status();
    ASSERT_EQ(jobs->size(), 1u);
    pp::v1::Job job = jobs->front();
    job.mutable_spec()->set_name(std::string(common::kMaxSpecBytes, 'n'));
    ASSERT_TRUE((*store)->Put(job).ok());
  }
  StartServer();
  const pp::v1::Job job = GetJob(id);
  EXPECT_EQ(job.state(), pp::v1::FAILED);
  EXPECT_THAT(job.reason(), HasSubstr("its spec is refused: spec: "));
  EXPECT_THAT(job.reason(), HasSubstr(absl::StrCat("over the limit ", common::kMaxSpecBytes)));
}

TEST_F(DurabilityTest, AnAutomaticRestartIsPlacedOnlyAfterItsBackoff) {
  std::string id;
  ASSERT_TRUE(Submit(SpecWithRestarts(3), &id).ok());
  FakeWorker& w1 = AddWorker("w1");
  FakeWorker& w0 = AddWorker("w0");
  ASSERT_TRUE(w0.WaitForTask(absl::Seconds(10)));
  ASSERT_TRUE(w1.WaitForTask(absl::Seconds(10)));
  // Restart n in a row waits 1 s * 2^(n-1) (the default backoff) before it is placed again.
  auto fail_and_wait = [&](int restart) {
    const size_t tasks = w1.tasks().size();
    const absl::Time failed = absl::Now();
    w1.FinishTask(false, "out of memory");
    EXPECT_TRUE(WaitUntil([&] { return w0.tasks().size() > tasks && w1.tasks().size() > tasks; },
                          absl::Seconds(10)));
    const pp::v1::Job job = GetJob(id);
    EXPECT_EQ(job.restarts(), restart);
    EXPECT_EQ(job.state(), pp::v1::RUNNING);
    return absl::Now() - failed;
  };
  EXPECT_GE(fail_and_wait(1), absl::Seconds(1));
  EXPECT_GE(fail_and_wait(2), absl::Seconds(2));
  // A checkpoint past the attempt's start is progress: the next restart waits 1 s again, not 4.
  Checkpoint(id, /*attempt=*/2, /*step=*/1, /*ranks=*/2);
  const absl::Duration third = fail_and_wait(3);
  EXPECT_GE(third, absl::Seconds(1));
  EXPECT_LT(third, absl::Seconds(4));
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
  const grpc::Status status = Submit(SpecWithRestarts(101));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("max_restarts: must be <= 100"));
  EXPECT_TRUE(Submit(SpecWithRestarts(100)).ok());
}

}  // namespace
}  // namespace pp::coordinator
