// The ppworker daemon: serves pp.v1.Worker (+ grpc.health.v1, reflection) and Prometheus
// /metrics, registers with the coordinator and heartbeats, runs one task at a time.
//
// Contract:
// - Start returns once both servers listen (port 0 = a free port); registration runs in the
//   background, retrying with bounded backoff until the coordinator answers, and again whenever a
//   heartbeat comes back known=false (not while draining); it names the job and attempt it still
//   runs, so a restarted coordinator can stop stale ones. Jobs in a heartbeat's abort_jobs are
//   aborted.
// - RunTask starts the task on a thread and returns at once; a second task while busy gets
//   FAILED_PRECONDITION. Each step goes to ReportStep, the end to ReportTask (ok or the error),
//   after which the worker is free again.
// - Calibrate (worker/calibrate/calibrate.h) answers on the calling thread within the request's
//   budget, under the same caller and data_roots rules as RunTask. While a task runs, or another
//   calibration does, it is FAILED_PRECONDITION (a busy machine would be measured); a RunTask
//   during a calibration is accepted (ppcoord calibrates before it places). Shutdown aborts it.
// - ReadTaskLog answers from the lines this worker's tasks wrote (task_log.h: per job, bounded, in
//   memory only), under the same caller rule as RunTask.
// - Shutdown aborts a running task (reported as failed) and stops everything, in bounded time.
// - Drain (SIGTERM, e.g. a Kubernetes node drain) refuses new tasks and stops registering again;
//   a running task asks the coordinator for a common stop step, checkpoints there and ends
//   (reported ok and drained). Drain returns when the task ended or `timeout` passed.
#ifndef PP_WORKER_DAEMON_DAEMON_H_
#define PP_WORKER_DAEMON_DAEMON_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/cert_deny_list.h"
#include "common/tls.h"

namespace pp::daemon {

struct DaemonOptions {
  std::string coordinator;      // HOST:PORT of ppcoord
  std::string grpc = "127.0.0.1:0";
  std::string metrics = "127.0.0.1:0";
  std::string device = "cpu";   // cpu | cuda:N
  std::string name;             // empty: <advertised host>-<grpc port>
  std::string advertise_host;   // empty: the --grpc host, or the machine's name for 0.0.0.0
  absl::Duration comm_timeout = absl::Seconds(30);
  // Announced to the coordinator as WorkerInfo.memory_bytes (placement and admission keep ranks
  // whose estimate exceeds it off this worker); 0 = unknown. Negative: detected, the host's
  // physical memory on cpu, 0 on cuda.
  int64_t memory_bytes = -1;
  bool async_checkpoints = true;     // TaskEnv::async_checkpoints
  int pause_shard_step = 0;          // test hook, TaskEnv::pause_shard_step
  absl::Duration pause_shard_for;
  // Test hook (--test_slow_after_steps, --test_slow_factor; worker/executor/slowdown.h): after
  // this many training steps every compute action and calibration timing takes factor times as
  // long. Negative: off.
  int test_slow_after_steps = -1;
  double test_slow_factor = 1;
  // Security (docs/security.md). With tls, pp.v1.Worker takes only mutual-TLS callers with a
  // certificate of tls.ca, RunTask, AbortTask, Calibrate, GetStatus and ReadTaskLog only from the
  // certificate whose common name is coordinator_identity (empty: the common name of the
  // certificate ppcoord presented at registration) and that deny_certs does not list, the
  // coordinator is dialled with tls.cert, and the default name is the certificate's common name.
  // Without tls, grpc must be loopback unless insecure.
  common::TlsPaths tls;
  bool insecure = false;
  std::string coordinator_identity;
  std::shared_ptr<const common::CertDenyList> deny_certs;  // null: none; its owner reloads it
  // A TaskPlan's data.path must lie under one of data_roots, its checkpoint_dir and resume_from
  // under one of checkpoint_roots (common/path_roots.h), or RunTask is INVALID_ARGUMENT. Empty:
  // anywhere.
  std::vector<std::string> data_roots;
  std::vector<std::string> checkpoint_roots;
};

class WorkerDaemon {
 public:
  static absl::StatusOr<std::unique_ptr<WorkerDaemon>> Start(const DaemonOptions& options);
  virtual ~WorkerDaemon() = default;
  virtual std::string grpc_address() const = 0;     // host:port actually bound
  virtual std::string metrics_address() const = 0;
  virtual void Drain(absl::Duration timeout) = 0;
  virtual void Shutdown() = 0;
};

}  // namespace pp::daemon

#endif  // PP_WORKER_DAEMON_DAEMON_H_
