// GetJobLogs through ppcoord, in-process on loopback, with two real ppworker daemons
// (worker/daemon/daemon.h) whose tasks fail: the lines come from the workers' own task logs.
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordinator/server_fixture.h"
#include "worker/daemon/daemon.h"

namespace pp::coordinator::testing {
namespace {

using ::testing::HasSubstr;

class JobLogsServiceTest : public CoordinatorServerTest {
 protected:
  void TearDown() override {
    for (auto& daemon : daemons_) daemon->Shutdown();
    daemons_.clear();
    CoordinatorServerTest::TearDown();
  }

  void StartWorker(const std::string& name) {
    daemon::DaemonOptions options;
    options.coordinator = server_->grpc_address();
    options.name = name;
    options.comm_timeout = absl::Seconds(5);
    absl::StatusOr<std::unique_ptr<daemon::WorkerDaemon>> worker =
        daemon::WorkerDaemon::Start(options);
    ASSERT_TRUE(worker.ok()) << worker.status();
    daemons_.push_back(*std::move(worker));
  }

  grpc::Status Logs(const pp::v1::GetJobLogsRequest& request,
                    pp::v1::GetJobLogsResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    return client_->GetJobLogs(&context, request, response);
  }

  // A two-rank job whose data file is gone by the time the workers start it: each task fails in
  // its set-up, naming the file. Returns the job's id once it FAILED.
  std::string FailedJob() {
    pp::v1::JobSpec spec = ValidSpec(2);
    spec.set_max_restarts(0);
    std::string id;
    EXPECT_TRUE(Submit(spec, &id).ok());
    std::filesystem::remove(data_);
    StartWorker("w0");
    StartWorker("w1");
    // A worker writes its task's end line before it reports the end and is IDLE again.
    EXPECT_TRUE(WaitUntil(
        [&] {
          std::map<std::string, pp::v1::WorkerInfo> workers = Workers();
          return GetJob(id).state() == pp::v1::FAILED && workers["w0"].state() == pp::v1::IDLE &&
                 workers["w1"].state() == pp::v1::IDLE;
        },
        absl::Seconds(30)))
        << pp::v1::JobState_Name(GetJob(id).state());
    return id;
  }

  std::vector<std::unique_ptr<daemon::WorkerDaemon>> daemons_;
};

TEST_F(JobLogsServiceTest, AFailedRanksErrorLineComesBackWithTheRankFilter) {
  const std::string id = FailedJob();
  pp::v1::GetJobLogsRequest request;
  request.set_job_id(id);
  request.set_rank(1);
  pp::v1::GetJobLogsResponse page;
  const grpc::Status status = Logs(request, &page);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(page.unreachable().empty());
  EXPECT_EQ(page.dropped(), 0);
  ASSERT_GE(page.lines_size(), 2);
  for (const pp::v1::JobLogLine& line : page.lines()) {
    EXPECT_EQ(line.rank(), 1) << line.text();
    EXPECT_EQ(line.worker(), page.lines(0).worker());
    EXPECT_EQ(line.attempt(), 0);
  }
  EXPECT_THAT(page.lines(0).text(), HasSubstr("task started: attempt 0, rank 1 of 2"));
  const std::string last = page.lines(page.lines_size() - 1).text();
  EXPECT_THAT(last, HasSubstr("task failed: "));
  // Rank 1 fails on the missing file itself, or is aborted first because rank 0 did (whichever
  // reads its data first): either way its line gives the error in full, naming the file.
  EXPECT_THAT(last, ::testing::AnyOf(HasSubstr(absl::StrCat("job ", id, " rank 1")),
                                     HasSubstr("task aborted: rank 0 on worker")));
  EXPECT_THAT(last, HasSubstr(data_)) << "the error in full, naming the missing file";

  // Without the filter: both ranks, w0's lines before w1's, each oldest first.
  request.clear_rank();
  ASSERT_TRUE(Logs(request, &page).ok());
  std::vector<int> ranks_seen(2, 0);
  for (int i = 0; i < page.lines_size(); ++i) {
    ++ranks_seen[page.lines(i).rank()];
    if (i > 0 && page.lines(i).worker() == page.lines(i - 1).worker()) {
      EXPECT_GT(page.lines(i).seq(), page.lines(i - 1).seq());
    }
    if (i > 0) {
      EXPECT_GE(page.lines(i).worker(), page.lines(i - 1).worker());
    }
  }
  EXPECT_GE(ranks_seen[0], 2);
  EXPECT_GE(ranks_seen[1], 2);
}

TEST_F(JobLogsServiceTest, PagesOfOneLineAddUpToTheWholeLogAndEndOnTheSameToken) {
  const std::string id = FailedJob();
  pp::v1::GetJobLogsRequest request;
  request.set_job_id(id);
  pp::v1::GetJobLogsResponse whole;
  ASSERT_TRUE(Logs(request, &whole).ok());
  request.set_max_lines(1);
  std::vector<std::string> paged;
  for (int call = 0; call <= whole.lines_size(); ++call) {
    pp::v1::GetJobLogsResponse page;
    ASSERT_TRUE(Logs(request, &page).ok());
    ASSERT_FALSE(page.next_page_token().empty());
    if (page.lines_size() == 0) {
      EXPECT_EQ(page.next_page_token(), request.page_token()) << "nothing new: the same token";
      break;
    }
    ASSERT_EQ(page.lines_size(), 1);
    paged.push_back(page.lines(0).text());
    request.set_page_token(page.next_page_token());
  }
  std::vector<std::string> all;
  for (const pp::v1::JobLogLine& line : whole.lines()) all.push_back(line.text());
  EXPECT_EQ(paged, all);
}

TEST_F(JobLogsServiceTest, RefusalsAndAWorkerThatCannotAnswer) {
  const std::string id = FailedJob();
  pp::v1::GetJobLogsRequest request;
  pp::v1::GetJobLogsResponse page;
  request.set_job_id("no-such-job");
  EXPECT_EQ(Logs(request, &page).error_code(), grpc::StatusCode::NOT_FOUND);
  request.set_job_id(id);
  request.set_page_token("step-3");
  grpc::Status bad = Logs(request, &page);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(bad.error_message(), "page_token: not a token GetJobLogs handed out");
  request.clear_page_token();
  request.set_max_lines(-1);
  EXPECT_EQ(Logs(request, &page).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  request.set_max_lines(0);

  // A fake worker serves no ReadTaskLog: it is named, and the others' lines still come.
  AddWorker("w2");
  ASSERT_TRUE(WaitUntil([&] { return Workers().count("w2") > 0; }, absl::Seconds(10)));
  ASSERT_TRUE(Logs(request, &page).ok());
  EXPECT_THAT(page.unreachable(), ::testing::ElementsAre("w2"));
  EXPECT_GE(page.lines_size(), 4);
}

}  // namespace
}  // namespace pp::coordinator::testing
