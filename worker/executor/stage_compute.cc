// StageCompute's defaults (executor.h): shapes from the sizes, the plain mean loss, host copies.
#include <algorithm>
#include <vector>

#include "worker/executor/executor.h"

namespace pp::executor {

BoundaryShape StageCompute::InputShape(int stage, int mb) const {
  return {1, 1, static_cast<int64_t>(InputSize(stage))};
}

BoundaryShape StageCompute::OutputShape(int stage, int mb) const {
  return {1, 1, static_cast<int64_t>(OutputSize(stage))};
}

double StageCompute::StepLoss(const std::vector<double>& loss_by_mb) const {
  double sum = 0;
  for (double loss : loss_by_mb) sum += loss;
  return sum / static_cast<double>(loss_by_mb.size());
}

void StageCompute::CopyToHost(float* host, const float* buffer, size_t n) {
  std::copy(buffer, buffer + n, host);
}

void StageCompute::CopyFromHost(float* buffer, const float* host, size_t n) {
  std::copy(host, host + n, buffer);
}

}  // namespace pp::executor
