// The single-process reference trainer: one StageModel holding every unit, gradient accumulation
// over M microbatches, AdamW with canonical clipping. The distributed runtime must reproduce its
// losses bit for bit on the CPU.
//
// Contract:
// - Step k (0-based) zeroes the gradients, runs forward then backward of microbatches j = 0..M-1
//   in order on the windows of worker/data/data.h (position k*M*B), then one AdamW update with
//   step number k+1. Its loss = (sum over j in order of microbatch mean loss, in double) / M.
// - A step whose loss or global gradient norm is NaN or Inf is not applied (weights and moments
//   stay); the (train.max_bad_steps + 1)-th such step ends Train with OutOfRange naming the step,
//   the rank (0) and the value, as the distributed runtime does.
// - With spec.eval: after every eval.every_steps steps and after the last step (also when
//   options.steps stops early), the eval loss over eval.batches batches of M microbatches of the
//   eval windows (worker/data/data.h), each microbatch run by StageModel::Evaluate, which touches
//   no gradient: their losses summed in double in (batch, microbatch) order over batches x M.
//   Training is bitwise the same with and without it.
// - With options.checkpoint_root set, a checkpoint in the common/checkpoint.h layout is written
//   every spec.checkpoint.every_steps steps and after the last step: one shard
//   rank-00000.safetensors with the model tensors and optim.exp_avg.* / optim.exp_avg_sq.*, then
//   the manifest; only the newest spec.checkpoint.keep are kept.
#ifndef PP_WORKER_TRAINER_TRAINER_H_
#define PP_WORKER_TRAINER_TRAINER_H_

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pp/v1/job.pb.h"

namespace pp::trainer {

struct TrainOptions {
  std::string device = "cpu";
  int threads = 0;              // BLAS threads; 0: the spec's train.threads
  int steps = 0;                // 0: the spec's train.steps
  std::string checkpoint_root;  // empty: no checkpoints
  std::ostream* log = nullptr;  // one line per step when set
  // TrainMain only: where to write "STEP LOSS" per step (%.17g: equal text is equal bits).
  std::string losses_path;
};

struct TrainResult {
  std::vector<double> losses;                         // one per step
  std::vector<double> step_seconds;                   // wall time of each step
  std::map<std::string, std::vector<float>> weights;  // final values, by tensor name
  double seconds = 0.0;                               // wall time of the steps
  int64_t tokens = 0;                                 // tokens trained on
  int skipped_steps = 0;  // steps not applied: non-finite loss or gradient norm
  struct Eval {
    int step = 0;  // completed steps before it
    double loss = 0;
  };
  std::vector<Eval> evals;  // every evaluation, in order (spec.eval)
};

// `spec` must have defaults applied and be valid (common/job_spec.h).
absl::StatusOr<TrainResult> Train(const pp::v1::JobSpec& spec, const TrainOptions& options);

// `ppctl train FILE`: load, default and validate the spec, train, log each step to stdout, and
// write options.losses_path when set. Returns the process exit code; errors are one line on
// stderr.
int TrainMain(const std::string& spec_path, const TrainOptions& options);

}  // namespace pp::trainer

#endif  // PP_WORKER_TRAINER_TRAINER_H_
