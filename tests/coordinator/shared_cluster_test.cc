// ppcoord in-process on a shared cluster (docs/jobs.md "Priorities, quotas and preemption"), with
// bearer tokens for owners and fake workers: per-owner quotas (max_workers holds a job back,
// max_queued_jobs refuses a submit), priority classes and who may use them (at submit and at
// resume), policy reloads, fair share (the order, and worker-seconds over 20 jobs of two owners)
// and the per-hour bound on a job's preemptions. Preemption (a borrowing job's too) and its grace:
// preemption_test.cc.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordinator/shared_cluster_fixture.h"
#include "tests/coordinator/test_support.h"

namespace pp::coordinator {
namespace {

using ::pp::coordinator::testing::FakeWorker;
using ::pp::coordinator::testing::kAdmin;
using ::pp::coordinator::testing::kAlice;
using ::pp::coordinator::testing::kBob;
using ::pp::coordinator::testing::SharedClusterServiceTest;
using ::pp::coordinator::testing::WaitUntil;
using ::testing::HasSubstr;

TEST_F(SharedClusterServiceTest, AnOwnerPastMaxWorkersWaitsWhileAnotherOwnersJobRuns) {
  Start("quota { owner: \"alice\" max_workers: 2 }\n", 4);
  std::string first, second, bobs;
  ASSERT_TRUE(SubmitAs(kAlice, Spec(2, ""), &first).ok());
  WaitRunning(first, 2);
  ASSERT_TRUE(SubmitAs(kAlice, Spec(2, ""), &second).ok());
  // Two workers are idle: only the quota holds it back.
  ASSERT_TRUE(WaitUntil([&] { return !Get(second).reason().empty(); }, absl::Seconds(5)));
  pp::v1::Job waiting = Get(second);
  EXPECT_EQ(waiting.state(), pp::v1::QUEUED);
  EXPECT_EQ(waiting.reason(), "owner alice uses 2 of 2 workers; the job needs 2");
  EXPECT_EQ(waiting.queue_position(), 1);
  EXPECT_EQ(IdleWorkers(), 2);
  EXPECT_EQ(waiting.priority(), 100);  // the default class, normal
  EXPECT_TRUE(MetricsHave("pp_queue_jobs{priority=\"normal\"} 1\n"));

  ASSERT_TRUE(SubmitAs(kBob, Spec(2, ""), &bobs).ok());
  WaitRunning(bobs, 2);
  EXPECT_EQ(Get(second).state(), pp::v1::QUEUED);
  EXPECT_TRUE(MetricsHave("pp_owner_workers_in_use{owner=\"alice\"} 2\n"));
  EXPECT_TRUE(MetricsHave("pp_owner_workers_in_use{owner=\"bob\"} 2\n"));

  for (FakeWorker* w : Holders(first)) w->FinishTask(true, "");
  ASSERT_TRUE(WaitForState(first, pp::v1::SUCCEEDED));
  WaitRunning(second, 2);
  EXPECT_EQ(Get(second).reason(), "");  // a first attempt: no reason once it runs
  EXPECT_TRUE(MetricsHave("pp_queue_jobs{priority=\"normal\"} 0\n"));
}

TEST_F(SharedClusterServiceTest, MaxQueuedJobsRefusesOneMoreSubmitNamingTheOwner) {
  Start(
      "quota { owner: \"alice\" max_queued_jobs: 2 }\nquota { owner: \"*\" max_queued_jobs: 1 }\n",
      0);
  std::string a1, a2;
  ASSERT_TRUE(SubmitAs(kAlice, Spec(2, ""), &a1).ok());
  ASSERT_TRUE(SubmitAs(kAlice, Spec(2, ""), &a2).ok());
  grpc::Status refused = SubmitAs(kAlice, Spec(2, ""));
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(), HasSubstr("owner alice has 2 of 2 queued jobs (its quota)"));
  // Bob falls under "*"; alice's queue does not count against him.
  ASSERT_TRUE(SubmitAs(kBob, Spec(2, "")).ok());
  refused = SubmitAs(kBob, Spec(2, ""));
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(), HasSubstr("owner bob has 1 of 1 queued jobs (its quota)"));
  // A job that leaves the queue makes room again.
  pp::v1::CancelJobRequest cancel;
  cancel.set_job_id(a1);
  pp::v1::Job cancelled;
  grpc::ClientContext context;
  As(context, kAlice);
  ASSERT_TRUE(client_->CancelJob(&context, cancel, &cancelled).ok());
  EXPECT_TRUE(SubmitAs(kAlice, Spec(2, "")).ok());
}

TEST_F(SharedClusterServiceTest, PriorityClassesAreCheckedAtSubmitAndKeepTheirValue) {
  Start(R"pb(
          priority_class { name: "low" value: 0 }
          priority_class { name: "normal" value: 100 }
          priority_class { name: "high" value: 200 allowed: "alice" }
          priority_class { name: "batch" value: 50 allowed: "admin" }
          default_class: "low"
        )pb",
        0);
  grpc::Status unknown = SubmitAs(kBob, Spec(2, "urgent"));
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(unknown.error_message(), HasSubstr("urgent"));
  EXPECT_THAT(unknown.error_message(), HasSubstr("low, normal, high, batch"));
  for (const char* denied : {"high", "batch"}) {
    grpc::Status status = SubmitAs(kBob, Spec(2, denied));
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << denied;
    EXPECT_THAT(status.error_message(), HasSubstr("bob")) << denied;
  }
  struct Allowed {
    const char* token;
    const char* priority;
    int value;
  };
  for (const Allowed& a :
       {Allowed{kAlice, "high", 200}, Allowed{kBob, "", 0}, Allowed{kBob, "normal", 100},
        Allowed{kAdmin, "batch", 50}, Allowed{kAdmin, "high", 200}}) {
    std::string id;
    grpc::Status status = SubmitAs(a.token, Spec(2, a.priority), &id);
    ASSERT_TRUE(status.ok()) << a.token << " " << a.priority << ": " << status.error_message();
    EXPECT_EQ(Get(id).priority(), a.value) << a.token << " " << a.priority;
  }
  // preemptible: false is for admins.
  pp::v1::JobSpec protect = Spec(2, "normal");
  protect.set_preemptible(false);
  grpc::Status status = SubmitAs(kAlice, protect);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(status.error_message(), HasSubstr("preemptible"));
  EXPECT_TRUE(SubmitAs(kAdmin, protect).ok());
}

// SIGHUP's path in-process: a bad file changes nothing; a good one applies at once.
TEST_F(SharedClusterServiceTest, AReloadedPolicyPlacesWhatItLetsAndABadOneIsRefused) {
  Start("quota { owner: \"alice\" max_workers: 2 }\n", 4);
  std::string first, second;
  ASSERT_TRUE(SubmitAs(kAlice, Spec(2, ""), &first).ok());
  WaitRunning(first, 2);
  ASSERT_TRUE(SubmitAs(kAlice, Spec(2, ""), &second).ok());
  ASSERT_TRUE(WaitUntil([&] { return !Get(second).reason().empty(); }, absl::Seconds(5)));
  const std::string file = (dir_ / "policy.txt").string();
  std::ofstream(file) << "\nquota { owner: \"alice\" max_workers: -1 }\n";
  const absl::StatusOr<std::string> bad = server_->ReloadPolicy();
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr(absl::StrCat("--policy=", file, ":2: ")));
  EXPECT_EQ(Get(second).reason(), "owner alice uses 2 of 2 workers; the job needs 2");
  std::ofstream(file) << "quota { owner: \"alice\" max_workers: 4 }\n";
  const absl::StatusOr<std::string> good = server_->ReloadPolicy();
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(*good, absl::StrCat("scheduling policy reloaded from ", file));
  WaitRunning(second, 2);
}

// policy.proto: a class's `allowed` says who may submit "(or resume)" a job at it, and job.proto:
// Job.priority is "set at submit and resume", from the policy in force then.
TEST_F(SharedClusterServiceTest, AResumeIsCheckedAgainstThePolicyInForce) {
  Start(
      "priority_class { name: \"normal\" value: 100 }\npriority_class { name: \"high\" value: 200 "
      "}\n",
      2);
  std::string id;
  ASSERT_TRUE(SubmitAs(kAlice, Spec(2, "high"), &id).ok());
  WaitRunning(id, 2);
  Checkpoint(id, 1, 2);
  pp::v1::Job job;
  {
    pp::v1::CancelJobRequest cancel;
    cancel.set_job_id(id);
    grpc::ClientContext context;
    As(context, kAlice);
    ASSERT_TRUE(client_->CancelJob(&context, cancel, &job).ok());
  }
  std::ofstream(dir_ / "policy.txt")
      << "priority_class { name: \"normal\" value: 100 }\n"
         "priority_class { name: \"high\" value: 300 allowed: \"admin\" }\n";
  ASSERT_TRUE(server_->ReloadPolicy().ok());
  pp::v1::ResumeJobRequest resume;
  resume.set_job_id(id);
  grpc::Status by_alice;
  {
    grpc::ClientContext context;
    As(context, kAlice);
    by_alice = client_->ResumeJob(&context, resume, &job);
    EXPECT_EQ(by_alice.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }
  if (!by_alice.ok()) {  // an admin may use every class
    grpc::ClientContext context;
    As(context, kAdmin);
    ASSERT_TRUE(client_->ResumeJob(&context, resume, &job).ok());
  }
  EXPECT_EQ(Get(id).priority(), 300);
}

// Fair share: at equal priority the owner who used fewer worker-seconds goes first, although
// the other owner's job waits longer. Alice's finished job counts as her usage.
TEST_F(SharedClusterServiceTest, AtEqualPriorityTheOwnerWhoUsedLessGoesFirst) {
  Start("", 2);
  std::string used, alices, bobs;
  ASSERT_TRUE(SubmitAs(kAlice, Spec(2, ""), &used).ok());
  WaitRunning(used, 2);
  ASSERT_TRUE(SubmitAs(kAlice, Spec(2, ""), &alices).ok());
  ASSERT_TRUE(SubmitAs(kBob, Spec(2, ""), &bobs).ok());
  // Bob's job is the newer one: only the usage puts it first.
  EXPECT_EQ(Get(bobs).queue_position(), 1);
  EXPECT_EQ(Get(alices).queue_position(), 2);
  for (FakeWorker* w : Holders(used)) w->FinishTask(true, "");
  ASSERT_TRUE(WaitForState(used, pp::v1::SUCCEEDED));
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Get(bobs).state() == pp::v1::RUNNING || Get(alices).state() == pp::v1::RUNNING;
      },
      absl::Seconds(10)));
  EXPECT_EQ(Get(bobs).state(), pp::v1::RUNNING);
  EXPECT_EQ(Get(alices).state(), pp::v1::QUEUED);
}

// One attempt of a job as ppcoord counted it: [end - worker_seconds, end], unix seconds.
struct Span {
  double start, end;
};

class SharedClusterFairShareTest : public SharedClusterServiceTest {
 protected:
  // The fake workers until `jobs` tasks ended: a task ends `work` after its placement
  // (Job.updated_unix of a RUNNING job that reported nothing). Sleeping until then is the jobs'
  // work, not a wait for ppcoord.
  void RunEveryTaskFor(absl::Duration work, size_t jobs) {
    std::map<std::string, absl::Time> due;  // job -> when its worker ends it
    std::set<std::string> finished;
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (finished.size() < jobs && absl::Now() < deadline) {
      absl::Time wake = absl::Now() + absl::Milliseconds(5);  // to see the next placement
      for (auto& w : workers_) {
        const std::string job = w->job();
        if (job.empty() || finished.count(job) > 0) continue;
        auto it = due.find(job);
        if (it == due.end()) {
          const pp::v1::Job placed = Get(job);
          ASSERT_EQ(placed.state(), pp::v1::RUNNING) << job;
          const absl::Time placed_at =
              absl::FromUnixNanos(static_cast<int64_t>(placed.updated_unix() * 1e9));
          it = due.emplace(job, placed_at + work).first;
        }
        if (absl::Now() >= it->second) {
          w->FinishTask(true, "");
          finished.insert(job);
        } else {
          wake = std::min(wake, it->second);
        }
      }
      absl::SleepFor(wake - absl::Now());
    }
    ASSERT_EQ(finished.size(), jobs) << "the jobs did not all run within 60 s";
  }

  // Each owner's jobs' spans, sorted by start; every job succeeded after at least `work`.
  std::map<std::string, std::vector<Span>> Spans(
      const std::map<std::string, std::vector<std::string>>& ids, absl::Duration work) {
    std::map<std::string, std::vector<Span>> spans;
    for (const auto& [owner, owned] : ids) {
      for (const std::string& id : owned) {
        EXPECT_TRUE(WaitForState(id, pp::v1::SUCCEEDED)) << id;
        const pp::v1::Job job = Get(id);
        EXPECT_EQ(job.owner(), owner);
        EXPECT_GE(job.worker_seconds(), absl::ToDoubleSeconds(work) - 1e-3) << id;
        spans[owner].push_back({job.updated_unix() - job.worker_seconds(), job.updated_unix()});
      }
      std::sort(spans[owner].begin(), spans[owner].end(),
                [](const Span& a, const Span& b) { return a.start < b.start; });
    }
    return spans;
  }
};

// Fair share over many jobs: alice submits ten one-worker jobs, then bob ten, on two workers;
// each fake worker ends its task a fixed kWork after ppcoord placed it. Fair share weighs
// Job.worker_seconds, wall-clock placement to end: every job here holds its worker kWork and a
// little more (the fake's latency). While both owners have jobs waiting (from bob's first submit
// until the first owner's last job starts), they get equal worker-seconds within 10%, and bob's
// jobs start long before alice's are done.
TEST_F(SharedClusterFairShareTest, TwoOwnersOfTenJobsEachGetEqualWorkerSecondsWhileBothWait) {
  constexpr int kJobs = 10;
  constexpr absl::Duration kWork = absl::Milliseconds(400);
  Start("", 2);
  std::map<std::string, std::vector<std::string>> ids;  // owner -> ids, in submission order
  for (const auto& [token, owner] : {std::pair{kAlice, "alice"}, std::pair{kBob, "bob"}}) {
    for (int i = 0; i < kJobs; ++i) {
      std::string id;
      ASSERT_TRUE(SubmitAs(token, Spec(1, ""), &id).ok());
      ids[owner].push_back(id);
    }
  }
  RunEveryTaskFor(kWork, 2 * kJobs);
  if (HasFatalFailure()) return;
  std::map<std::string, std::vector<Span>> spans = Spans(ids, kWork);
  // The window in which both owners had jobs waiting: from bob's first submit (alice's first two
  // run, her other eight wait) until the first owner's last job starts.
  const double t0 = Get(ids["bob"].front()).created_unix();
  const double t1 = std::min(spans["alice"].back().start, spans["bob"].back().start);
  ASSERT_GT(t1 - t0, 3 * absl::ToDoubleSeconds(kWork));
  std::map<std::string, double> used;  // owner -> worker-seconds within [t0, t1]
  for (const auto& [owner, owned] : spans) {
    for (const Span& s : owned) {
      used[owner] += std::max(0.0, std::min(s.end, t1) - std::max(s.start, t0));
    }
  }
  const double alice = used["alice"], bob = used["bob"];
  std::cout << "fair share over " << (t1 - t0) << " s: alice " << alice << " bob " << bob
            << " worker-seconds\n";
  EXPECT_LE(std::abs(alice - bob), 0.1 * std::max(alice, bob))
      << "alice " << alice << " bob " << bob;
  // Interleaved: only alice's first two jobs (on the idle workers) start before bob's first, and
  // when the first owner's last job starts the other has at most two left to start.
  EXPECT_LT(spans["bob"].front().start, spans["alice"][2].start);
  for (const auto& [owner, owned] : spans) {
    const auto later =
        std::count_if(owned.begin(), owned.end(), [t1](const Span& s) { return s.start > t1; });
    EXPECT_LE(later, 2) << owner << "'s jobs still to start when the other owner's last started";
  }
}

// The per-hour bound (Preemption.max_per_hour), from L1ResumedAfterAPreemptionBesideL2
// (shared_cluster_fixture.h): L1, preempted once already and now the cheaper victim, is spared
// at max_per_hour 1; L2 is preempted instead, and then a high job with no other victim waits.
TEST_F(SharedClusterServiceTest, AJobPreemptedMaxPerHourTimesIsSparedAndAnotherVictimChosen) {
  Start("preemption { max_per_hour: 1 }\n", 4);
  std::string l1, l2;
  std::tie(l1, l2) = L1ResumedAfterAPreemptionBesideL2();
  ASSERT_FALSE(HasFatalFailure());
  std::string high;
  ASSERT_TRUE(SubmitAs(kBob, Spec(2, "high"), &high).ok());
  ASSERT_TRUE(WaitUntil([&] { return Get(l2).preemptions() == 1; }, absl::Seconds(5)));
  EXPECT_THAT(Get(high).reason(), HasSubstr("2 workers being freed by preemption"));
  EXPECT_EQ(Get(l1).preemptions(), 1);
  EXPECT_EQ(ReportStep(l1, 0, 3, 2).stop_after_step(), 0);  // L1 is not asked to stop
  ExpectToldToStopAfter(l2, 2, 2);
  ASSERT_NO_FATAL_FAILURE(DrainVictim(l2, 2, 2));
  WaitRunning(high, 2);

  // A second high job: the only lower-class job running is L1, at its bound: nothing is
  // preempted and the job waits (the reason does not say why L1 was spared).
  std::string waiting;
  ASSERT_TRUE(SubmitAs(kBob, Spec(2, "high"), &waiting).ok());
  ASSERT_TRUE(WaitUntil([&] { return !Get(waiting).reason().empty(); }, absl::Seconds(5)));
  EXPECT_EQ(Get(waiting).reason(), "needs 2 workers, 4 registered, 0 idle");
  EXPECT_EQ(Get(waiting).state(), pp::v1::QUEUED);
  EXPECT_EQ(Get(l1).preemptions(), 1);
  EXPECT_EQ(Get(l1).state(), pp::v1::RUNNING);
  EXPECT_EQ(ReportStep(l1, 1, 3, 2).stop_after_step(), 0);
  EXPECT_TRUE(MetricsHave("\npp_preemptions_total 2\n"));
  // L1 ends on its own: the high job takes its workers, ahead of the requeued L2.
  for (FakeWorker* w : Holders(l1)) w->FinishTask(true, "");
  ASSERT_TRUE(WaitForState(l1, pp::v1::SUCCEEDED));
  WaitRunning(waiting, 2);
  EXPECT_EQ(Get(l2).state(), pp::v1::QUEUED);
}

// The control of the test above: with a bound of 2, L1's one preemption does not spare it, and
// as the cheaper victim it is preempted again while L2 runs on.
TEST_F(SharedClusterServiceTest, BelowTheBoundTheCheaperVictimIsPreemptedAgain) {
  Start("preemption { max_per_hour: 2 }\n", 4);
  std::string l1, l2;
  std::tie(l1, l2) = L1ResumedAfterAPreemptionBesideL2();
  ASSERT_FALSE(HasFatalFailure());
  std::string high;
  ASSERT_TRUE(SubmitAs(kBob, Spec(2, "high"), &high).ok());
  ASSERT_TRUE(WaitUntil([&] { return Get(l1).preemptions() == 2; }, absl::Seconds(5)));
  EXPECT_EQ(Get(l2).preemptions(), 0);
  EXPECT_EQ(ReportStep(l2, 0, 2, 2).stop_after_step(), 0);
  const pp::v1::Job preempted = Get(l1);
  EXPECT_EQ(preempted.preempted_unix_size(), 2);
}

}  // namespace
}  // namespace pp::coordinator
