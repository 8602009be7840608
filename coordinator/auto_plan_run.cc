#include "coordinator/auto_plan_run.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/job_spec.h"
#include "coordinator/plan/plan.h"

namespace pp::coordinator {
namespace {

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

std::string Ms(double seconds) { return absl::StrFormat("%.1f ms", seconds * 1e3); }

// A decided job re-plans at the M it runs; the first decision chooses M too (0).
int FixedMicrobatches(const pp::v1::Job& job) {
  return job.plan().chosen().empty() ? 0 : job.spec().train().microbatches();
}

}  // namespace

CalibrationPlan AutoPlanRun::PlanCalibration(const pp::v1::Job& job) {
  CalibrationPlan plan{
      .spec = AutoSpecOf(job.spec()), .sizes = {}, .replan = !job.plan().chosen().empty()};
  plan.sizes = pp::plan::CalibrationSequences(plan.spec, FixedMicrobatches(job));
  return plan;
}

absl::StatusOr<Decision> AutoPlanRun::Decide(const pp::v1::Job& job,
                                             pp::v1::Calibration calibration) {
  const bool replan = !job.plan().chosen().empty();
  absl::StatusOr<pp::plan::CalibratedPlan> plan =
      pp::plan::ChooseCalibrated(AutoSpecOf(job.spec()), calibration, FixedMicrobatches(job));
  if (!plan.ok()) return plan.status();
  // PlanJobSpec reads no file (under mu_); the data the choice did not change was checked at
  // submission.
  absl::StatusOr<PlannedJob> planned = PlanJobSpec(plan->spec);
  if (!planned.ok()) return planned.status();
  Decision decision{.planned = *std::move(planned), .plan = job.plan()};
  pp::v1::JobPlan& record = decision.plan;
  record.set_reason(plan->reason);
  record.set_chosen(plan->chosen);
  record.set_predicted_step_seconds(plan->predicted_step_seconds);
  record.set_first_predicted_step_seconds(plan->predicted_step_seconds);
  record.set_runner_up(plan->runner_up);
  record.set_runner_up_step_seconds(plan->runner_up_step_seconds);
  record.set_runner_up_reason(plan->runner_up_reason);
  record.set_candidates(plan->candidates);
  *record.mutable_calibration() = std::move(calibration);
  record.set_drift_run(0);
  if (replan) record.set_replans(record.replans() + 1);
  return decision;
}

StepOutcome AutoPlanRun::OnStep(const pp::v1::JobSpec& spec, int start_step,
                                const StepSummary& summary, pp::v1::JobPlan* plan) {
  StepOutcome outcome;
  // The first step of an attempt pays for warm-up (allocation, connections, caches).
  if (plan->predicted_step_seconds() <= 0 || summary.step - 1 <= start_step) return outcome;
  if (!trial_.done) FitTrial(spec, summary, plan, &outcome);
  const double predicted = plan->predicted_step_seconds();
  const double error = std::abs(summary.step_seconds - predicted) / predicted;
  plan->set_prediction_error_ratio(error);
  outcome.error = error;
  const pp::v1::AutoPlanSpec& bounds = spec.parallel().auto_plan();
  plan->set_drift_run(error > bounds.drift_threshold() ? plan->drift_run() + 1 : 0);
  if (plan->drift_run() < bounds.drift_steps()) return outcome;
  outcome.drift_replan = absl::StrFormat(
      "prediction drift: step %d took %s against %s predicted (error %.0f%% > %.0f%%, %d steps "
      "in a row)",
      summary.step, Ms(summary.step_seconds), Ms(predicted), 100 * error,
      100 * bounds.drift_threshold(), plan->drift_run());
  return outcome;
}

void AutoPlanRun::FitTrial(const pp::v1::JobSpec& spec, const StepSummary& summary,
                           pp::v1::JobPlan* plan, StepOutcome* outcome) {
  const pp::v1::AutoPlanSpec& bounds = spec.parallel().auto_plan();
  trial_.done = bounds.trial_steps() < 0;  // no trial
  if (trial_.done) return;
  trial_.traces.push_back(summary.trace);
  trial_.seconds.push_back(summary.step_seconds);
  if (static_cast<int>(trial_.seconds.size()) < bounds.trial_steps()) return;
  trial_.done = true;
  absl::StatusOr<pp::v1::StepOverheads> fitted =
      pp::plan::FitStepOverheads(trial_.traces, trial_.seconds);
  trial_.traces.clear();
  if (!fitted.ok()) {
    outcome->notes.push_back(absl::StrCat("trial steps not fitted: ", fitted.status().message()));
    return;
  }
  fitted->set_plan(plan->chosen());
  absl::StatusOr<pp::plan::Refit> refitted =
      pp::plan::RefitWithTrial(spec, plan->calibration(), *fitted);
  if (!refitted.ok()) {
    outcome->notes.push_back(absl::StrCat("trial steps not fitted: ", refitted.status().message()));
    return;
  }
  const pp::v1::Calibration& calibration = refitted->calibration;
  const double refit = refitted->predicted_step_seconds;
  // Later jobs on these workers choose with the overheads too.
  outcome->refit = calibration;
  *plan->mutable_calibration() = calibration;
  std::string note = absl::StrFormat(
      "trial steps to %d: sends %s, a waited message %s, step tail %s, %s an action: predicted "
      "%s per step (chosen with %s)",
      summary.step, Ms(fitted->send_seconds()), Ms(fitted->latency_seconds()),
      Ms(fitted->tail_seconds()), Ms(calibration.trial().action_seconds()), Ms(refit),
      Ms(plan->predicted_step_seconds()));
  plan->set_predicted_step_seconds(refit);
  plan->set_drift_run(0);
  absl::StatusOr<pp::plan::CalibratedPlan> best = pp::plan::ChooseCalibrated(
      AutoSpecOf(spec), plan->calibration(), spec.train().microbatches());
  if (best.ok() && best->chosen != plan->chosen() &&
      best->predicted_step_seconds < (1 - bounds.trial_gain()) * refit) {
    outcome->trial_replan =
        absl::StrFormat("trial steps: %s is predicted %s per step, %.0f%% shorter than %s",
                        best->chosen, Ms(best->predicted_step_seconds),
                        100 * (1 - best->predicted_step_seconds / refit), plan->chosen());
  }
  plan->set_reason(absl::StrCat(plan->reason(), "\n", note));
  outcome->notes.push_back(std::move(note));
}

std::optional<int> AutoPlanRun::Replan(const pp::v1::Job& job, int newest_reported_step,
                                       const std::string& why, bool from_refit) {
  const pp::v1::AutoPlanSpec& bounds = job.spec().parallel().auto_plan();
  if (replan_ || bounds.max_replans() < 0 || job.plan().replans() >= bounds.max_replans()) {
    return std::nullopt;
  }
  // It ends before a new plan could pay off; compared before adding, which overflows at INT_MAX.
  if (newest_reported_step >= job.spec().train().steps() - 1) return std::nullopt;
  const int stop = newest_reported_step + 1;
  replan_ = absl::StrFormat("%s; re-planning from the checkpoint of step %d", why, stop);
  if (from_refit) replan_from_refit_ = true;
  return stop;
}

std::optional<std::string> AutoPlanRun::TakeReplan() {
  if (!replan_) return std::nullopt;
  calibrate_ = true;
  return std::exchange(replan_, std::nullopt);
}

}  // namespace pp::coordinator
