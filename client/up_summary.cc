#include "client/up_summary.h"

#include <algorithm>
#include <chrono>
#include <iostream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/clock_text.h"
#include "common/epoch.h"
#include "common/file_io.h"
#include "common/median.h"
#include "common/step_math.h"
#include "coordinator/plan/plan.h"
#include "worker/trainer/flop_rate.h"

namespace pp::client {
namespace {

std::unique_ptr<grpc::ClientContext> TenSeconds() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return context;
}

// "0.002 after 30 warm-up steps, cosine to 0.0002 by step 300".
std::string ScheduleText(const pp::v1::TrainSpec& t) {
  std::string text = absl::StrCat(t.lr());
  if (t.warmup_steps() > 0) absl::StrAppend(&text, " after ", t.warmup_steps(), " warm-up steps");
  if (t.decay().empty() || t.decay() == "constant") return text;
  absl::StrAppend(&text, ", ", t.decay(), " to ", t.min_lr(), " by step ",
                  t.warmup_steps() + common::DecaySteps(t));
  return text;
}

// The spec as ppcoord runs it: the job's (train.steps derived from train.epochs, the "auto"
// fields chosen) when GetJob answered, else the one submitted with train.steps from the events
// (their total_steps): a spec of train.epochs alone says steps 0.
pp::v1::JobSpec ResolvedSpec(const UpRun& run, const pp::v1::Job* job) {
  if (job != nullptr) return job->spec();
  pp::v1::JobSpec spec = run.spec;
  const int total = run.first_step ? run.first_step->total_steps() : run.last_event.total_steps();
  if (total > 0) spec.mutable_train()->set_steps(total);
  return spec;
}

// `s` is ResolvedSpec's. Returns the tokens/s printed, 0 when the run has no step timing.
double PrintLossAndSpeed(const UpRun& run, const pp::v1::JobSpec& s) {
  const pp::v1::JobEvent& last = run.last_event;
  const pp::v1::JobEvent& first = run.first_step.value_or(last);
  const double tokens_per_step = static_cast<double>(common::GlobalTokensPerStep(s));
  std::cout << "\nsummary of job " << run.job_id << "\n";
  std::cout << absl::StrFormat("  loss        %.4f at step %d -> %.4f at step %d\n", first.loss(),
                               first.step(), last.loss(), last.step());
  if (last.has_eval()) {
    std::cout << absl::StrFormat("  eval loss   %.4f after step %d\n", last.eval_loss(),
                                 last.step());
  }
  if (last.has_epoch()) {
    std::cout << absl::StrFormat(
        "  epoch       %s: %d passes over %d training windows + %d sequences\n",
        common::EpochText(last.epoch()), last.epoch().completed(), last.epoch().windows(),
        last.epoch().sequence());
  }
  std::cout << "  lr          " << ScheduleText(s.train()) << "\n";
  const double seconds = last.time_unix() - first.time_unix();
  if (last.step() <= first.step() || seconds <= 0) return 0;
  const double tokens_per_second = tokens_per_step * (last.step() - first.step()) / seconds;
  std::cout << absl::StrFormat("  tokens/s    %.0f (mean over steps %d-%d: %.0f tokens in %s)\n",
                               tokens_per_second, first.step() + 1, last.step(),
                               tokens_per_step * (last.step() - first.step()), ClockText(seconds));
  return tokens_per_second;
}

// The model FLOPs a second and their share of the peak of the job's ranks, each a worker process
// on this machine (trainer/flop_rate.h: one process's measured GEMM rate x the ranks, capped by
// the cores).
void PrintFlopRate(const UpRun& run, const pp::v1::JobSpec& s, double tokens_per_second) {
  const pp::v1::ParallelSpec& p = s.parallel();
  const int ranks = std::max(p.pipeline(), 1) * std::max(p.tensor(), 1) * std::max(p.data(), 1);
  std::cout << "  FLOP rate   "
            << trainer::FlopRateText(s.model(), tokens_per_second,
                                     trainer::PeakSetupOf(s, run.device, ranks))
            << "\n";
}

// The kept traced steps (ppcoord keeps the newest few) from step 2 on, each as measured and as
// re-simulated under its own measured costs (plan.h CompareTraceWithSimulation): medians, so one
// step the machine slowed does not decide the figure.
void PrintTracedBubbles(const pp::v1::Schedule& schedule,
                        const std::vector<pp::v1::StepTrace>& traces) {
  std::vector<double> measured, simulated, send, latency;
  int first = 0, last = 0;
  for (const pp::v1::StepTrace& trace : traces) {
    absl::StatusOr<pp::plan::TracedBubble> compared =
        pp::plan::CompareTraceWithSimulation(schedule, trace);
    if (!compared.ok()) continue;
    if (first == 0) first = trace.step();
    last = trace.step();
    measured.push_back(compared->measured), simulated.push_back(compared->simulated);
    send.push_back(compared->costs.send_overhead), latency.push_back(compared->costs.comm_latency);
  }
  if (measured.empty()) return;
  std::cout << absl::StrFormat("              traced     %5.1f%% (median of steps %d-%d, from their "
                               "traces)\n",
                               100 * common::Median(measured), first, last);
  std::cout << absl::StrFormat(
      "              simulated  %5.1f%% (median of the same steps, each under its own measured "
      "costs: per-stage F, B, I, W, %.2f ms per send, %.2f ms latency)\n",
      100 * common::Median(simulated), 1e3 * common::Median(send), 1e3 * common::Median(latency));
}

// `plan` is null when ppcoord did not give it.
void PrintBubbles(const UpRun& run, const pp::v1::PlanJobResponse* plan,
                  const std::vector<pp::v1::StepTrace>& traces) {
  std::cout << "  bubble      idle share of all ranks' time, first action to last\n";
  if (run.bubble_steps > 0) {
    std::cout << absl::StrFormat("              measured   %5.1f%% (mean of steps 2-%d, whole steps: "
                                 "the optimizer busy, the step's collectives idle)\n",
                                 100 * run.bubble_sum / run.bubble_steps, run.last_event.step());
  }
  if (plan == nullptr) return;
  std::cout << absl::StrFormat(
      "              simulated  %5.1f%% (%s D=%d M=%d, F=1 B=2, free communication)\n",
      100 * plan->schedule().simulation().bubble_fraction(), plan->schedule().name(),
      plan->schedule().pipeline(), plan->schedule().microbatches());
  PrintTracedBubbles(plan->schedule(), traces);
}

absl::Status PrintTimeline(const UpRun& run, const pp::v1::StepTrace& trace, const WorkDir& dir,
                           std::string path) {
  const pp::plan::Timeline timeline = pp::plan::TimelineFromTrace(trace);
  std::cout << "\nstep " << trace.step() << " as measured:\n"
            << pp::plan::RenderAscii(timeline, pp::plan::TimeUnit::kSeconds);
  if (path.empty()) {
    path = dir.temporary() ? absl::StrCat(TempRoot(), "/ppctl-up-", run.job_id, ".trace.json")
                           : absl::StrCat(dir.path(), "/", run.job_id, ".trace.json");
  }
  if (absl::Status written =
          pp::common::WriteFileAtomic(path, pp::plan::RenderChrome(timeline, 1e6));
      !written.ok()) {
    return written;
  }
  std::cout << "\nChrome trace of step " << trace.step() << ": " << path
            << " (open in ui.perfetto.dev or chrome://tracing)\n";
  return absl::OkStatus();
}

}  // namespace

// parallel.schedule "auto": what ppcoord chose, its prediction against the last step (and the
// first prediction, when its trial steps refitted it), and the runner-up.
void PrintAutoPlan(const pp::v1::Job& job) {
  const pp::v1::JobPlan& plan = job.plan();
  if (plan.chosen().empty()) return;
  std::cout << "  plan        " << plan.chosen() << absl::StrFormat(
      " (auto, %d candidates, calibrated in %.2f s%s)\n", plan.candidates(),
      plan.calibration().seconds(), plan.calibration().cached() ? ", cached" : "");
  const double tokens = static_cast<double>(common::GlobalTokensPerStep(job.spec()));
  if (job.tokens_per_second() > 0) {
    const pp::v1::StepOverheads& trial = plan.calibration().trial();
    std::cout << absl::StrFormat("              predicted %.1f ms per step, measured %.1f ms "
                                 "(last step; %d re-plans)\n",
                                 1e3 * plan.predicted_step_seconds(),
                                 1e3 * tokens / job.tokens_per_second(), plan.replans());
    if (plan.calibration().has_trial() && trial.plan() == plan.chosen()) {
      std::cout << absl::StrFormat(
          "              chosen on %.1f ms; refitted after %d trial steps (sends %.2f ms, a "
          "waited message %.2f ms, step tail %.1f ms, %.2f ms an action)\n",
          1e3 * plan.first_predicted_step_seconds(), trial.steps(), 1e3 * trial.send_seconds(),
          1e3 * trial.latency_seconds(), 1e3 * trial.tail_seconds(), 1e3 * trial.action_seconds());
    }
  }
  if (!plan.runner_up().empty()) {
    std::cout << "              runner-up " << plan.runner_up() << ": " << plan.runner_up_reason()
              << "\n";
  }
}

absl::Status PrintSummary(pp::v1::Coordinator::Stub& stub, const UpRun& run, const WorkDir& dir,
                          const std::string& chrome_trace) {
  pp::v1::GetTraceRequest trace_request;
  trace_request.set_job_id(run.job_id);
  pp::v1::StepTrace trace;
  const grpc::Status traced = stub.GetTrace(TenSeconds().get(), trace_request, &trace);
  std::vector<pp::v1::StepTrace> kept;  // steps 2.. of the newest ppcoord keeps, the last above
  for (int step = std::max(2, trace.step() - 7); traced.ok() && step < trace.step(); ++step) {
    trace_request.set_step(step);
    if (stub.GetTrace(TenSeconds().get(), trace_request, &kept.emplace_back()).ok()) continue;
    kept.pop_back();
  }
  if (traced.ok() && trace.step() >= 2) kept.push_back(trace);
  // The job's own spec: with schedule "auto" it holds what ppcoord chose.
  pp::v1::GetJobRequest job_request;
  job_request.set_job_id(run.job_id);
  pp::v1::Job job;
  const grpc::Status got = stub.GetJob(TenSeconds().get(), job_request, &job);
  const pp::v1::JobSpec spec = ResolvedSpec(run, got.ok() ? &job : nullptr);
  pp::v1::PlanJobRequest plan_request;
  *plan_request.mutable_spec() = spec;
  // The steps stand for the epochs: a spec may set only one of them.
  plan_request.mutable_spec()->mutable_train()->clear_epochs();
  pp::v1::PlanJobResponse plan;
  const grpc::Status planned = stub.PlanJob(TenSeconds().get(), plan_request, &plan);

  PrintFlopRate(run, spec, PrintLossAndSpeed(run, spec));
  if (got.ok()) PrintAutoPlan(job);
  PrintBubbles(run, planned.ok() ? &plan : nullptr, kept);
  if (!dir.temporary()) {
    std::cout << "  checkpoints " << dir.path() << "/checkpoints/" << run.job_id << "/\n";
  }
  if (!traced.ok()) {
    return absl::UnavailableError(
        absl::StrCat("trace of job ", run.job_id, ": ", traced.error_message()));
  }
  return PrintTimeline(run, trace, dir, chrome_trace);
}

}  // namespace pp::client
