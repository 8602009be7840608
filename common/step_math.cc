#include "common/step_math.h"

#include <algorithm>
#include <cmath>

#include "common/packing.h"

namespace pp::common {

int64_t GlobalMicrobatches(const pp::v1::JobSpec& spec) {
  return int64_t{spec.train().microbatches()} * std::max(1, spec.parallel().data());
}

int64_t ReplicaTokensPerStep(const pp::v1::JobSpec& spec) {
  return static_cast<int64_t>(spec.train().microbatches()) * MaxMicrobatchTokens(spec);
}

int64_t GlobalTokensPerStep(const pp::v1::JobSpec& spec) {
  return ReplicaTokensPerStep(spec) * std::max(1, spec.parallel().data());
}

int64_t DataPositionAtStep(int64_t step, int64_t microbatches, int64_t microbatch_size) {
  return step * microbatches * microbatch_size;
}

bool CheckpointDue(int done_steps, int total_steps, int every_steps) {
  return done_steps == total_steps || (every_steps > 0 && done_steps % every_steps == 0);
}

bool EvalEnabled(const pp::v1::JobSpec& spec) { return spec.eval().batches() >= 1; }

bool EvalDue(const pp::v1::JobSpec& spec, int done_steps) {
  return EvalEnabled(spec) &&
         CheckpointDue(done_steps, spec.train().steps(), spec.eval().every_steps());
}

WindowSplit SplitWindows(int64_t n_tokens, int64_t seq_len, double holdout_fraction) {
  const int64_t starts = n_tokens - seq_len;
  WindowSplit split;
  if (holdout_fraction <= 0) {
    split.train_starts = starts;
    split.held_out_first = starts;
    return split;
  }
  split.held_out_starts =
      static_cast<int64_t>(std::floor(static_cast<double>(starts) * holdout_fraction));
  split.held_out_first = starts - split.held_out_starts;
  split.train_starts = split.held_out_first - seq_len;
  return split;
}

int64_t DecaySteps(const pp::v1::TrainSpec& train) {
  if (train.decay_steps() > 0) return train.decay_steps();
  return std::max<int64_t>(1, int64_t{train.steps()} - train.warmup_steps());
}

double LearningRateAt(const pp::v1::TrainSpec& train, int step) {
  const double lr = train.lr();
  const int64_t warmup = train.warmup_steps();
  if (warmup > 0 && step <= warmup) return lr * static_cast<double>(step) / static_cast<double>(warmup);
  if (train.decay().empty() || train.decay() == "constant") return lr;
  const double q =
      std::min(1.0, static_cast<double>(step - warmup) / static_cast<double>(DecaySteps(train)));
  const double min_lr = train.min_lr();
  if (train.decay() == "cosine") return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(M_PI * q));
  return (1.0 - q) * lr + q * min_lr;  // linear, written so that q = 1 gives min_lr exactly
}

}  // namespace pp::common
