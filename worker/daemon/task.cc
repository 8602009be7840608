#include "worker/daemon/task.h"

#include <chrono>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/checkpoint.h"
#include "common/job_spec.h"
#include "worker/daemon/model_compute.h"

namespace pp::daemon {
namespace {

absl::Status CheckPlan(const pp::v1::TaskPlan& plan) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("task plan of job ", plan.job_id(), ": ", why));
  };
  if (plan.world_size() < 1) return bad(absl::StrCat("world_size ", plan.world_size()));
  if (plan.rank() < 0 || plan.rank() >= plan.world_size()) {
    return bad(absl::StrCat("rank ", plan.rank(), " outside world size ", plan.world_size()));
  }
  if (plan.stage_to_rank_size() == 0) return bad("stage_to_rank is empty");
  if (plan.spec().parallel().data() > 1 || plan.spec().parallel().tensor() > 1) {
    return absl::UnimplementedError(absl::StrCat(
        "task plan of job ", plan.job_id(),
        ": data and tensor parallelism are not supported by this worker yet (parallel.data ",
        plan.spec().parallel().data(), ", parallel.tensor ", plan.spec().parallel().tensor(), ")"));
  }
  if (plan.spec().train().steps() < 1) return bad("spec.train.steps must be positive");
  if (plan.start_step() < 0 || plan.start_step() > plan.spec().train().steps()) {
    return bad(absl::StrCat("start_step ", plan.start_step(), " outside [0, ",
                            plan.spec().train().steps(), "]"));
  }
  for (const pp::v1::StageLayers& layers : plan.stages()) {
    if (layers.stage() < 0 || layers.stage() >= plan.stage_to_rank_size() ||
        plan.stage_to_rank(layers.stage()) != plan.rank()) {
      return bad(absl::StrCat("stage ", layers.stage(), " is not placed on rank ", plan.rank()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<comm::Transport>> Connect(const pp::v1::TaskPlan& plan,
                                                         const TaskEnv& env) {
  comm::TransportOptions options;
  options.rank = plan.rank();
  options.size = plan.world_size();
  options.prefix = plan.rendezvous_prefix();
  options.hostname = env.hostname;
  options.timeout = env.comm_timeout;
  if (env.device == "cpu") return comm::ConnectGloo(*env.kv, options);
  if (absl::StartsWith(env.device, "cuda:") &&
      absl::SimpleAtoi(env.device.substr(5), &options.cuda_device)) {
    return comm::ConnectNccl(*env.kv, options);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("device '", env.device, "': want cpu or cuda:N"));
}

}  // namespace

void Task::Abort(const std::string& reason) {
  absl::MutexLock lock(&mu_);
  if (!aborted_) abort_reason_ = reason;
  aborted_ = true;
  if (executor_ != nullptr) executor_->Abort();
}

absl::Status Task::CheckAborted() {
  absl::MutexLock lock(&mu_);
  if (aborted_) return absl::AbortedError(absl::StrCat("task aborted: ", abort_reason_));
  return absl::OkStatus();
}

absl::Status Task::Run(TaskReporter& reporter) {
  const std::string where = absl::StrCat("job ", plan_.job_id(), " rank ", plan_.rank());
  auto fail = [&](const absl::Status& status) {
    // An abort explains every error it causes.
    if (absl::Status aborted = CheckAborted(); !aborted.ok()) return aborted;
    if (absl::StrContains(status.message(), where)) return status;
    return absl::Status(status.code(), absl::StrCat(where, ": ", status.message()));
  };
  common::ApplyDefaults(plan_.mutable_spec());
  if (absl::Status s = common::ValidateJobSpec(plan_.spec()); !s.ok()) {
    return fail(absl::InvalidArgumentError(absl::StrCat("spec.", s.message())));
  }
  if (absl::Status s = CheckPlan(plan_); !s.ok()) return fail(s);
  if (absl::Status s = CheckAborted(); !s.ok()) return s;

  absl::StatusOr<std::unique_ptr<ModelCompute>> compute = ModelCompute::Create(plan_, env_.device);
  if (!compute.ok()) return fail(compute.status());
  if (!plan_.resume_from().empty()) {
    absl::StatusOr<common::Checkpoint> checkpoint = common::LoadCheckpoint(plan_.resume_from());
    if (!checkpoint.ok()) return fail(checkpoint.status());
    if (absl::Status s = (*compute)->LoadCheckpointTensors(checkpoint->tensors); !s.ok()) {
      return fail(s);
    }
  }
  absl::StatusOr<std::unique_ptr<comm::Transport>> transport = Connect(plan_, env_);
  if (!transport.ok()) return fail(transport.status());

  const pp::v1::JobSpec& spec = plan_.spec();
  executor::ExecutorOptions options;
  options.rank = plan_.rank();
  options.microbatches = spec.train().microbatches();
  options.stage_to_rank.assign(plan_.stage_to_rank().begin(), plan_.stage_to_rank().end());
  absl::StatusOr<std::unique_ptr<executor::Executor>> executor =
      executor::Executor::Create(options, plan_.program(), compute->get(), transport->get());
  if (!executor.ok()) return fail(executor.status());
  {
    absl::MutexLock lock(&mu_);
    executor_ = executor->get();
    if (aborted_) executor_->Abort();
  }
  struct Unregister {
    Task* task;
    ~Unregister() {
      absl::MutexLock lock(&task->mu_);
      task->executor_ = nullptr;
    }
  } unregister{this};

  const int64_t tokens_per_step = static_cast<int64_t>(spec.train().microbatches()) *
                                  spec.train().microbatch_size() * spec.model().seq_len();
  const int every = spec.checkpoint().every_steps();
  for (int step = plan_.start_step(); step < spec.train().steps(); ++step) {
    absl::StatusOr<executor::StepResult> result = (*executor)->RunStep(step);
    if (!result.ok()) return fail(result.status());
    completed_steps_ = step + 1;

    pp::v1::StepReport report;
    report.set_job_id(plan_.job_id());
    report.set_attempt(plan_.attempt());
    report.set_rank(plan_.rank());
    report.set_step(step + 1);
    report.set_has_loss(result->has_loss);
    report.set_loss(result->loss);
    report.set_step_seconds(result->step_seconds);
    report.set_busy_seconds(
        result->compute_seconds +
        result->busy_seconds[static_cast<int>(executor::Phase::kOptimizer)]);
    report.set_tokens(tokens_per_step);
    *report.mutable_trace() = result->trace;
    if (!reporter.ReportStep(report, *result)) {
      Abort("the coordinator asked to stop");
      return CheckAborted();
    }

    const bool due = step + 1 == spec.train().steps() || (every > 0 && (step + 1) % every == 0);
    if (due && !plan_.checkpoint_dir().empty()) {
      const auto start = std::chrono::steady_clock::now();
      pp::v1::CheckpointReport checkpoint;
      checkpoint.set_job_id(plan_.job_id());
      checkpoint.set_attempt(plan_.attempt());
      checkpoint.set_rank(plan_.rank());
      checkpoint.set_step(step + 1);
      checkpoint.set_shard(common::ShardFileName(plan_.rank()));
      absl::StatusOr<pp::v1::CheckpointShard> shard = common::WriteShard(
          common::StepDir(plan_.checkpoint_dir(), plan_.job_id(), step + 1),
          checkpoint.shard(), (*compute)->CheckpointTensors());
      checkpoint.set_ok(shard.ok());
      if (shard.ok()) {
        checkpoint.set_bytes(shard->bytes());
        checkpoint.set_sha256(shard->sha256());
      } else {
        checkpoint.set_error(std::string(shard.status().message()));
      }
      reporter.ReportCheckpoint(
          checkpoint,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      if (!shard.ok()) return fail(shard.status());
    }
  }
  // Nobody closes its connections while a peer may still be finishing its last transfers.
  if (absl::Status s = (*transport)->Barrier(); !s.ok()) return fail(s);
  return absl::OkStatus();
}

}  // namespace pp::daemon
