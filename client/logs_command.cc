#include "client/logs_command.h"

#include <signal.h>

#include <iostream>
#include <optional>
#include <set>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/exit_code.h"
#include "common/stop_signals.h"

ABSL_FLAG(int32_t, rank, -1, "logs: only this global rank's lines (-1: every rank)");
ABSL_FLAG(bool, follow, false,
          "logs: keep printing new lines every 0.5 s until the job ends (Ctrl-C stops)");

namespace pp::client {
namespace {

constexpr absl::Duration kFollowPoll = absl::Milliseconds(500);

// One logs run's state: where it is in the log and what it already said on stderr.
struct LogsRun {
  pp::v1::Coordinator::Stub& stub;
  const CallHelpers& calls;
  pp::v1::GetJobLogsRequest request;
  std::set<std::string> unreachable;  // as last said
};

int Fail(const std::string& message) {
  std::cerr << "ppctl logs: " << message << "\n";
  return common::kExitFailure;
}

// The notes of one page: dropped lines each time, unreachable workers when the set changed.
void Note(LogsRun& run, const pp::v1::GetJobLogsResponse& page) {
  if (page.dropped() > 0) {
    std::cerr << "ppctl logs: " << page.dropped()
              << " earlier line(s) are gone from the workers' bounded buffers (docs/jobs.md, "
                 "\"Worker logs\")\n";
  }
  std::set<std::string> unreachable(page.unreachable().begin(), page.unreachable().end());
  if (unreachable != run.unreachable && !unreachable.empty()) {
    std::cerr << "ppctl logs: no answer from worker(s) " << absl::StrJoin(unreachable, ", ")
              << ": their lines are missing\n";
  }
  run.unreachable = std::move(unreachable);
}

// Pages until one brings nothing new; prints each line. The call's error, if any.
grpc::Status Drain(LogsRun& run) {
  while (true) {
    pp::v1::GetJobLogsResponse page;
    grpc::Status status = run.stub.GetJobLogs(run.calls.context().get(), run.request, &page);
    if (!status.ok()) return status;
    for (const pp::v1::JobLogLine& line : page.lines()) std::cout << LogLineText(line) << "\n";
    std::cout << std::flush;
    Note(run, page);
    const bool moved = page.next_page_token() != run.request.page_token();
    run.request.set_page_token(page.next_page_token());
    if (!moved) return grpc::Status::OK;
  }
}

// The stop signals of --follow, installed once per process. Installed after the channel's
// threads started, a signal may land on one of them: the handler only writes to a pipe, so it is
// neither lost nor fatal (common/stop_signals.h). Null when they cannot be installed.
common::StopSignals* FollowSignals() {
  static absl::StatusOr<common::StopSignals>* signals =
      new absl::StatusOr<common::StopSignals>(common::StopSignals::Install({SIGINT, SIGTERM}));
  return signals->ok() ? &**signals : nullptr;
}

// Waits one poll; false when a stop signal came.
bool WaitPoll(common::StopSignals* signals) {
  if (signals == nullptr) {
    absl::SleepFor(kFollowPoll);
    return true;
  }
  return !signals->Wait(kFollowPoll).has_value();
}

// Whether the job is in a terminal state; a failed GetJob is the caller's error.
absl::StatusOr<bool> Ended(LogsRun& run) {
  pp::v1::GetJobRequest request;
  request.set_job_id(run.request.job_id());
  pp::v1::Job job;
  grpc::Status status = run.stub.GetJob(run.calls.context().get(), request, &job);
  if (!status.ok()) return absl::UnavailableError(run.calls.describe(status));
  return job.state() == pp::v1::SUCCEEDED || job.state() == pp::v1::FAILED ||
         job.state() == pp::v1::CANCELLED;
}

int Follow(LogsRun& run) {
  common::StopSignals* signals = FollowSignals();
  bool last_round = false;
  while (true) {
    // The state is read before the lines: once it says ended, the lines read after include
    // everything the ranks wrote up to then; one more round after a poll takes the ranks that
    // ended just after the first.
    absl::StatusOr<bool> ended = Ended(run);
    if (!ended.ok()) return Fail(std::string(ended.status().message()));
    if (grpc::Status status = Drain(run); !status.ok()) return Fail(run.calls.describe(status));
    if (*ended && last_round) return common::kExitOk;
    last_round = *ended;
    if (!WaitPoll(signals)) return common::kExitOk;
  }
}

}  // namespace

std::string LogLineText(const pp::v1::JobLogLine& line) {
  return absl::StrCat(line.worker(), " rank ", line.rank(), " attempt ", line.attempt(), " | ",
                      line.text());
}

int RunLogsCommand(pp::v1::Coordinator::Stub& stub, const std::vector<std::string>& args,
                   const CallHelpers& calls) {
  LogsRun run{stub, calls, {}, {}};
  run.request.set_job_id(args.at(0));
  const int rank = absl::GetFlag(FLAGS_rank);
  if (rank < -1) {
    std::cerr << "ppctl logs: --rank: a global rank, or -1 for every rank; got " << rank << "\n";
    return common::kExitUsage;
  }
  if (rank >= 0) run.request.set_rank(rank);
  if (absl::GetFlag(FLAGS_follow)) return Follow(run);
  if (grpc::Status status = Drain(run); !status.ok()) return Fail(calls.describe(status));
  return common::kExitOk;
}

}  // namespace pp::client
