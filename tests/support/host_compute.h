// A StageCompute that computes nothing, over host memory: for code that drives boundary transfers
// (worker/executor/boundary_transfers.h) without a model, in tests and benches. Every size is 0 and
// every compute call succeeds at once; buffers are zero-filled new[] arrays; StageCompute's default
// shapes and host copies apply.
#ifndef PP_TESTS_SUPPORT_HOST_COMPUTE_H_
#define PP_TESTS_SUPPORT_HOST_COMPUTE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "worker/executor/executor.h"

namespace pp::testing {

class HostCompute : public executor::StageCompute {
 public:
  size_t InputSize(int) const override { return 0; }
  size_t OutputSize(int) const override { return 0; }
  float* AllocBuffer(size_t n) override { return new float[n](); }
  void FreeBuffer(float* buffer) override { delete[] buffer; }
  absl::Status BeginStep(int) override { return absl::OkStatus(); }
  absl::StatusOr<double> Forward(int, int, const float*, float*) override { return 0.0; }
  absl::Status BeginEval(int) override { return absl::OkStatus(); }
  absl::StatusOr<double> Evaluate(int, int, const float*, float*) override { return 0.0; }
  absl::Status Backward(int, int, const float*, float*) override { return absl::OkStatus(); }
  absl::Status BackwardInput(int, int, const float*, float*) override { return absl::OkStatus(); }
  absl::Status BackwardWeight(int, int) override { return absl::OkStatus(); }
  std::vector<executor::TensorSumSq> GradSumSquares() override { return {}; }
  absl::StatusOr<executor::GradientClip> Clip(const std::vector<executor::TensorSumSq>&) override {
    return executor::GradientClip{};
  }
  absl::Status OptimizerStep(int, float) override { return absl::OkStatus(); }
  int64_t LiveActivationBytes() const override { return 0; }
};

}  // namespace pp::testing

#endif  // PP_TESTS_SUPPORT_HOST_COMPUTE_H_
