// `ppctl report` (client/report_command) against an in-process ppcoord and fake workers: through
// RunReport, and once through the real ppctl binary (the command's registration and --out).
// Unknown jobs and unwritable files are one-line errors; a job still queued gets a page without
// curves; a job that ran gets one point per recorded step and its traced step.
#include "client/report_command.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "absl/strings/str_cat.h"
#include "coordinator/coordinator.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "tests/client/ppctl_run.h"
#include "tests/coordinator/test_support.h"

namespace pp::client {
namespace {

using ::pp::coordinator::testing::FakeWorker;
using ::pp::coordinator::testing::WaitUntil;
using ::pp::testing_support::Slurp;
using ::testing::HasSubstr;

struct Output {
  int code;
  std::string out, err;
};

class ReportCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           absl::StrCat("report_", ::getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ / "corpus.txt") << std::string(4096, 'x');
    coordinator::CoordinatorOptions options;
    options.data_dir = (dir_ / "data").string();
    options.worker_timeout = absl::Milliseconds(600);
    options.heartbeat_interval = absl::Milliseconds(50);
    absl::StatusOr<std::unique_ptr<coordinator::CoordinatorServer>> server =
        coordinator::CoordinatorServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    stub_ = pp::v1::Coordinator::NewStub(
        grpc::CreateChannel(server_->grpc_address(), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    workers_.clear();
    stub_.reset();
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  static ReportRpc Rpc() {
    return {[] {
              auto context = std::make_unique<grpc::ClientContext>();
              context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
              return context;
            },
            [](const grpc::Status& s) { return s.error_message(); }};
  }

  Output Report(const std::string& job) {
    ::testing::internal::CaptureStdout();
    ::testing::internal::CaptureStderr();
    const int code = RunReport(*stub_, job, Rpc());
    return {code, ::testing::internal::GetCapturedStdout(),
            ::testing::internal::GetCapturedStderr()};
  }

  std::string Submit(int steps) {
    pp::v1::SubmitJobRequest request;
    pp::v1::JobSpec& spec = *request.mutable_spec();
    spec.set_name("tiny <b>");
    spec.mutable_model()->set_vocab_size(256), spec.mutable_model()->set_seq_len(16);
    spec.mutable_model()->set_d_model(32), spec.mutable_model()->set_n_heads(4);
    spec.mutable_model()->set_n_layers(2);
    spec.mutable_parallel()->set_pipeline(2), spec.mutable_parallel()->set_schedule("1f1b");
    spec.mutable_train()->set_steps(steps), spec.mutable_train()->set_microbatches(4);
    spec.mutable_train()->set_microbatch_size(1), spec.mutable_train()->set_lr(0.001);
    spec.mutable_data()->set_path((dir_ / "corpus.txt").string());
    pp::v1::SubmitJobResponse response;
    grpc::ClientContext context;
    EXPECT_TRUE(stub_->SubmitJob(&context, request, &response).ok());
    return response.job_id();
  }

  // Two fake workers take the job; each rank reports `steps` steps with a traced forward of
  // each of two microbatches, then the task's end.
  void RunOnFakeWorkers(int steps) {
    for (const char* name : {"w0", "w1"}) {
      workers_.push_back(std::make_unique<FakeWorker>(name, server_->grpc_address()));
    }
    for (auto& w : workers_) ASSERT_TRUE(w->WaitForTask(absl::Seconds(10)));
    for (int step = 1; step <= steps; ++step) {
      for (auto& w : workers_) {
        const pp::v1::TaskPlan plan = w->tasks().back();
        pp::v1::StepReport report;
        report.set_job_id(plan.job_id()), report.set_rank(plan.rank()), report.set_step(step);
        report.set_step_seconds(0.004), report.set_busy_seconds(0.002);
        report.set_has_loss(plan.rank() == 1), report.set_loss(5.0 - step);
        for (int mb = 0; mb < 2; ++mb) {
          pp::v1::TimedAction* a = report.mutable_trace()->add_actions();
          a->mutable_action()->set_kind(pp::v1::FORWARD);
          a->mutable_action()->set_stage(plan.rank()), a->mutable_action()->set_microbatch(mb);
          a->set_start(0.001 * (mb + plan.rank())), a->set_end(a->start() + 0.001);
        }
        pp::v1::ReportResponse response;
        grpc::ClientContext context;
        ASSERT_TRUE(w->registry().ReportStep(&context, report, &response).ok());
      }
    }
    for (auto& w : workers_) w->FinishTask(true, "");
  }

  std::filesystem::path dir_;
  std::unique_ptr<coordinator::CoordinatorServer> server_;
  std::unique_ptr<pp::v1::Coordinator::Stub> stub_;
  std::vector<std::unique_ptr<FakeWorker>> workers_;
};

TEST_F(ReportCommandTest, UnknownJobIsAnErrorAndWritesNothing) {
  const std::string out = (dir_ / "nope.html").string();
  EXPECT_FALSE(WriteReport(*stub_, "nope", out, Rpc()).ok());
  EXPECT_FALSE(std::filesystem::exists(out));
  const Output o = Report("nope");
  EXPECT_EQ(o.code, 1);
  EXPECT_THAT(o.err, HasSubstr("ppctl report: "));
  EXPECT_THAT(o.err, HasSubstr("not found"));
}

TEST_F(ReportCommandTest, UnwritablePathIsAnError) {
  const std::string id = Submit(2);
  const absl::Status s = WriteReport(*stub_, id, (dir_ / "missing" / "r.html").string(), Rpc());
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("cannot write the report to "));
  EXPECT_THAT(s.message(), HasSubstr("missing/r.html"));
}

TEST_F(ReportCommandTest, QueuedJobGetsAPageWithoutCurves) {
  const std::string id = Submit(2);
  const std::string out = (dir_ / "queued.html").string();
  ASSERT_TRUE(WriteReport(*stub_, id, out, Rpc()).ok());
  const std::string html = Slurp(out);
  EXPECT_THAT(html, HasSubstr("No steps recorded yet"));
  EXPECT_THAT(html, HasSubstr("tiny &lt;b&gt;"));
  EXPECT_THAT(html, HasSubstr("QUEUED"));
}

TEST_F(ReportCommandTest, FinishedJobThroughTheBinary) {
  const std::string id = Submit(3);
  RunOnFakeWorkers(3);
  ASSERT_TRUE(WaitUntil(
      [&] {
        pp::v1::GetJobRequest request;
        request.set_job_id(id);
        pp::v1::Job job;
        grpc::ClientContext context;
        return stub_->GetJob(&context, request, &job).ok() && job.state() == pp::v1::SUCCEEDED;
      },
      absl::Seconds(10)));
  const std::string out = (dir_ / "done.html").string();
  const auto ppctl = pp::testing_support::RunPpctl(
      PPCTL_PATH,
      absl::StrCat("report ", id, " --coordinator=", server_->grpc_address(), " --out=", out));
  ASSERT_EQ(ppctl.code, 0) << ppctl.err;
  EXPECT_EQ(ppctl.out, absl::StrCat("report: ", out, "\n"));
  const std::string html = Slurp(out);
  EXPECT_THAT(html, HasSubstr("data-series=\"loss\" data-points=\"3\""));
  EXPECT_THAT(html, HasSubstr("SUCCEEDED"));
  EXPECT_THAT(html, HasSubstr("id=\"timeline-measured\""));
  // The fake trace has forwards only: the simulation needs every stage's backward too, and the
  // page says why there is none.
  EXPECT_THAT(html, HasSubstr("No simulation: "));
  EXPECT_THAT(html, HasSubstr("<td>w0</td>"));
}

}  // namespace
}  // namespace pp::client
