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
#include "tests/client/local_coordinator.h"
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
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(coordinator_.Start("report_")); }
  void TearDown() override { coordinator_.Stop(); }

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
    const int code = RunReport(*coordinator_.stub, job, Rpc());
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
    spec.mutable_data()->set_path(coordinator_.corpus);
    pp::v1::SubmitJobResponse response;
    grpc::ClientContext context;
    EXPECT_TRUE(coordinator_.stub->SubmitJob(&context, request, &response).ok());
    return response.job_id();
  }

  testing::LocalCoordinator coordinator_;
};

TEST_F(ReportCommandTest, UnknownJobIsAnErrorAndWritesNothing) {
  const std::string out = (coordinator_.dir / "nope.html").string();
  EXPECT_FALSE(WriteReport(*coordinator_.stub, "nope", out, Rpc()).ok());
  EXPECT_FALSE(std::filesystem::exists(out));
  const Output o = Report("nope");
  EXPECT_EQ(o.code, 1);
  EXPECT_THAT(o.err, HasSubstr("ppctl report: "));
  EXPECT_THAT(o.err, HasSubstr("not found"));
}

TEST_F(ReportCommandTest, UnwritablePathIsAnError) {
  const std::string id = Submit(2);
  const absl::Status s = WriteReport(*coordinator_.stub, id,
                                     (coordinator_.dir / "missing" / "r.html").string(), Rpc());
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("cannot write the report to "));
  EXPECT_THAT(s.message(), HasSubstr("missing/r.html"));
}

TEST_F(ReportCommandTest, QueuedJobGetsAPageWithoutCurves) {
  const std::string id = Submit(2);
  const std::string out = (coordinator_.dir / "queued.html").string();
  ASSERT_TRUE(WriteReport(*coordinator_.stub, id, out, Rpc()).ok());
  const std::string html = Slurp(out);
  EXPECT_THAT(html, HasSubstr("No steps recorded yet"));
  EXPECT_THAT(html, HasSubstr("tiny &lt;b&gt;"));
  EXPECT_THAT(html, HasSubstr("QUEUED"));
}

TEST_F(ReportCommandTest, FinishedJobThroughTheBinary) {
  const std::string id = Submit(3);
  coordinator_.RunJobOnFakeWorkers(3);
  ASSERT_TRUE(WaitUntil(
      [&] {
        pp::v1::GetJobRequest request;
        request.set_job_id(id);
        pp::v1::Job job;
        grpc::ClientContext context;
        return coordinator_.stub->GetJob(&context, request, &job).ok() &&
               job.state() == pp::v1::SUCCEEDED;
      },
      absl::Seconds(10)));
  const std::string out = (coordinator_.dir / "done.html").string();
  const auto ppctl = pp::testing_support::RunPpctl(
      PPCTL_PATH,
      absl::StrCat("report ", id, " --coordinator=", coordinator_.address(), " --out=", out));
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
