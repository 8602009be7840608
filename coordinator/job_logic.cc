#include "coordinator/job_logic.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "coordinator/plan/plan.h"

namespace pp::coordinator {

bool IsTerminal(pp::v1::JobState state) {
  return state == pp::v1::SUCCEEDED || state == pp::v1::FAILED || state == pp::v1::CANCELLED;
}

absl::Status CheckTransition(pp::v1::JobState from, pp::v1::JobState to) {
  const bool ok = (from == pp::v1::QUEUED &&
                   (to == pp::v1::RUNNING || to == pp::v1::FAILED || to == pp::v1::CANCELLED)) ||
                  (from == pp::v1::RUNNING &&
                   (to == pp::v1::SUCCEEDED || to == pp::v1::FAILED || to == pp::v1::CANCELLED ||
                    to == pp::v1::QUEUED)) ||
                  (IsTerminal(from) && to == pp::v1::QUEUED);
  if (ok) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("job is ", pp::v1::JobState_Name(from),
                                                    ", cannot become ", pp::v1::JobState_Name(to)));
}

double MeasuredBubble(const std::vector<pp::v1::StepReport>& reports) {
  // A report's busy time includes the optimizer, which its trace does not carry, and each rank
  // times its trace from its own step start: the span is the slowest rank's step.
  std::vector<double> busy;
  double longest = 0;
  for (const pp::v1::StepReport& r : reports) {
    busy.push_back(r.busy_seconds());
    longest = std::max(longest, r.step_seconds());
  }
  return pp::plan::IdleFraction(busy, longest);
}

std::optional<StepSummary> StepAggregator::Add(const pp::v1::StepReport& report) {
  if (report.rank() < 0 || report.rank() >= world_) return std::nullopt;
  std::map<int, pp::v1::StepReport>& ranks = pending_[report.step()];
  ranks[report.rank()] = report;
  if (static_cast<int>(ranks.size()) < world_) return std::nullopt;

  StepSummary summary;
  summary.step = report.step();
  std::vector<pp::v1::StepReport> reports;
  double loss_sum = 0;
  int losses = 0;
  for (auto& [rank, r] : ranks) {
    if (r.has_loss()) {
      loss_sum += r.loss();
      ++losses;
    }
    summary.step_seconds = std::max(summary.step_seconds, r.step_seconds());
    pp::v1::RankTrace* trace = summary.trace.add_ranks();
    *trace = r.trace();
    trace->set_rank(rank);
    reports.push_back(std::move(r));
  }
  summary.loss = losses > 0 ? loss_sum / losses : 0;
  summary.bubble_ratio = MeasuredBubble(reports);
  summary.trace.set_job_id(report.job_id());
  summary.trace.set_step(report.step());
  // Ranks never report a step twice: everything up to this step is done or abandoned.
  pending_.erase(pending_.begin(), pending_.upper_bound(report.step()));
  return summary;
}

absl::StatusOr<std::optional<std::vector<pp::v1::CheckpointReport>>> CheckpointCollector::Add(
    const pp::v1::CheckpointReport& report) {
  if (report.rank() < 0 || report.rank() >= world_) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint report: rank ", report.rank(), " outside 0..", world_ - 1));
  }
  if (!report.ok()) {
    pending_.erase(report.step());
    return absl::InternalError(absl::StrCat("checkpoint step ", report.step(), ": rank ",
                                            report.rank(),
                                            " failed to write its shard: ", report.error()));
  }
  std::map<int, pp::v1::CheckpointReport>& ranks = pending_[report.step()];
  ranks[report.rank()] = report;
  if (static_cast<int>(ranks.size()) < world_) return std::nullopt;
  std::vector<pp::v1::CheckpointReport> complete;
  for (auto& [rank, r] : ranks) complete.push_back(std::move(r));
  pending_.erase(report.step());
  return complete;
}

}  // namespace pp::coordinator
