// Internal to worker/daemon (task.cc): a task's checkpoint shard writer.
// ShardWriter writes this rank's checkpoint shards (<checkpoint_dir>/<job_id>/step-<N>/
// rank-<rank>.safetensors: tensors, AdamW moments, step, data position and RNG as metadata),
// inline or, with TaskEnv::async_checkpoints, on a background thread with one write in flight;
// reports each to the coordinator (TaskReporter::ReportCheckpoint) and writes a log line.
// Threading: Save and Wait from the task's thread only; the destructor waits for the write.
// REQUIRES: plan, env, reporter and log outlive the writer.
#ifndef PP_WORKER_DAEMON_SHARD_WRITER_H_
#define PP_WORKER_DAEMON_SHARD_WRITER_H_

#include <thread>

#include "absl/status/status.h"
#include "pp/v1/worker.pb.h"
#include "worker/compute/model_compute.h"
#include "worker/daemon/task.h"
#include "worker/daemon/task_log.h"

namespace pp::daemon {

class ShardWriter {
 public:
  ShardWriter(const pp::v1::TaskPlan& plan, const TaskEnv& env, TaskReporter& reporter,
              const TaskLogWriter& log)
      : plan_(plan), env_(env), reporter_(reporter), log_(log) {}
  ~ShardWriter() { (void)Wait(); }

  // Writes (async: starts writing) the shard of `step` after the previous write ended; returns
  // the previous write's error, or this one's when inline.
  absl::Status Save(int step, compute::ModelCompute::ShardContents shard);

  // Waits for the write in flight; its outcome.
  absl::Status Wait();

 private:
  absl::Status Write(int step, const compute::ModelCompute::ShardContents& contents);

  const pp::v1::TaskPlan& plan_;
  const TaskEnv& env_;
  TaskReporter& reporter_;
  const TaskLogWriter& log_;
  std::thread thread_;
  absl::Status status_;  // of the last write; read after joining its thread
};

}  // namespace pp::daemon

#endif  // PP_WORKER_DAEMON_SHARD_WRITER_H_
