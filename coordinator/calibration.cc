// JobManager's part of parallel.schedule "auto" (jobs.h): calibrating the placed workers (the
// run in flight and the cache of what was measured are calibration_run.h's), deciding the plan
// from what they measured, and checking every step against the prediction.
//
// A job whose spec says "auto" is placed like any other, on a provisional layout (planning.h
// ProvisionalSpec), but instead of RunTask its workers get Calibrate, held BUSY for the job's
// attempt while it stays QUEUED. Once every rank answered, ChooseCalibrated (plan/calibrated.h)
// writes the choice into the job's spec, and the attempt starts on the same workers. A decided
// job is an ordinary job: restarts and resumes run its recorded plan. Only a re-plan (prediction
// drift, CheckPrediction) calibrates it again, from its checkpoint, with M kept.
#include <cmath>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/job_spec.h"
#include "coordinator/calibration_run.h"
#include "coordinator/jobs.h"
#include "coordinator/log.h"
#include "coordinator/plan/plan.h"

namespace pp::coordinator {
namespace {

// Calibration that failed this many times in a row fails the job.
constexpr int kMaxCalibrationFailures = 3;

// The search's input: the spec as submitted, or a decided spec opened up again for a re-plan.
pp::v1::JobSpec AutoSpecOf(const pp::v1::JobSpec& spec) {
  if (common::IsAutoSchedule(spec.parallel())) return spec;
  pp::v1::JobSpec open = spec;
  pp::v1::ParallelSpec* p = open.mutable_parallel();
  p->set_schedule(prog::kAutoSchedule);
  p->set_chunks(0);
  p->set_partition("");
  p->clear_stage_layers();
  p->set_recompute("none");
  return open;
}

// The placement's ranks with the stages `schedule` gives them (a pipeline-only mesh: global
// rank = pipeline rank).
std::vector<pp::v1::RankPlacement> Restage(std::vector<pp::v1::RankPlacement> placement,
                                           const pp::v1::Schedule& schedule) {
  for (pp::v1::RankPlacement& p : placement) {
    p.clear_stages();
    for (int s = 0; s < schedule.stage_to_rank_size(); ++s) {
      if (schedule.stage_to_rank(s) == p.pp()) p.add_stages(s);
    }
  }
  return placement;
}

std::string Ms(double seconds) { return absl::StrFormat("%.1f ms", seconds * 1e3); }

}  // namespace

bool JobManager::IsCalibrating(const Held& held) {
  JobRecord* rec = FindLocked(held.job_id);
  return rec != nullptr && rec->calibrating && rec->calibrating->attempt() == held.attempt &&
         rec->job().attempt() == held.attempt;
}

void JobManager::BeginCalibration(JobRecord& rec, std::vector<pp::v1::RankPlacement> placement) {
  const pp::v1::Job& job = rec.job();
  const bool replan = !job.plan().chosen().empty();
  const pp::v1::JobSpec spec = AutoSpecOf(job.spec());
  const std::vector<int> sizes =
      pp::plan::CalibrationSequences(spec, replan ? job.spec().train().microbatches() : 0);
  const std::string key = CalibrationKey(spec, sizes, placement);
  // A re-plan after drift measures again: the cached figures are what its prediction drifted
  // from. One after trial steps chooses again from the job's own calibration, now refitted.
  if (std::exchange(rec.replan_cached, false) && SameWorkers(job.plan().calibration(), placement)) {
    pp::v1::Calibration calibration = job.plan().calibration();
    calibration.set_cached(true);
    Decide(rec, std::move(placement), std::move(calibration));
    return;
  }
  rec.calibration_key = key;
  if (const pp::v1::Calibration* cached = calibrations_.Find(key); cached != nullptr && !replan) {
    pp::v1::Calibration calibration = *cached;
    calibration.set_cached(true);
    Decide(rec, std::move(placement), std::move(calibration));
    return;
  }
  const double budget = spec.parallel().auto_plan().calibration_seconds();
  const int64_t largest = sizes.empty() ? 1 : sizes.back();
  rec.calibrating.emplace(job.attempt(), placement, key, calibrations_.NextSerial(), absl::Now());
  std::vector<std::string> names;
  for (const pp::v1::RankPlacement& p : placement) {
    workers_.SetBusy(p.worker(), job.id());
    held_[p.worker()] = Held{.job_id = job.id(), .attempt = job.attempt()};
    names.push_back(p.worker());
    Outbound rpc{.kind = Outbound::Kind::kCalibrate,
                 .worker = p.worker(),
                 .address = p.address(),
                 .job_id = job.id(),
                 .reason = "",
                 .attempt = job.attempt(),
                 .plan = {},
                 .calibrate = {},
                 .answer = {},
                 .serial = rec.calibrating->serial()};
    pp::v1::CalibrateRequest& request = rpc.calibrate;
    request.set_job_id(job.id());
    request.set_attempt(job.attempt());
    request.set_rank(p.pp());
    request.set_world_size(static_cast<int>(placement.size()));
    *request.mutable_spec() = pp::plan::ProvisionalSpec(spec);
    request.mutable_sequences()->Assign(sizes.begin(), sizes.end());
    request.set_rendezvous_prefix(absl::StrCat(job.id(), "/", job.attempt(), "/calibrate/"));
    request.set_budget_seconds(budget);
    request.set_message_bytes(
        static_cast<int64_t>(pp::plan::BoundaryBytes(spec.model(), static_cast<int>(largest))));
    rpc_.Queue(std::move(rpc));
  }
  NoteWait(rec, absl::StrCat(replan ? "re-planning: " : "", "calibrating ",
                             absl::StrJoin(names, ", "), " (at most ", budget, " s)"));
}

void JobManager::ReleaseCalibration(JobRecord& rec) {
  if (!rec.calibrating) return;
  for (const pp::v1::RankPlacement& p : rec.calibrating->placement()) {
    Release(p.worker(), Held{.job_id = rec.job().id(), .attempt = rec.calibrating->attempt()});
  }
  rendezvous_.EraseWithPrefix(
      absl::StrCat(rec.job().id(), "/", rec.calibrating->attempt(), "/calibrate/"));
  rec.calibrating.reset();
}

void JobManager::CalibrationAnswered(const Outbound& rpc, const grpc::Status& status) {
  JobRecord* rec = FindLocked(rpc.job_id);
  // A calibration released meanwhile (cancelled, failed on another worker): nothing to do.
  if (rec == nullptr || !rec->calibrating || rec->calibrating->serial() != rpc.serial) return;
  const int rank = rpc.calibrate.rank();
  if (!status.ok()) {
    const std::string reason =
        absl::StrCat("calibration of worker ", rpc.worker, " (rank ", rank, ") failed: ",
                     absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())),
                     status.error_message().empty() ? "" : ": ", status.error_message());
    ReleaseCalibration(*rec);
    if (++rec->calibration_failures >= kMaxCalibrationFailures) {
      Finish(*rec, pp::v1::FAILED,
             absl::StrCat(reason, " (", rec->calibration_failures, " calibrations failed)"));
      return;
    }
    LogAndApply(*rec, JobEdit::Backoff(absl::Now() + RestartBackoff(rec->calibration_failures,
                                                                    options_.restart_backoff,
                                                                    options_.restart_backoff_cap)));
    NoteWait(*rec, absl::StrCat(reason, "; calibrating again"));
    return;
  }
  std::optional<pp::v1::Calibration> calibration =
      rec->calibrating->Answer(rank, rpc.worker, rpc.answer, absl::Now());
  if (!calibration) return;  // ranks still measure
  // The last trial's overheads stand until this plan's own trial steps refit them.
  if (rec->job().plan().calibration().has_trial()) {
    *calibration->mutable_trial() = rec->job().plan().calibration().trial();
  }
  calibrations_.Put(rec->calibrating->key(), *calibration);
  rec->calibration_failures = 0;
  Decide(*rec, rec->calibrating->placement(), *std::move(calibration));
}

void JobManager::Decide(JobRecord& rec, std::vector<pp::v1::RankPlacement> placement,
                        pp::v1::Calibration calibration) {
  pp::v1::Job& job = *rec.mutable_job();
  const bool replan = !job.plan().chosen().empty();
  absl::StatusOr<pp::plan::CalibratedPlan> plan = pp::plan::ChooseCalibrated(
      AutoSpecOf(job.spec()), calibration, replan ? job.spec().train().microbatches() : 0);
  // PlanJobSpec reads no file (under mu_); the data the choice did not change was checked at
  // submission.
  absl::StatusOr<PlannedJob> planned =
      plan.ok() ? PlanJobSpec(plan->spec) : absl::StatusOr<PlannedJob>(plan.status());
  if (!planned.ok()) {
    ReleaseCalibration(rec);
    Finish(rec, pp::v1::FAILED, absl::StrCat("schedule auto: ", planned.status().message()));
    return;
  }
  rec.calibrating.reset();  // its workers stay held: the attempt starts on them
  rec.calibrate = false;
  *job.mutable_spec() = std::move(planned->spec);
  rec.schedule = std::move(planned->schedule);
  rec.stage_units = std::move(planned->stage_units);
  rec.rank_bytes = RankBytes(planned->memory);
  pp::v1::JobPlan* record = job.mutable_plan();
  record->set_reason(plan->reason);
  record->set_chosen(plan->chosen);
  record->set_predicted_step_seconds(plan->predicted_step_seconds);
  record->set_first_predicted_step_seconds(plan->predicted_step_seconds);
  rec.trial = {};
  record->set_runner_up(plan->runner_up);
  record->set_runner_up_step_seconds(plan->runner_up_step_seconds);
  record->set_runner_up_reason(plan->runner_up_reason);
  record->set_candidates(plan->candidates);
  *record->mutable_calibration() = std::move(calibration);
  record->set_drift_run(0);
  if (replan) record->set_replans(record->replans() + 1);
  Log(absl::StrCat("job ", job.id(), ": ", plan->reason));
  Start(rec, Restage(std::move(placement), rec.schedule));
}

void JobManager::CheckPrediction(JobRecord& rec, const StepSummary& summary) {
  pp::v1::Job& job = *rec.mutable_job();
  pp::v1::JobPlan* record = job.mutable_plan();
  // The first step of an attempt pays for warm-up (allocation, connections, caches).
  if (record->predicted_step_seconds() <= 0 || summary.step - 1 <= job.start_step()) return;
  if (!rec.trial.done) FitTrial(rec, summary);
  const double predicted = record->predicted_step_seconds();
  const double error = std::abs(summary.step_seconds - predicted) / predicted;
  record->set_prediction_error_ratio(error);
  metrics_->StepPredicted(job.id(), error);
  const pp::v1::AutoPlanSpec& bounds = job.spec().parallel().auto_plan();
  record->set_drift_run(error > bounds.drift_threshold() ? record->drift_run() + 1 : 0);
  if (record->drift_run() < bounds.drift_steps()) return;
  CallReplan(rec, absl::StrFormat(
                      "prediction drift: step %d took %s against %s predicted (error %.0f%% > "
                      "%.0f%%, %d steps in a row)",
                      summary.step, Ms(summary.step_seconds), Ms(predicted), 100 * error,
                      100 * bounds.drift_threshold(), record->drift_run()));
}

void JobManager::FitTrial(JobRecord& rec, const StepSummary& summary) {
  pp::v1::Job& job = *rec.mutable_job();
  pp::v1::JobPlan* record = job.mutable_plan();
  const pp::v1::AutoPlanSpec& bounds = job.spec().parallel().auto_plan();
  JobRecord::Trial& trial = rec.trial;
  trial.done = bounds.trial_steps() < 0;  // no trial
  if (trial.done) return;
  trial.traces.push_back(summary.trace);
  trial.seconds.push_back(summary.step_seconds);
  if (static_cast<int>(trial.seconds.size()) < bounds.trial_steps()) return;
  trial.done = true;
  absl::StatusOr<pp::v1::StepOverheads> fitted =
      pp::plan::FitStepOverheads(trial.traces, trial.seconds);
  trial.traces.clear();
  if (!fitted.ok()) {
    Log(absl::StrCat("job ", job.id(), ": trial steps not fitted: ", fitted.status().message()));
    return;
  }
  fitted->set_plan(record->chosen());
  absl::StatusOr<pp::plan::Refit> refitted =
      pp::plan::RefitWithTrial(job.spec(), record->calibration(), *fitted);
  if (!refitted.ok()) {
    Log(absl::StrCat("job ", job.id(), ": trial steps not fitted: ",
                     refitted.status().message()));
    return;
  }
  const pp::v1::Calibration& calibration = refitted->calibration;
  const double refit = refitted->predicted_step_seconds;
  // Later jobs on these workers choose with the overheads too.
  if (!rec.calibration_key.empty()) calibrations_.Put(rec.calibration_key, calibration);
  *record->mutable_calibration() = calibration;
  std::string note = absl::StrFormat(
      "trial steps to %d: sends %s, a waited message %s, step tail %s, %s an action: predicted "
      "%s per step (chosen with %s)",
      summary.step, Ms(fitted->send_seconds()), Ms(fitted->latency_seconds()),
      Ms(fitted->tail_seconds()), Ms(calibration.trial().action_seconds()), Ms(refit),
      Ms(record->predicted_step_seconds()));
  record->set_predicted_step_seconds(refit);
  record->set_drift_run(0);
  absl::StatusOr<pp::plan::CalibratedPlan> best = pp::plan::ChooseCalibrated(
      AutoSpecOf(job.spec()), calibration, job.spec().train().microbatches());
  if (best.ok() && best->chosen != record->chosen() &&
      best->predicted_step_seconds < (1 - bounds.trial_gain()) * refit) {
    const std::string why = absl::StrFormat(
        "trial steps: %s is predicted %s per step, %.0f%% shorter than %s", best->chosen,
        Ms(best->predicted_step_seconds), 100 * (1 - best->predicted_step_seconds / refit),
        record->chosen());
    if (CallReplan(rec, why)) rec.replan_cached = true;
  }
  record->set_reason(absl::StrCat(record->reason(), "\n", note));
  Log(absl::StrCat("job ", job.id(), ": ", note));
}

bool JobManager::CallReplan(JobRecord& rec, const std::string& why) {
  const pp::v1::Job& job = rec.job();
  const pp::v1::AutoPlanSpec& bounds = job.spec().parallel().auto_plan();
  if (rec.replan || rec.stop_step > 0 || bounds.max_replans() < 0 ||
      job.plan().replans() >= bounds.max_replans()) {
    return false;
  }
  // It ends before a new plan could pay off; compared before adding, which overflows at INT_MAX.
  if (rec.newest_reported_step >= job.spec().train().steps() - 1) return false;
  const int stop = rec.newest_reported_step + 1;
  rec.stop_step = stop;
  rec.replan = absl::StrFormat("%s; re-planning from the checkpoint of step %d", why, stop);
  Log(absl::StrCat("job ", job.id(), ": ", *rec.replan));
  return true;
}

}  // namespace pp::coordinator
