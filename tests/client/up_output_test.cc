// `ppctl up`'s progress line (client/up_progress) and summary (client/up_summary): the epoch, and
// the learning-rate text of a spec of train.epochs alone, whose steps ppcoord derives (the summary
// against an in-process ppcoord; no workers: the job stays queued, the events are made here).
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/up_progress.h"
#include "client/up_summary.h"
#include "client/work_dir.h"
#include "common/epoch.h"
#include "coordinator/coordinator.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"

namespace pp::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// K = 200 training windows (216 tokens, seq_len 16, no holdout); S = 1 x 4 x 1 = 4 sequences a
// step, so 3 epochs are ceil(3 x 200 / 4) = 150 steps.
constexpr int kTokens = 216;
constexpr int kWindows = 200;
constexpr int kSteps = 150;

pp::v1::JobEvent StepEvent(int step, int64_t position) {
  pp::v1::JobEvent e;
  e.set_job_id("up-1");
  e.set_kind(pp::v1::EVENT_STEP);
  e.set_step(step);
  e.set_total_steps(kSteps);
  e.set_loss(3.5);
  *e.mutable_epoch() = common::EpochAt(position, kWindows);
  return e;
}

TEST(UpProgressTest, StepLineShowsTheEpochWhenKnown) {
  const pp::v1::JobEvent first = StepEvent(1, 4);
  // Step 75 ends at position 300: 1 pass of 200 and 100 sequences, epoch 1.50.
  EXPECT_THAT(ProgressLine(StepEvent(75, 300), &first), HasSubstr("  epoch 1.50"));
  // 199 of 200 sequences: truncated, never rounded up to the next pass.
  EXPECT_THAT(ProgressLine(StepEvent(50, 199), &first), HasSubstr("  epoch 0.99"));
  pp::v1::JobEvent unknown = StepEvent(75, 300);
  unknown.clear_epoch();  // K unknown (a job stored by an older ppcoord)
  EXPECT_THAT(ProgressLine(unknown, &first), Not(HasSubstr("epoch")));
}

class UpSummaryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           absl::StrCat("up_output_", ::getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ / "corpus.txt") << std::string(kTokens, 'x');
    coordinator::CoordinatorOptions options;
    options.data_dir = (dir_ / "data").string();
    absl::StatusOr<std::unique_ptr<coordinator::CoordinatorServer>> server =
        coordinator::CoordinatorServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    stub_ = pp::v1::Coordinator::NewStub(
        grpc::CreateChannel(server_->grpc_address(), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    stub_.reset();
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  // train.epochs 3 and no train.steps, with a warm-up and a cosine decay.
  pp::v1::JobSpec EpochSpec() {
    pp::v1::JobSpec spec;
    spec.set_name("up");
    pp::v1::ModelSpec* m = spec.mutable_model();
    m->set_vocab_size(256), m->set_seq_len(16), m->set_d_model(32), m->set_n_heads(4);
    m->set_n_layers(2);
    spec.mutable_parallel()->set_pipeline(2);
    spec.mutable_parallel()->set_schedule("1f1b");
    pp::v1::TrainSpec* t = spec.mutable_train();
    t->set_epochs(3), t->set_microbatches(4), t->set_microbatch_size(1);
    t->set_lr(0.001), t->set_warmup_steps(10), t->set_decay("cosine"), t->set_min_lr(0.0001);
    spec.mutable_data()->set_path((dir_ / "corpus.txt").string());
    return spec;
  }

  // PrintSummary's stdout for `run`. There is no trace (no worker ran a step): Unavailable, after
  // the summary lines.
  std::string Summary(const UpRun& run) {
    absl::StatusOr<WorkDir> work = WorkDir::Open("");
    EXPECT_TRUE(work.ok()) << work.status();
    if (!work.ok()) return "";
    ::testing::internal::CaptureStdout();
    const absl::Status printed = PrintSummary(*stub_, run, *work, (dir_ / "trace.json").string());
    const std::string out = ::testing::internal::GetCapturedStdout();
    EXPECT_EQ(printed.code(), absl::StatusCode::kUnavailable) << printed;
    return out;
  }

  // `run_id`'s run of EpochSpec() as ppctl up saw it: every step done.
  UpRun FinishedRun(const std::string& run_id) {
    UpRun run;
    run.job_id = run_id;
    run.spec = EpochSpec();
    run.first_step = StepEvent(1, 4);
    run.last_event = StepEvent(kSteps, int64_t{kSteps} * 4);
    run.last_event.set_kind(pp::v1::EVENT_FINISHED);
    return run;
  }

  std::filesystem::path dir_;
  std::unique_ptr<coordinator::CoordinatorServer> server_;
  std::unique_ptr<pp::v1::Coordinator::Stub> stub_;
};

TEST_F(UpSummaryTest, EpochsOnlySpecShowsTheResolvedStepsTheEpochAndThePlan) {
  pp::v1::SubmitJobRequest request;
  *request.mutable_spec() = EpochSpec();
  pp::v1::SubmitJobResponse response;
  grpc::ClientContext context;
  ASSERT_TRUE(stub_->SubmitJob(&context, request, &response).ok());
  const std::string out = Summary(FinishedRun(response.job_id()));
  // Not "by step 11" (the steps 0 of the spec as submitted): ppcoord's 150.
  EXPECT_THAT(out, HasSubstr("  lr          0.001 after 10 warm-up steps, cosine to 0.0001 by "
                             "step 150\n"))
      << out;
  EXPECT_THAT(out, HasSubstr("  epoch       3.00: 3 passes over 200 training windows + 0 "
                             "sequences\n"))
      << out;
  // The job's spec says both steps and epochs: PlanJob is asked with the steps alone.
  EXPECT_THAT(out, HasSubstr("F=1 B=2, free communication")) << out;
  // The events carry no times: no tokens/s, so no FLOP rate and no peak measured.
  EXPECT_THAT(out, Not(HasSubstr("tokens/s"))) << out;
  EXPECT_THAT(out, HasSubstr("  FLOP rate   not known (no step timing; the peak was not "
                             "measured)\n"))
      << out;
}

TEST_F(UpSummaryTest, WithoutTheJobTheStepsComeFromTheEvents) {
  // ppcoord does not know the job (GetJob fails): the spec as submitted, steps from the events.
  const std::string out = Summary(FinishedRun("gone-1"));
  EXPECT_THAT(out, HasSubstr("cosine to 0.0001 by step 150\n")) << out;
  EXPECT_THAT(out, HasSubstr("F=1 B=2, free communication")) << out;
}

}  // namespace
}  // namespace pp::client
