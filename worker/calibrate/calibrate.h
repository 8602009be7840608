// A worker's answer to pp.v1.Worker/Calibrate (parallel.schedule "auto", docs/planner.md "Auto at
// run time"): what one microbatch costs in each kind of partition unit on this worker, what the
// link to the next pipeline rank costs, and how much memory the worker has. ppcoord calls every
// placed worker at once and chooses the schedule, V, M and partition from the answers.
//
// Contract:
// - CheckRequest: the spec passes common::ApplyDefaults + ValidateJobSpecFields with
//   parallel.schedule read as "1f1b" (it arrives as "auto"): it opens none of the spec's files,
//   which calibration does not read (the task checks them); 1 <= world_size <= kMaxWorldSize,
//   0 <= rank < world_size; 1..kMaxSequenceSizes sequences, each 1..kMaxMicrobatchSize and the spec still
//   within common/spec_bounds.h at that microbatch size; 0 < budget_seconds <= kMaxBudgetSeconds;
//   0 <= message_bytes <= kMaxMessageBytes (0: the largest activation, max(sequences) x T x C
//   floats); a rendezvous_prefix of 1..kMaxPrefixBytes bytes. InvalidArgument naming the field.
// - Calibration::Run (REQUIRES CheckRequest ok) times, for each size in `sequences`, the
//   embedding (unit 0), one block (unit 1; every block has its shape) and the head (unit
//   n_layers + 1) through compute::ModelCompute, the executor's own compute, on env.device in the
//   spec's train.threads and train.precision, with train.microbatch_size = that size and the
//   spec's recompute mode ("auto" times "none"): forward, full backward, backward_input and
//   backward_weight. One warm-up pass, then passes until the compute share of the budget is
//   spent (at least one); each cost is the mean. Not the median: every placed worker times at
//   once, and where workers share cores, the scheduler's time slices stall a few calls for a
//   whole slice; the step pays for those stalls, and the median would hide them (bench/NOTES.md
//   "Planner"). The AdamW step of the three units is timed too (at the first size) and shared
//   out by their parameter counts (UnitCost.optimizer). Tensor parallelism is not calibrated:
//   units are timed whole.
// - Then the links: the ranks connect over the job's transport (Gloo on cpu, NCCL on cuda:N)
//   through env.kv under rendezvous_prefix; rank r first answers r-1's pings, then pings r+1, so
//   links are measured one at a time, each with a share of what is left of the budget. Latency is
//   half the median round trip of a 1-float message; bandwidth is that of a stream: k
//   message_bytes messages one way (k x message_bytes >= 512 KiB, 1 <= k <= 8: past a shaped
//   link's burst) answered by a 1-float echo, the bytes over (the fastest stream round - the
//   fastest small round trip), or over the whole stream round when that difference is under half
//   of it (a lower bound). The fastest, not the median: on shared cores a round that waited for
//   a time slice measures the scheduler. Set on every rank but the last.
// - The whole call ends by budget_seconds after it started: a watchdog aborts the transport at
//   the deadline. Every field with at least one sample by then: OK with what was measured (the
//   costs of fewer passes). Else DeadlineExceeded naming what is missing. Transport failures
//   before the deadline on a rank with a link to measure: that error, naming the rank.
// - Every timing is stretched by env.slowdown (executor/slowdown.h) as the executor's are.
// - The answer names the worker's machine and its usable cores (MachineIdentity, UsableCores), so
//   that the coordinator knows which ranks share cores.
// Threading: Run blocks; Abort may be called from any thread and makes Run return Aborted soon.
#ifndef PP_WORKER_CALIBRATE_CALIBRATE_H_
#define PP_WORKER_CALIBRATE_CALIBRATE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/median.h"
#include "pp/v1/job.pb.h"
#include "pp/v1/worker.pb.h"
#include "worker/comm/transport.h"
#include "worker/executor/slowdown.h"

namespace pp::calibrate {

inline constexpr int kMaxSequenceSizes = 16;
inline constexpr double kMaxBudgetSeconds = 600;
inline constexpr int64_t kMaxMessageBytes = int64_t{1} << 30;
inline constexpr int64_t kMaxPrefixBytes = 1024;
// Share of the budget the unit timings may use; the rest is the links'.
inline constexpr double kComputeShare = 0.6;

absl::Status CheckRequest(const pp::v1::CalibrateRequest& request);

// The spec the units are timed with, at microbatch size `sequences` (one microbatch, no data or
// tensor parallelism, no eval). REQUIRES CheckRequest ok.
pp::v1::JobSpec TimingSpec(const pp::v1::JobSpec& spec, int sequences);
// message_bytes, or the largest activation when it is 0. REQUIRES CheckRequest ok.
int64_t MessageBytes(const pp::v1::CalibrateRequest& request);

using common::Median;  // common/median.h
// Their mean. REQUIRES non-empty.
double Mean(const std::vector<double>& samples);

struct Link {
  double latency_seconds = 0;
  double bytes_per_second = 0;
};
// From round trips of a 1-float message (`small`) and stream rounds of `bytes` bytes in all one
// way (`stream`), both non-empty, as the contract above says.
Link LinkFromRoundTrips(const std::vector<double>& small, const std::vector<double>& stream,
                        int64_t bytes);

// This machine, the same in every process on it, whatever its network namespace or container:
// "boot:" + /proc/sys/kernel/random/boot_id (which no namespace changes), else "host:" + the
// hostname, else "" (unknown).
std::string MachineIdentity();
// The cores this process may run on: the size of its CPU affinity mask (sched_getaffinity), else
// std::thread::hardware_concurrency; at least 1.
int UsableCores();

struct CalibrateEnv {
  comm::KvStore* kv = nullptr;         // rendezvous (the coordinator's KV in ppworker)
  std::string device = "cpu";          // cpu | cuda:N
  std::string hostname = "127.0.0.1";  // where peers reach this rank
  std::string worker;                  // RankCalibration.worker
  int64_t free_memory_bytes = 0;       // RankCalibration.free_memory_bytes
  const executor::Slowdown* slowdown = nullptr;
};

class Calibration {
 public:
  Calibration(pp::v1::CalibrateRequest request, CalibrateEnv env);
  ~Calibration();

  absl::StatusOr<pp::v1::RankCalibration> Run();
  void Abort(const std::string& reason);

  // Between two actions: Aborted after Abort, DeadlineExceeded past the deadline.
  absl::Status Check() const;
  absl::Time deadline() const { return deadline_; }
  const executor::Slowdown* slowdown() const { return env_.slowdown; }

 private:
  absl::Status TimeUnits(pp::v1::RankCalibration& out);
  absl::Status MeasureLinks(pp::v1::RankCalibration& out);
  // Aborts the transport once the deadline passes or Abort is called; stops when Run ends.
  void Watch();
  // The transport the watchdog aborts (null: none); one set past the deadline is aborted now.
  void SetTransport(comm::Transport* transport);

  const pp::v1::CalibrateRequest request_;
  const CalibrateEnv env_;
  absl::Time deadline_;
  mutable absl::Mutex mu_;
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  std::string abort_reason_ ABSL_GUARDED_BY(mu_);
  comm::Transport* transport_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace pp::calibrate

#endif  // PP_WORKER_CALIBRATE_CALIBRATE_H_
