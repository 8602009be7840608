// Internal to worker/daemon: the ppworker Prometheus metrics (names in docs/monitoring.md). The series of
// one task (labels job, rank) are dropped when the next task starts, keeping labels bounded.
#ifndef PP_WORKER_DAEMON_METRICS_H_
#define PP_WORKER_DAEMON_METRICS_H_

#include <string>

#include "absl/synchronization/mutex.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "worker/executor/executor.h"

namespace pp::daemon {

class WorkerMetrics {
 public:
  explicit WorkerMetrics(prometheus::Registry& registry);

  void StartTask(const std::string& job, int rank);
  void RecordStep(const executor::StepResult& result, int64_t tokens);
  void RecordCheckpoint(double seconds);
  void RpcError(const std::string& method);

 private:
  void DropTaskSeries() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  prometheus::Family<prometheus::Histogram>& step_seconds_;
  prometheus::Family<prometheus::Counter>& busy_seconds_;
  prometheus::Family<prometheus::Counter>& wait_seconds_;
  prometheus::Family<prometheus::Gauge>& bubble_ratio_;
  prometheus::Family<prometheus::Gauge>& activation_bytes_;
  prometheus::Family<prometheus::Gauge>& loss_;
  prometheus::Family<prometheus::Counter>& tokens_;
  prometheus::Family<prometheus::Counter>& skipped_steps_;
  prometheus::Family<prometheus::Histogram>& checkpoint_seconds_;
  prometheus::Family<prometheus::Counter>& rpc_errors_;

  absl::Mutex mu_;
  struct TaskSeries {
    prometheus::Histogram* step_seconds = nullptr;
    prometheus::Counter* busy[executor::kNumPhases] = {};
    prometheus::Counter* wait = nullptr;
    prometheus::Gauge* bubble = nullptr;
    prometheus::Gauge* activation = nullptr;
    prometheus::Gauge* loss = nullptr;  // created on the first loss: only the last stage has it
    prometheus::Counter* tokens = nullptr;
    prometheus::Counter* skipped = nullptr;
    prometheus::Histogram* checkpoint = nullptr;
  } task_ ABSL_GUARDED_BY(mu_);
  std::string job_ ABSL_GUARDED_BY(mu_);
  bool active_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace pp::daemon

#endif  // PP_WORKER_DAEMON_METRICS_H_
