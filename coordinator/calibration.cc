// JobManager's part of parallel.schedule "auto" (jobs.h): what needs its lock-held state and
// RPCs. It holds the placed workers and sends them Calibrate (the run in flight and the cache of
// what was measured are calibration_run.h's), starts the job on the plan its AutoPlanRun decided
// (auto_plan_run.h: the choice, the trial fit and the prediction checks), and stops it to
// re-plan when a step calls for it.
//
// A job whose spec says "auto" is placed like any other, on a provisional layout (planning.h
// ProvisionalSpec), but instead of RunTask its workers get Calibrate, held BUSY for the job's
// attempt while it stays QUEUED. Once every rank answered, ChooseCalibrated (plan/calibrated.h)
// writes the choice into the job's spec, and the attempt starts on the same workers. A decided
// job is an ordinary job: restarts and resumes run its recorded plan. Only a re-plan (prediction
// drift, CheckPrediction) calibrates it again, from its checkpoint, with M kept.
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/auto_plan_run.h"
#include "coordinator/calibration_run.h"
#include "coordinator/jobs.h"
#include "coordinator/log.h"
#include "coordinator/plan/plan.h"

namespace pp::coordinator {
namespace {

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

}  // namespace

bool JobManager::IsCalibrating(const Held& held) {
  JobRecord* rec = FindLocked(held.job_id);
  return rec != nullptr && rec->calibrating && rec->calibrating->attempt() == held.attempt &&
         rec->job().attempt() == held.attempt;
}

void JobManager::BeginCalibration(JobRecord& rec, std::vector<pp::v1::RankPlacement> placement) {
  const pp::v1::Job& job = rec.job();
  const CalibrationPlan measure = AutoPlanRun::PlanCalibration(job);
  const pp::v1::JobSpec& spec = measure.spec;
  const std::vector<int>& sizes = measure.sizes;
  const std::string key = CalibrationKey(spec, sizes, placement);
  // A re-plan after drift measures again: the cached figures are what its prediction drifted
  // from. One after trial steps chooses again from the job's own calibration, now refitted.
  if (rec.auto_plan.TakeReplanFromRefit() && SameWorkers(job.plan().calibration(), placement)) {
    pp::v1::Calibration calibration = job.plan().calibration();
    calibration.set_cached(true);
    Decide(rec, std::move(placement), std::move(calibration));
    return;
  }
  rec.auto_plan.set_calibration_key(key);
  if (const pp::v1::Calibration* cached = calibrations_.Find(key);
      cached != nullptr && !measure.replan) {
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
  NoteWait(rec, absl::StrCat(measure.replan ? "re-planning: " : "", "calibrating ",
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
    const int failures = rec->auto_plan.CalibrationFailed();
    if (rec->auto_plan.TooManyFailures()) {
      Finish(*rec, pp::v1::FAILED, absl::StrCat(reason, " (", failures, " calibrations failed)"));
      return;
    }
    LogAndApply(*rec, JobEdit::Backoff(absl::Now() + RestartBackoff(failures,
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
  rec->auto_plan.CalibrationSucceeded();
  Decide(*rec, rec->calibrating->placement(), *std::move(calibration));
}

void JobManager::Decide(JobRecord& rec, std::vector<pp::v1::RankPlacement> placement,
                        pp::v1::Calibration calibration) {
  absl::StatusOr<Decision> decision = AutoPlanRun::Decide(rec.job(), std::move(calibration));
  if (!decision.ok()) {
    ReleaseCalibration(rec);
    Finish(rec, pp::v1::FAILED, absl::StrCat("schedule auto: ", decision.status().message()));
    return;
  }
  rec.calibrating.reset();  // its workers stay held: the attempt starts on them
  rec.auto_plan.Decided();
  pp::v1::Job& job = *rec.mutable_job();
  *job.mutable_spec() = std::move(decision->planned.spec);
  rec.schedule = std::move(decision->planned.schedule);
  rec.stage_units = std::move(decision->planned.stage_units);
  rec.rank_bytes = RankBytes(decision->planned.memory);
  *job.mutable_plan() = std::move(decision->plan);
  Log(absl::StrCat("job ", job.id(), ": ", job.plan().reason()));
  Start(rec, Restage(std::move(placement), rec.schedule));
}

void JobManager::CheckPrediction(JobRecord& rec, const StepSummary& summary) {
  pp::v1::Job& job = *rec.mutable_job();
  StepOutcome outcome =
      rec.auto_plan.OnStep(job.spec(), job.start_step(), summary, job.mutable_plan());
  if (outcome.refit && !rec.auto_plan.calibration_key().empty()) {
    calibrations_.Put(rec.auto_plan.calibration_key(), *outcome.refit);
  }
  if (outcome.trial_replan) CallReplan(rec, *outcome.trial_replan, /*from_refit=*/true);
  for (const std::string& note : outcome.notes) Log(absl::StrCat("job ", job.id(), ": ", note));
  if (!outcome.error) return;
  metrics_->StepPredicted(job.id(), *outcome.error);
  if (outcome.drift_replan) CallReplan(rec, *outcome.drift_replan, /*from_refit=*/false);
}

void JobManager::CallReplan(JobRecord& rec, const std::string& why, bool from_refit) {
  if (rec.stop_step > 0) return;  // stopping already
  const std::optional<int> stop =
      rec.auto_plan.Replan(rec.job(), rec.newest_reported_step, why, from_refit);
  if (!stop) return;
  rec.stop_step = *stop;
  Log(absl::StrCat("job ", rec.job().id(), ": ", *rec.auto_plan.replan()));
}

}  // namespace pp::coordinator
