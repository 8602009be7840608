// One rank of a job, start to end: builds the stage models of a pp.v1.TaskPlan, connects to the
// peers through the rendezvous, runs the program for the plan's steps, writes checkpoint shards.
//
// Contract:
// - Run blocks until the task ends and returns its outcome: OK, or an error naming the rank and
//   what failed (bad plan, unreachable peer, transport timeout, abort). Every wait is bounded by
//   TaskEnv::comm_timeout, so Run always returns.
// - Steps are reported 1-based (StepReport.step = completed steps); the last stage's report
//   carries the loss. An answer with abort aborts the task; one with stop_after_step = N makes
//   the task checkpoint after step N and return OK early (drained()). Drain() marks the next
//   reports `draining` so the coordinator picks that common stop step for every rank.
// - With spec.eval, after every eval.every_steps steps and after the last, every rank runs the
//   plan's eval_program (the planner's forward-only schedule) for eval.batches batches (touching no
//   gradient, moment or saved activation); the last stage's report of that step carries the
//   eval loss (has_eval).
// - A step the executor skipped (non-finite loss or gradient norm) is reported with `skipped`;
//   the (train.max_bad_steps + 1)-th of a run ends it with OutOfRange naming the step, the rank
//   and the value, before that step is reported or checkpointed.
// - Checkpoints (when plan.checkpoint_dir is set): after step N = every_steps multiples, the
//   last step and a drain stop, each rank writes <checkpoint_dir>/<job_id>/step-<N>/
//   rank-<rank>.safetensors with its tensors, AdamW moments and (as metadata) step, data position
//   and RNG state, and reports it; the coordinator commits the manifest. With
//   TaskEnv::async_checkpoints the tensors are copied to host memory at the step boundary and a
//   background thread writes them while the next steps train (one write in flight at a time);
//   Run returns only after the last write was reported.
// - A plan with resume_from loads its tensors and moments from that committed step folder
//   (verified: manifest and every shard's sha256) first; its step must equal start_step, from
//   which the AdamW step count and the data position continue.
// - Log lines (task_log.h, TaskEnv::log; each also on stderr): the start (attempt, rank, stages,
//   schedule, steps, resume_from), the set-up done, step 1, every 10th, the attempt's first and
//   the last step, every skipped step (with the loss where the rank has it), each eval loss,
//   each checkpoint shard written or failed, a stop at the coordinator's stop step or abort.
//   Note adds a line of the caller's (the daemon's drain and the task's end, report.h EndLine).
#ifndef PP_WORKER_DAEMON_TASK_H_
#define PP_WORKER_DAEMON_TASK_H_

#include <atomic>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "pp/v1/coordinator.pb.h"
#include "pp/v1/worker.pb.h"
#include "worker/comm/transport.h"
#include "worker/daemon/task_log.h"
#include "worker/executor/executor.h"

namespace pp::compute {
class ModelCompute;
}

namespace pp::daemon {

// OK when `job_id` is one ppcoord's MakeJobId makes (1 to 64 of a-z, 0-9 and '-', not starting
// with '-'); INVALID_ARGUMENT otherwise. The id names the task's checkpoint folder
// (<checkpoint_dir>/<job_id>/step-N): from a caller without TLS, "../../x" would write outside
// the checkpoint root. RunTask checks it before answering, Run again.
absl::Status CheckJobId(const std::string& job_id);

class ShardWriter;

class TaskReporter {
 public:
  virtual ~TaskReporter() = default;
  // The coordinator's answer (abort, stop_after_step); a lost answer is an empty one.
  virtual pp::v1::ReportResponse ReportStep(const pp::v1::StepReport& report,
                                            const executor::StepResult& result) = 0;
  // Called from the checkpoint writer thread when async_checkpoints is on.
  virtual void ReportCheckpoint(const pp::v1::CheckpointReport& report, double seconds) = 0;
};

struct TaskEnv {
  comm::KvStore* kv = nullptr;         // rendezvous
  std::string device = "cpu";          // cpu | cuda:N
  std::string hostname = "127.0.0.1";  // where peers reach this rank
  absl::Duration comm_timeout = absl::Seconds(30);
  bool async_checkpoints = true;  // false: training waits for each shard write
  // Run the held stages once before the pipeline connects (compute::ModelCompute::Rehearse), so
  // a GPU's libraries load their kernels while no NCCL kernel spins. The daemon sets it for
  // cuda:N; on the CPU it would only cost time.
  bool rehearse = false;
  // Test hook (PP_TEST_SHARD_WRITE_PAUSE=STEP:SECONDS in ppworker): the writer sleeps this long
  // before writing the shard of this step, so a test can kill a worker mid-checkpoint.
  int pause_shard_step = 0;
  absl::Duration pause_shard_for;
  // Test hook (--test_slow_after_steps, executor/slowdown.h); null: off. Outlives the task.
  executor::Slowdown* slowdown = nullptr;
  // --data_root: the spec's files (data, model.init_from's config and weights) are opened under
  // these (common/path_roots.h OpenUnderRoots); empty: anywhere.
  std::vector<std::string> data_roots;
  // Where the task's log lines are kept for ReadTaskLog; null: stderr only. Outlives the task.
  TaskLog* log = nullptr;
};

class Task {
 public:
  Task(pp::v1::TaskPlan plan, TaskEnv env)
      : plan_(std::move(plan)),
        env_(std::move(env)),
        log_(env_.log, plan_.job_id(), plan_.attempt(), plan_.rank(), &std::cerr) {}

  absl::Status Run(TaskReporter& reporter);
  // Any thread, any time: Run returns Aborted with `reason` within a bounded time.
  void Abort(const std::string& reason);
  // Any thread: ask the coordinator for a common stop step (the worker is being drained).
  void Drain() { draining_ = true; }
  // Any thread: one line of this task's log (task_log.h).
  void Note(absl::string_view text) const { log_.Line(text); }

  const pp::v1::TaskPlan& plan() const { return plan_; }
  int completed_steps() const { return completed_steps_; }
  // Run stopped early at the coordinator's stop_after_step, its checkpoint written.
  bool drained() const { return drained_; }

 private:
  struct Running;
  absl::Status CheckAborted();
  // `status` named after this job and rank (or the abort that caused it).
  absl::Status Failed(const absl::Status& status);
  // Run's three phases: setup, steps, report.
  absl::Status SetUp(Running& running);
  absl::Status RunSteps(Running& running, TaskReporter& reporter, ShardWriter& writer);
  absl::Status Report(Running& running, ShardWriter& writer);
  // The log lines of the task's start and of a step worth a line (see the contract).
  void NoteStart() const;
  void NoteStep(int done, const executor::StepResult& result) const;
  // Steps of SetUp and RunSteps.
  absl::Status ConnectGroups(Running& running);
  absl::Status Resume(compute::ModelCompute& model_compute);
  void Register(Running& running);
  // With spec.eval: the eval loss on the last stage's rank, nullopt on the others.
  absl::StatusOr<std::optional<double>> Evaluate(Running& running);
  pp::v1::StepReport StepReportOf(int done, const executor::StepResult& result,
                                  const compute::ModelCompute& model_compute) const;

  pp::v1::TaskPlan plan_;
  TaskEnv env_;
  TaskLogWriter log_;
  std::atomic<int> completed_steps_{0};
  std::atomic<bool> draining_{false};
  std::atomic<bool> drained_{false};
  absl::Mutex mu_;
  std::string abort_reason_ ABSL_GUARDED_BY(mu_);
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  executor::Executor* executor_ ABSL_GUARDED_BY(mu_) = nullptr;
  executor::Executor* eval_executor_ ABSL_GUARDED_BY(mu_) = nullptr;
  // The data- and tensor-parallel groups' transports, aborted with the executor.
  std::vector<comm::Transport*> groups_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pp::daemon

#endif  // PP_WORKER_DAEMON_TASK_H_
