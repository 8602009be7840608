// An in-process ppcoord on loopback for the tests of ppctl's job commands: a fresh folder under
// the test's TempDir named after the running test, a 4,096-byte corpus in it, heartbeats every
// 50 ms (a worker is lost after 600 ms), plaintext.
// Start once from SetUp (ASSERT_NO_FATAL_FAILURE); Stop (also the destructor) drops the fake
// workers, shuts the server down and removes the folder: call it after the test's own workers
// stopped.
#ifndef PP_TESTS_CLIENT_LOCAL_COORDINATOR_H_
#define PP_TESTS_CLIENT_LOCAL_COORDINATOR_H_

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "coordinator/coordinator.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "pp/v1/coordinator.grpc.pb.h"
#include "tests/coordinator/test_support.h"

namespace pp::client::testing {

class LocalCoordinator {
 public:
  ~LocalCoordinator() { Stop(); }

  // `prefix` starts the folder's name ("report_": TempDir/report_<pid>_<test>).
  void Start(const std::string& prefix) {
    dir = std::filesystem::path(::testing::TempDir()) /
          absl::StrCat(prefix, ::getpid(), "_",
                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    corpus = (dir / "corpus.txt").string();
    std::ofstream(corpus) << std::string(4096, 'x');
    coordinator::CoordinatorOptions options;
    options.data_dir = (dir / "data").string();
    options.worker_timeout = absl::Milliseconds(600);
    options.heartbeat_interval = absl::Milliseconds(50);
    absl::StatusOr<std::unique_ptr<coordinator::CoordinatorServer>> started =
        coordinator::CoordinatorServer::Start(options);
    ASSERT_TRUE(started.ok()) << started.status();
    server = *std::move(started);
    stub = pp::v1::Coordinator::NewStub(
        grpc::CreateChannel(server->grpc_address(), grpc::InsecureChannelCredentials()));
  }

  // Two fake workers, w0 and w1, take the queued two-rank job; each rank reports `steps` steps
  // (rank 1 the loss 5 - step; both the gradient norm 0.5 x step and a traced forward of each of
  // two microbatches), then the task's end. REQUIRES: Start.
  void RunJobOnFakeWorkers(int steps) {
    for (const char* name : {"w0", "w1"}) {
      fake_workers.push_back(std::make_unique<coordinator::testing::FakeWorker>(name, address()));
    }
    for (auto& w : fake_workers) ASSERT_TRUE(w->WaitForTask(absl::Seconds(10)));
    for (int step = 1; step <= steps; ++step) {
      for (auto& w : fake_workers) {
        pp::v1::ReportResponse response;
        grpc::ClientContext context;
        ASSERT_TRUE(w->registry()
                        .ReportStep(&context, StepReport(w->tasks().back(), step), &response)
                        .ok());
      }
    }
    for (auto& w : fake_workers) w->FinishTask(true, "");
  }

  void Stop() {
    fake_workers.clear();
    stub.reset();
    server.reset();
    if (!dir.empty()) std::filesystem::remove_all(dir);
    dir.clear();
  }

  std::string address() const { return server->grpc_address(); }

  std::filesystem::path dir;
  std::string corpus;  // dir/corpus.txt
  std::unique_ptr<coordinator::CoordinatorServer> server;
  std::unique_ptr<pp::v1::Coordinator::Stub> stub;
  std::vector<std::unique_ptr<coordinator::testing::FakeWorker>> fake_workers;

 private:
  static pp::v1::StepReport StepReport(const pp::v1::TaskPlan& plan, int step) {
    pp::v1::StepReport report;
    report.set_job_id(plan.job_id());
    report.set_rank(plan.rank());
    report.set_step(step);
    report.set_step_seconds(0.004);
    report.set_busy_seconds(0.002);
    report.set_has_loss(plan.rank() == 1);
    report.set_loss(5.0 - step);
    report.set_grad_norm(0.5 * step);
    for (int mb = 0; mb < 2; ++mb) {
      pp::v1::TimedAction* a = report.mutable_trace()->add_actions();
      a->mutable_action()->set_kind(pp::v1::FORWARD);
      a->mutable_action()->set_stage(plan.rank());
      a->mutable_action()->set_microbatch(mb);
      a->set_start(0.001 * (mb + plan.rank()));
      a->set_end(a->start() + 0.001);
    }
    return report;
  }
};

}  // namespace pp::client::testing

#endif  // PP_TESTS_CLIENT_LOCAL_COORDINATOR_H_
