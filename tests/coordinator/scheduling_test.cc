// The scheduling decisions of a shared cluster (coordinator/scheduling.h): aging, fair share,
// quotas, preemption victims and start estimates, and a small fair-share simulation.
#include "coordinator/scheduling.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pp::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

constexpr double kNow = 1'000'000;

SchedJob Queued(const std::string& id, const std::string& owner, int64_t order, int priority,
                int workers) {
  SchedJob job;
  job.id = id;
  job.owner = owner;
  job.order = order;
  job.priority = priority;
  job.state = pp::v1::QUEUED;
  job.workers = workers;
  job.queued_unix = kNow;
  return job;
}

SchedJob Running(const std::string& id, const std::string& owner, int64_t order, int priority,
                 int workers) {
  SchedJob job = Queued(id, owner, order, priority, workers);
  job.state = pp::v1::RUNNING;
  job.started_unix = kNow - 100;
  return job;
}

pp::v1::Aging Aging(double every_seconds, int step, int max_boost) {
  pp::v1::Aging aging;
  aging.set_every_seconds(every_seconds);
  aging.set_step(step);
  aging.set_max_boost(max_boost);
  return aging;
}

pp::v1::Preemption Preemption(int max_per_hour) {
  pp::v1::Preemption preemption;
  preemption.set_max_per_hour(max_per_hour);
  return preemption;
}

// ---- EffectivePriority ----

TEST(EffectivePriority, RisesByStepForEachWholePeriodUpToTheCap) {
  const SchedJob job = Queued("j", "alice", 1, 100, 1);
  const pp::v1::Aging aging = Aging(60, 5, 12);
  EXPECT_EQ(EffectivePriority(job, aging, kNow), 100);
  EXPECT_EQ(EffectivePriority(job, aging, kNow + 59), 100);
  EXPECT_EQ(EffectivePriority(job, aging, kNow + 60), 105);
  EXPECT_EQ(EffectivePriority(job, aging, kNow + 119), 105);
  EXPECT_EQ(EffectivePriority(job, aging, kNow + 120), 110);
  EXPECT_EQ(EffectivePriority(job, aging, kNow + 180), 112);  // 115 capped at +12
  EXPECT_EQ(EffectivePriority(job, aging, kNow + 1e12), 112);
  EXPECT_EQ(EffectivePriority(job, aging, kNow - 600), 100);  // queued in the future: no boost
}

TEST(EffectivePriority, NoBoostForARunningJobOrWithoutAging) {
  SchedJob running = Running("r", "alice", 1, 100, 1);
  running.queued_unix = kNow - 10'000;
  EXPECT_EQ(EffectivePriority(running, Aging(60, 5, 100), kNow), 100);

  SchedJob queued = Queued("q", "alice", 2, 100, 1);
  queued.queued_unix = kNow - 10'000;
  EXPECT_EQ(EffectivePriority(queued, pp::v1::Aging(), kNow), 100);
  EXPECT_EQ(EffectivePriority(queued, Aging(0, 5, 100), kNow), 100);
  EXPECT_EQ(EffectivePriority(queued, Aging(60, 5, 100), kNow), 200);
}

// ---- OwnerUsage, OwnerWorkers ----

TEST(OwnerUsage, AddsEndedAttemptsAndTheRunningJobsTimeSoFar) {
  SchedJob a1 = Running("a1", "alice", 1, 0, 2);
  a1.started_unix = kNow - 10;
  a1.worker_seconds = 5;
  SchedJob a2 = Queued("a2", "alice", 2, 0, 4);
  a2.worker_seconds = 7;
  SchedJob a3 = Running("a3", "alice", 3, 0, 3);
  a3.started_unix = kNow;
  SchedJob c1 = Queued("c1", "carol", 4, 0, 1);
  c1.state = pp::v1::SUCCEEDED;  // an ended job's attempts still count
  c1.worker_seconds = 40;
  const std::vector<SchedJob> jobs = {a1, a2, a3, Queued("b1", "bob", 5, 0, 8), c1};

  EXPECT_THAT(OwnerUsage(jobs, kNow), UnorderedElementsAre(Pair("alice", 2 * 10 + 5 + 7),
                                                           Pair("bob", 0), Pair("carol", 40)));
  EXPECT_THAT(OwnerUsage(jobs, kNow + 1), UnorderedElementsAre(Pair("alice", 2 * 11 + 5 + 7 + 3),
                                                               Pair("bob", 0), Pair("carol", 40)));
  // Only RUNNING jobs hold workers.
  EXPECT_THAT(OwnerWorkers(jobs), UnorderedElementsAre(Pair("alice", 5)));
}

// ---- OrderQueued ----

TEST(OrderQueued, HigherPriorityFirstWhateverTheUsageAndAge) {
  SchedJob busy = Running("busy", "alice", 1, 0, 4);  // alice has used 400 worker-seconds
  const std::vector<SchedJob> jobs = {busy, Queued("old-low", "bob", 2, 50, 1),
                                      Queued("new-high", "alice", 3, 100, 1)};
  EXPECT_THAT(OrderQueued(jobs, pp::v1::Aging(), kNow), ElementsAre("new-high", "old-low"));
}

TEST(OrderQueued, AtEqualPriorityTheLeastUsedOwnerFirst) {
  const std::vector<SchedJob> jobs = {Running("busy", "alice", 1, 0, 4),
                                      Queued("alice-old", "alice", 2, 100, 1),
                                      Queued("bob-new", "bob", 3, 100, 1)};
  EXPECT_THAT(OrderQueued(jobs, pp::v1::Aging(), kNow), ElementsAre("bob-new", "alice-old"));
}

TEST(OrderQueued, AtEqualPriorityAndUsageTheOldestFirst) {
  const std::vector<SchedJob> jobs = {Queued("c", "alice", 30, 100, 1),
                                      Queued("a", "bob", 10, 100, 1),
                                      Queued("b", "alice", 20, 100, 1)};
  EXPECT_THAT(OrderQueued(jobs, pp::v1::Aging(), kNow), ElementsAre("a", "b", "c"));
}

TEST(OrderQueued, AgingLiftsALongWaitingJob) {
  SchedJob waited = Queued("waited", "alice", 1, 50, 1);
  waited.queued_unix = kNow - 600;  // +5 for each of 10 minutes: 100, above "high" at 90
  const std::vector<SchedJob> jobs = {Queued("high", "bob", 2, 90, 1), waited};
  EXPECT_THAT(OrderQueued(jobs, pp::v1::Aging(), kNow), ElementsAre("high", "waited"));
  EXPECT_THAT(OrderQueued(jobs, Aging(60, 5, 100), kNow), ElementsAre("waited", "high"));
  EXPECT_THAT(OrderQueued(jobs, Aging(60, 5, 30), kNow), ElementsAre("high", "waited"));
}

// ---- CheckQuota ----

TEST(CheckQuota, NoQuotaOrNoLimitIsAlwaysWithin) {
  const SchedJob job = Queued("j", "bob", 1, 0, 100);
  EXPECT_TRUE(CheckQuota(job, 1000, nullptr).within);
  pp::v1::Quota unlimited;
  unlimited.set_owner("bob");
  const QuotaVerdict verdict = CheckQuota(job, 1000, &unlimited);
  EXPECT_TRUE(verdict.within);
  EXPECT_FALSE(verdict.may_borrow);
  EXPECT_EQ(verdict.reason, "");
}

TEST(CheckQuota, WithinUpToMaxWorkersThenOverWithTheReason) {
  pp::v1::Quota quota;
  quota.set_owner("bob");
  quota.set_max_workers(6);
  const SchedJob job = Queued("j", "bob", 1, 0, 2);
  EXPECT_TRUE(CheckQuota(job, 4, &quota).within);  // exactly 6

  const QuotaVerdict over = CheckQuota(job, 6, &quota);
  EXPECT_FALSE(over.within);
  EXPECT_FALSE(over.may_borrow);
  EXPECT_EQ(over.reason, "owner bob uses 6 of 6 workers; the job needs 2");

  quota.set_borrow(true);
  const QuotaVerdict borrow = CheckQuota(job, 5, &quota);
  EXPECT_FALSE(borrow.within);
  EXPECT_TRUE(borrow.may_borrow);
  EXPECT_EQ(borrow.reason, "owner bob uses 5 of 6 workers; the job needs 2");
}

// ---- ChooseVictims ----

TEST(ChooseVictims, TakesLowerPrioritiesOnlyAndJustEnoughOfThem) {
  const SchedJob waiting = Queued("w", "alice", 10, 200, 4);
  const std::vector<SchedJob> jobs = {
      Running("low", "bob", 1, 0, 2), Running("mid", "bob", 2, 100, 2),
      Running("equal", "bob", 3, 200, 4), Running("higher", "bob", 4, 300, 4), waiting};
  const pp::v1::Preemption preemption = Preemption(4);
  EXPECT_THAT(ChooseVictims(waiting, true, 1, jobs, preemption, kNow), ElementsAre("low"));
  EXPECT_THAT(ChooseVictims(waiting, true, 2, jobs, preemption, kNow), ElementsAre("low"));
  EXPECT_THAT(ChooseVictims(waiting, true, 3, jobs, preemption, kNow), ElementsAre("low", "mid"));
  EXPECT_THAT(ChooseVictims(waiting, true, 4, jobs, preemption, kNow), ElementsAre("low", "mid"));
  // "equal" and "higher" cannot be taken, and the two others are not enough: none is stopped.
  EXPECT_THAT(ChooseVictims(waiting, true, 5, jobs, preemption, kNow), IsEmpty());
}

TEST(ChooseVictims, NothingWhenNothingIsMissingOrPreemptionIsDisabled) {
  const SchedJob waiting = Queued("w", "alice", 10, 200, 4);
  const std::vector<SchedJob> jobs = {Running("low", "bob", 1, 0, 8)};
  EXPECT_THAT(ChooseVictims(waiting, true, 0, jobs, Preemption(4), kNow), IsEmpty());
  EXPECT_THAT(ChooseVictims(waiting, true, -3, jobs, Preemption(4), kNow), IsEmpty());
  pp::v1::Preemption disabled = Preemption(4);
  disabled.set_disabled(true);
  EXPECT_THAT(ChooseVictims(waiting, true, 2, jobs, disabled, kNow), IsEmpty());
  EXPECT_THAT(ChooseVictims(waiting, true, 2, jobs, Preemption(4), kNow), ElementsAre("low"));
}

TEST(ChooseVictims, LowestPriorityThenLeastWorkLostThenYoungestThenNewest) {
  SchedJob lost10 = Running("lost10", "bob", 1, 0, 1);  // 10 steps since its checkpoint x 1 s
  lost10.step = 30;
  lost10.last_checkpoint_step = 20;
  lost10.step_seconds = 1;
  SchedJob lost2_old = Running("lost2-old", "bob", 2, 0, 1);  // 4 steps x 0.5 s
  lost2_old.step = 24;
  lost2_old.last_checkpoint_step = 20;
  lost2_old.step_seconds = 0.5;
  SchedJob lost2_young = lost2_old;
  lost2_young.id = "lost2-young";
  lost2_young.order = 3;
  lost2_young.started_unix = lost2_old.started_unix + 50;
  SchedJob lost2_newer = lost2_old;  // same start as lost2-old, submitted after it
  lost2_newer.id = "lost2-newer";
  lost2_newer.order = 4;
  SchedJob mid = Running("mid", "bob", 5, 50, 1);  // nothing to lose, but a higher class
  const std::vector<SchedJob> jobs = {mid, lost10, lost2_old, lost2_newer, lost2_young};

  const SchedJob waiting = Queued("w", "alice", 10, 100, 5);
  EXPECT_THAT(ChooseVictims(waiting, true, 5, jobs, Preemption(4), kNow),
              ElementsAre("lost2-young", "lost2-newer", "lost2-old", "lost10", "mid"));
  EXPECT_THAT(ChooseVictims(waiting, true, 2, jobs, Preemption(4), kNow),
              ElementsAre("lost2-young", "lost2-newer"));
}

TEST(ChooseVictims, BorrowingJobsOnlyForAJobWithinItsQuota) {
  SchedJob borrower = Running("borrower", "bob", 1, 300, 2);  // a higher class, but borrowing
  borrower.borrowing = true;
  const std::vector<SchedJob> jobs = {borrower, Running("peer", "bob", 2, 100, 2)};
  const SchedJob waiting = Queued("w", "alice", 10, 100, 2);
  EXPECT_THAT(ChooseVictims(waiting, true, 2, jobs, Preemption(4), kNow), ElementsAre("borrower"));
  EXPECT_THAT(ChooseVictims(waiting, false, 2, jobs, Preemption(4), kNow), IsEmpty());
}

TEST(ChooseVictims, SkipsProtectedStoppingAndOftenPreemptedJobs) {
  SchedJob protected_job = Running("protected", "bob", 1, 0, 4);
  protected_job.preemptible = false;
  SchedJob stopping = Running("stopping", "bob", 2, 0, 4);
  stopping.stopping = true;
  SchedJob often = Running("often", "bob", 3, 0, 4);  // 4 in the hour: the boundary counts
  often.preempted_unix = {kNow - 3600, kNow - 100, kNow - 50, kNow - 10};
  SchedJob earlier = Running("earlier", "bob", 4, 0, 4);  // the first was more than an hour ago
  earlier.preempted_unix = {kNow - 3601, kNow - 100, kNow - 50, kNow - 10};
  const std::vector<SchedJob> jobs = {protected_job, stopping, often, earlier};

  const SchedJob waiting = Queued("w", "alice", 10, 100, 4);
  EXPECT_THAT(ChooseVictims(waiting, true, 4, jobs, Preemption(4), kNow), ElementsAre("earlier"));
  EXPECT_THAT(ChooseVictims(waiting, true, 4, jobs, Preemption(0), kNow), ElementsAre("earlier"))
      << "max_per_hour 0 means 4";
  EXPECT_THAT(ChooseVictims(waiting, true, 4, jobs, Preemption(3), kNow), IsEmpty());
  EXPECT_THAT(ChooseVictims(waiting, true, 8, jobs, Preemption(4), kNow), IsEmpty());
  // Equal in all but submission: the newer first.
  EXPECT_THAT(ChooseVictims(waiting, true, 8, jobs, Preemption(5), kNow),
              ElementsAre("earlier", "often"));
}

TEST(ChooseVictims, NotAJobInItsLastStep) {
  SchedJob ending = Running("ending", "bob", 1, 0, 4);
  ending.total_steps = 10;
  ending.step = 9;  // step 10 runs now: it frees its workers as soon as a drain would
  const SchedJob waiting = Queued("w", "alice", 10, 100, 4);
  EXPECT_THAT(ChooseVictims(waiting, true, 4, {ending}, Preemption(4), kNow), IsEmpty());
  ending.step = 8;
  EXPECT_THAT(ChooseVictims(waiting, true, 4, {ending}, Preemption(4), kNow),
              ElementsAre("ending"));
}

TEST(ChooseVictims, AnAgedJobPreemptsWithItsClassValueOnly) {
  SchedJob waiting = Queued("w", "alice", 10, 100, 2);
  waiting.queued_unix = kNow - 3600;
  ASSERT_EQ(EffectivePriority(waiting, Aging(60, 5, 100), kNow), 200);
  const std::vector<SchedJob> jobs = {Running("preemptor", "bob", 1, 150, 2)};
  EXPECT_THAT(ChooseVictims(waiting, true, 2, jobs, Preemption(4), kNow), IsEmpty());
  const std::vector<SchedJob> lower = {Running("lower", "bob", 1, 99, 2)};
  EXPECT_THAT(ChooseVictims(waiting, true, 2, lower, Preemption(4), kNow), ElementsAre("lower"));
}

// ---- EstimateStarts ----

SchedJob Remaining(const std::string& id, int workers, int steps_left, double step_seconds) {
  SchedJob job = Running(id, "bob", 0, 0, workers);
  job.total_steps = 100;
  job.step = 100 - steps_left;
  job.step_seconds = step_seconds;
  return job;
}

TEST(EstimateStarts, ReplaysTheRunningJobsEndsInQueueOrder) {
  const std::vector<SchedJob> jobs = {
      Remaining("r20", 2, 10, 2.0),  // frees 2 workers in 20 s
      Remaining("r50", 3, 50, 1.0),  // frees 3 in 50 s
      Remaining("unmeasured", 4, 50, 0), Queued("big", "alice", 1, 0, 3),
      Queued("small", "alice", 2, 0, 1), Queued("pair", "alice", 3, 0, 2),
      Queued("huge", "alice", 4, 0, 4),  Queued("late", "alice", 5, 0, 1)};
  const std::map<std::string, double> starts =
      EstimateStarts({"big", "small", "pair", "huge", "late", "r20", "nowhere"}, jobs, 1);
  // small fits the idle worker now; pair takes r20's at 20 s; big r50's at 50 s; huge and late
  // would need the workers of "unmeasured", whose end is unknown.
  EXPECT_THAT(starts, UnorderedElementsAre(Pair("small", 0), Pair("pair", 20), Pair("big", 50)));
}

TEST(EstimateStarts, JobsThatFitNowGetZero) {
  const std::vector<SchedJob> jobs = {Queued("a", "alice", 1, 0, 1), Queued("b", "bob", 2, 0, 2),
                                      Queued("c", "bob", 3, 0, 1)};
  EXPECT_THAT(EstimateStarts({"a", "b", "c"}, jobs, 3),
              UnorderedElementsAre(Pair("a", 0), Pair("b", 0)));
}

TEST(EstimateStarts, UnknownWhileTheNeededRunningJobHasNoStepTime) {
  std::vector<SchedJob> jobs = {Remaining("r", 2, 6, 0), Queued("q", "alice", 1, 0, 1)};
  EXPECT_THAT(EstimateStarts({"q"}, jobs, 0), IsEmpty());
  jobs[0].step_seconds = 1.5;
  EXPECT_THAT(EstimateStarts({"q"}, jobs, 0), UnorderedElementsAre(Pair("q", 9)));
}

// ---- Fair share, simulated ----

constexpr double kRunSeconds = 10;

// The team of a simulated job: the first letter of its id, whatever owner it runs under.
std::string Team(const SchedJob& job) { return job.id.substr(0, 1); }

bool AllStarted(const std::vector<SchedJob>& jobs, const std::string& team) {
  return std::none_of(jobs.begin(), jobs.end(), [&](const SchedJob& job) {
    return Team(job) == team && job.state == pp::v1::QUEUED;
  });
}

// Ten 1-worker jobs of team "a" (submitted first) and ten of team "b", all at t=0, under the
// owners given; each runs kRunSeconds.
std::vector<SchedJob> TwoTeams(const std::string& owner_a, const std::string& owner_b) {
  std::vector<SchedJob> jobs;
  for (const auto& [team, owner] : {std::pair{"a", owner_a}, std::pair{"b", owner_b}}) {
    for (int i = 0; i < 10; ++i) {
      SchedJob job = Queued(std::string(team) + std::to_string(i), owner, jobs.size(), 100, 1);
      job.queued_unix = 0;
      jobs.push_back(job);
    }
  }
  return jobs;
}

// Ends the jobs due at `now`, then starts the first of OrderQueued on each free worker, until a
// team has all its jobs started. Returns when that happened; `jobs` are left as they were then.
double RunUntilATeamStarted(std::vector<SchedJob>& jobs, int workers) {
  double now = 0;
  for (int round = 0; round < 100; ++round) {
    int busy = 0;
    for (SchedJob& job : jobs) {
      if (job.state == pp::v1::RUNNING && job.started_unix + kRunSeconds <= now) {
        job.state = pp::v1::SUCCEEDED;
        job.worker_seconds += job.workers * kRunSeconds;
      }
      if (job.state == pp::v1::RUNNING) busy += job.workers;
    }
    for (; busy < workers; ++busy) {
      const std::vector<std::string> order = OrderQueued(jobs, pp::v1::Aging(), now);
      if (order.empty()) break;
      auto it = std::find_if(jobs.begin(), jobs.end(),
                             [&](const SchedJob& job) { return job.id == order.front(); });
      it->state = pp::v1::RUNNING;
      it->started_unix = now;
      if (AllStarted(jobs, "a") || AllStarted(jobs, "b")) return now;
    }
    now += kRunSeconds;  // every job runs as long, so the next ends are all at this time
  }
  ADD_FAILURE() << "no team got all its jobs started";
  return now;
}

// Each team's worker-seconds at `now`, by OwnerUsage with the team as owner.
std::map<std::string, double> TeamUsage(std::vector<SchedJob> jobs, double now) {
  for (SchedJob& job : jobs) job.owner = Team(job);
  return OwnerUsage(jobs, now);
}

TEST(FairShare, TwoOwnersShareTheClusterEvenThoughOneSubmittedFirst) {
  std::vector<SchedJob> jobs = TwoTeams("A", "B");
  const double done = RunUntilATeamStarted(jobs, 2);
  EXPECT_EQ(done, 80);  // the teams take turns: a at 0, 20, ..., 80; b at 10, 30, ..., 70
  std::map<std::string, double> usage = TeamUsage(jobs, done);
  ASSERT_GT(usage["a"], 0);
  ASSERT_GT(usage["b"], 0);
  EXPECT_LE(std::abs(usage["a"] - usage["b"]), 0.1 * std::max(usage["a"], usage["b"]))
      << "a used " << usage["a"] << ", b used " << usage["b"] << " by t=" << done;
}

TEST(FairShare, WithoutItTheOlderJobsWouldAllStartFirst) {
  std::vector<SchedJob> jobs = TwoTeams("shared", "shared");  // one owner: age order alone
  const double done = RunUntilATeamStarted(jobs, 2);
  EXPECT_EQ(done, 40);
  EXPECT_TRUE(AllStarted(jobs, "a"));
  EXPECT_TRUE(std::all_of(
      jobs.begin(), jobs.end(),
      [](const SchedJob& job) { return Team(job) != "b" || job.state == pp::v1::QUEUED; }))
      << "b started a job by t=" << done;
  std::map<std::string, double> usage = TeamUsage(jobs, done);
  EXPECT_EQ(usage["b"], 0);
  EXPECT_GT(std::abs(usage["a"] - usage["b"]), 0.1 * std::max(usage["a"], usage["b"]));
}

}  // namespace
}  // namespace pp::coordinator
