// What a running task tells ppcoord over pp.v1.WorkerRegistry: its steps, its checkpoint shards
// and, once, how it ended.
// Contract:
// - RegistryReporter: the TaskReporter the daemon hands a task. Step and checkpoint reports are
//   best effort: one try within kRpcDeadline; a failure counts in the metrics (rpc_errors) and a
//   lost step answer is an empty one, because heartbeats decide whether ppcoord is gone.
// - EndReport: the TaskReport of `task` that ended with `status` on worker `worker`.
// - EndLine: the task's last log line: "task ended: ok after step N" (", drained" when it stopped
//   at the coordinator's stop step), or "task failed: " and the status message in full.
// - SendEndReport: the end of a task matters to ppcoord: up to 3 tries of 2 s, 200 ms apart
//   (each failure counted); true when one was delivered.
// Thread-safe: `stub` and `metrics` are; RegistryReporter keeps no state of its own.
// REQUIRES: `stub` and `metrics` outlive the reporter and the calls.
#ifndef PP_WORKER_DAEMON_REPORT_H_
#define PP_WORKER_DAEMON_REPORT_H_

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpcpp/client_context.h"
#include "pp/v1/coordinator.grpc.pb.h"
#include "worker/daemon/metrics.h"
#include "worker/daemon/task.h"

namespace pp::daemon {

// The deadline of every single call to ppcoord (registration, heartbeats, step reports).
inline constexpr absl::Duration kRpcDeadline = absl::Seconds(5);

void SetDeadline(grpc::ClientContext& context, absl::Duration deadline);

class RegistryReporter : public TaskReporter {
 public:
  RegistryReporter(pp::v1::WorkerRegistry::Stub* stub, WorkerMetrics* metrics)
      : stub_(stub), metrics_(metrics) {}

  pp::v1::ReportResponse ReportStep(const pp::v1::StepReport& report,
                                    const executor::StepResult& result) override;
  void ReportCheckpoint(const pp::v1::CheckpointReport& report, double seconds) override;

 private:
  pp::v1::WorkerRegistry::Stub* stub_;
  WorkerMetrics* metrics_;
};

pp::v1::TaskReport EndReport(const Task& task, const absl::Status& status,
                             const std::string& worker);

std::string EndLine(const Task& task, const absl::Status& status);

bool SendEndReport(pp::v1::WorkerRegistry::Stub* stub, WorkerMetrics* metrics,
                   const pp::v1::TaskReport& report);

}  // namespace pp::daemon

#endif  // PP_WORKER_DAEMON_REPORT_H_
