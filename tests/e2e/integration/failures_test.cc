// The real binaries when things go wrong: bad specs are refused (INVALID_ARGUMENT over gRPC, one
// stderr line from `ppctl submit`) and the daemon keeps serving; a worker SIGKILLed mid-task
// fails its job with a reason within a bounded time and frees the other workers.
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordinator/test_support.h"
#include "tests/e2e/integration/fixture.h"
#include "tests/support/cluster.h"
#include "tests/support/process.h"

namespace pp::integration {
namespace {

using ::pp::testing_support::CommandResult;
using ::pp::testing_support::RunCommand;
using ::pp::testing_support::SubmitJob;
using ::pp::testing_support::WaitForJob;
using ::testing::HasSubstr;

class FailuresTest : public IntegrationTest {};

TEST_F(FailuresTest, BadSpecsAreRefusedWithTheFieldNamedAndTheDaemonKeepsServing) {
  struct Case {
    const char* field;  // must appear in the refusal
    std::function<void(pp::v1::JobSpec&)> mutate;
  };
  const std::vector<Case> cases = {
      {"parallel.schedule", [](auto& s) { s.mutable_parallel()->set_schedule("2f2b"); }},
      {"parallel.pipeline", [](auto& s) { s.mutable_parallel()->set_pipeline(0); }},
      // 6 blocks make 8 partition units: 9 stages cannot all hold one.
      {"parallel.pipeline", [](auto& s) { s.mutable_parallel()->set_pipeline(9); }},
      {"parallel.pipeline",  // interleaved-1f1b on 4 ranks with V=3: 12 stages > 8 units
       [](auto& s) {
         s.mutable_parallel()->set_schedule("interleaved-1f1b");
         s.mutable_parallel()->set_chunks(3);
       }},
      {"parallel.chunks", [](auto& s) { s.mutable_parallel()->set_schedule("zb-v"); }},  // V=1
      {"train.microbatches",  // interleaved 1F1B needs M >= D
       [](auto& s) {
         s.mutable_parallel()->set_schedule("interleaved-1f1b");
         s.mutable_parallel()->set_chunks(2);
         s.mutable_train()->set_microbatches(2);
       }},
      {"train.microbatches", [](auto& s) { s.mutable_train()->set_microbatches(0); }},
      {"train.microbatch_size", [](auto& s) { s.mutable_train()->set_microbatch_size(-2); }},
      {"train.steps", [](auto& s) { s.mutable_train()->set_steps(0); }},
      {"train.lr", [](auto& s) { s.mutable_train()->set_lr(-1); }},
      {"model.d_model", [](auto& s) { s.mutable_model()->set_d_model(0); }},
      // 5 heads do not divide C=32.
      {"model.n_heads", [](auto& s) { s.mutable_model()->set_n_heads(5); }},
      {"model.n_heads", [](auto& s) { s.mutable_model()->set_n_heads(0); }},
      {"model.n_layers", [](auto& s) { s.mutable_model()->set_n_layers(-1); }},
      {"model.seq_len", [](auto& s) { s.mutable_model()->set_seq_len(0); }},
      {"model.vocab_size", [](auto& s) { s.mutable_model()->set_vocab_size(100); }},  // bytes
      {"data.path", [](auto& s) { s.mutable_data()->set_path("/nonexistent/corpus.txt"); }},
      {"data.path", [](auto& s) { s.mutable_data()->clear_path(); }},
      {"data.format", [](auto& s) { s.mutable_data()->set_format("parquet"); }},
  };
  ASSERT_NO_FATAL_FAILURE(StartCluster(0));
  const std::string coordinator = "--coordinator=" + cluster_->coordinator().grpc;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    pp::v1::JobSpec spec = TinySpec("1f1b", 1, 3);
    c.mutate(spec);
    SCOPED_TRACE(absl::StrCat("case ", i, " (", c.field, ")"));

    absl::StatusOr<std::string> refused = SubmitJob(cluster_->stub(), spec);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
    EXPECT_THAT(refused.status().message(), HasSubstr(c.field));

    absl::StatusOr<CommandResult> ppctl =
        RunCommand({cluster_->ppctl(), coordinator, "submit",
                    WriteSpec(spec, absl::StrCat("bad", i, ".json"))},
                   absl::Seconds(20));
    ASSERT_TRUE(ppctl.ok()) << ppctl.status();
    EXPECT_NE(ppctl->exit_code, 0);
    EXPECT_EQ(ppctl->out, "");
    EXPECT_THAT(ppctl->err, HasSubstr(c.field));
    EXPECT_EQ(std::count(ppctl->err.begin(), ppctl->err.end(), '\n'), 1) << ppctl->err;
  }
  // Files that are not job specs never reach the daemon: ppctl names the file.
  for (const std::string& text : {std::string("{\"model\": {"), std::string("{\"modle\": {}}")}) {
    const std::string path = (dir_ / "unparsable.json").string();
    std::ofstream(path) << text;
    absl::StatusOr<CommandResult> ppctl =
        RunCommand({cluster_->ppctl(), coordinator, "submit", path}, absl::Seconds(20));
    ASSERT_TRUE(ppctl.ok()) << ppctl.status();
    EXPECT_NE(ppctl->exit_code, 0) << text;
    EXPECT_THAT(ppctl->err, HasSubstr("unparsable.json")) << text;
  }

  // Nothing was queued, and a good spec is still taken.
  pp::v1::ListJobsResponse jobs;
  grpc::ClientContext context;
  ASSERT_TRUE(cluster_->stub().ListJobs(&context, {}, &jobs).ok());
  EXPECT_EQ(jobs.jobs_size(), 0);
  absl::StatusOr<std::string> good = SubmitJob(cluster_->stub(), TinySpec("1f1b", 1, 3));
  ASSERT_TRUE(good.ok()) << good.status();
  absl::StatusOr<pp::v1::Job> job = testing_support::GetJob(cluster_->stub(), *good);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state(), pp::v1::QUEUED);
}

std::map<std::string, pp::v1::WorkerState> WorkerStates(pp::v1::Coordinator::Stub& stub) {
  std::map<std::string, pp::v1::WorkerState> states;
  absl::StatusOr<std::vector<pp::v1::WorkerInfo>> workers = testing_support::ListWorkers(stub);
  if (workers.ok()) {
    for (const pp::v1::WorkerInfo& w : *workers) states[w.name()] = w.state();
  }
  return states;
}

TEST_F(FailuresTest, KilledWorkerFailsTheJobWithAReasonAndFreesTheOthers) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(4));
  pp::v1::JobSpec spec = TinySpec("1f1b", 1, 100000);  // runs until the kill
  absl::StatusOr<std::string> job_id = SubmitJob(cluster_->stub(), spec);
  ASSERT_TRUE(job_id.ok()) << job_id.status();
  absl::StatusOr<pp::v1::Job> job = WaitForJob(
      cluster_->stub(), *job_id, [](const pp::v1::Job& j) { return j.step() >= 2; },
      absl::Seconds(30));
  ASSERT_TRUE(job.ok()) << "job did not reach step 2: " << job.status() << "\n" << cluster_->Logs();
  ASSERT_EQ(job->state(), pp::v1::RUNNING);

  // Workers are placed in name order: w2 holds rank 2, in the middle of the pipeline.
  const absl::Time killed = absl::Now();
  cluster_->worker("w2").Signal(SIGKILL);
  absl::StatusOr<int> exit = cluster_->worker("w2").Wait(absl::Seconds(5));
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_EQ(*exit, 128 + SIGKILL);

  job = WaitForJob(
      cluster_->stub(), *job_id, [](const pp::v1::Job& j) { return j.state() != pp::v1::RUNNING; },
      absl::Seconds(15));
  ASSERT_TRUE(job.ok()) << job.status() << "\n" << cluster_->Logs();
  const absl::Duration to_fail = absl::Now() - killed;
  EXPECT_EQ(job->state(), pp::v1::FAILED);
  // Its neighbours only lost a peer; the coordinator finds the worker that does not answer.
  EXPECT_THAT(job->reason(), HasSubstr("worker w2 (rank 2)"));
  EXPECT_THAT(job->reason(), HasSubstr("does not answer"));
  std::cout << "job FAILED " << absl::FormatDuration(to_fail)
            << " after the kill: " << job->reason() << "\n";

  // The survivors are free again, the dead one DOWN after --worker_timeout (2 s).
  std::map<std::string, pp::v1::WorkerState> states;
  EXPECT_TRUE(coordinator::testing::WaitUntil(
      [&] {
        states = WorkerStates(cluster_->stub());
        return states["w0"] == pp::v1::IDLE && states["w1"] == pp::v1::IDLE &&
               states["w3"] == pp::v1::IDLE && states["w2"] == pp::v1::DOWN;
      },
      absl::Seconds(10)))
      << "w0 " << states["w0"] << " w1 " << states["w1"] << " w2 " << states["w2"] << " w3 "
      << states["w3"];

  // Free for real: a 3-rank job runs to its end on them.
  pp::v1::JobSpec next = TinySpec("1f1b", 1, 2);
  next.mutable_parallel()->set_pipeline(3);
  absl::StatusOr<std::string> next_id = SubmitJob(cluster_->stub(), next);
  ASSERT_TRUE(next_id.ok()) << next_id.status();
  absl::StatusOr<pp::v1::Job> done =
      testing_support::WaitSucceeded(cluster_->stub(), *next_id, absl::Seconds(20));
  EXPECT_TRUE(done.ok()) << done.status() << "\n" << cluster_->Logs();
}

}  // namespace
}  // namespace pp::integration
