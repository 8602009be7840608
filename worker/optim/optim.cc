#include "worker/optim/optim.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/step_math.h"

namespace pp::optim {

AdamWConfig AdamWConfigFromSpec(const pp::v1::TrainSpec& train) {
  AdamWConfig c;
  c.lr = train.lr();
  c.weight_decay = train.weight_decay();
  c.grad_clip = train.grad_clip();
  if (train.beta1() != 0) c.beta1 = train.beta1();
  if (train.beta2() != 0) c.beta2 = train.beta2();
  if (train.eps() != 0) c.eps = train.eps();
  return c;
}

AdamWConfig AdamWConfigAtStep(const pp::v1::TrainSpec& train, int step) {
  AdamWConfig c = AdamWConfigFromSpec(train);
  c.lr = common::LearningRateAt(train, step);
  return c;
}

SumSquares GradSumSquares(kernels::Ops& ops, const std::vector<model::ModelTensor>& tensors) {
  SumSquares sums;
  for (const auto& t : tensors) sums[t.name] = ops.SumSquares(t.grad, t.size);
  return sums;
}

absl::Status MergeSumSquares(const SumSquares& part, SumSquares& into) {
  for (const auto& [name, value] : part) {
    if (!into.emplace(name, value).second) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' reported by two stages"));
    }
  }
  return absl::OkStatus();
}

double GlobalNorm(const SumSquares& sums) {
  double total = 0.0;
  for (const auto& [name, value] : sums) total += value;
  return std::sqrt(total);
}

float ClipScale(double norm, double max_norm) {
  if (max_norm <= 0.0) return 1.0f;
  double scale = max_norm / (norm + 1e-6);
  return scale < 1.0 ? static_cast<float>(scale) : 1.0f;
}

void ApplyAdamW(kernels::Ops& ops, std::vector<model::ModelTensor>& tensors,
                const AdamWConfig& config, int step, float grad_scale) {
  kernels::AdamWParams p;
  p.lr = static_cast<float>(config.lr);
  p.beta1 = static_cast<float>(config.beta1);
  p.beta2 = static_cast<float>(config.beta2);
  p.eps = static_cast<float>(config.eps);
  p.step = step;
  p.grad_scale = grad_scale;
  for (auto& t : tensors) {
    p.weight_decay = t.shape.size() == 2 ? static_cast<float>(config.weight_decay) : 0.0f;
    ops.AdamW(t.value, t.grad, t.exp_avg, t.exp_avg_sq, t.size, p);
  }
}

}  // namespace pp::optim
