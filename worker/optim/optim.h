// AdamW over a stage's named tensors, with gradient clipping by a canonical global L2 norm.
//
// Contract:
// - Weight decay applies to 2-D tensors only (matrices and embeddings), never to biases or
//   LayerNorm parameters.
// - The global norm is sqrt(sum of per-tensor sums of squares), the per-tensor sums taken in
//   double and combined in tensor-name order (std::map order). A distributed runtime gathers
//   GradSumSquares from every stage, merges them with MergeSumSquares and calls GlobalNorm: the
//   result, and so every clipped update, is bitwise the same whatever the layout.
// - Clipping follows torch.nn.utils.clip_grad_norm_: scale = max_norm / (norm + 1e-6), capped
//   at 1; max_norm <= 0 disables it.
#ifndef PP_WORKER_OPTIM_OPTIM_H_
#define PP_WORKER_OPTIM_OPTIM_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kernels/ops.h"
#include "pp/v1/job.pb.h"
#include "worker/model/model.h"

namespace pp::optim {

struct AdamWConfig {
  double lr = 3e-4;  // the rate of this update
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;
  double grad_clip = 0.0;  // max global L2 norm; 0 disables
};

// TrainSpec defaults: beta1 0.9, beta2 0.95, eps 1e-8 where the spec says 0.
// lr is train.lr, the peak rate.
AdamWConfig AdamWConfigFromSpec(const pp::v1::TrainSpec& train);
// The config of update `step` (1-based): lr follows the schedule (common::LearningRateAt).
AdamWConfig AdamWConfigAtStep(const pp::v1::TrainSpec& train, int step);

using SumSquares = std::map<std::string, double>;  // tensor name -> sum of grad^2

SumSquares GradSumSquares(kernels::Ops& ops, const std::vector<model::ModelTensor>& tensors);
// Adds `part` into `into`; a name present in both is an error (each tensor lives on one stage).
absl::Status MergeSumSquares(const SumSquares& part, SumSquares& into);
double GlobalNorm(const SumSquares& sums);
float ClipScale(double norm, double max_norm);

// One AdamW update (step is 1-based) with gradients multiplied by grad_scale first.
void ApplyAdamW(kernels::Ops& ops, std::vector<model::ModelTensor>& tensors,
                const AdamWConfig& config, int step, float grad_scale);

}  // namespace pp::optim

#endif  // PP_WORKER_OPTIM_OPTIM_H_
