// The fixture of the shared-cluster tests of ppcoord in-process (shared_cluster_test.cc: quotas,
// priority classes, policy reloads, resume, fair share; preemption_test.cc: preemption and its
// grace): ppcoord with bearer tokens for an admin and two owners, its --policy file of the test's
// choosing, fake workers, and the steps the tests share (a running low-priority job, a watch for
// EVENT_PREEMPTED, a victim that drains at its stop step, a job preempted once and resumed beside
// another for the per-hour bound). Header-only; test code only.
#ifndef PP_TESTS_COORDINATOR_SHARED_CLUSTER_FIXTURE_H_
#define PP_TESTS_COORDINATOR_SHARED_CLUSTER_FIXTURE_H_

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/checkpoint.h"
#include "coordinator/coordinator.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "pp/v1/coordinator.grpc.pb.h"
#include "tests/coordinator/event_watch.h"
#include "tests/coordinator/server_fixture.h"
#include "tests/coordinator/test_support.h"

namespace pp::coordinator::testing {

inline constexpr char kAdmin[] = "t-admin";  // role admin, name ops
inline constexpr char kAlice[] = "t-alice";  // role submit
inline constexpr char kBob[] = "t-bob";      // role submit

class SharedClusterServiceTest : public CoordinatorServerTest {
 protected:
  // Not the base fixture's SetUp: each test starts ppcoord itself, with its policy (Start).
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           absl::StrCat("ppcoord_shared_", ::getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    data_ = (dir_ / "corpus.txt").string();
    std::ofstream(data_) << std::string(4096, 'a');
    std::ofstream(dir_ / "tokens") << "t-admin admin ops\nt-alice submit alice\nt-bob submit bob\n";
  }

  // Starts ppcoord with the tokens and `policy` as its --policy file (empty: no file, the default
  // policy), and workers w0..w<workers-1> (workers_[i] is wi).
  void Start(const std::string& policy, int workers) {
    CoordinatorOptions options;
    options.data_dir = (dir_ / "data").string();
    options.worker_timeout = absl::Milliseconds(600);
    options.heartbeat_interval = absl::Milliseconds(50);
    options.auth_tokens = (dir_ / "tokens").string();
    if (!policy.empty()) {
      options.policy = (dir_ / "policy.txt").string();
      std::ofstream(options.policy) << policy;
    }
    absl::StatusOr<std::unique_ptr<CoordinatorServer>> server = CoordinatorServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    channel_ = grpc::CreateChannel(server_->grpc_address(), grpc::InsecureChannelCredentials());
    client_ = pp::v1::Coordinator::NewStub(channel_);
    for (int i = 0; i < workers; ++i) AddWorker(absl::StrCat("w", i));
    ASSERT_TRUE(WaitUntil([&] { return IdleWorkers() == workers; }, absl::Seconds(5)));
  }

  static void As(grpc::ClientContext& context, const std::string& token) {
    context.AddMetadata("authorization", absl::StrCat("Bearer ", token));
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  }

  // A job of `pipeline` ranks at class `priority` (empty: the default class), 10 steps.
  pp::v1::JobSpec Spec(int pipeline, const std::string& priority) {
    pp::v1::JobSpec spec = ValidSpec(pipeline);
    spec.set_priority(priority);
    spec.mutable_train()->set_steps(10);
    return spec;
  }

  grpc::Status SubmitAs(const std::string& token, const pp::v1::JobSpec& spec,
                        std::string* id = nullptr) {
    pp::v1::SubmitJobRequest request;
    *request.mutable_spec() = spec;
    pp::v1::SubmitJobResponse response;
    grpc::ClientContext context;
    As(context, token);
    grpc::Status status = client_->SubmitJob(&context, request, &response);
    if (id != nullptr) *id = response.job_id();
    return status;
  }

  pp::v1::Job Get(const std::string& id) {
    pp::v1::GetJobRequest request;
    request.set_job_id(id);
    pp::v1::Job job;
    grpc::ClientContext context;
    As(context, kAdmin);
    grpc::Status status = client_->GetJob(&context, request, &job);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return job;
  }

  int IdleWorkers() {
    pp::v1::ListWorkersResponse response;
    grpc::ClientContext context;
    As(context, kAdmin);
    if (!client_->ListWorkers(&context, {}, &response).ok()) return -1;
    int idle = 0;
    for (const pp::v1::WorkerInfo& w : response.workers()) idle += w.state() == pp::v1::IDLE;
    return idle;
  }

  bool WaitForState(const std::string& id, pp::v1::JobState state) {
    return WaitUntil([&] { return Get(id).state() == state; }, absl::Seconds(10));
  }

  // The fake workers that hold `id` now.
  std::vector<FakeWorker*> Holders(const std::string& id) {
    std::vector<FakeWorker*> holders;
    for (auto& w : workers_) {
      if (w->job() == id) holders.push_back(w.get());
    }
    return holders;
  }

  // Waits until `id` runs and each of its `ranks` fake workers holds its task.
  void WaitRunning(const std::string& id, int ranks) {
    ASSERT_TRUE(WaitForState(id, pp::v1::RUNNING)) << Get(id).reason();
    ASSERT_TRUE(WaitUntil([&] { return static_cast<int>(Holders(id).size()) == ranks; },
                          absl::Seconds(10)));
  }

  pp::v1::ReportResponse ReportStep(const std::string& id, int rank, int step, int ranks,
                                    double seconds = 0.5) {
    pp::v1::StepReport report;
    report.set_job_id(id);
    report.set_attempt(Get(id).attempt());
    report.set_rank(rank);
    report.set_step(step);
    report.set_step_seconds(seconds);
    report.set_busy_seconds(seconds / 2);
    report.set_has_loss(rank == ranks - 1);
    report.set_loss(5.0);
    pp::v1::ReportResponse response;
    grpc::ClientContext context;
    EXPECT_TRUE(workers_[0]->registry().ReportStep(&context, report, &response).ok());
    return response;
  }

  // Every rank of `id` writes a one-tensor shard of `step` and reports it; waits for its commit
  // (GetJob with a token: the base's Checkpoint asks without one).
  void Checkpoint(const std::string& id, int step, int ranks) {
    ASSERT_NO_FATAL_FAILURE(ReportShards(id, Get(id).attempt(), step, ranks));
    ASSERT_TRUE(
        WaitUntil([&] { return Get(id).last_checkpoint_step() == step; }, absl::Seconds(5)));
  }

  std::string Metrics() {
    absl::StatusOr<std::string> body = HttpGet(server_->metrics_address(), "/metrics");
    EXPECT_TRUE(body.ok()) << body.status();
    return body.value_or("");
  }
  bool MetricsHave(const std::string& line) {
    return WaitUntil([&] { return Metrics().find(line) != std::string::npos; }, absl::Seconds(5));
  }

  // For the per-hour bound (Preemption.max_per_hour): alice's low job L1 (two ranks) is
  // preempted once for a four-worker high job, drains at its checkpoint of step 2 and, once that
  // job ended, resumes from it; her low job L2 runs beside it and reports a step since its newest
  // checkpoint, which L1 lacks. A two-worker high job then needs one victim, and L1 is the cheaper
  // (no work lost; the younger placement is L2's, so only the work lost tells them apart).
  // Returns {L1, L2}. REQUIRES: Start with 4 workers, a policy with the default classes.
  std::pair<std::string, std::string> L1ResumedAfterAPreemptionBesideL2() {
    std::string l1, first_high, l2;
    EXPECT_TRUE(SubmitAs(kAlice, Spec(2, "low"), &l1).ok());
    WaitRunning(l1, 2);
    for (int rank = 0; rank < 2; ++rank) ReportStep(l1, rank, 1, 2);
    EXPECT_TRUE(SubmitAs(kBob, Spec(4, "high"), &first_high).ok());
    EXPECT_TRUE(WaitUntil([&] { return Get(l1).preemptions() == 1; }, absl::Seconds(5)));
    ExpectToldToStopAfter(l1, 2, 2);
    DrainVictim(l1, 2, 2);
    WaitRunning(first_high, 4);
    for (FakeWorker* w : Holders(first_high)) w->FinishTask(true, "");
    EXPECT_TRUE(WaitForState(first_high, pp::v1::SUCCEEDED));
    WaitRunning(l1, 2);  // resumed from its checkpoint of step 2: nothing to lose now
    EXPECT_EQ(Get(l1).start_step(), 2);
    EXPECT_TRUE(SubmitAs(kAlice, Spec(2, "low"), &l2).ok());
    WaitRunning(l2, 2);
    for (int rank = 0; rank < 2; ++rank) ReportStep(l2, rank, 1, 2);
    EXPECT_TRUE(WaitUntil([&] { return Get(l2).step() == 1; }, absl::Seconds(5)));
    EXPECT_EQ(IdleWorkers(), 0);
    return {l1, l2};
  }

  // Runs the low job of the preemption tests: `token` submits a 4-rank job of class "low" (with
  // preemptible: false when `protect`) on the 4 workers; every rank reports step 1.
  std::string RunningLowJob(const std::string& token = kAlice, bool protect = false) {
    pp::v1::JobSpec spec = Spec(4, "low");
    if (protect) spec.set_preemptible(false);
    std::string id;
    EXPECT_TRUE(SubmitAs(token, spec, &id).ok());
    WaitRunning(id, 4);
    for (int rank = 0; rank < 4; ++rank) ReportStep(id, rank, 1, 4);
    EXPECT_EQ(Get(id).step(), 1);
    return id;
  }

  // Each of the `ranks` ranks of the preempted job `victim` reports step `stop` and is told to
  // stop after it (the step after the newest reported one when the preemption was decided).
  void ExpectToldToStopAfter(const std::string& victim, int stop, int ranks) {
    for (int rank = 0; rank < ranks; ++rank) {
      EXPECT_EQ(ReportStep(victim, rank, stop, ranks).stop_after_step(), stop) << rank;
    }
  }

  // The event `watch` read is the victim's EVENT_PREEMPTED for job `preempting` (at the default
  // policy's class high, 200), naming its stop step `stop`.
  static void ExpectPreemptedEvent(EventWatch& watch, const std::string& preempting, int stop) {
    const std::vector<pp::v1::JobEvent> seen = watch.Await(1, absl::Seconds(10));
    ASSERT_FALSE(seen.empty());
    const pp::v1::JobEvent& preempted = seen.front();
    EXPECT_EQ(preempted.kind(), pp::v1::EVENT_PREEMPTED);
    EXPECT_THAT(preempted.message(),
                ::testing::HasSubstr(absl::StrCat("preempted by job ", preempting)));
    EXPECT_THAT(preempted.message(), ::testing::HasSubstr("(priority high 200)"));
    EXPECT_THAT(preempted.message(),
                ::testing::HasSubstr(absl::StrCat("checkpoints after step ", stop)));
  }

  // The preempted job `victim` stops as asked: each of its `ranks` ranks commits the checkpoint of
  // its stop step `stop`, ends its task drained, and the job is queued again.
  void DrainVictim(const std::string& victim, int stop, int ranks) {
    Checkpoint(victim, stop, ranks);
    for (FakeWorker* w : Holders(victim)) {
      w->FinishTask(true, "", absl::StatusCode::kInternal, /*drained=*/true);
    }
    ASSERT_TRUE(WaitForState(victim, pp::v1::QUEUED));
  }

  // `requeued` (a job read after it drained) waits to resume from its stop step `stop` after its
  // one preemption, for job `preempting`, which is not counted as a restart.
  static void ExpectRequeuedByPreemption(const pp::v1::Job& requeued, const std::string& preempting,
                                         int stop) {
    EXPECT_EQ(requeued.state(), pp::v1::QUEUED);
    EXPECT_EQ(requeued.preemptions(), 1);
    EXPECT_EQ(requeued.restarts(), 0);  // not counted against max_restarts
    EXPECT_EQ(requeued.start_step(), stop);
    ASSERT_GE(requeued.restart_log_size(), 1);
    const pp::v1::JobRestart& entry = requeued.restart_log(requeued.restart_log_size() - 1);
    EXPECT_THAT(entry.reason(), ::testing::HasSubstr(absl::StrCat("preempted by job ", preempting,
                                                                  " after step ", stop)));
    EXPECT_EQ(entry.from_step(), stop);
  }
};

}  // namespace pp::coordinator::testing

#endif  // PP_TESTS_COORDINATOR_SHARED_CLUSTER_FIXTURE_H_
