// The deciding half of parallel.schedule "auto" (internal): what one job's auto-plan run keeps
// between calibration and its end, and the choices made from it. The measuring half is
// calibration_run.h (the calibration in flight, JobRecord::calibrating, and the cache);
// JobManager (calibration.cc) issues the Calibrate RPCs, holds and frees the workers, applies the
// job's edits and starts or re-plans it, as this run's answers say.
//
// A run is idle for a job of a fixed schedule (calibrate() false, no prediction). For an "auto"
// job it goes: calibrate() -> Decide (a plan from a calibration) -> Decided -> OnStep per step
// (the trial steps are fitted, the prediction is checked) -> Replan when a step calls for one ->
// TakeReplan once every rank stopped -> calibrate() again, and so on within max_replans.
//
// Threading: no lock of its own. It lives in its JobRecord, under JobManager::mu_ (jobs.h), like
// the rest of the record. It does no RPC and no I/O (not even the log): its methods compute from
// their arguments and this run's fields, and return what JobManager is to do and log.
#ifndef PP_COORDINATOR_AUTO_PLAN_RUN_H_
#define PP_COORDINATOR_AUTO_PLAN_RUN_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/job_logic.h"
#include "coordinator/planning.h"
#include "pp/v1/job.pb.h"

namespace pp::coordinator {

// What the job measures when it calibrates (BeginCalibration): the spec the search starts from,
// the sequence sizes each rank times, and whether this is a re-plan (M kept).
struct CalibrationPlan {
  pp::v1::JobSpec spec;
  std::vector<int> sizes;
  bool replan = false;
};

// The plan Decide chose: the job's spec, schedule and estimates (planning.h), and its record
// (job.plan: what was chosen and why, the runner-up, the calibration).
struct Decision {
  PlannedJob planned;
  pp::v1::JobPlan plan;
};

// What a step of a decided job calls for (OnStep), in the order JobManager acts on it.
struct StepOutcome {
  // The trial was fitted at this step: its refitted calibration, for the CalibrationCache.
  std::optional<pp::v1::Calibration> refit;
  // Another layout at the same M is predicted trial_gain shorter: re-plan from the refit, why.
  std::optional<std::string> trial_replan;
  std::vector<std::string> notes;  // for the log, after trial_replan's
  // The step's prediction error ratio (for the metrics); nullopt: not checked (no prediction, or
  // the attempt's first step, which pays for warm-up).
  std::optional<double> error;
  // The prediction drifted drift_steps in a row: re-plan, measuring again, why.
  std::optional<std::string> drift_replan;
};

class AutoPlanRun {
 public:
  // Calibration that failed this many times in a row fails the job.
  static constexpr int kMaxCalibrationFailures = 3;

  // Whether the workers calibrate before the next placement: set at submission, at reload of an
  // undecided job and at resume (the spec says "auto"), and by TakeReplan; cleared by Decided.
  bool calibrate() const { return calibrate_; }
  void set_calibrate(bool calibrate) { calibrate_ = calibrate; }

  // ---- calibrating ----
  // What `job` measures next: its spec opened up, the sizes (M kept on a re-plan).
  static CalibrationPlan PlanCalibration(const pp::v1::Job& job);
  // Whether this calibration chooses again from the job's own calibration, refitted by its trial
  // (a re-plan called by the trial steps), rather than measure; true once per such re-plan.
  bool TakeReplanFromRefit() { return std::exchange(replan_from_refit_, false); }
  // A calibration failed: the failures in a row, this one included. Fails the job once
  // TooManyFailures.
  int CalibrationFailed() { return ++calibration_failures_; }
  bool TooManyFailures() const { return calibration_failures_ >= kMaxCalibrationFailures; }
  void CalibrationSucceeded() { calibration_failures_ = 0; }
  // The CalibrationCache key of the decided plan's calibration: a trial's refit replaces it.
  const std::string& calibration_key() const { return calibration_key_; }
  void set_calibration_key(std::string key) { calibration_key_ = std::move(key); }

  // ---- deciding ----
  // The plan `job` runs on `calibration` (plan/calibrated.h ChooseCalibrated, then PlanJobSpec,
  // which reads no file): its record is job.plan() updated. Pure; an error is the planner's
  // reason, and the job fails with it.
  static absl::StatusOr<Decision> Decide(const pp::v1::Job& job, pp::v1::Calibration calibration);
  // The job runs the plan Decide chose: no calibration before the next placement, a new trial.
  void Decided() {
    calibrate_ = false;
    trial_ = {};
  }

  // ---- checking ----
  // A step of the decided job whose spec is `spec`, in an attempt from `start_step`: collects
  // the trial steps (after the last, refits `plan`'s calibration and prediction from their
  // overheads), checks the step against `plan`'s prediction and counts the drift in `plan`.
  StepOutcome OnStep(const pp::v1::JobSpec& spec, int start_step, const StepSummary& summary,
                     pp::v1::JobPlan* plan);

  // ---- re-planning ----
  // Calls a re-plan of `job` for `why`, the job to stop after `newest_reported_step` + 1 (the
  // step returned); nullopt when it may not: one is called already, max_replans is spent, or the
  // job ends before a new plan could pay off. `from_refit`: TakeReplanFromRefit.
  std::optional<int> Replan(const pp::v1::Job& job, int newest_reported_step,
                            const std::string& why, bool from_refit);
  // The reason of the re-plan called, if any, with its stop step; nullopt when none.
  const std::optional<std::string>& replan() const { return replan_; }
  // Every rank stopped at the re-plan's step: its reason, and calibrate() again; nullopt when no
  // re-plan was called.
  std::optional<std::string> TakeReplan();

 private:
  // The decided plan's trial steps: traced steps after the first, until auto_plan.trial_steps of
  // them are fitted into plan.calibration.trial.
  struct Trial {
    std::vector<pp::v1::StepTrace> traces;
    std::vector<double> seconds;
    bool done = false;
  };

  // Collects a trial step; after the last, the refit and the re-plan it may call for.
  void FitTrial(const pp::v1::JobSpec& spec, const StepSummary& summary, pp::v1::JobPlan* plan,
                StepOutcome* outcome);

  bool calibrate_ = false;
  int calibration_failures_ = 0;  // in a row
  std::string calibration_key_;
  Trial trial_;
  std::optional<std::string> replan_;
  bool replan_from_refit_ = false;
};

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_AUTO_PLAN_RUN_H_
