// The machine's measured matrix-product rate: the denominator of MFU (model FLOPs utilisation),
// measured with our own kernels (Ops::MatmulForward, as the model's Linear layers call it), at a
// job's precision and thread count, so the share printed is of what this build can reach here.
//
// Contract: MeasureGemmPeak runs one square product M = K = N (1024 on the CPU: 2 GFLOP, compute
// bound for every cache; 4096 on a GPU) repeatedly for about `seconds` in all (at least 3 runs,
// after one warm-up run that is not timed) and reports the best run: the least disturbed by other
// processes on a shared machine. The FLOPs of a run are 2 x M x K x N. It allocates 3 M^2 floats
// on the device for its duration. Errors: a device that is not "cpu" or "cuda:N", and MakeOps's
// for a GPU (a missing plugin or device).
#ifndef PP_KERNELS_PEAK_H_
#define PP_KERNELS_PEAK_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/precision.h"

namespace pp::kernels {

struct GemmPeak {
  double flops_per_second = 0;  // the best run's
  int size = 0;                 // M = K = N
  int threads = 1;
  common::Precision precision = common::Precision::kFp32;
  int runs = 0;  // timed runs
};

absl::StatusOr<GemmPeak> MeasureGemmPeak(const std::string& device, int threads,
                                         common::Precision precision, double seconds = 0.4);

// "fp32 GEMM 1024^3".
std::string GemmPeakShape(const GemmPeak& peak);

}  // namespace pp::kernels

#endif  // PP_KERNELS_PEAK_H_
