#include "coordinator/checkpoint_interval.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/median.h"
#include "common/step_math.h"

namespace pp::coordinator {
namespace {

bool Positive(double x) { return std::isfinite(x) && x > 0; }

void Keep(std::deque<double>& samples, double seconds) {
  samples.push_back(seconds);
  while (samples.size() > kCostSamples) samples.pop_front();
}

double MedianOf(const std::deque<double>& samples) {
  return common::Median(std::vector<double>(samples.begin(), samples.end()));
}

}  // namespace

double YoungIntervalSeconds(double cost_seconds, double mtbf_seconds) {
  if (!Positive(cost_seconds) || !(mtbf_seconds > 0)) return 0;
  return std::sqrt(2 * cost_seconds * mtbf_seconds);
}

double DalyIntervalSeconds(double cost_seconds, double mtbf_seconds) {
  if (!Positive(cost_seconds) || !(mtbf_seconds > 0)) return 0;
  // Daly 2006: past C = 2M a checkpoint costs more than the work a failure is expected to take,
  // and the optimum is to checkpoint once per MTBF.
  if (cost_seconds >= 2 * mtbf_seconds) return mtbf_seconds;
  const double x = cost_seconds / (2 * mtbf_seconds);
  return YoungIntervalSeconds(cost_seconds, mtbf_seconds) * (1 + std::sqrt(x) / 3 + x / 9) -
         cost_seconds;
}

std::optional<int> IntervalSteps(double cost_seconds, double mtbf_seconds, double step_seconds,
                                 int min_steps, int max_steps) {
  if (!std::isfinite(cost_seconds) || cost_seconds < 0 || !Positive(step_seconds) ||
      !(mtbf_seconds > 0)) {
    return std::nullopt;
  }
  // In double until clamped: a tiny step time under a long MTBF overflows an int.
  const double steps =
      std::isinf(mtbf_seconds)
          ? static_cast<double>(max_steps)
          : std::round(DalyIntervalSeconds(cost_seconds, mtbf_seconds) / step_seconds);
  return static_cast<int>(
      std::clamp(steps, static_cast<double>(min_steps), static_cast<double>(max_steps)));
}

void CheckpointCost::AddStep(const pp::v1::JobSpec& spec, int attempt, int step,
                             double step_seconds, double now_unix) {
  const bool follows = attempt == last_attempt_ && step == last_step_ + 1;
  const double wall = now_unix - last_unix_;
  last_attempt_ = attempt;
  last_step_ = step;
  last_unix_ = now_unix;
  if (!follows || common::EvalDue(spec, step)) return;
  const double seconds = std::max(step_seconds, wall);
  if (!std::isfinite(seconds) || seconds <= 0) return;
  // The checkpoint due after step - 1 was written before this step began (task.cc RunSteps).
  const bool after_checkpoint =
      common::CheckpointDue(step - 1, spec.train().steps(), spec.checkpoint().every_steps());
  Keep(after_checkpoint ? after_checkpoint_ : plain_, seconds);
}

std::optional<double> CheckpointCost::CostSeconds() const {
  if (after_checkpoint_.empty() || plain_.empty()) return std::nullopt;
  return std::max(0.0, MedianOf(after_checkpoint_) - MedianOf(plain_));
}

std::optional<double> CheckpointCost::StepSeconds() const {
  if (plain_.empty()) return std::nullopt;
  return MedianOf(plain_);
}

void FailureRate::AddWorkerSeconds(double worker_seconds) {
  if (std::isfinite(worker_seconds) && worker_seconds > 0) worker_seconds_ += worker_seconds;
}

double FailureRate::WorkerMtbfSeconds() const {
  return (kPriorWorkerSeconds + worker_seconds_) / (kPriorFailures + failures_);
}

double FailureRate::JobMtbfSeconds(int workers) const {
  return WorkerMtbfSeconds() / std::max(workers, 1);
}

IntervalChoice ChooseEverySteps(const pp::v1::JobSpec& spec, const CheckpointCost& cost,
                                const FailureRate& failures, int workers) {
  IntervalChoice choice;
  choice.mtbf_seconds = failures.JobMtbfSeconds(workers);
  const int every = spec.checkpoint().every_steps();
  choice.every_steps = every > 0 ? every : kDefaultAutoEverySteps;
  const std::optional<double> measured = cost.CostSeconds();
  const std::optional<double> step = cost.StepSeconds();
  if (!measured || !step) return choice;
  choice.cost_seconds = *measured;
  choice.step_seconds = *step;
  choice.used_cost_seconds = std::max(*measured, kMinCostFraction * *step);
  const std::optional<int> steps = IntervalSteps(choice.used_cost_seconds, choice.mtbf_seconds,
                                                 *step, 1, std::max(spec.train().steps(), 1));
  if (!steps) return choice;
  choice.measured = true;
  choice.every_steps = *steps;
  return choice;
}

std::string DescribeChoice(const IntervalChoice& choice, const FailureRate& failures, int workers) {
  const std::string mtbf = absl::StrFormat(
      "MTBF %.0f s of %d worker(s) (%d failure(s) in %.0f worker-seconds, prior %g in %.0f)",
      choice.mtbf_seconds, workers, failures.failures(), failures.worker_seconds(),
      FailureRate::kPriorFailures, FailureRate::kPriorWorkerSeconds);
  if (!choice.measured) {
    return absl::StrCat("checkpoint every ", choice.every_steps,
                        " steps (auto: no checkpoint cost measured yet; ", mtbf, ")");
  }
  const std::string cost =
      choice.used_cost_seconds > choice.cost_seconds
          ? absl::StrFormat("cost %.3f s (measured %.3f s, at least %g of a step)",
                            choice.used_cost_seconds, choice.cost_seconds, kMinCostFraction)
          : absl::StrFormat("cost %.3f s", choice.cost_seconds);
  return absl::StrCat("checkpoint every ", choice.every_steps, " steps (auto, Daly 2006: ", cost,
                      ", ", mtbf, absl::StrFormat(", step %.3f s)", choice.step_seconds));
}

std::string ApplyAutoEverySteps(pp::v1::Job& job, const CheckpointCost& cost,
                                const FailureRate& failures) {
  if (!job.spec().checkpoint().auto_every_steps()) return "";
  const int workers = job.placement_size();
  const IntervalChoice choice = ChooseEverySteps(job.spec(), cost, failures, workers);
  job.mutable_spec()->mutable_checkpoint()->set_every_steps(choice.every_steps);
  return absl::StrCat("job ", job.id(), ": attempt ", job.attempt(), ": ",
                      DescribeChoice(choice, failures, workers));
}

}  // namespace pp::coordinator
