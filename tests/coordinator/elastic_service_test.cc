// Elastic jobs in ppcoord (spec.elastic, coordinator/elastic_jobs.cc), in-process with fake
// workers: a job that lost a worker shrinks onto the others after its grace, keeping its global
// batch, and grows back at a step boundary once a new worker stayed idle; resizes are events,
// restart log entries and metrics; bad elastic fields are refused naming the field.
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "tests/coordinator/event_watch.h"
#include "tests/coordinator/server_fixture.h"
#include "tests/coordinator/test_support.h"

namespace pp::coordinator {
namespace {

using ::pp::coordinator::testing::FakeWorker;
using ::pp::coordinator::testing::HttpGet;
using ::pp::coordinator::testing::WaitUntil;
using ::testing::HasSubstr;

class ElasticServiceTest : public testing::CoordinatorServerTest {
 protected:
  // A 4-stage job of 20 steps, elastic down to 2 workers, quick to shrink and to grow.
  pp::v1::JobSpec ElasticSpec() {
    pp::v1::JobSpec spec = ValidSpec(/*pipeline=*/4);
    spec.mutable_train()->set_steps(20);
    spec.set_max_restarts(2);
    pp::v1::ElasticSpec* e = spec.mutable_elastic();
    e->set_min_workers(2);
    e->set_grace_seconds(0.3);
    e->set_grow_after_seconds(0.3);
    return spec;
  }

  // Whether the worker got at least `n` plans.
  static bool HasPlans(FakeWorker& w, size_t n) { return w.tasks().size() >= n; }

  // Every rank of the attempt reports `step`; returns the stop step ppcoord answered.
  int ReportSteps(const std::string& id, int attempt, int ranks, int step) {
    int stop = 0;
    for (int rank = 0; rank < ranks; ++rank) {
      pp::v1::StepReport report;
      report.set_job_id(id);
      report.set_attempt(attempt);
      report.set_rank(rank);
      report.set_step(step);
      report.set_step_seconds(0.01);
      report.set_busy_seconds(0.01);
      report.set_has_loss(rank == ranks - 1);
      report.set_loss(1.0);
      pp::v1::ReportResponse answer;
      grpc::ClientContext context;
      EXPECT_TRUE(workers_[0]->registry().ReportStep(&context, report, &answer).ok());
      stop = answer.stop_after_step();
    }
    return stop;
  }

  // Every rank reports steps from `from_step` on, 100 ms apart, until ppcoord answers a stop
  // step, and then up to that step: the stop step, or 0 when none came by the last step.
  int StepUntilStopped(const std::string& id, int attempt, int ranks, int from_step) {
    const int steps = ElasticSpec().train().steps();
    int stop = 0;
    int step = from_step;
    for (; step < steps && stop == 0; ++step) {
      stop = ReportSteps(id, attempt, ranks, step);
      if (stop == 0) absl::SleepFor(absl::Milliseconds(100));
    }
    for (; step <= stop; ++step) ReportSteps(id, attempt, ranks, step);
    return stop;
  }

  // Shrunk from 4 to 3 workers, then grown back: two events and their metrics.
  void ExpectTwoResizesRecorded(const std::string& id, testing::EventWatch& watch) {
    const std::vector<pp::v1::JobEvent> resized = watch.Await(2, absl::Seconds(5));
    ASSERT_EQ(resized.size(), 2u);
    EXPECT_EQ(resized[0].resized_from().pipeline(), 4);
    EXPECT_EQ(resized[0].resized_to().pipeline(), 3);
    EXPECT_EQ(resized[1].resized_from().pipeline(), 3);
    EXPECT_EQ(resized[1].resized_to().pipeline(), 4);
    absl::StatusOr<std::string> metrics = HttpGet(server_->metrics_address(), "/metrics");
    ASSERT_TRUE(metrics.ok()) << metrics.status();
    EXPECT_THAT(*metrics, HasSubstr(absl::StrCat("pp_job_resizes_total{job=\"", id, "\"} 2")));
    EXPECT_THAT(*metrics, HasSubstr(absl::StrCat("pp_job_workers{job=\"", id, "\"} 4")));
  }
};

TEST_F(ElasticServiceTest, ALostWorkerShrinksTheJobAndANewOneGrowsItBack) {
  std::string id;
  ASSERT_TRUE(Submit(ElasticSpec(), &id).ok());
  testing::EventWatch watch(*client_, id, pp::v1::EVENT_RESIZED);
  ASSERT_TRUE(watch.WaitSubscribed(absl::Seconds(5)));
  for (const char* name : {"w0", "w1", "w2", "w3"}) AddWorker(name);
  for (int w = 0; w < 4; ++w) ASSERT_TRUE(workers_[w]->WaitForTask(absl::Seconds(10)));
  Checkpoint(id, /*attempt=*/0, /*step=*/2, /*ranks=*/4);

  // w3 (rank 3) is gone for good: no spare, so after the grace the job runs on three stages.
  workers_[3]->Vanish();
  ASSERT_TRUE(WaitUntil(
      [&] {
        return HasPlans(*workers_[0], 2) && HasPlans(*workers_[1], 2) && HasPlans(*workers_[2], 2);
      },
      absl::Seconds(15)));
  const pp::v1::TaskPlan shrunk = workers_[0]->tasks().back();
  EXPECT_EQ(shrunk.attempt(), 1);
  EXPECT_EQ(shrunk.start_step(), 2);
  EXPECT_EQ(shrunk.spec().parallel().pipeline(), 3);
  EXPECT_EQ(shrunk.spec().train().microbatches(), 4);  // the global batch: 4 x 1 replica
  pp::v1::Job job = GetJob(id);
  EXPECT_EQ(job.state(), pp::v1::RUNNING);
  EXPECT_EQ(job.placement_size(), 3);
  EXPECT_EQ(job.resizes(), 1);
  EXPECT_EQ(job.restarts(), 1);
  EXPECT_EQ(job.base_parallel().pipeline(), 4);
  ASSERT_EQ(job.restart_log_size(), 1);
  EXPECT_THAT(job.restart_log(0).reason(), HasSubstr("stopped heartbeating"));
  EXPECT_THAT(job.restart_log(0).reason(),
              HasSubstr("resized from 1f1b D=4 V=1 T=1 R=1 M=4 (4 workers) to 1f1b D=3"));

  // A new worker: once it stayed idle for grow_after, every rank is told to stop after the next
  // step; they checkpoint there and end drained; the next attempt runs on four stages again.
  AddWorker("w4");
  const int stop = StepUntilStopped(id, /*attempt=*/1, /*ranks=*/3, /*from_step=*/3);
  ASSERT_GT(stop, 0) << "the job never stopped to grow";
  Checkpoint(id, /*attempt=*/1, stop, /*ranks=*/3);
  for (int w = 0; w < 3; ++w) workers_[w]->FinishTask(true, "", absl::StatusCode::kOk, true);
  FakeWorker& w4 = *workers_[4];
  ASSERT_TRUE(w4.WaitForTask(absl::Seconds(10)));
  const pp::v1::TaskPlan grown = w4.tasks().back();
  EXPECT_EQ(grown.attempt(), 2);
  EXPECT_EQ(grown.start_step(), stop);
  EXPECT_EQ(grown.spec().parallel().pipeline(), 4);
  EXPECT_EQ(grown.spec().train().microbatches(), 4);
  job = GetJob(id);
  EXPECT_EQ(job.placement_size(), 4);
  EXPECT_EQ(job.resizes(), 2);
  EXPECT_EQ(job.restarts(), 1);  // growing is not a failure
  ASSERT_EQ(job.restart_log_size(), 2);
  EXPECT_THAT(job.restart_log(1).reason(), HasSubstr("to grow to 4 workers"));
  EXPECT_THAT(job.restart_log(1).reason(), HasSubstr("to 1f1b D=4 V=1 T=1 R=1 M=4 (4 workers)"));

  ExpectTwoResizesRecorded(id, watch);
}

// Below min_workers an elastic job waits as any job does, its reason saying so.
TEST_F(ElasticServiceTest, AJobDoesNotShrinkBelowMinWorkers) {
  pp::v1::JobSpec spec = ElasticSpec();
  spec.mutable_elastic()->set_min_workers(4);
  std::string id;
  ASSERT_TRUE(Submit(spec, &id).ok());
  for (const char* name : {"w0", "w1", "w2"}) AddWorker(name);
  absl::SleepFor(absl::Seconds(1));  // three times the grace
  const pp::v1::Job job = GetJob(id);
  EXPECT_EQ(job.state(), pp::v1::QUEUED);
  EXPECT_EQ(job.resizes(), 0);
  EXPECT_THAT(job.reason(), HasSubstr("needs 4 workers"));
}

TEST_F(ElasticServiceTest, BadElasticFieldsAreRefusedNamingTheField) {
  struct Case {
    const char* field;
    std::function<void(pp::v1::ElasticSpec&)> mutate;
  };
  const std::vector<Case> cases = {
      {"elastic.min_workers", [](auto& e) { e.set_min_workers(0); }},
      {"elastic.min_workers", [](auto& e) { e.set_min_workers(5); }},  // above the layout's 4
      {"elastic.max_workers", [](auto& e) { e.set_max_workers(3); }},
      {"elastic.grace_seconds", [](auto& e) { e.set_grace_seconds(-1); }},
      {"elastic.grow_after_seconds", [](auto& e) { e.set_grow_after_seconds(1e9); }},
  };
  for (const Case& c : cases) {
    pp::v1::JobSpec spec = ElasticSpec();
    c.mutate(*spec.mutable_elastic());
    const grpc::Status status = Submit(spec);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.field;
    EXPECT_THAT(status.error_message(), HasSubstr(c.field));
  }
}

}  // namespace
}  // namespace pp::coordinator
