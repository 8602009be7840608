// ppcoord in-process on loopback port 0 with fake workers: validation, queueing, placement, step
// aggregation, worker failure detection, restarts from checkpoints, resume, drains, health,
// reflection and /metrics.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/checkpoint.h"
#include "coordinator/coordinator.h"
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
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

class ServiceTest : public testing::CoordinatorServerTest {
 protected:
  // Submits a valid 2-rank job, brings up workers w1 and w0 (workers_[0] and [1]), and waits
  // until both hold a task.
  std::string RunningJob(int max_restarts = 0) {
    pp::v1::JobSpec spec = ValidSpec();
    spec.set_max_restarts(max_restarts);
    return RunOnTwoWorkers(spec);
  }

  void ReportStep(const std::string& id, int rank, int step, double seconds, double busy,
                  bool has_loss, double loss) {
    pp::v1::StepReport report;
    report.set_job_id(id);
    report.set_rank(rank);
    report.set_step(step);
    report.set_step_seconds(seconds);
    report.set_busy_seconds(busy);
    report.set_has_loss(has_loss);
    report.set_loss(loss);
    pp::v1::TimedAction* a = report.mutable_trace()->add_actions();
    a->mutable_action()->set_kind(pp::v1::FORWARD);
    a->mutable_action()->set_stage(rank);
    a->set_end(busy);
    pp::v1::ReportResponse response;
    grpc::ClientContext context;
    ASSERT_TRUE(workers_[0]->registry().ReportStep(&context, report, &response).ok());
    EXPECT_FALSE(response.abort());
  }

  grpc::Status Resume(const pp::v1::ResumeJobRequest& request, pp::v1::Job* job) {
    grpc::ClientContext context;
    return client_->ResumeJob(&context, request, job);
  }

};

TEST_F(ServiceTest, InvalidSpecsAreRefusedNamingTheField) {
  struct Case {
    const char* field;
    std::function<void(pp::v1::JobSpec&)> mutate;
  };
  const std::vector<Case> cases = {
      {"parallel.schedule", [](auto& s) { s.mutable_parallel()->set_schedule("2f2b"); }},
      {"parallel.pipeline", [](auto& s) { s.mutable_parallel()->set_pipeline(0); }},
      {"parallel.pipeline", [](auto& s) { s.mutable_parallel()->set_pipeline(7); }},  // > 6 units
      {"train.microbatches",
       [](auto& s) {  // interleaved 1F1B needs M >= D
         s.mutable_parallel()->set_schedule("interleaved-1f1b");
         s.mutable_parallel()->set_chunks(2);
         s.mutable_parallel()->set_pipeline(3);
         s.mutable_train()->set_microbatches(2);
       }},
      {"parallel.chunks", [](auto& s) { s.mutable_parallel()->set_schedule("zb-v"); }},
      {"model.d_model", [](auto& s) { s.mutable_model()->set_d_model(0); }},
      {"model.n_heads", [](auto& s) { s.mutable_model()->set_n_heads(5); }},
      {"model.n_layers", [](auto& s) { s.mutable_model()->set_n_layers(-1); }},
      {"model.seq_len", [](auto& s) { s.mutable_model()->set_seq_len(0); }},
      {"model.vocab_size", [](auto& s) { s.mutable_model()->set_vocab_size(100); }},
      {"train.steps", [](auto& s) { s.mutable_train()->set_steps(0); }},
      {"train.microbatch_size", [](auto& s) { s.mutable_train()->set_microbatch_size(0); }},
      {"train.lr", [](auto& s) { s.mutable_train()->set_lr(-1); }},
      {"data.path", [](auto& s) { s.mutable_data()->set_path("/nonexistent/corpus"); }},
      {"data.path", [](auto& s) { s.mutable_data()->clear_path(); }},
  };
  for (const Case& c : cases) {
    pp::v1::JobSpec spec = ValidSpec();
    c.mutate(spec);
    grpc::Status status = Submit(spec);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.field;
    EXPECT_THAT(status.error_message(), HasSubstr(c.field));
  }
  // The daemon still serves, and nothing was queued.
  EXPECT_TRUE(Submit(ValidSpec()).ok());
  pp::v1::ListJobsResponse jobs;
  grpc::ClientContext context;
  ASSERT_TRUE(client_->ListJobs(&context, {}, &jobs).ok());
  EXPECT_EQ(jobs.jobs_size(), 1);
}

TEST_F(ServiceTest, JobWaitsQueuedThenIsPlacedInNameOrderAndPushed) {
  std::string id;
  ASSERT_TRUE(Submit(ValidSpec(), &id).ok());
  EXPECT_THAT(id, HasSubstr("tiny"));
  AddWorker("w1");
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(GetJob(id).state(), pp::v1::QUEUED);  // one worker is not enough
  AddWorker("w0");
  ASSERT_TRUE(WaitUntil([&] { return GetJob(id).state() == pp::v1::RUNNING; }, absl::Seconds(10)));
  const pp::v1::Job job = GetJob(id);
  ASSERT_EQ(job.placement_size(), 2);
  EXPECT_EQ(job.placement(0).worker(), "w0");
  EXPECT_EQ(job.placement(1).worker(), "w1");
  ASSERT_TRUE(workers_[1]->WaitForTask(absl::Seconds(10)));  // w0
  ASSERT_TRUE(workers_[0]->WaitForTask(absl::Seconds(10)));  // w1
  const pp::v1::TaskPlan plan = workers_[0]->tasks().front();
  EXPECT_EQ(plan.job_id(), id);
  EXPECT_EQ(plan.rank(), 1);
  EXPECT_EQ(plan.world_size(), 2);
  EXPECT_EQ(plan.program().rank(), 1);
  EXPECT_GT(plan.program().actions_size(), 0);
  ASSERT_EQ(plan.stages_size(), 1);
  EXPECT_EQ(plan.stages(0).stage(), 1);
  EXPECT_EQ(plan.stages(0).last_unit(), 5);  // 6 units: embedding, 4 blocks, head
  EXPECT_EQ(plan.rendezvous_prefix(), absl::StrCat(id, "/0/"));
  EXPECT_EQ(plan.spec().parallel().chunks(), 1);  // defaults applied
  EXPECT_THAT(plan.checkpoint_dir(), HasSubstr("checkpoints"));
  EXPECT_EQ(Workers()["w0"].state(), pp::v1::BUSY);
}

TEST_F(ServiceTest, StepReportsAggregateAndTheJobSucceeds) {
  const std::string id = RunningJob();
  // Watch from the start: current state first, then live events until the end.
  std::vector<pp::v1::JobEvent> events;
  std::thread watcher([&] {
    auto stub = pp::v1::Coordinator::NewStub(channel_);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    pp::v1::WatchJobRequest request;
    request.set_job_id(id);
    auto reader = stub->WatchJob(&context, request);
    pp::v1::JobEvent event;
    while (reader->Read(&event)) events.push_back(event);
    EXPECT_TRUE(reader->Finish().ok());
  });
  absl::SleepFor(absl::Milliseconds(200));
  ReportStep(id, 0, 1, 4.0, 3.0, false, 0);
  EXPECT_EQ(GetJob(id).step(), 0);  // rank 1 has not reported
  ReportStep(id, 1, 1, 2.0, 1.0, true, 5.5);
  pp::v1::Job job = GetJob(id);
  EXPECT_EQ(job.step(), 1);
  EXPECT_EQ(job.loss(), 5.5);
  EXPECT_DOUBLE_EQ(job.bubble_ratio(), 0.5);  // 1 - (3 + 1) / (2 * 4)
  EXPECT_DOUBLE_EQ(job.tokens_per_second(), 4 * 2 * 16 / 4.0);

  pp::v1::GetTraceRequest trace_request;
  trace_request.set_job_id(id);
  pp::v1::StepTrace trace;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(client_->GetTrace(&context, trace_request, &trace).ok());
  }
  ASSERT_EQ(trace.ranks_size(), 2);
  EXPECT_EQ(trace.step(), 1);
  EXPECT_EQ(trace.ranks(1).actions(0).action().stage(), 1);

  for (auto& w : workers_) w->FinishTask(true, "");
  ASSERT_TRUE(WaitUntil([&] { return GetJob(id).state() == pp::v1::SUCCEEDED; }, absl::Seconds(5)));
  watcher.join();
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.front().kind(), pp::v1::EVENT_PLACED);
  EXPECT_EQ(events[1].kind(), pp::v1::EVENT_STEP);
  EXPECT_EQ(events[1].step(), 1);
  EXPECT_EQ(events[1].total_steps(), 3);
  EXPECT_EQ(events[1].loss(), 5.5);
  EXPECT_EQ(events.back().kind(), pp::v1::EVENT_FINISHED);
  auto workers = Workers();
  EXPECT_EQ(workers["w0"].state(), pp::v1::IDLE);
  EXPECT_EQ(workers["w1"].state(), pp::v1::IDLE);
}

TEST_F(ServiceTest, SilentWorkerFailsTheJobAndFreesTheOthers) {
  const std::string id = RunningJob();
  FakeWorker& w1 = *workers_[0];
  FakeWorker& w0 = *workers_[1];
  const absl::Time stopped = absl::Now();
  w1.StopHeartbeats();
  ASSERT_TRUE(WaitUntil([&] { return GetJob(id).state() == pp::v1::FAILED; }, absl::Seconds(5)));
  EXPECT_LT(absl::Now() - stopped, absl::Seconds(3));  // timeout 0.6 s + a scheduler tick
  const pp::v1::Job job = GetJob(id);
  EXPECT_THAT(job.reason(), HasSubstr("w1"));
  EXPECT_THAT(job.reason(), HasSubstr("rank 1"));
  ASSERT_TRUE(WaitUntil([&] { return Workers()["w0"].state() == pp::v1::IDLE; }, absl::Seconds(5)));
  EXPECT_THAT(w0.aborted_jobs(), Contains(id));
  EXPECT_EQ(Workers()["w1"].state(), pp::v1::DOWN);
  // Late reports of the dead job are told to stop.
  pp::v1::StepReport late;
  late.set_job_id(id);
  pp::v1::ReportResponse response;
  grpc::ClientContext context;
  ASSERT_TRUE(w0.registry().ReportStep(&context, late, &response).ok());
  EXPECT_TRUE(response.abort());
}

// A rank that lost its peer is a symptom: the job's reason names the worker that does not answer.
TEST_F(ServiceTest, ALostPeerIsTracedToTheWorkerThatDoesNotAnswer) {
  const std::string id = RunningJob();  // w0 holds rank 0, w1 rank 1
  FakeWorker& w1 = *workers_[0];
  FakeWorker& w0 = *workers_[1];
  w1.Vanish();
  const absl::Time lost = absl::Now();
  w0.FinishTask(false, "rank 0 recv from rank 1 (tag 5): connection closed",
                absl::StatusCode::kUnavailable);
  ASSERT_TRUE(WaitUntil([&] { return GetJob(id).state() == pp::v1::FAILED; }, absl::Seconds(5)));
  const std::string reason = GetJob(id).reason();
  EXPECT_THAT(reason, HasSubstr("worker w1 (rank 1)"));
  EXPECT_THAT(reason, HasSubstr("does not answer"));
  EXPECT_THAT(reason, HasSubstr("connection closed"));  // the symptom stays in the reason
  EXPECT_LT(absl::Now() - lost, absl::Seconds(2));  // the probe is refused at once
}

// A rank's own error reported soon after its peer lost it is the reason.
TEST_F(ServiceTest, ALostPeerGivesWayToTheRanksOwnError) {
  const std::string id = RunningJob();
  workers_[1]->FinishTask(false, "rank 0 recv from rank 1 (tag 5): connection closed",
                          absl::StatusCode::kUnavailable);
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(GetJob(id).state(), pp::v1::RUNNING);  // w1 answers its probe: waiting for it
  workers_[0]->FinishTask(false, "CUDA out of memory", absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(WaitUntil([&] { return GetJob(id).state() == pp::v1::FAILED; }, absl::Seconds(5)));
  EXPECT_THAT(GetJob(id).reason(), HasSubstr("rank 1 on worker w1: CUDA out of memory"));
}

// When every other worker answers and says nothing more, the lost-peer report is the reason
// once the settle time (1 s) passed.
TEST_F(ServiceTest, ALostPeerWithEveryWorkerAliveFailsWithTheReport) {
  const std::string id = RunningJob();
  FakeWorker& w0 = *workers_[1];
  w0.FinishTask(false, "rank 0 recv from rank 1 (tag 5): timed out after 30s",
                absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(WaitUntil([&] { return GetJob(id).state() == pp::v1::FAILED; }, absl::Seconds(5)));
  const std::string reason = GetJob(id).reason();
  EXPECT_THAT(reason, HasSubstr("rank 0 on worker w0"));
  EXPECT_THAT(reason, HasSubstr("timed out"));
  EXPECT_THAT(reason, Not(HasSubstr("does not answer")));
  ASSERT_TRUE(WaitUntil([&] { return !workers_[0]->aborted_jobs().empty(); }, absl::Seconds(5)));
}

TEST_F(ServiceTest, FailedRankFailsTheJobAndCancelStopsAQueuedOne) {
  const std::string id = RunningJob();
  workers_[0]->FinishTask(false, "out of memory");
  ASSERT_TRUE(WaitUntil([&] { return GetJob(id).state() == pp::v1::FAILED; }, absl::Seconds(5)));
  EXPECT_THAT(GetJob(id).reason(), HasSubstr("out of memory"));
  EXPECT_THAT(GetJob(id).reason(), HasSubstr("rank 1"));
  ASSERT_TRUE(WaitUntil([&] { return Workers()["w0"].state() == pp::v1::IDLE; }, absl::Seconds(5)));

  std::string queued;
  ASSERT_TRUE(Submit(ValidSpec(4), &queued).ok());  // 4 ranks, 2 workers: waits
  pp::v1::CancelJobRequest cancel;
  cancel.set_job_id(queued);
  pp::v1::Job cancelled;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(client_->CancelJob(&context, cancel, &cancelled).ok());
  }
  EXPECT_EQ(cancelled.state(), pp::v1::CANCELLED);
  grpc::ClientContext context;
  EXPECT_EQ(client_->CancelJob(&context, cancel, &cancelled).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(ServiceTest, FailedRankRestartsFromTheNewestCheckpointUntilTheBudgetEnds) {
  const std::string id = RunningJob(/*max_restarts=*/1);
  FakeWorker& w1 = *workers_[0];
  FakeWorker& w0 = *workers_[1];
  Checkpoint(id, /*attempt=*/0, /*step=*/2, /*ranks=*/2);

  w1.FinishTask(false, "out of memory");
  // w0 is told to stop attempt 0, then both take attempt 1 from step 2.
  ASSERT_TRUE(WaitUntil([&] { return w0.tasks().size() == 2 && w1.tasks().size() == 2; },
                        absl::Seconds(10)));
  EXPECT_THAT(w0.aborted_jobs(), Contains(id));
  const pp::v1::TaskPlan plan = w0.tasks().back();
  EXPECT_EQ(plan.attempt(), 1);
  EXPECT_EQ(plan.start_step(), 2);
  EXPECT_EQ(plan.resume_from(),
            common::StepDir((dir_ / "data" / "checkpoints").string(), id, 2));
  EXPECT_EQ(plan.rendezvous_prefix(), absl::StrCat(id, "/1/"));
  pp::v1::Job job = GetJob(id);
  EXPECT_EQ(job.state(), pp::v1::RUNNING);
  EXPECT_EQ(job.restarts(), 1);
  ASSERT_EQ(job.restart_log_size(), 1);
  EXPECT_EQ(job.restart_log(0).from_step(), 2);
  EXPECT_TRUE(job.restart_log(0).automatic());
  EXPECT_THAT(job.restart_log(0).reason(), HasSubstr("out of memory"));

  // A late report of attempt 0 is told to stop; the budget is spent at the next failure.
  pp::v1::StepReport stale;
  stale.set_job_id(id);
  stale.set_attempt(0);
  pp::v1::ReportResponse answer;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(w0.registry().ReportStep(&context, stale, &answer).ok());
  }
  EXPECT_TRUE(answer.abort());
  w1.FinishTask(false, "out of memory again");
  ASSERT_TRUE(WaitUntil([&] { return GetJob(id).state() == pp::v1::FAILED; }, absl::Seconds(5)));
  EXPECT_THAT(GetJob(id).reason(), HasSubstr("after 1 automatic restarts"));
}

// The scheduler verifies a restart's checkpoint (outside the coordinator's lock) before it places
// the job, and falls back to an older one when the newest is damaged.
TEST_F(ServiceTest, ARestartSkipsADamagedCheckpoint) {
  const std::string id = RunningJob(/*max_restarts=*/1);
  FakeWorker& w1 = *workers_[0];
  FakeWorker& w0 = *workers_[1];
  Checkpoint(id, /*attempt=*/0, /*step=*/2, /*ranks=*/2);
  Checkpoint(id, /*attempt=*/0, /*step=*/3, /*ranks=*/2);
  {
    const std::string shard = common::StepDir((dir_ / "data" / "checkpoints").string(), id, 3) +
                              "/" + common::ShardFileName(1);
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x7f');  // the last byte of the data: sizes still match, the sha256 does not
  }
  w1.FinishTask(false, "out of memory");
  ASSERT_TRUE(WaitUntil([&] { return w0.tasks().size() == 2 && w1.tasks().size() == 2; },
                        absl::Seconds(10)));
  EXPECT_EQ(w0.tasks().back().start_step(), 2);
  const pp::v1::Job job = GetJob(id);
  EXPECT_EQ(job.start_step(), 2);
  ASSERT_EQ(job.restart_log_size(), 1);
  EXPECT_EQ(job.restart_log(0).from_step(), 2);
}

TEST_F(ServiceTest, ResumeQueuesAnEndedJobFromACheckpointOnANewLayout) {
  const std::string id = RunningJob();
  Checkpoint(id, /*attempt=*/0, /*step=*/2, /*ranks=*/2);
  pp::v1::ResumeJobRequest request;
  request.set_job_id(id);
  pp::v1::Job job;
  EXPECT_EQ(Resume(request, &job).error_code(), grpc::StatusCode::FAILED_PRECONDITION);  // runs
  {
    pp::v1::CancelJobRequest cancel;
    cancel.set_job_id(id);
    grpc::ClientContext context;
    ASSERT_TRUE(client_->CancelJob(&context, cancel, &job).ok());
  }
  request.set_step(3);  // never written
  grpc::Status missing = Resume(request, &job);
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(missing.error_message(), HasSubstr("step-3"));

  request.set_step(0);
  request.mutable_parallel()->set_pipeline(2);
  request.mutable_parallel()->set_chunks(2);
  request.mutable_parallel()->set_schedule("interleaved-1f1b");
  ASSERT_TRUE(Resume(request, &job).ok());
  EXPECT_EQ(job.start_step(), 2);
  EXPECT_EQ(job.attempt(), 1);
  EXPECT_EQ(job.restarts(), 0);  // a resume is not an automatic restart
  ASSERT_TRUE(WaitUntil([&] { return workers_[1]->tasks().size() == 2; }, absl::Seconds(10)));
  const pp::v1::TaskPlan plan = workers_[1]->tasks().back();
  EXPECT_EQ(plan.start_step(), 2);
  EXPECT_EQ(plan.stages_size(), 2);  // V = 2
  EXPECT_EQ(plan.spec().parallel().schedule(), "interleaved-1f1b");
  EXPECT_EQ(GetJob(id).state(), pp::v1::RUNNING);
}

TEST_F(ServiceTest, ResumeOnMoreReplicasKeepsTheGlobalBatch) {
  const std::string id = RunningJob();  // pipeline 2, M = 4, one replica
  Checkpoint(id, /*attempt=*/0, /*step=*/2, /*ranks=*/2);
  pp::v1::Job job;
  {
    pp::v1::CancelJobRequest cancel;
    cancel.set_job_id(id);
    grpc::ClientContext context;
    ASSERT_TRUE(client_->CancelJob(&context, cancel, &job).ok());
  }
  pp::v1::ResumeJobRequest request;
  request.set_job_id(id);
  request.mutable_parallel()->set_pipeline(1);
  request.mutable_parallel()->set_chunks(1);
  request.mutable_parallel()->set_schedule("gpipe");
  request.mutable_parallel()->set_data(3);  // 4 microbatches do not split over 3 replicas
  grpc::Status refused = Resume(request, &job);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.error_message(), HasSubstr("global batch"));
  EXPECT_EQ(GetJob(id).state(), pp::v1::CANCELLED);

  request.mutable_parallel()->set_data(2);
  ASSERT_TRUE(Resume(request, &job).ok());
  EXPECT_EQ(job.spec().parallel().data(), 2);
  EXPECT_EQ(job.spec().train().microbatches(), 2);  // 2 replicas x 2 = the 4 of one replica
}

TEST_F(ServiceTest, ADrainingRankGetsACommonStopStepAndTheJobIsQueuedAgain) {
  const std::string id = RunningJob();
  ReportStep(id, 0, 1, 0.1, 0.1, false, 0);
  pp::v1::StepReport draining;
  draining.set_job_id(id);
  draining.set_rank(1);
  draining.set_step(1);
  draining.set_draining(true);
  pp::v1::ReportResponse answer;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(workers_[0]->registry().ReportStep(&context, draining, &answer).ok());
  }
  EXPECT_FALSE(answer.abort());
  EXPECT_EQ(answer.stop_after_step(), 2);  // every rank can still stop after step 2
  Checkpoint(id, /*attempt=*/0, /*step=*/2, /*ranks=*/2);
  workers_[0]->StopHeartbeats();  // a drained worker does not register again
  for (int rank : {0, 1}) {
    pp::v1::TaskReport done;
    done.set_job_id(id);
    done.set_rank(rank);
    done.set_ok(true);
    done.set_drained(true);
    done.set_worker(rank == 0 ? "w0" : "w1");
    grpc::ClientContext context;
    ASSERT_TRUE(workers_[0]->registry().ReportTask(&context, done, &answer).ok());
  }
  const pp::v1::Job job = GetJob(id);
  EXPECT_EQ(job.state(), pp::v1::QUEUED);  // one worker left: waits for another
  EXPECT_EQ(job.start_step(), 2);
  EXPECT_EQ(job.restarts(), 0);
  ASSERT_EQ(job.restart_log_size(), 1);
  EXPECT_THAT(job.restart_log(0).reason(), HasSubstr("w1 drained after step 2"));
  EXPECT_EQ(Workers()["w1"].state(), pp::v1::DOWN);
}

TEST_F(ServiceTest, RendezvousWaitsForKeysAcrossClients) {
  AddWorker("w0");
  AddWorker("w1");
  std::thread getter([&] {
    pp::v1::KvGetRequest request;
    request.add_keys("j/0/rank1");
    request.set_timeout_seconds(10);
    pp::v1::KvGetResponse response;
    grpc::ClientContext context;
    ASSERT_TRUE(workers_[0]->registry().KvGet(&context, request, &response).ok());
    ASSERT_EQ(response.values_size(), 1);
    EXPECT_EQ(response.values(0), "addr-of-1");
  });
  absl::SleepFor(absl::Milliseconds(100));
  pp::v1::KvSetRequest set;
  set.set_key("j/0/rank1");
  set.set_value("addr-of-1");
  pp::v1::KvSetResponse ignored;
  grpc::ClientContext context;
  ASSERT_TRUE(workers_[1]->registry().KvSet(&context, set, &ignored).ok());
  getter.join();

  pp::v1::KvGetRequest missing;
  missing.add_keys("j/0/never");
  missing.set_timeout_seconds(0.1);
  pp::v1::KvGetResponse response;
  grpc::ClientContext context2;
  grpc::Status status = workers_[0]->registry().KvGet(&context2, missing, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(status.error_message(), HasSubstr("j/0/never"));
}

TEST_F(ServiceTest, PlanJobIsADryRun) {
  pp::v1::PlanJobRequest request;
  *request.mutable_spec() = ValidSpec(2);
  pp::v1::PlanJobResponse response;
  grpc::ClientContext context;
  ASSERT_TRUE(client_->PlanJob(&context, request, &response).ok());
  EXPECT_EQ(response.schedule().ranks_size(), 2);
  EXPECT_EQ(response.stage_layers_size(), 2);
  EXPECT_NEAR(response.schedule().simulation().bubble_fraction(), 1.0 / 5.0,
              1e-12);  // (D-1)/(M+D-1)
  EXPECT_FALSE(response.ascii().empty());
  EXPECT_EQ(response.mesh(), "dp1 x pp2 x tp1");
  pp::v1::ListJobsResponse jobs;
  grpc::ClientContext list;
  ASSERT_TRUE(client_->ListJobs(&list, {}, &jobs).ok());
  EXPECT_EQ(jobs.jobs_size(), 0);
}

TEST_F(ServiceTest, PlanJobShowsTheMesh) {
  pp::v1::PlanJobRequest request;
  *request.mutable_spec() = ValidSpec(2);
  request.mutable_spec()->mutable_parallel()->set_data(2);
  request.mutable_spec()->mutable_parallel()->set_tensor(2);
  pp::v1::PlanJobResponse response;
  grpc::ClientContext context;
  ASSERT_TRUE(client_->PlanJob(&context, request, &response).ok());
  EXPECT_EQ(response.mesh(), "dp2 x pp2 x tp2");
  ASSERT_EQ(response.ranks_size(), 8);
  // rank = (dp * PP + pp) * TP + tp: TP is the fastest axis, then the pipeline, then replicas.
  for (int rank = 0; rank < 8; ++rank) {
    const pp::v1::RankPlacement& r = response.ranks(rank);
    EXPECT_EQ(r.rank(), rank);
    EXPECT_EQ(r.tp(), rank % 2);
    EXPECT_EQ(r.pp(), rank / 2 % 2);
    EXPECT_EQ(r.dp(), rank / 4);
    EXPECT_THAT(r.stages(), ElementsAre(r.pp()));
    EXPECT_TRUE(r.worker().empty());
  }
}

TEST_F(ServiceTest, JobsSurviveARestartOfTheCoordinator) {
  std::string queued;
  ASSERT_TRUE(Submit(ValidSpec(2), &queued).ok());
  server_.reset();
  StartServer();
  EXPECT_EQ(GetJob(queued).state(), pp::v1::QUEUED);
  std::string next;
  ASSERT_TRUE(Submit(ValidSpec(2), &next).ok());
  EXPECT_NE(next, queued);
}

TEST_F(ServiceTest, HealthAndReflectionAnswer) {
  absl::StatusOr<int> health = testing::HealthCheck(channel_);
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, 1);  // SERVING
  absl::StatusOr<std::vector<std::string>> services = testing::ReflectionServices(channel_);
  ASSERT_TRUE(services.ok()) << services.status();
  EXPECT_THAT(*services, Contains("pp.v1.Coordinator"));
  EXPECT_THAT(*services, Contains("pp.v1.WorkerRegistry"));
  EXPECT_THAT(*services, Contains("grpc.health.v1.Health"));
}

TEST_F(ServiceTest, MetricsAreServed) {
  const std::string id = RunningJob();
  ReportStep(id, 0, 1, 1.0, 1.0, false, 0);
  ReportStep(id, 1, 1, 1.0, 0.5, true, 4.25);
  {
    grpc::ClientContext context;
    pp::v1::SubmitJobResponse ignored;
    client_->SubmitJob(&context, {}, &ignored);  // an invalid spec: counted as an RPC error
  }
  absl::StatusOr<std::string> body;
  ASSERT_TRUE(WaitUntil(
      [&] {
        body = testing::HttpGet(server_->metrics_address(), "/metrics");
        return body.ok() && body->find("pp_workers{state=\"BUSY\"} 2") != std::string::npos;
      },
      absl::Seconds(5)))
      << body.status() << *body;
  EXPECT_THAT(*body, HasSubstr("pp_jobs{state=\"RUNNING\"} 1"));
  EXPECT_THAT(*body, HasSubstr(absl::StrCat("pp_job_steps_total{job=\"", id, "\"} 1")));
  EXPECT_THAT(*body, HasSubstr(absl::StrCat("pp_job_loss{job=\"", id, "\"} 4.25")));
  // Step 1 consumed 1 x 4 x 2 = 8 of K = 4096 - 16 = 4080 training windows.
  const std::regex epoch_line(absl::StrCat("pp_job_epoch\\{job=\"", id, "\"\\} ([0-9.e+-]+)"));
  std::smatch epoch;
  ASSERT_TRUE(std::regex_search(*body, epoch, epoch_line)) << *body;
  EXPECT_NEAR(std::stod(epoch[1]), 8.0 / 4080, 1e-12);
  EXPECT_THAT(*body, HasSubstr("pp_job_planned_bubble_ratio"));
  EXPECT_THAT(*body, HasSubstr("pp_rpc_errors_total{method=\"pp.v1.Coordinator/SubmitJob\"} 1"));
}

#ifdef PP_PROMTOOL
// Registered only where Debian's promtool (package prometheus) was found at configure time.
TEST_F(ServiceTest, MetricsPassPromtoolCheck) {
  const std::string id = RunningJob();
  ReportStep(id, 0, 1, 1.0, 1.0, false, 0);
  ReportStep(id, 1, 1, 1.0, 0.5, true, 4.25);
  absl::StatusOr<std::string> body = testing::HttpGet(server_->metrics_address(), "/metrics");
  ASSERT_TRUE(body.ok()) << body.status();
  const std::string path = (dir_ / "scrape.txt").string();
  std::ofstream(path) << *body;
  const std::string command = absl::StrCat(PP_PROMTOOL, " check metrics < ", path, " 2>&1");
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buffer[512];
  while (fgets(buffer, sizeof(buffer), pipe)) output += buffer;
  EXPECT_EQ(pclose(pipe), 0) << output << "\n" << *body;
}
#endif

}  // namespace
}  // namespace pp::coordinator
