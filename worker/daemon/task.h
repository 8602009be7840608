// One rank of a job, start to end: builds the stage models of a pp.v1.TaskPlan, connects to the
// peers through the rendezvous, runs the program for the plan's steps, writes checkpoint shards.
//
// Contract:
// - Run blocks until the task ends and returns its outcome: OK, or an error naming the rank and
//   what failed (bad plan, unreachable peer, transport timeout, abort). Every wait is bounded by
//   TaskEnv::comm_timeout, so Run always returns.
// - Steps are reported 1-based (StepReport.step = completed steps); the last stage's report
//   carries the loss. A reporter answering false aborts the task.
// - Checkpoints (when plan.checkpoint_dir is set): after step N = every_steps multiples and the
//   last step, each rank writes <checkpoint_dir>/<job_id>/step-<N>/rank-<rank>.safetensors with
//   its tensors and AdamW moments and reports it; the coordinator commits the manifest.
// - A plan with resume_from loads its tensors and moments from that step folder first.
#ifndef PP_WORKER_DAEMON_TASK_H_
#define PP_WORKER_DAEMON_TASK_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "pp/v1/coordinator.pb.h"
#include "pp/v1/worker.pb.h"
#include "worker/comm/transport.h"
#include "worker/executor/executor.h"

namespace pp::daemon {

class TaskReporter {
 public:
  virtual ~TaskReporter() = default;
  // Returns false when the task must stop.
  virtual bool ReportStep(const pp::v1::StepReport& report,
                          const executor::StepResult& result) = 0;
  virtual void ReportCheckpoint(const pp::v1::CheckpointReport& report, double seconds) = 0;
};

struct TaskEnv {
  comm::KvStore* kv = nullptr;         // rendezvous
  std::string device = "cpu";          // cpu | cuda:N
  std::string hostname = "127.0.0.1";  // where peers reach this rank
  absl::Duration comm_timeout = absl::Seconds(30);
};

class Task {
 public:
  Task(pp::v1::TaskPlan plan, TaskEnv env) : plan_(std::move(plan)), env_(std::move(env)) {}

  absl::Status Run(TaskReporter& reporter);
  // Any thread, any time: Run returns Aborted with `reason` within a bounded time.
  void Abort(const std::string& reason);

  const pp::v1::TaskPlan& plan() const { return plan_; }
  int completed_steps() const { return completed_steps_; }

 private:
  absl::Status CheckAborted();

  pp::v1::TaskPlan plan_;
  TaskEnv env_;
  std::atomic<int> completed_steps_{0};
  absl::Mutex mu_;
  std::string abort_reason_ ABSL_GUARDED_BY(mu_);
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  executor::Executor* executor_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace pp::daemon

#endif  // PP_WORKER_DAEMON_TASK_H_
