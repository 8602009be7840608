// Executor: what every rank does once its program ran: the all-gather of gradient sums of
// squares and losses, the canonical clip scale, and the optimizer step unless a value is not
// finite (the same decision on every rank, from the same gather).
#include <vector>

#include "worker/executor/executor.h"
#include "worker/executor/sum_squares.h"

namespace pp::executor {

// The canonical clip scale over every rank, then the optimizer step.
absl::Status Executor::UpdateWeights(int step, Clock::time_point start, StepResult& result) {
  absl::StatusOr<std::vector<RankSums>> gathered = GatherSums(result);
  if (!gathered.ok()) return gathered.status();
  std::vector<TensorSumSq> all;
  for (const RankSums& part : *gathered) all.insert(all.end(), part.sums.begin(), part.sums.end());
  absl::StatusOr<GradientClip> clip = compute_->Clip(all);
  if (!clip.ok()) return clip.status();
  result.grad_norm = clip->norm;
  // Every rank decides on the same gather, so all of them skip the same steps and stay in step.
  result.non_finite = FindNonFinite(*gathered);
  if (!result.non_finite) {
    const double optimizer_start = SecondsSince(start);
    if (absl::Status s = compute_->OptimizerStep(step, clip->scale); !s.ok()) return s;
    result.busy_seconds[static_cast<int>(Phase::kOptimizer)] +=
        SecondsSince(start) - optimizer_start;
  }
  result.step_seconds = SecondsSince(start);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<RankSums>> Executor::GatherSums(StepResult& result) {
  RankSums mine;
  if (result.has_loss) mine.loss = result.loss;
  mine.sums = compute_->GradSumSquares();
  const Clock::time_point start = Clock::now();
  absl::StatusOr<std::vector<RankSums>> all = AllGatherSums(*transport_, mine);
  result.wait_seconds += SecondsSince(start);
  return all;
}

}  // namespace pp::executor
