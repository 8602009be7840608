// ppcoord's calls to its workers (internal): RunTask, AbortTask, Calibrate and the GetStatus probe, queued by
// the job manager under its lock and issued by the scheduler thread outside it as callback RPCs,
// so that a slow or dead worker never blocks the scheduler.
//
// Threading: WorkerRpc has no lock of its own. It is given the JobManager's mutex, which guards
// its queue, its stubs (one per worker address, kept for the daemon's life) and its count of
// RPCs in flight. Queue, HasQueued, TakeQueued and AwaitIdle REQUIRE that mutex; Issue EXCLUDES it
// (it takes it briefly), and each RPC's completion runs `done` with the mutex held.
#ifndef PP_COORDINATOR_WORKER_RPC_H_
#define PP_COORDINATOR_WORKER_RPC_H_

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/metrics.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/status.h"
#include "pp/v1/worker.grpc.pb.h"

namespace pp::coordinator {

// An RPC to a worker.
struct Outbound {
  enum class Kind {
    kRun,    // RunTask(plan)
    kAbort,  // AbortTask(job_id, attempt, reason)
    kProbe,  // GetStatus: is the worker of a suspected lost peer alive?
    kCalibrate,  // Calibrate(calibrate): answer in `answer` when done runs
  };
  Kind kind = Kind::kAbort;
  std::string worker, address, job_id, reason;
  int attempt = 0;
  pp::v1::TaskPlan plan;
  pp::v1::CalibrateRequest calibrate = {};
  pp::v1::RankCalibration answer = {};
  int64_t serial = 0;  // kCalibrate: which calibration of the job asked
};

class WorkerRpc {
 public:
  // Runs under `mu` when an RPC completed: after a failed RunTask, Calibrate or AbortTask was counted in
  // metrics (pp.v1.Worker/RunTask, pp.v1.Worker/AbortTask) and logged; probes are neither.
  using DoneFn = std::function<void(const Outbound& rpc, const grpc::Status& status)>;

  // RunTask and AbortTask carry `rpc_deadline`, probes `probe_deadline`, Calibrate its
  // request's budget plus `rpc_deadline`. Workers are dialled
  // with `credentials` (mutual TLS), or plaintext when it is null.
  WorkerRpc(absl::Mutex* mu, CoordinatorMetrics* metrics,
            std::shared_ptr<grpc::ChannelCredentials> credentials, absl::Duration rpc_deadline,
            absl::Duration probe_deadline, DoneFn done);
  ~WorkerRpc();

  void Queue(Outbound rpc) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool HasQueued() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Everything queued, oldest first; the queue is then empty.
  std::deque<Outbound> TakeQueued() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Starts `rpc`; its completion runs `done`.
  void Issue(Outbound rpc) ABSL_LOCKS_EXCLUDED(mu_);

  // Waits (releasing the mutex meanwhile) until no RPC is in flight, at most `timeout`.
  void AwaitIdle(absl::Duration timeout) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

 private:
  pp::v1::Worker::Stub* StubFor(const std::string& address) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  struct Call;
  // An RPC came back: counts and logs a failed RunTask, Calibrate or AbortTask, runs done_, then
  // destroys the call.
  void Completed(Call* call, const grpc::Status& status) ABSL_LOCKS_EXCLUDED(mu_);

  absl::Mutex* const mu_;
  CoordinatorMetrics* const metrics_;
  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  const absl::Duration rpc_deadline_;
  const absl::Duration probe_deadline_;
  const DoneFn done_;
  std::deque<Outbound> queued_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<pp::v1::Worker::Stub>> stubs_ ABSL_GUARDED_BY(mu_);
  // The RPCs in flight, owned here rather than by their callbacks. A call's ClientContext holds a
  // reference to its channel; were the callback to hold the call, the daemon's shutdown could
  // pass AwaitIdle and destroy stubs_ while a callback still held the context, and the channel's
  // last reference would then go on gRPC's own callback thread, which cannot join itself (gRPC
  // 1.51 then frees a completion queue that thread still polls: "assertion failed: prior > 0";
  // grpc/grpc#32584). Completed destroys the call under the mutex, so once AwaitIdle saw the map
  // empty, stubs_ holds each channel's last reference.
  std::map<Call*, std::unique_ptr<Call>> in_flight_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_WORKER_RPC_H_
