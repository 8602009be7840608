// The "FLOP rate" line of `ppctl train` and `ppctl up`: the model FLOPs a second of a finished
// run (common/model_flops.h, per token, x its tokens/s) and their share of the machine's measured
// peak (kernels/peak.h), i.e. the MFU. Here so ppctl (client/) can reach the kernels' measurement.
//
// The peak of P worker processes of t threads each on one machine: one process's measured GEMM
// rate at t threads x P, P capped at the machine's cores / t (more processes than that share the
// cores, and add nothing), and never under 1 (the one process measured). Workers sharing one GPU
// (device cuda:N) share its rate: P counts as 1.
//
// Contract: FlopRateText never fails: a run without step timing (tokens_per_second <= 0) skips
// the measurement and says so, and a failed measurement is named in the text in place of the
// share. With a rate it spends about 0.5 s measuring, on the calling thread and `threads` threads.
#ifndef PP_WORKER_TRAINER_FLOP_RATE_H_
#define PP_WORKER_TRAINER_FLOP_RATE_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/precision.h"
#include "kernels/peak.h"
#include "pp/v1/job.pb.h"

namespace pp::trainer {

struct PeakSetup {
  std::string device = "cpu";  // the run's --device
  int threads = 1;             // compute threads of each process
  common::Precision precision = common::Precision::kFp32;
  int processes = 1;  // processes computing at once (ppctl up: the job's ranks)
  // data.documents "mask": attention computes each document's block only, so 12LTC (whole
  // windows) overstates the FLOPs done; the text says so.
  bool masked_documents = false;
};

// The setup of `spec`'s workers (train.precision, train.threads, data.documents), `processes` of
// them on `device`; an unknown precision counts as fp32 (a validated spec has none).
PeakSetup PeakSetupOf(const pp::v1::JobSpec& spec, const std::string& device, int processes);

// e.g. "12.3 GFLOP/s (6N+12LTC per token x tokens/s), 41.0% of the measured peak 30.0 GFLOP/s
// (fp32 GEMM 1024^3 at 1 thread x 2 processes)". No label: the caller's summary places it.
std::string FlopRateText(const pp::v1::ModelSpec& model, double tokens_per_second,
                         const PeakSetup& setup);

// FlopRateText's text for a measured (or failed) `peak`: no measuring, for tests. `cores`: the
// machine's logical CPUs.
std::string FlopRateTextWith(double flops_per_second, const absl::StatusOr<kernels::GemmPeak>& peak,
                             const PeakSetup& setup, int cores);

}  // namespace pp::trainer

#endif  // PP_WORKER_TRAINER_FLOP_RATE_H_
