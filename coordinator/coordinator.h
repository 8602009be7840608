// ppcoord, the coordinator daemon, as a library (main.cc and the tests start it).
// Contract: Start serves pp.v1.Coordinator (clients) and pp.v1.WorkerRegistry (workers) on one gRPC
// port, with grpc.health.v1 and server reflection, and Prometheus text on /metrics. Jobs are
// validated and compiled on submit, kept in SQLite under data_dir, wait QUEUED for enough IDLE
// workers, are placed (workers in name order) and pushed with Worker.RunTask. Ranks' checkpoint
// shards are committed (manifest.json) once every rank reported. A failure of a running attempt
// (a worker silent for worker_timeout, a task error, a failed RunTask, a worker back without its
// task) stops its other ranks and queues the job again from its newest verified checkpoint, up to
// spec.max_restarts times; a draining worker's job stops at a common step, checkpoints and is
// queued again elsewhere; ResumeJob queues an ended job from a checkpoint, on any layout; a
// restarted ppcoord queues its running jobs again. Port 0 in an address binds a free port.
#ifndef PP_COORDINATOR_COORDINATOR_H_
#define PP_COORDINATOR_COORDINATOR_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/cert_deny_list.h"
#include "common/tls.h"
#include "coordinator/retention.h"

namespace pp::coordinator {

struct CoordinatorOptions {
  std::string grpc_address = "127.0.0.1:0";
  std::string metrics_address = "127.0.0.1:0";
  std::string data_dir;  // required: ppcoord.db and checkpoints/<job>/step-<N>/
  absl::Duration worker_timeout = absl::Seconds(5);
  absl::Duration heartbeat_interval = absl::Seconds(1);
  // An ended job unchanged this long is deleted, its checkpoints kept (retention.h); 0: never.
  absl::Duration retain_jobs = kDefaultRetainJobs;
  // Security (docs/security.md). With tls, every gRPC connection is TLS: WorkerRegistry takes only
  // callers with a client certificate of tls.ca, a worker registers only under its certificate's
  // common name, only admin certificates (coordinator/auth.h) are admins on the job API, and
  // workers are dialled with tls.cert. Without tls, grpc_address must be loopback unless insecure.
  common::TlsPaths tls;
  bool insecure = false;
  std::string auth_tokens;              // token file (coordinator/auth.h); empty: none
  // Certificates refused on every call (--deny_certs; its owner reloads it). Null: none.
  std::shared_ptr<const common::CertDenyList> deny_certs;
  std::vector<std::string> data_roots;  // data.path must lie under one; empty: anywhere
  // Scheduling policy file (coordinator/policy.h: priority classes, quotas, aging, preemption);
  // empty: Policy::Default(). A bad file stops Start; ReloadPolicy reads it again.
  std::string policy;
};

class CoordinatorServer {
 public:
  static absl::StatusOr<std::unique_ptr<CoordinatorServer>> Start(
      const CoordinatorOptions& options);
  ~CoordinatorServer();  // shuts down

  // The addresses actually bound (host as given, the chosen port).
  std::string grpc_address() const;
  std::string metrics_address() const;

  // Reads options.policy again and applies it (SIGHUP): a line saying what it did ("scheduling
  // policy reloaded from PATH"; without a policy file "no --policy: nothing to reload"). On an
  // error the policy in force stays and the error names the file and line.
  absl::StatusOr<std::string> ReloadPolicy();

  // Ends watches and rendezvous waits, then stops serving. Idempotent.
  void Shutdown();

 private:
  struct Impl;
  explicit CoordinatorServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_COORDINATOR_H_
