// Pure parts of ppcoord: rendezvous store, worker table, placement, task plans, state machine,
// step and checkpoint aggregation, restart backoff, the SQLite job store.
#include <filesystem>
#include <limits>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "coordinator/job_logic.h"
#include "coordinator/rendezvous.h"
#include "coordinator/placement.h"
#include "coordinator/registry.h"
#include "coordinator/store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pp::coordinator {
namespace {

pp::v1::JobStepRecord StepAt(int step, double loss) {
  pp::v1::JobStepRecord record;
  record.set_step(step);
  record.set_loss(loss);
  return record;
}

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(RendezvousStore, GetWaitsForKeysSetLater) {
  RendezvousStore kv;
  EXPECT_TRUE(kv.Set("j/0/a", "1").ok());
  std::thread setter([&kv] {
    absl::SleepFor(absl::Milliseconds(50));
    EXPECT_TRUE(kv.Set("j/0/b", "2").ok());
  });
  absl::StatusOr<std::vector<std::string>> values = kv.Get({"j/0/a", "j/0/b"}, absl::Seconds(10));
  setter.join();
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_THAT(*values, ElementsAre("1", "2"));
}

TEST(RendezvousStore, GetTimesOutNamingMissingKeys) {
  RendezvousStore kv;
  EXPECT_TRUE(kv.Set("present", "x").ok());
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<std::string>> values =
      kv.Get({"present", "absent"}, absl::Milliseconds(100));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  ASSERT_EQ(values.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(values.status().message(), HasSubstr("absent"));
  EXPECT_THAT(values.status().message(), ::testing::Not(HasSubstr("present")));
}

TEST(RendezvousStore, ZeroTimeoutDoesNotWaitAndCancelEndsWait) {
  RendezvousStore kv;
  EXPECT_FALSE(kv.Get({"k"}, absl::ZeroDuration()).ok());
  const absl::Time start = absl::Now();
  EXPECT_FALSE(kv.Get({"k"}, absl::Seconds(30), [] { return true; }).ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(RendezvousStore, EraseWithPrefixDropsOnlyThatJob) {
  RendezvousStore kv;
  EXPECT_TRUE(kv.Set("job-1/0/a", "").ok());
  EXPECT_TRUE(kv.Set("job-1/0/b", "").ok());
  EXPECT_TRUE(kv.Set("job-10/0/a", "").ok());
  EXPECT_TRUE(kv.Set("job-2/0/a", "").ok());
  EXPECT_EQ(kv.EraseWithPrefix("job-1/"), 2);
  EXPECT_EQ(kv.size(), 2u);
  EXPECT_TRUE(kv.Get({"job-10/0/a", "job-2/0/a"}, absl::ZeroDuration()).ok());
}

TEST(RendezvousStore, CloseWakesWaiters) {
  RendezvousStore kv;
  std::thread closer([&kv] {
    absl::SleepFor(absl::Milliseconds(50));
    kv.Close();
  });
  const absl::Time start = absl::Now();
  EXPECT_EQ(kv.Get({"never"}, absl::Seconds(30)).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  closer.join();
}

pp::v1::WorkerInfo Worker(const std::string& name) {
  pp::v1::WorkerInfo w;
  w.set_name(name);
  w.set_address(name + ".local:1");
  w.set_device("cpu");
  return w;
}

TEST(WorkerTable, SilentWorkersGoDownAndMustRegisterAgain) {
  WorkerTable table;
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  ASSERT_TRUE(table.Register(Worker("b"), t0).ok());
  ASSERT_TRUE(table.Register(Worker("a"), t0).ok());
  table.SetBusy("b", "job-1");
  EXPECT_TRUE(table.Heartbeat("a", t0 + absl::Seconds(4)));
  std::vector<pp::v1::WorkerInfo> down =
      table.MarkSilentDown(t0 + absl::Seconds(6), absl::Seconds(5));
  ASSERT_EQ(down.size(), 1u);
  EXPECT_EQ(down[0].name(), "b");
  EXPECT_EQ(down[0].job_id(), "job-1");
  EXPECT_EQ(table.Find("b")->state(), pp::v1::DOWN);
  EXPECT_FALSE(table.Heartbeat("b", t0 + absl::Seconds(7)));
  EXPECT_FALSE(table.Heartbeat("nobody", t0));
  ASSERT_TRUE(table.Register(Worker("b"), t0 + absl::Seconds(8)).ok());
  EXPECT_EQ(table.Find("b")->state(), pp::v1::IDLE);
  EXPECT_EQ(table.CountInState(pp::v1::IDLE), 2);
}

TEST(WorkerTable, IdleIsSortedByNameAndBadRegistrationsAreRefused) {
  WorkerTable table;
  const absl::Time t = absl::Now();
  for (const char* name : {"w2", "w0", "w1"}) ASSERT_TRUE(table.Register(Worker(name), t).ok());
  table.SetBusy("w1", "j");
  std::vector<std::string> names;
  for (const auto& w : table.Idle()) names.push_back(w.name());
  EXPECT_THAT(names, ElementsAre("w0", "w2"));
  EXPECT_THAT(table.Register(pp::v1::WorkerInfo(), t).message(), HasSubstr("worker.name"));
  pp::v1::WorkerInfo no_address;
  no_address.set_name("x");
  EXPECT_THAT(table.Register(no_address, t).message(), HasSubstr("worker.address"));
}

TEST(WorkerTable, NewNamesBeyondTheLimitAreRefusedUntilADownOneIsForgotten) {
  WorkerTable table(/*max_workers=*/2);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  ASSERT_TRUE(table.Register(Worker("a"), t0).ok());
  ASSERT_TRUE(table.Register(Worker("b"), t0).ok());
  const absl::Status full = table.Register(Worker("c"), t0);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;
  EXPECT_THAT(full.message(), HasSubstr("worker c not registered: 2 workers are registered"));
  EXPECT_TRUE(table.Register(Worker("a"), t0 + absl::Seconds(1)).ok());  // a known name: always

  table.MarkSilentDown(t0 + absl::Seconds(10), absl::Seconds(5));  // a and b DOWN
  auto keep_b = [](const std::string& name) { return name == "b"; };  // b holds a live rank
  EXPECT_TRUE(table.ForgetDown(t0 + absl::Minutes(30), absl::Hours(1), keep_b).empty());
  EXPECT_THAT(table.ForgetDown(t0 + absl::Hours(2), absl::Hours(1), keep_b), ElementsAre("a"));
  EXPECT_EQ(table.Find("a"), nullptr);
  EXPECT_NE(table.Find("b"), nullptr);
  EXPECT_TRUE(table.Register(Worker("c"), t0 + absl::Hours(2)).ok());
  EXPECT_FALSE(table.Heartbeat("a", t0 + absl::Hours(2)));  // forgotten: registers anew
}

TEST(JobLogic, AReportedErrorIsKeptUpToItsBoundOnACharacterBoundary) {
  EXPECT_EQ(ReportedText("disk full"), "disk full");
  const std::string exact(kMaxReportedTextBytes, 'x');
  EXPECT_EQ(ReportedText(exact), exact);
  // "é" is two bytes: one that would straddle the bound is cut whole.
  std::string text(kMaxReportedTextBytes - 1, 'a');
  for (int i = 0; i < 1000; ++i) text += "\xc3\xa9";
  const std::string kept = ReportedText(text);
  EXPECT_EQ(kept.substr(0, kMaxReportedTextBytes),
            std::string(kMaxReportedTextBytes - 1, 'a') + " ");
  EXPECT_THAT(kept, HasSubstr("(2000 more bytes not kept)"));
  EXPECT_LT(kept.size(), kMaxReportedTextBytes + 64);
}

TEST(JobLogic, TheRestartLogKeepsTheNewestRestartsOnly) {
  pp::v1::Job job;
  const int restarts = kMaxRestartLog + 8;
  for (int i = 1; i <= restarts; ++i) {
    StartNextAttempt(job, /*from_step=*/i, absl::StrCat("failure ", i), /*automatic=*/true, i);
  }
  ASSERT_EQ(job.restart_log_size(), kMaxRestartLog);
  EXPECT_EQ(job.attempt(), restarts);
  EXPECT_EQ(job.restart_log(0).attempt(), restarts - kMaxRestartLog + 1);
  EXPECT_EQ(job.restart_log(kMaxRestartLog - 1).attempt(), restarts);
  EXPECT_EQ(job.restart_log(kMaxRestartLog - 1).reason(), absl::StrCat("failure ", restarts));
}

pp::v1::JobSpec Spec(int pipeline, int chunks) {
  pp::v1::JobSpec spec;
  spec.mutable_parallel()->set_pipeline(pipeline);
  spec.mutable_parallel()->set_chunks(chunks);
  spec.mutable_parallel()->set_tensor(1);
  spec.mutable_parallel()->set_data(1);
  return spec;
}

TEST(Placement, RanksTakeWorkersInNameOrderWithTheirStages) {
  std::vector<pp::v1::WorkerInfo> idle = {Worker("a"), Worker("b"), Worker("c")};
  absl::StatusOr<std::vector<pp::v1::RankPlacement>> placement =
      PlaceRanks(Spec(2, 2), {0, 1, 1, 0}, idle);  // V-shape stage_to_rank
  ASSERT_TRUE(placement.ok()) << placement.status();
  ASSERT_EQ(placement->size(), 2u);
  EXPECT_EQ((*placement)[0].worker(), "a");
  EXPECT_EQ((*placement)[0].address(), "a.local:1");
  EXPECT_THAT((*placement)[0].stages(), ElementsAre(0, 3));
  EXPECT_EQ((*placement)[1].worker(), "b");
  EXPECT_EQ((*placement)[1].pp(), 1);
  EXPECT_THAT((*placement)[1].stages(), ElementsAre(1, 2));
}

TEST(Placement, DataAndTensorDegreesMultiplyTheRanks) {
  pp::v1::JobSpec spec = Spec(2, 1);
  spec.mutable_parallel()->set_data(2);
  std::vector<pp::v1::WorkerInfo> idle;
  for (const char* n : {"w0", "w1", "w2", "w3"}) idle.push_back(Worker(n));
  absl::StatusOr<std::vector<pp::v1::RankPlacement>> placement = PlaceRanks(spec, {0, 1}, idle);
  ASSERT_TRUE(placement.ok());
  ASSERT_EQ(placement->size(), 4u);
  EXPECT_EQ((*placement)[3].pp(), 1);
  EXPECT_EQ((*placement)[3].dp(), 1);
  EXPECT_EQ((*placement)[2].pp(), 0);
  EXPECT_EQ((*placement)[2].dp(), 1);
}

// Workers in name order alternate between two hosts; PP2 x TP2 must still put each TP pair on one
// host, and the pipeline's two pairs on the two hosts.
TEST(Placement, TensorParallelGroupsShareAHost) {
  pp::v1::JobSpec spec = Spec(2, 1);
  spec.mutable_parallel()->set_tensor(2);
  std::vector<pp::v1::WorkerInfo> idle;
  for (const char* n : {"w0", "w1", "w2", "w3"}) {
    idle.push_back(Worker(n));
    idle.back().set_host(idle.size() % 2 == 1 ? "node-a" : "node-b");
  }
  absl::StatusOr<std::vector<pp::v1::RankPlacement>> placement = PlaceRanks(spec, {0, 1}, idle);
  ASSERT_TRUE(placement.ok()) << placement.status();
  std::map<std::string, std::string> host_of;
  for (const auto& w : idle) host_of[w.name()] = w.host();
  ASSERT_EQ(placement->size(), 4u);
  for (int group = 0; group < 2; ++group) {
    const pp::v1::RankPlacement& a = (*placement)[2 * group];
    const pp::v1::RankPlacement& b = (*placement)[2 * group + 1];
    EXPECT_EQ(a.pp(), group);
    EXPECT_EQ(b.pp(), group);
    EXPECT_EQ(host_of[a.worker()], host_of[b.worker()]) << a.worker() << " and " << b.worker();
  }
  EXPECT_NE(host_of[(*placement)[0].worker()], host_of[(*placement)[2].worker()]);
}

TEST(Placement, TooFewWorkersIsAnError) {
  absl::StatusOr<std::vector<pp::v1::RankPlacement>> placement =
      PlaceRanks(Spec(4, 1), {0, 1, 2, 3}, {Worker("a")});
  EXPECT_EQ(placement.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(placement.status().message(), HasSubstr("needs 4"));
}

TEST(Placement, TaskPlansCarryUnitsProgramAndRendezvous) {
  pp::v1::Job job;
  job.set_id("tiny-3");
  *job.mutable_spec() = Spec(2, 1);
  pp::v1::Schedule schedule;
  schedule.add_stage_to_rank(0);
  schedule.add_stage_to_rank(1);
  for (int r : {1, 0}) {  // programs need not be in rank order
    pp::v1::RankProgram* program = schedule.add_ranks();
    program->set_rank(r);
    program->add_actions()->set_microbatch(10 + r);
  }
  absl::StatusOr<std::vector<pp::v1::RankPlacement>> placement =
      PlaceRanks(job.spec(), {0, 1}, {Worker("a"), Worker("b")});
  ASSERT_TRUE(placement.ok());
  job.mutable_placement()->Assign(placement->begin(), placement->end());
  job.set_attempt(1);
  std::vector<pp::v1::TaskPlan> plans = BuildTaskPlans(job, schedule, {2, 4}, "/ck");
  ASSERT_EQ(plans.size(), 2u);
  EXPECT_EQ(plans[1].rank(), 1);
  EXPECT_EQ(plans[1].world_size(), 2);
  ASSERT_EQ(plans[1].stages_size(), 1);
  EXPECT_EQ(plans[1].stages(0).first_unit(), 2);
  EXPECT_EQ(plans[1].stages(0).last_unit(), 5);
  EXPECT_EQ(plans[0].stages(0).first_unit(), 0);
  EXPECT_EQ(plans[0].stages(0).last_unit(), 1);
  EXPECT_EQ(plans[1].program().actions(0).microbatch(), 11);
  EXPECT_EQ(plans[0].program().actions(0).microbatch(), 10);
  EXPECT_EQ(plans[1].rendezvous_prefix(), "tiny-3/1/");
  EXPECT_EQ(plans[1].attempt(), 1);
  EXPECT_EQ(plans[1].checkpoint_dir(), "/ck");
  EXPECT_THAT(plans[0].stage_to_rank(), ElementsAre(0, 1));
  EXPECT_EQ(plans[0].start_step(), 0);
  EXPECT_EQ(plans[0].resume_from(), "");

  // A later attempt resumes from its checkpoint under a fresh rendezvous prefix.
  job.set_attempt(2);
  job.set_start_step(10);
  plans = BuildTaskPlans(job, schedule, {2, 4}, "/ck");
  EXPECT_EQ(plans[1].rendezvous_prefix(), "tiny-3/2/");
  EXPECT_EQ(plans[1].start_step(), 10);
  EXPECT_EQ(plans[1].resume_from(), "/ck/tiny-3/step-10");
}

TEST(StateMachine, AllowsForwardTransitionsRestartsAndResumes) {
  using pp::v1::JobState;
  EXPECT_TRUE(CheckTransition(pp::v1::QUEUED, pp::v1::RUNNING).ok());
  EXPECT_TRUE(CheckTransition(pp::v1::QUEUED, pp::v1::CANCELLED).ok());
  EXPECT_TRUE(CheckTransition(pp::v1::RUNNING, pp::v1::SUCCEEDED).ok());
  EXPECT_TRUE(CheckTransition(pp::v1::RUNNING, pp::v1::FAILED).ok());
  EXPECT_TRUE(CheckTransition(pp::v1::RUNNING, pp::v1::CANCELLED).ok());
  EXPECT_FALSE(CheckTransition(pp::v1::QUEUED, pp::v1::SUCCEEDED).ok());
  EXPECT_TRUE(CheckTransition(pp::v1::RUNNING, pp::v1::QUEUED).ok());  // restart
  EXPECT_FALSE(CheckTransition(pp::v1::QUEUED, pp::v1::QUEUED).ok());
  for (JobState end : {pp::v1::SUCCEEDED, pp::v1::FAILED, pp::v1::CANCELLED}) {
    EXPECT_TRUE(IsTerminal(end));
    EXPECT_TRUE(CheckTransition(end, pp::v1::QUEUED).ok());  // resume
    absl::Status s = CheckTransition(end, pp::v1::RUNNING);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(s.message(), HasSubstr(pp::v1::JobState_Name(end)));
  }
  EXPECT_FALSE(IsTerminal(pp::v1::RUNNING));
}

pp::v1::StepReport Report(int rank, int step, double step_seconds, double busy) {
  pp::v1::StepReport r;
  r.set_job_id("j");
  r.set_rank(rank);
  r.set_step(step);
  r.set_step_seconds(step_seconds);
  r.set_busy_seconds(busy);
  r.mutable_trace()->add_actions()->set_end(busy);
  return r;
}

TEST(RestartBackoff, DoublesFromTheBaseUpToTheCap) {
  const absl::Duration base = absl::Seconds(1);
  const absl::Duration cap = absl::Seconds(60);
  EXPECT_EQ(RestartBackoff(0, base, cap), absl::ZeroDuration());  // not a restart
  EXPECT_EQ(RestartBackoff(1, base, cap), absl::Seconds(1));
  EXPECT_EQ(RestartBackoff(2, base, cap), absl::Seconds(2));
  EXPECT_EQ(RestartBackoff(3, base, cap), absl::Seconds(4));
  EXPECT_EQ(RestartBackoff(6, base, cap), absl::Seconds(32));
  EXPECT_EQ(RestartBackoff(7, base, cap), absl::Seconds(60));  // 64 s, capped
  EXPECT_EQ(RestartBackoff(100, base, cap), absl::Seconds(60));
  EXPECT_EQ(RestartBackoff(std::numeric_limits<int>::max(), base, cap), absl::Seconds(60));
  EXPECT_EQ(RestartBackoff(3, absl::Milliseconds(300), absl::Seconds(1)), absl::Milliseconds(1000));
}

TEST(WaitReason, NamesTheNeedAndTheWorkers) {
  EXPECT_EQ(WaitReason(8, 2, 0), "needs 8 workers, 2 registered, 0 idle");
}

TEST(StepAggregator, CompletesWhenEveryRankReported) {
  StepAggregator agg(3);
  EXPECT_FALSE(agg.Add(Report(2, 1, 2.0, 1.0)));
  EXPECT_FALSE(agg.Add(Report(0, 1, 4.0, 3.0)));
  EXPECT_FALSE(agg.Add(Report(7, 1, 4.0, 3.0)));  // unknown rank: ignored
  pp::v1::StepReport last = Report(1, 1, 3.0, 2.0);
  last.set_has_loss(true);
  last.set_loss(5.25);
  std::optional<StepSummary> s = agg.Add(last);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->step, 1);
  EXPECT_EQ(s->loss, 5.25);
  EXPECT_EQ(s->step_seconds, 4.0);
  // 1 - (3 + 2 + 1) / (3 * 4)
  EXPECT_DOUBLE_EQ(s->bubble_ratio, 0.5);
  ASSERT_EQ(s->trace.ranks_size(), 3);
  EXPECT_EQ(s->trace.ranks(2).rank(), 2);
  EXPECT_EQ(s->trace.ranks(2).actions(0).end(), 1.0);
  EXPECT_EQ(s->trace.step(), 1);
}

TEST(StepAggregator, InterleavedStepsCompleteIndependently) {
  StepAggregator agg(2);
  EXPECT_FALSE(agg.Add(Report(0, 1, 1, 1)));
  EXPECT_FALSE(agg.Add(Report(0, 2, 1, 1)));
  EXPECT_EQ(agg.Add(Report(1, 1, 1, 1))->step, 1);
  EXPECT_EQ(agg.Add(Report(1, 2, 1, 1))->step, 2);
}

TEST(StepAggregator, KeepsAtMostTheCapOfStepsARankNeverReported) {
  StepAggregator agg(2);
  for (int step = 1; step <= kMaxPendingSteps + 36; ++step) {
    EXPECT_FALSE(agg.Add(Report(0, step, 1, 1)));  // rank 1 falls silent
  }
  EXPECT_EQ(agg.pending_steps(), static_cast<size_t>(kMaxPendingSteps));
  EXPECT_EQ(agg.Add(Report(1, kMaxPendingSteps + 30, 1, 1))->step, kMaxPendingSteps + 30);
  EXPECT_EQ(agg.pending_steps(), 6u) << "older steps dropped, later ones kept";
}

TEST(MeasuredBubble, ZeroWithoutTime) {
  EXPECT_EQ(MeasuredBubble({}), 0);
  EXPECT_EQ(MeasuredBubble({Report(0, 1, 0, 0)}), 0);
  EXPECT_DOUBLE_EQ(MeasuredBubble({Report(0, 1, 2, 2), Report(1, 1, 2, 1)}), 0.25);
}

pp::v1::CheckpointReport Shard(int rank, int step) {
  pp::v1::CheckpointReport r;
  r.set_job_id("j");
  r.set_rank(rank);
  r.set_step(step);
  r.set_ok(true);
  return r;
}

TEST(CheckpointCollector, DropsOlderIncompleteStepsAndCapsPending) {
  CheckpointCollector c(2);
  ASSERT_TRUE(c.Add(Shard(0, 10)).ok());  // rank 1 never saves step 10
  ASSERT_TRUE(c.Add(Shard(0, 20)).ok());
  ASSERT_TRUE(c.Add(Shard(0, 30)).ok());
  auto done = c.Add(Shard(1, 20));
  ASSERT_TRUE(done.ok() && done->has_value());
  EXPECT_EQ(c.pending_steps(), 1u) << "step 10 dropped, step 30 still waits";
  for (int step = 40; step < 40 + 2 * kMaxPendingSteps; ++step) {
    ASSERT_TRUE(c.Add(Shard(0, step)).ok());
  }
  EXPECT_EQ(c.pending_steps(), static_cast<size_t>(kMaxPendingSteps));
}

TEST(CheckpointCollector, CompletesOnAllRanksAndNamesAFailedRank) {
  CheckpointCollector c(2);
  pp::v1::CheckpointReport r;
  r.set_step(10);
  r.set_ok(true);
  r.set_rank(1);
  r.set_shard("rank-00001.safetensors");
  auto first = c.Add(r);
  ASSERT_TRUE(first.ok());
  EXPECT_FALSE(first->has_value());
  r.set_rank(0);
  r.set_shard("rank-00000.safetensors");
  auto done = c.Add(r);
  ASSERT_TRUE(done.ok() && done->has_value());
  EXPECT_EQ((**done)[0].shard(), "rank-00000.safetensors");
  EXPECT_EQ((**done)[1].rank(), 1);

  r.set_step(20);
  r.set_ok(false);
  r.set_error("disk full");
  auto failed = c.Add(r);
  EXPECT_THAT(failed.status().message(), HasSubstr("rank 0"));
  EXPECT_THAT(failed.status().message(), HasSubstr("disk full"));
  r.set_rank(5);
  EXPECT_FALSE(c.Add(r).ok());
}

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("store_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string db() const { return (dir_ / "ppcoord.db").string(); }
  std::filesystem::path dir_;
};

TEST_F(StoreTest, JobsAndStepsSurviveReopening) {
  {
    absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(db());
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_EQ(*(*store)->ReserveSequence(), 1);
    pp::v1::Job job;
    job.set_id("tiny-1");
    job.mutable_spec()->set_name("tiny");
    job.mutable_spec()->mutable_model()->set_d_model(128);
    job.set_state(pp::v1::QUEUED);
    ASSERT_TRUE((*store)->Put(job).ok());
    job.set_id("other-2");
    ASSERT_TRUE((*store)->Put(job).ok());
    job.set_id("tiny-1");
    job.set_state(pp::v1::RUNNING);
    job.set_step(2);
    job.set_loss(4.5);
    job.add_placement()->set_worker("w0");
    ASSERT_TRUE((*store)->Put(job).ok());  // replaces, keeps its place in the order
    pp::v1::JobStepRecord first = StepAt(1, 5.0);
    first.set_step_seconds(0.5);
    ASSERT_TRUE((*store)->AddStep("tiny-1", first).ok());
    pp::v1::JobStepRecord second = StepAt(2, 4.5);
    second.set_bubble_ratio(0.25);
    ASSERT_TRUE((*store)->AddStep("tiny-1", second).ok());
  }
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(db());
  ASSERT_TRUE(store.ok());
  absl::StatusOr<std::vector<pp::v1::Job>> jobs = (*store)->LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].id(), "tiny-1");
  EXPECT_EQ((*jobs)[0].state(), pp::v1::RUNNING);
  EXPECT_EQ((*jobs)[0].spec().model().d_model(), 128);
  EXPECT_EQ((*jobs)[0].placement(0).worker(), "w0");
  EXPECT_EQ((*jobs)[1].id(), "other-2");
  EXPECT_EQ(*(*store)->ReserveSequence(), 3);  // 2 went to other-2's row
  absl::StatusOr<std::vector<pp::v1::JobStepRecord>> steps = (*store)->Steps("tiny-1");
  ASSERT_TRUE(steps.ok());
  ASSERT_EQ(steps->size(), 2u);
  EXPECT_EQ((*steps)[0].loss(), 5.0);
  EXPECT_EQ((*steps)[0].step_seconds(), 0.5);
  EXPECT_EQ((*steps)[1].bubble_ratio(), 0.25);
  EXPECT_TRUE((*store)->Steps("other-2")->empty());
}

// What an expired job leaves (coordinator/retention.h): neither its row nor its steps, for good;
// other jobs keep theirs, and deleting what is not there is no error.
TEST_F(StoreTest, DeleteRemovesTheRowAndItsStepsForGood) {
  {
    absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(db());
    ASSERT_TRUE(store.ok()) << store.status();
    pp::v1::Job job;
    job.set_state(pp::v1::SUCCEEDED);
    for (const char* name : {"kept", "old"}) {  // numbered as SubmitJob numbers them
      job.set_id(absl::StrCat(name, "-", *(*store)->ReserveSequence()));
      ASSERT_TRUE((*store)->Put(job).ok());
      ASSERT_TRUE((*store)->AddStep(job.id(), StepAt(1, 5.0)).ok());
    }
    ASSERT_TRUE((*store)->Delete("old-2").ok());
    EXPECT_TRUE((*store)->Delete("old-2").ok());
    EXPECT_TRUE((*store)->Delete("never-9").ok());
  }
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(db());
  ASSERT_TRUE(store.ok());
  absl::StatusOr<std::vector<pp::v1::Job>> jobs = (*store)->LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].id(), "kept-1");
  EXPECT_TRUE((*store)->Steps("old-2")->empty());
  EXPECT_EQ((*store)->Steps("kept-1")->size(), 1u);
  EXPECT_EQ(*(*store)->ReserveSequence(), 3);  // the deleted newest job's number is not reused
}

TEST_F(StoreTest, UnopenablePathIsAnErrorNamingIt) {
  absl::StatusOr<std::unique_ptr<JobStore>> store =
      JobStore::Open((dir_ / "missing" / "dir" / "x.db").string());
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(), HasSubstr("missing/dir/x.db"));
}

}  // namespace
}  // namespace pp::coordinator
