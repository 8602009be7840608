// ppcoord in-process on a shared cluster (docs/jobs.md "Priorities, quotas and preemption"), with
// bearer tokens for owners and fake workers: per-owner quotas (max_workers holds a job back,
// max_queued_jobs refuses a submit), priority classes and who may use them (at submit and at
// resume), policy reloads and fair share. Preemption (a borrowing job's too) and its grace:
// preemption_test.cc.
#include <fstream>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
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

}  // namespace
}  // namespace pp::coordinator
