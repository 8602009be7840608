// JobManager: the worker side: registration, heartbeats, and the step, task and checkpoint reports
// of running attempts, with the commit of a checkpoint once every rank reported its shard.
#include <algorithm>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/step_math.h"
#include "coordinator/jobs.h"
#include "coordinator/log.h"

namespace pp::coordinator {
namespace {

// The history row of a completed step (docs/jobs.md "Step history"), from the job as updated by it.
pp::v1::JobStepRecord StepRecordOf(const pp::v1::Job& job, const StepSummary& summary) {
  pp::v1::JobStepRecord record;
  record.set_step(summary.step);
  record.set_attempt(job.attempt());
  record.set_loss(summary.loss);
  record.set_learning_rate(common::LearningRateAt(job.spec().train(), summary.step));
  record.set_grad_norm(summary.grad_norm);
  record.set_step_seconds(summary.step_seconds);
  record.set_tokens_per_second(job.tokens_per_second());
  record.set_bubble_ratio(summary.bubble_ratio);
  record.set_skipped(summary.skipped);
  if (job.eval_step() == summary.step) {
    record.set_has_eval(true);
    record.set_eval_loss(job.eval_loss());
  }
  record.set_time_unix(job.updated_unix());
  return record;
}

}  // namespace

absl::StatusOr<pp::v1::RegisterWorkerResponse> JobManager::Register(
    const pp::v1::WorkerInfo& worker) {
  absl::MutexLock lock(&mu_);
  std::optional<Held> before;
  if (auto it = held_.find(worker.name()); it != held_.end()) before = it->second;
  if (absl::Status ok = workers_.Register(worker, absl::Now()); !ok.ok()) return ok;
  Log(absl::StrCat("worker ", worker.name(), " registered at ", worker.address()));
  held_.erase(worker.name());
  const Held now{.job_id = worker.job_id(), .attempt = worker.attempt()};
  if (!worker.job_id().empty()) {
    // Busy with what it says until it says the task ended; a stale attempt is told to stop.
    held_[worker.name()] = now;
    if (!IsLive(now)) {
      QueueAbort(worker.name(), worker.address(), now.job_id, now.attempt,
                 "the attempt this worker runs was replaced");
    }
  }
  // A worker that comes back without the live task it held has lost that rank.
  if (before && IsLive(*before) &&
      (before->job_id != now.job_id || before->attempt != now.attempt)) {
    JobRecord& rec = jobs_.at(before->job_id);
    Fail(rec,
         absl::StrCat("worker ", worker.name(), " (rank ", RankOfWorker(rec.job(), worker.name()),
                      ") registered again without its task (restarted?)"),
         worker.name());
  }
  PlaceQueued();
  UpdateGauges();
  pp::v1::RegisterWorkerResponse response;
  response.set_name(worker.name());
  response.set_heartbeat_seconds(absl::ToDoubleSeconds(options_.heartbeat_interval));
  return response;
}

pp::v1::HeartbeatResponse JobManager::Heartbeat(const pp::v1::HeartbeatRequest& request) {
  absl::MutexLock lock(&mu_);
  pp::v1::HeartbeatResponse response;
  response.set_known(workers_.Heartbeat(request.name(), absl::Now()));
  if (!response.known()) return response;
  const Held reported{.job_id = request.job_id(), .attempt = request.attempt()};
  if (!request.job_id().empty() && !IsLive(reported)) response.add_abort_jobs(request.job_id());
  // A worker is free once it says it no longer runs what it held, unless that is the live attempt
  // (its RunTask may still be on the way).
  auto held = held_.find(request.name());
  if (held != held_.end() && !IsLive(held->second) && !IsCalibrating(held->second) &&
      (held->second.job_id != reported.job_id || held->second.attempt != reported.attempt)) {
    held_.erase(held);
    workers_.SetIdle(request.name());
    PlaceQueued();
    UpdateGauges();
  }
  return response;
}

pp::v1::ReportResponse JobManager::ReportStep(const pp::v1::StepReport& report) {
  absl::MutexLock lock(&mu_);
  pp::v1::ReportResponse response;
  if (!IsLive(Held{.job_id = report.job_id(), .attempt = report.attempt()})) {
    response.set_abort(true);
    return response;
  }
  JobRecord* rec = FindLocked(report.job_id());
  pp::v1::Job& job = *rec->mutable_job();
  if (report.step() < 1 || report.step() > job.spec().train().steps()) {
    // No worker trains such a step: a broken or forged report, which must not move the stop
    // step (newest + 1 overflows at INT_MAX) or the summaries.
    Log(absl::StrCat("job ", job.id(), ": ignored a report of step ", report.step(), " from rank ",
                     report.rank(), " (steps run 1..", job.spec().train().steps(), ")"));
    return response;
  }
  // Ranks finish step s before any rank finishes s + 2 (the clip norm is gathered every step),
  // and every rank reports each step: each one still reports newest + 1 after this answer.
  rec->newest_reported_step = std::max(rec->newest_reported_step, report.step());
  if (report.draining() && rec->stop_step == 0 && report.rank() >= 0 &&
      report.rank() < job.placement_size()) {
    rec->stop_step = rec->NextCommonStopStep();
    const std::string& worker = job.placement(report.rank()).worker();
    rec->leaving_workers.insert(worker);
    Log(absl::StrCat("job ", job.id(), ": worker ", worker, " drains; every rank stops after step ",
                     rec->stop_step));
  }
  response.set_stop_after_step(rec->stop_step);
  // Every rank skips the same steps: rank 0 speaks for the job.
  if (report.skipped() && report.rank() == 0) metrics_->StepSkipped(job.id());
  if (report.has_eval()) {
    job.set_eval_loss(report.eval_loss());
    job.set_eval_step(report.step());
    metrics_->EvalCompleted(job.id(), report.eval_loss());
  }
  std::optional<StepSummary> summary = rec->steps->Add(report);
  if (!summary) return response;
  rec->checkpoint_cost.AddStep(job.spec(), job.attempt(), summary->step, summary->step_seconds,
                               NowUnix());
  SetStep(job, summary->step);
  job.set_loss(summary->loss);
  job.set_bubble_ratio(summary->bubble_ratio);
  job.set_tokens_per_second(summary->step_seconds > 0
                                ? static_cast<double>(common::GlobalTokensPerStep(job.spec())) /
                                      summary->step_seconds
                                : 0);
  job.set_updated_unix(NowUnix());
  CheckPrediction(*rec, *summary);
  events_.AddTrace(job.id(), std::move(summary->trace));
  committer_.AddStep(job.id(), StepRecordOf(job, *summary));
  Persist(*rec);
  metrics_->StepCompleted(job.id(), summary->loss,
                          common::LearningRateAt(job.spec().train(), summary->step),
                          summary->bubble_ratio);
  if (job.train_windows() > 0) metrics_->EpochReached(job.id(), job.epoch().epoch());
  Emit(*rec, pp::v1::EVENT_STEP, "").set_step_seconds(summary->step_seconds);
  return response;
}

pp::v1::ReportResponse JobManager::ReportTask(const pp::v1::TaskReport& report) {
  absl::MutexLock lock(&mu_);
  pp::v1::ReportResponse response;
  JobRecord* rec = FindLocked(report.job_id());
  const Held ended{.job_id = report.job_id(), .attempt = report.attempt()};
  std::string worker = report.worker();
  if (worker.empty() && rec != nullptr && report.rank() >= 0 &&
      report.rank() < rec->job().placement_size()) {
    worker = rec->job().placement(report.rank()).worker();
  }
  const bool live = IsLive(ended);
  Release(worker, ended);
  if (!live) {
    response.set_abort(true);
    PlaceQueued();
    UpdateGauges();
    return response;
  }
  if (rec->commits_in_flight > 0) {
    // A rank reports its checkpoint before its end, and what the end leads to (a final state, a
    // restart) reads the newest checkpoint: apply it once the commits reported before it are.
    rec->reports_after_commits.push_back(TaskEnd{.report = report, .worker = worker});
  } else {
    ApplyTaskEnd(*rec, report, worker);
  }
  PlaceQueued();
  UpdateGauges();
  return response;
}

void JobManager::ApplyTaskEnd(JobRecord& rec, const pp::v1::TaskReport& report,
                              const std::string& worker) {
  const pp::v1::Job& job = rec.job();
  if (!report.ok()) {
    const std::string reason = absl::StrCat("rank ", report.rank(), " on worker ", worker, ": ",
                                            ReportedText(report.error()));
    const auto code = static_cast<absl::StatusCode>(report.error_code());
    if (code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kDeadlineExceeded) {
      Suspect(rec, reason, worker);
    } else if (code == absl::StatusCode::kOutOfRange) {
      // Non-finite loss, gradients or weights: a restart would compute them again.
      Finish(rec, pp::v1::FAILED, reason, worker);
    } else {
      Fail(rec, reason, worker);  // the rank's own error: the cause
    }
  } else if (report.rank() >= 0 && report.rank() < job.placement_size()) {
    rec.ranks_done.insert(report.rank());
    rec.drained = rec.drained || report.drained();
    if (static_cast<int>(rec.ranks_done.size()) == job.placement_size()) EndAttempt(rec);
  }
}

void JobManager::EndAttempt(JobRecord& rec) {
  if (!rec.drained) {
    Finish(rec, pp::v1::SUCCEEDED, "");
    return;
  }
  std::vector<std::string> why;
  if (!rec.leaving_workers.empty()) {
    // The workers that asked to drain are leaving: the next attempt goes elsewhere.
    for (const std::string& w : rec.leaving_workers) workers_.SetDown(w);
    why.push_back(absl::StrCat("worker(s) ", absl::StrJoin(rec.leaving_workers, ", "),
                               " drained after step ", rec.stop_step));
  }
  // A re-plan (CheckPrediction): calibrate again and choose from the checkpoint.
  if (std::optional<std::string> replan = rec.auto_plan.TakeReplan()) why.push_back(*replan);
  if (rec.grow_to > 0) {
    why.push_back(absl::StrCat("stopped after step ", rec.stop_step, " to grow to ", rec.grow_to,
                               " workers"));
  }
  if (!rec.preempted_for.empty()) {
    why.push_back(
        absl::StrCat("preempted by job ", rec.preempted_for, " after step ", rec.stop_step));
  }
  Requeue(rec, absl::StrJoin(why, "; "), /*automatic=*/false);
}

pp::v1::ReportResponse JobManager::ReportCheckpoint(const pp::v1::CheckpointReport& report) {
  absl::MutexLock lock(&mu_);
  pp::v1::ReportResponse response;
  JobRecord* rec = FindLocked(report.job_id());
  // A rank's last checkpoint may arrive after another rank ended the job.
  const bool current =
      rec != nullptr && rec->job().attempt() == report.attempt() && rec->checkpoints != nullptr &&
      (rec->job().state() == pp::v1::RUNNING || rec->job().state() == pp::v1::SUCCEEDED);
  if (!current) {
    response.set_abort(rec == nullptr || rec->job().state() != pp::v1::SUCCEEDED);
    return response;
  }
  absl::StatusOr<std::optional<std::vector<pp::v1::CheckpointReport>>> complete =
      rec->checkpoints->Add(report);
  if (!complete.ok()) {
    Log(absl::StrCat("job ", rec->job().id(), ": ", complete.status().message()));
    metrics_->CheckpointFailed(rec->job().id());
  } else if (complete->has_value()) {
    CommitCheckpoint(*rec, **complete);
  }
  return response;
}

}  // namespace pp::coordinator
