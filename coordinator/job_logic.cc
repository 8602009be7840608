#include "coordinator/job_logic.h"

#include <algorithm>
#include <cctype>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/epoch.h"
#include "common/step_math.h"
#include "coordinator/log.h"
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

std::string MakeJobId(const std::string& name, int64_t sequence) {
  std::string clean;
  for (char c : name) {
    if (clean.size() >= 40) break;
    const unsigned char u = static_cast<unsigned char>(c);
    if (std::isalnum(u)) {
      clean.push_back(static_cast<char>(std::tolower(u)));
    } else if (!clean.empty() && clean.back() != '-') {
      clean.push_back('-');
    }
  }
  while (!clean.empty() && clean.back() == '-') clean.pop_back();
  return absl::StrCat(clean.empty() ? "job" : clean, "-", sequence);
}

std::string ReportedText(const std::string& text) {
  if (text.size() <= kMaxReportedTextBytes) return text;
  size_t end = kMaxReportedTextBytes;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;  // 10xxxxxx
  return absl::StrCat(text.substr(0, end), " ... (", text.size() - end, " more bytes not kept)");
}

pp::v1::JobEventKind FinalEventKind(pp::v1::JobState state) {
  switch (state) {
    case pp::v1::SUCCEEDED:
      return pp::v1::EVENT_FINISHED;
    case pp::v1::CANCELLED:
      return pp::v1::EVENT_CANCELLED;
    default:
      return pp::v1::EVENT_FAILED;
  }
}

bool EndsWatch(pp::v1::JobEventKind kind) {
  return kind == pp::v1::EVENT_FINISHED || kind == pp::v1::EVENT_FAILED ||
         kind == pp::v1::EVENT_CANCELLED;
}

int RankOfWorker(const pp::v1::Job& job, const std::string& worker) {
  for (const pp::v1::RankPlacement& p : job.placement()) {
    if (p.worker() == worker) return p.rank();
  }
  return -1;
}

void SetStep(pp::v1::Job& job, int step) {
  job.set_step(step);
  if (job.train_windows() > 0) {
    *job.mutable_epoch() = common::EpochAtStep(job.spec(), step, job.train_windows());
  }
}

pp::v1::JobEvent SnapshotEvent(const pp::v1::Job& job, double now_unix) {
  pp::v1::JobEvent event;
  switch (job.state()) {
    case pp::v1::QUEUED:
      event.set_kind(pp::v1::EVENT_QUEUED);
      break;
    case pp::v1::RUNNING:
      event.set_kind(job.step() > 0 ? pp::v1::EVENT_STEP : pp::v1::EVENT_PLACED);
      break;
    default:
      event.set_kind(FinalEventKind(job.state()));
      break;
  }
  event.set_job_id(job.id());
  event.set_step(job.step());
  event.set_total_steps(job.spec().train().steps());
  event.set_loss(job.loss());
  if (job.has_epoch()) *event.mutable_epoch() = job.epoch();
  if (job.step() > 0) {
    event.set_learning_rate(common::LearningRateAt(job.spec().train(), job.step()));
  }
  if (job.step() > 0 && job.eval_step() == job.step()) {
    event.set_has_eval(true);
    event.set_eval_loss(job.eval_loss());
  }
  event.set_tokens_per_second(job.tokens_per_second());
  event.set_bubble_ratio(job.bubble_ratio());
  event.set_message(job.reason());
  event.set_time_unix(now_unix);
  return event;
}

void StartNextAttempt(pp::v1::Job& job, int from_step, const std::string& reason, bool automatic,
                      double now_unix) {
  job.set_attempt(job.attempt() + 1);
  job.set_start_step(from_step);
  SetStep(job, from_step);
  job.set_reason(reason);
  job.set_updated_unix(now_unix);
  pp::v1::JobRestart* entry = job.add_restart_log();
  entry->set_attempt(job.attempt());
  entry->set_reason(reason);
  entry->set_from_step(from_step);
  entry->set_time_unix(job.updated_unix());
  entry->set_automatic(automatic);
  if (const int extra = job.restart_log_size() - kMaxRestartLog; extra > 0) {
    job.mutable_restart_log()->DeleteSubrange(0, extra);
  }
}

absl::Duration RestartBackoff(int restart, absl::Duration base, absl::Duration cap) {
  if (restart < 1) return absl::ZeroDuration();
  absl::Duration wait = base;
  for (int i = 1; i < restart && wait < cap; ++i) wait *= 2;
  return std::min(wait, cap);
}

std::string WaitReason(int needed, int registered, int idle) {
  return absl::StrCat("needs ", needed, " workers, ", registered, " registered, ", idle, " idle");
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

namespace {

// Drops the pending steps below `below`, then the oldest while more than kMaxPendingSteps are
// left, one log line each. `Ranks` maps rank to report.
template <typename Ranks>
void DropStalePending(std::map<int, Ranks>& pending, int below, int world,
                      const std::string& job_id, const char* what) {
  auto drop = [&](typename std::map<int, Ranks>::iterator it, const char* why) {
    Log(absl::StrCat("job ", job_id, ": dropped the ", what, " reports of step ", it->first, " (",
                     it->second.size(), " of ", world, " ranks reported): ", why));
    return pending.erase(it);
  };
  for (auto it = pending.begin(); it != pending.end() && it->first < below;) {
    it = drop(it, "a later step completed");
  }
  while (pending.size() > static_cast<size_t>(kMaxPendingSteps)) {
    drop(pending.begin(), "too many steps pending");
  }
}

}  // namespace

std::optional<StepSummary> StepAggregator::Add(const pp::v1::StepReport& report) {
  if (report.rank() < 0 || report.rank() >= world_) return std::nullopt;
  std::map<int, pp::v1::StepReport>& ranks = pending_[report.step()];
  ranks[report.rank()] = report;
  if (static_cast<int>(ranks.size()) < world_) {
    DropStalePending(pending_, std::numeric_limits<int>::min(), world_, report.job_id(), "step");
    return std::nullopt;
  }

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
    summary.skipped = summary.skipped || r.skipped();
    summary.grad_norm = r.grad_norm();  // the same on every rank, from the same gather
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
  pending_.erase(report.step());
  DropStalePending(pending_, report.step(), world_, report.job_id(), "step");
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
                                            " failed to write its shard: ",
                                            ReportedText(report.error())));
  }
  std::map<int, pp::v1::CheckpointReport>& ranks = pending_[report.step()];
  ranks[report.rank()] = report;
  if (static_cast<int>(ranks.size()) < world_) {
    DropStalePending(pending_, std::numeric_limits<int>::min(), world_, report.job_id(),
                     "checkpoint");
    return std::nullopt;
  }
  std::vector<pp::v1::CheckpointReport> complete;
  for (auto& [rank, r] : ranks) complete.push_back(std::move(r));
  pending_.erase(report.step());
  // Ranks save their checkpoints in step order: an older step still missing shards never
  // completes.
  DropStalePending(pending_, report.step(), world_, report.job_id(), "checkpoint");
  return complete;
}

}  // namespace pp::coordinator
