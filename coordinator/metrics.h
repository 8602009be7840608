// Prometheus metrics of ppcoord (internal); names and labels as in docs/monitoring.md's metrics table.
// Thread-safe (prometheus-cpp metrics are atomic; family lookups are locked inside the library).
#ifndef PP_COORDINATOR_METRICS_H_
#define PP_COORDINATOR_METRICS_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/metrics_server.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

namespace pp::coordinator {

class CoordinatorMetrics {
 public:
  // Serves /metrics on `address` (host:port, port 0 = a free port).
  static absl::StatusOr<std::unique_ptr<CoordinatorMetrics>> Serve(const std::string& address);

  int port() const { return server_->port(); }

  // Whole-fleet gauges: counts by JobState / WorkerState name.
  void SetJobCounts(const std::map<std::string, int>& by_state);
  void SetWorkerCounts(const std::map<std::string, int>& by_state);
  // The shared cluster (docs/jobs.md "Priorities, quotas and preemption"): QUEUED jobs by
  // priority class, and workers held by each owner's RUNNING jobs. Each call replaces the last:
  // a class or owner absent now is dropped. Not thread-safe with each other: ppcoord calls them
  // under its job lock.
  void SetQueueByPriority(const std::map<std::string, int>& by_class);
  void SetOwnerWorkers(const std::map<std::string, int>& by_owner);
  void JobPreempted();

  void JobCreated(const std::string& job_id, double planned_bubble_ratio);
  void StepCompleted(const std::string& job_id, double loss, double learning_rate,
                     double bubble_ratio);
  // The epoch of the job's last completed step (common/epoch.h: completed passes + fraction).
  void EpochReached(const std::string& job_id, double epoch);
  // The loss of the job's newest evaluation (spec.eval).
  void EvalCompleted(const std::string& job_id, double eval_loss);
  // parallel.schedule "auto": a step's |measured - predicted| / predicted step seconds.
  void StepPredicted(const std::string& job_id, double error_ratio);
  void CheckpointCommitted(const std::string& job_id, int step, double time_unix);
  void CheckpointFailed(const std::string& job_id);
  // A step whose update was skipped (non-finite loss or gradient norm).
  void StepSkipped(const std::string& job_id);
  void JobRestarted(const std::string& job_id);
  // An elastic job's layout changed (spec.elastic), and the workers its attempt holds now (0 when
  // it holds none: queued or ended).
  void JobResized(const std::string& job_id);
  void JobWorkers(const std::string& job_id, int workers);
  // Drops every series of the job (it expired, coordinator/retention.h).
  void JobExpired(const std::string& job_id);
  void RpcError(const std::string& method);

 private:
  CoordinatorMetrics() = default;

  std::shared_ptr<prometheus::Registry> registry_ = std::make_shared<prometheus::Registry>();
  std::unique_ptr<common::MetricsServer> server_;
  prometheus::Family<prometheus::Gauge>* jobs_ = nullptr;
  prometheus::Family<prometheus::Gauge>* workers_ = nullptr;
  prometheus::Family<prometheus::Counter>* steps_ = nullptr;
  prometheus::Family<prometheus::Gauge>* loss_ = nullptr;
  prometheus::Family<prometheus::Gauge>* learning_rate_ = nullptr;
  prometheus::Family<prometheus::Gauge>* eval_loss_ = nullptr;
  prometheus::Family<prometheus::Gauge>* epoch_ = nullptr;
  prometheus::Family<prometheus::Counter>* restarts_ = nullptr;
  prometheus::Family<prometheus::Counter>* skipped_ = nullptr;
  prometheus::Family<prometheus::Counter>* resizes_ = nullptr;
  prometheus::Family<prometheus::Gauge>* job_workers_ = nullptr;
  prometheus::Family<prometheus::Gauge>* bubble_ = nullptr;
  prometheus::Family<prometheus::Gauge>* planned_bubble_ = nullptr;
  prometheus::Family<prometheus::Gauge>* prediction_error_ = nullptr;
  prometheus::Family<prometheus::Gauge>* checkpoint_step_ = nullptr;
  prometheus::Family<prometheus::Gauge>* checkpoint_time_ = nullptr;
  prometheus::Family<prometheus::Counter>* checkpoint_failures_ = nullptr;
  prometheus::Family<prometheus::Counter>* rpc_errors_ = nullptr;
  prometheus::Family<prometheus::Gauge>* queue_jobs_ = nullptr;
  prometheus::Family<prometheus::Gauge>* owner_workers_ = nullptr;
  prometheus::Counter* preemptions_ = nullptr;
  std::map<std::string, prometheus::Gauge*> queue_series_;  // by class: to drop the stale ones
  std::map<std::string, prometheus::Gauge*> owner_series_;  // by owner
};

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_METRICS_H_
