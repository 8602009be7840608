// The real binaries against specs sized to hurt: a spec over a limit (ranks that overflow int, a
// million microbatches, 3e8 layers) is refused at submit with the field and the limit named, and
// ppcoord keeps serving; a job stored with such a spec (as an older ppcoord wrote it, straight into
// the job store) is quarantined when ppcoord starts: FAILED with the reason and one log line,
// while ppcoord starts and runs the next job.
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/file_io.h"
#include "common/job_spec.h"
#include "coordinator/store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/e2e/integration/fixture.h"
#include "tests/support/cluster.h"
#include "tests/support/process.h"

namespace pp::integration {
namespace {

using ::pp::testing_support::CommandResult;
using ::pp::testing_support::GetJob;
using ::pp::testing_support::RunCommand;
using ::pp::testing_support::SubmitJob;
using ::pp::testing_support::WaitSucceeded;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class HostileSpecTest : public IntegrationTest {
 protected:
  // One rank, two steps: runs on one worker in about a second.
  pp::v1::JobSpec Small() const {
    pp::v1::JobSpec spec = TinySpec("1f1b", 1, 2);
    spec.mutable_parallel()->set_pipeline(1);
    return spec;
  }

  // The submission that used to segfault ppcoord: 65536-way data and tensor parallelism.
  pp::v1::JobSpec CrashingSpec() const {
    pp::v1::JobSpec spec = TinySpec("1f1b", 1, 3);
    spec.mutable_model()->set_d_model(65536);
    spec.mutable_model()->set_n_heads(65536);
    spec.mutable_parallel()->set_tensor(65536);
    spec.mutable_parallel()->set_data(65536);
    return spec;
  }

  // Every field within its own limit, but 1024 x 4096 x 4096 ranks are 2^34: 0 in an int.
  pp::v1::JobSpec OverflowingMesh() const {
    pp::v1::JobSpec spec = TinySpec("1f1b", 1, 3);
    spec.mutable_model()->set_d_model(4096);
    spec.mutable_model()->set_n_heads(4096);
    spec.mutable_model()->set_n_layers(1022);
    spec.mutable_parallel()->set_pipeline(1024);
    spec.mutable_parallel()->set_tensor(4096);
    spec.mutable_parallel()->set_data(4096);
    return spec;
  }

  // A job row as a ppcoord without the limits stored it: accepted, defaults applied.
  struct Stored {
    std::string id;
    pp::v1::JobState state;
    pp::v1::JobSpec spec;
    std::string reason;  // the quarantine reason starts with it
  };

  // Writes `rows` into the stopped ppcoord's job store, through the store's own API.
  void Store(const std::vector<Stored>& rows) {
    absl::StatusOr<std::unique_ptr<coordinator::JobStore>> store =
        coordinator::JobStore::Open(cluster_->data_dir() + "/ppcoord.db");
    ASSERT_TRUE(store.ok()) << store.status();
    for (const Stored& row : rows) {
      pp::v1::Job job;
      job.set_id(row.id);
      *job.mutable_spec() = row.spec;
      common::ApplyDefaults(job.mutable_spec());
      job.set_state(row.state);
      job.set_attempt(row.state == pp::v1::RUNNING ? 1 : 0);
      ASSERT_TRUE((*store)->Put(job).ok()) << row.id;
    }
  }

  // The lines of ppcoord's log (every run of it) that contain `word`.
  std::vector<std::string> CoordinatorLogLines(absl::string_view word) const {
    absl::StatusOr<std::string> log = common::ReadFile((dir_ / "cluster" / "ppcoord.log").string());
    std::vector<std::string> lines;
    for (absl::string_view line : absl::StrSplit(log.ok() ? *log : "", '\n')) {
      if (absl::StrContains(line, word)) lines.emplace_back(line);
    }
    return lines;
  }
};

TEST_F(HostileSpecTest, OversizedSpecsAreRefusedNamingTheFieldAndTheLimit) {
  struct Case {
    std::string field;  // the refusal names it
    std::string limit;  // and names it
    std::function<pp::v1::JobSpec()> spec;
  };
  const std::vector<Case> cases = {
      {"model.d_model", "over the limit 16384", [&] { return CrashingSpec(); }},
      {"parallel.pipeline x parallel.tensor x parallel.data", "over the limit 4096",
       [&] { return OverflowingMesh(); }},
      {"train.microbatches", "over the limit 65536",
       [&] {
         pp::v1::JobSpec spec = TinySpec("1f1b", 1, 3);
         spec.mutable_train()->set_microbatches(1000000);
         return spec;
       }},
      {"model.n_layers", "over the limit 1024",
       [&] {
         pp::v1::JobSpec spec = TinySpec("1f1b", 1, 3);
         spec.mutable_model()->set_n_layers(300000000);
         return spec;
       }},
  };
  ASSERT_NO_FATAL_FAILURE(StartCluster(1));
  const std::string coordinator = "--coordinator=" + cluster_->coordinator().grpc;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    SCOPED_TRACE(c.field);
    absl::StatusOr<std::string> refused = SubmitJob(cluster_->stub(), c.spec());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
    EXPECT_THAT(std::string(refused.status().message()), HasSubstr(c.field + ": "));
    EXPECT_THAT(std::string(refused.status().message()), HasSubstr(c.limit));
    absl::StatusOr<CommandResult> ppctl =
        RunCommand({cluster_->ppctl(), coordinator, "submit",
                    WriteSpec(c.spec(), absl::StrCat("hostile", i, ".json"))},
                   absl::Seconds(20));
    ASSERT_TRUE(ppctl.ok()) << ppctl.status();
    EXPECT_NE(ppctl->exit_code, 0);
    EXPECT_THAT(ppctl->err, HasSubstr(c.field));
    EXPECT_THAT(ppctl->err, HasSubstr(c.limit));
  }
  // Nothing was stored, and ppcoord still schedules: the next job runs to its end.
  pp::v1::ListJobsResponse jobs;
  grpc::ClientContext context;
  ASSERT_TRUE(cluster_->stub().ListJobs(&context, {}, &jobs).ok());
  EXPECT_EQ(jobs.jobs_size(), 0);
  absl::StatusOr<std::string> good = SubmitJob(cluster_->stub(), Small());
  ASSERT_TRUE(good.ok()) << good.status();
  absl::StatusOr<pp::v1::Job> done = WaitSucceeded(cluster_->stub(), *good, absl::Seconds(30));
  EXPECT_TRUE(done.ok()) << done.status() << "\n" << cluster_->Logs();
}

TEST_F(HostileSpecTest, AStoredHostileJobIsQuarantinedAtStartupAndPpcoordServes) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(0));
  absl::StatusOr<std::string> waiting = SubmitJob(cluster_->stub(), Small());
  ASSERT_TRUE(waiting.ok()) << waiting.status();
  cluster_->KillCoordinator();

  // One QUEUED as at submit, one RUNNING when ppcoord went down.
  const std::vector<Stored> stored = {
      {"hostile-100", pp::v1::QUEUED, CrashingSpec(),
       "quarantined at startup: its spec is refused: model.d_model: 65536 is over the limit "
       "16384"},
      {"hostile-101", pp::v1::RUNNING, OverflowingMesh(),
       "quarantined at startup: its spec is refused: parallel.pipeline x parallel.tensor x "
       "parallel.data: 1024 x 4096 x 4096 = 17179869184 ranks is over the limit 4096"},
  };
  ASSERT_NO_FATAL_FAILURE(Store(stored));

  absl::Status restarted = cluster_->RestartCoordinator();
  ASSERT_TRUE(restarted.ok()) << restarted << "\n" << cluster_->Logs();
  for (const Stored& s : stored) {
    absl::StatusOr<pp::v1::Job> job = GetJob(cluster_->stub(), s.id);
    ASSERT_TRUE(job.ok()) << s.id << ": " << job.status() << "\n" << cluster_->Logs();
    EXPECT_EQ(job->state(), pp::v1::FAILED) << s.id;
    EXPECT_THAT(job->reason(), StartsWith(s.reason));
  }
  // One log line per quarantined job, naming it.
  const std::vector<std::string> quarantined = CoordinatorLogLines("quarantined");
  ASSERT_EQ(quarantined.size(), stored.size()) << cluster_->Logs();
  for (size_t i = 0; i < stored.size(); ++i) {
    EXPECT_THAT(quarantined[i], HasSubstr(absl::StrCat("job ", stored[i].id, ": quarantined")));
  }

  // The job stored before them waits again; one submitted now queues behind them. Once a worker
  // comes, the scheduler places both: neither quarantined job is in the way.
  absl::StatusOr<pp::v1::Job> job = GetJob(cluster_->stub(), *waiting);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), pp::v1::QUEUED);
  absl::StatusOr<std::string> later = SubmitJob(cluster_->stub(), Small());
  ASSERT_TRUE(later.ok()) << later.status();
  ASSERT_TRUE(cluster_->AddWorkers(1).ok()) << cluster_->Logs();
  for (const std::string& id : {*waiting, *later}) {
    absl::StatusOr<pp::v1::Job> done = WaitSucceeded(cluster_->stub(), id, absl::Seconds(30));
    EXPECT_TRUE(done.ok()) << id << ": " << done.status() << "\n" << cluster_->Logs();
  }
}

}  // namespace
}  // namespace pp::integration
