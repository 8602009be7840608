// A job's step history (ListJobSteps, coordinator/step_history.cc; docs/jobs.md "Step history"):
// paging of a 10,000-step job through ppcoord with a fake worker, the storage bound of table
// steps (store.h kMaxStepRecords) and its thinning rule, and a store written before the history
// columns.
#include <sqlite3.h>

#include <functional>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/store.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "tests/coordinator/server_fixture.h"
#include "tests/coordinator/test_support.h"

namespace pp::coordinator {
namespace {

// A record with every field set, none to its default.
pp::v1::JobStepRecord SecondStep() {
  pp::v1::JobStepRecord record;
  record.set_step(2);
  record.set_attempt(1);
  record.set_loss(3.25);
  record.set_learning_rate(1e-3);
  record.set_grad_norm(0.75);
  record.set_step_seconds(0.5);
  record.set_tokens_per_second(1234.5);
  record.set_bubble_ratio(0.125);
  record.set_has_eval(true);
  record.set_eval_loss(3.0);
  record.set_skipped(true);
  record.set_time_unix(1.7e9);
  return record;
}

using ::pp::coordinator::testing::WaitUntil;
using ::testing::HasSubstr;

constexpr int kLongJobSteps = 10000;

class StepHistoryTest : public testing::CoordinatorServerTest {
 protected:
  // The job's one rank reports kLongJobSteps steps: an eval every 2,000, step 77 skipped.
  void ReportEverySteps(testing::FakeWorker& w, const std::string& id) {
    for (int step = 1; step <= kLongJobSteps; ++step) {
      pp::v1::StepReport report;
      report.set_job_id(id);
      report.set_step(step);
      report.set_step_seconds(0.01);
      report.set_busy_seconds(0.01);
      report.set_has_loss(true);
      report.set_loss(10.0 / step);
      report.set_skipped(step == 77);
      report.set_grad_norm(1.0 / step);
      report.set_has_eval(step % 2000 == 0);
      report.set_eval_loss(2.5);
      pp::v1::ReportResponse response;
      grpc::ClientContext context;
      ASSERT_TRUE(w.registry().ReportStep(&context, report, &response).ok());
    }
  }

  grpc::Status ListSteps(const pp::v1::ListJobStepsRequest& request,
                         pp::v1::ListJobStepsResponse* page) {
    grpc::ClientContext context;
    return client_->ListJobSteps(&context, request, page);
  }

  // Every step of the job, following next_page_token from `from_step`; the pages' sizes.
  std::vector<pp::v1::JobStepRecord> AllSteps(const std::string& id, int page_size,
                                              std::vector<int>* sizes, int from_step = 0) {
    std::vector<pp::v1::JobStepRecord> steps;
    pp::v1::ListJobStepsRequest request;
    request.set_job_id(id);
    request.set_page_size(page_size);
    request.set_from_step(from_step);
    do {
      pp::v1::ListJobStepsResponse page;
      const grpc::Status status = ListSteps(request, &page);
      EXPECT_TRUE(status.ok()) << status.error_message();
      if (!status.ok()) break;
      sizes->push_back(page.steps_size());
      steps.insert(steps.end(), page.steps().begin(), page.steps().end());
      request.set_page_token(page.next_page_token());
    } while (!request.page_token().empty());
    return steps;
  }
};

// One rank reports 10,000 steps (an eval every 2,000, step 77 skipped): the history pages in
// order, holds every one of the newest 1,024 steps, every eval and skip, and at most
// kMaxStepRecords + those.
TEST_F(StepHistoryTest, ATenThousandStepJobPagesInOrderWithinTheStorageBound) {
  pp::v1::JobSpec spec = ValidSpec(/*pipeline=*/1);
  spec.mutable_train()->set_steps(kLongJobSteps);
  std::string id;
  ASSERT_TRUE(Submit(spec, &id).ok());
  testing::FakeWorker& w = AddWorker("w0");
  ASSERT_TRUE(w.WaitForTask(absl::Seconds(10)));
  ASSERT_NO_FATAL_FAILURE(ReportEverySteps(w, id));
  // The committer writes steps in its rounds: wait for the last one.
  ASSERT_TRUE(WaitUntil(
      [&] {
        pp::v1::ListJobStepsRequest request;
        request.set_job_id(id);
        request.set_from_step(kLongJobSteps);
        pp::v1::ListJobStepsResponse page;
        return ListSteps(request, &page).ok() && page.steps_size() == 1;
      },
      absl::Seconds(30)));

  std::vector<int> sizes;
  const std::vector<pp::v1::JobStepRecord> steps = AllSteps(id, 1000, &sizes);
  ASSERT_FALSE(steps.empty());
  std::cout << kLongJobSteps << " steps: " << steps.size() << " records\n";
  EXPECT_LE(static_cast<int>(steps.size()), kMaxStepRecords + 5 + 1);  // + evals and the skip
  for (size_t i = 0; i + 1 < sizes.size(); ++i) EXPECT_EQ(sizes[i], 1000);
  std::set<int> held;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (i > 0) {
      EXPECT_LT(steps[i - 1].step(), steps[i].step());
    }
    held.insert(steps[i].step());
    EXPECT_EQ(steps[i].loss(), 10.0 / steps[i].step());  // bit for bit what was reported
    EXPECT_EQ(steps[i].has_eval(), steps[i].step() % 2000 == 0);
    EXPECT_EQ(steps[i].skipped(), steps[i].step() == 77);
    EXPECT_EQ(steps[i].grad_norm(), 1.0 / steps[i].step());
    EXPECT_GT(steps[i].learning_rate(), 0);
  }
  for (int step = kLongJobSteps - kKeptNewestSteps + 1; step <= kLongJobSteps; ++step) {
    EXPECT_EQ(held.count(step), 1u) << step;
  }
  for (int step : {1, 77, 2000, 4000, 6000, 8000}) EXPECT_EQ(held.count(step), 1u) << step;

  // from_step starts the first page there.
  sizes.clear();
  const std::vector<pp::v1::JobStepRecord> tail = AllSteps(id, 300, &sizes, 9500);
  ASSERT_EQ(tail.size(), 501u);
  EXPECT_EQ(tail.front().step(), 9500);
  EXPECT_THAT(sizes, ::testing::ElementsAre(300, 201));
}

TEST_F(StepHistoryTest, BadRequestsAreRefusedNamingTheField) {
  std::string id;
  ASSERT_TRUE(Submit(ValidSpec(), &id).ok());
  pp::v1::ListJobStepsResponse page;
  pp::v1::ListJobStepsRequest request;
  request.set_job_id(id);
  EXPECT_TRUE(ListSteps(request, &page).ok());  // no step yet: an empty last page
  EXPECT_EQ(page.steps_size(), 0);
  EXPECT_EQ(page.next_page_token(), "");
  for (auto [field, mutate] :
       std::vector<std::pair<std::string, std::function<void(pp::v1::ListJobStepsRequest&)>>>{
           {"page_size", [](auto& r) { r.set_page_size(-1); }},
           {"page_size", [](auto& r) { r.set_page_size(10001); }},
           {"from_step", [](auto& r) { r.set_from_step(-3); }},
           {"page_token", [](auto& r) { r.set_page_token("bogus"); }},
       }) {
    pp::v1::ListJobStepsRequest bad = request;
    mutate(bad);
    const grpc::Status status = ListSteps(bad, &page);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << field;
    EXPECT_THAT(status.error_message(), HasSubstr(field));
  }
  request.set_job_id("nope-1");
  EXPECT_EQ(ListSteps(request, &page).error_code(), grpc::StatusCode::NOT_FOUND);
}

// A ppcoord.db written before the history columns opens, gains them (0 for the old rows) and
// records the new fields.
TEST(StepStoreTest, AStoreWrittenBeforeTheHistoryColumnsIsUpgraded) {
  const std::string path = ::testing::TempDir() + "/old_steps.db";
  std::remove(path.c_str());
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db,
                           "CREATE TABLE steps (job_id TEXT NOT NULL, step INTEGER NOT NULL, loss"
                           " REAL, step_seconds REAL, tokens_per_second REAL, bubble_ratio REAL,"
                           " time_unix REAL, PRIMARY KEY (job_id, step));"
                           "INSERT INTO steps VALUES ('j', 1, 3.5, 0.1, 100, 0.2, 5);",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->AddStep("j", SecondStep()).ok());
  absl::StatusOr<std::vector<pp::v1::JobStepRecord>> steps = (*store)->Steps("j");
  ASSERT_TRUE(steps.ok()) << steps.status();
  ASSERT_EQ(steps->size(), 2u);
  EXPECT_EQ((*steps)[0].loss(), 3.5);
  EXPECT_EQ((*steps)[0].attempt(), 0);
  EXPECT_FALSE((*steps)[0].has_eval());
  EXPECT_EQ((*steps)[0].grad_norm(), 0);  // a column the old table lacked reads 0
  // Every field of a new record reads back as written.
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals((*steps)[1], SecondStep()))
      << (*steps)[1].DebugString();
}

}  // namespace
}  // namespace pp::coordinator
