#include "worker/daemon/task.h"

#include <algorithm>
#include <map>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/checkpoint.h"
#include "common/hf_gpt2.h"
#include "common/job_spec.h"
#include "common/packing.h"
#include "common/step_math.h"
#include "worker/compute/model_compute.h"
#include "worker/daemon/shard_writer.h"
#include "worker/executor/sum_squares.h"

namespace pp::daemon {

absl::Status CheckJobId(const std::string& id) {
  if (id.empty() || id.size() > 64 || id.front() == '-' ||
      !std::all_of(id.begin(), id.end(), [](char c) {
        return absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-';
      })) {
    return absl::InvalidArgumentError(absl::StrCat(
        "task plan of job ", id, ": job_id must be 1 to 64 of a-z, 0-9 and '-', not starting with '-'"));
  }
  return absl::OkStatus();
}

namespace {

absl::Status CheckPlan(const pp::v1::TaskPlan& plan) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("task plan of job ", plan.job_id(), ": ", why));
  };
  if (absl::Status id = CheckJobId(plan.job_id()); !id.ok()) return id;
  if (plan.world_size() < 1) return bad(absl::StrCat("world_size ", plan.world_size()));
  if (plan.rank() < 0 || plan.rank() >= plan.world_size()) {
    return bad(absl::StrCat("rank ", plan.rank(), " outside world size ", plan.world_size()));
  }
  if (plan.stage_to_rank_size() == 0) return bad("stage_to_rank is empty");
  const pp::v1::ParallelSpec& parallel = plan.spec().parallel();
  // Mesh coordinates matter only to the data- and tensor-parallel groups.
  const int data = std::max(1, parallel.data());
  const int tensor = std::max(1, parallel.tensor());
  if (data * tensor > 1 && plan.world_size() != data * parallel.pipeline() * tensor) {
    return bad(absl::StrCat("world_size ", plan.world_size(), " is not parallel.data x pipeline x ",
                            "tensor = ", data * parallel.pipeline() * tensor));
  }
  if (data * tensor > 1 &&
      plan.rank() != (plan.dp_rank() * parallel.pipeline() + plan.pp_rank()) * tensor +
                         plan.tp_rank()) {
    return bad(absl::StrCat("rank ", plan.rank(), " does not match its mesh coordinates dp ",
                            plan.dp_rank(), " pp ", plan.pp_rank(), " tp ", plan.tp_rank()));
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

// Connects `rank` of a group of `size` ranks whose rendezvous keys live under `prefix`; a
// data- or tensor-parallel group needs collectives only (no `peers`), the pipeline's transport
// connects its point-to-point channels with `peers` before any receive is posted.
absl::StatusOr<std::unique_ptr<comm::Transport>> Connect(int rank, int size,
                                                         const std::string& prefix,
                                                         const TaskEnv& env,
                                                         const std::vector<int>* peers) {
  comm::TransportOptions options;
  options.rank = rank;
  options.size = size;
  options.prefix = prefix;
  // A pipeline rank with no neighbour (D = 1) needs no point-to-point channel either.
  options.point_to_point = peers != nullptr && !peers->empty();
  if (options.point_to_point) options.peers = *peers;
  options.hostname = env.hostname;
  options.timeout = env.comm_timeout;
  return comm::ConnectForDevice(*env.kv, options, env.device);
}

}  // namespace

namespace {

// The step loss over every replica: the replicas' microbatch losses gathered in replica order
// (= the step's global microbatch order), combined by the compute's StepLoss (summed in double
// and divided by the step's M, or packed microbatches' token mean), exactly as the
// single-process trainer does.
absl::Status ReplicaLoss(parallel::Collectives& data_group, const executor::StageCompute& compute,
                         executor::StepResult& result) {
  const size_t local = result.loss_by_mb.size();
  std::vector<double> all(local * data_group.size());
  if (absl::Status s =
          data_group.AllGather(result.loss_by_mb.data(), local * sizeof(double), all.data());
      !s.ok()) {
    return s;
  }
  result.loss_by_mb = all;
  result.loss = compute.StepLoss(all);
  return absl::OkStatus();
}

// Replicas must end bitwise identical: a difference is a bug, never rounding.
absl::Status CheckReplicasEqual(parallel::Collectives& data_group, const std::string& digest) {
  std::vector<char> all(digest.size() * data_group.size());
  if (absl::Status s = data_group.AllGather(digest.data(), digest.size(), all.data()); !s.ok()) {
    return s;
  }
  for (int r = 1; r < data_group.size(); ++r) {
    if (std::string(all.data() + r * digest.size(), digest.size()) != digest) {
      return absl::InternalError(absl::StrCat(
          "data-parallel replica ", r, " holds different weights or moments than replica 0"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

void Task::Abort(const std::string& reason) {
  absl::MutexLock lock(&mu_);
  if (!aborted_) abort_reason_ = reason;
  aborted_ = true;
  if (executor_ != nullptr) executor_->Abort();
  if (eval_executor_ != nullptr) eval_executor_->Abort();
  for (comm::Transport* group : groups_) group->Abort();
}

absl::Status Task::CheckAborted() {
  absl::MutexLock lock(&mu_);
  if (aborted_) return absl::AbortedError(absl::StrCat("task aborted: ", abort_reason_));
  return absl::OkStatus();
}

// What a running task owns, in construction order (destroyed in reverse: the executor before the
// transport and compute it uses, the compute before the groups it all-reduces over).
struct Task::Running {
  std::unique_ptr<comm::Transport> data_transport, tensor_transport;
  std::unique_ptr<parallel::Collectives> data_group, tensor_group;
  std::unique_ptr<compute::ModelCompute> compute;
  std::unique_ptr<comm::Transport> transport;  // the pipeline's point-to-point transport
  std::unique_ptr<executor::Executor> executor;
  std::unique_ptr<executor::Executor> eval_executor;  // with spec.eval: the forward-only program
};

absl::Status Task::Run(TaskReporter& reporter) {
  NoteStart();
  Running running;
  if (absl::Status s = SetUp(running); !s.ok()) return Failed(s);
  log_.Line("set up: stages built, peers connected");
  struct Unregister {
    Task* task;
    ~Unregister() {
      absl::MutexLock lock(&task->mu_);
      task->executor_ = nullptr;
      task->eval_executor_ = nullptr;
      task->groups_.clear();
    }
  } unregister{this};
  ShardWriter writer(plan_, env_, reporter, log_);
  if (absl::Status s = RunSteps(running, reporter, writer); !s.ok()) return Failed(s);
  if (absl::Status s = Report(running, writer); !s.ok()) return Failed(s);
  return absl::OkStatus();
}

absl::Status Task::Failed(const absl::Status& status) {
  // An abort explains every error it causes.
  if (absl::Status aborted = CheckAborted(); !aborted.ok()) return aborted;
  const std::string where = absl::StrCat("job ", plan_.job_id(), " rank ", plan_.rank());
  if (absl::StrContains(status.message(), where)) return status;
  return absl::Status(status.code(), absl::StrCat(where, ": ", status.message()));
}

void Task::NoteStart() const {
  std::vector<std::string> stages;
  for (const pp::v1::StageLayers& s : plan_.stages()) {
    stages.push_back(absl::StrCat(s.stage(), " (units ", s.first_unit(), "-", s.last_unit(), ")"));
  }
  const pp::v1::JobSpec& spec = plan_.spec();
  std::string line = absl::StrCat(
      "task started: attempt ", plan_.attempt(), ", rank ", plan_.rank(), " of ",
      plan_.world_size(), " (pp ", plan_.pp_rank(), ", dp ", plan_.dp_rank(), ", tp ",
      plan_.tp_rank(), "), stages ", stages.empty() ? "none" : absl::StrJoin(stages, ", "),
      ", schedule ", common::ScheduleLabel(spec.parallel()), ", steps ", plan_.start_step() + 1,
      " to ", spec.train().steps(), " on ", env_.device);
  if (!plan_.resume_from().empty()) absl::StrAppend(&line, ", resume_from ", plan_.resume_from());
  if (plan_.resume_from().empty() && !spec.model().init_from().empty()) {
    absl::StrAppend(&line, ", init_from ", spec.model().init_from());
  }
  log_.Line(line);
}

// Step 1, every 10th, the attempt's first and the last, and every skipped one: a bounded cadence
// that still shows where a run stood and every step that went wrong.
void Task::NoteStep(int done, const executor::StepResult& result) const {
  const int steps = plan_.spec().train().steps();
  if (!result.non_finite && done != 1 && done % 10 != 0 && done != steps &&
      done != plan_.start_step() + 1) {
    return;
  }
  std::string line = absl::StrFormat("step %d/%d:", done, steps);
  if (result.has_loss) absl::StrAppendFormat(&line, " loss %.6g,", result.loss);
  absl::StrAppendFormat(&line, " grad norm %.4g, %.3f s", result.grad_norm, result.step_seconds);
  if (result.non_finite) {
    absl::StrAppend(&line, "; skipped: ", executor::DescribeNonFinite(done, *result.non_finite));
  }
  log_.Line(line);
}

// Setup: the checked plan, the groups, the compute (resumed), the executor, registered for Abort.
absl::Status Task::SetUp(Running& running) {
  common::ApplyDefaults(plan_.mutable_spec());
  if (absl::Status s = common::ValidateJobSpec(plan_.spec(), env_.data_roots); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("spec.", s.message()));
  }
  if (absl::Status s = CheckPlan(plan_); !s.ok()) return s;
  if (absl::Status s = CheckAborted(); !s.ok()) return s;
  if (absl::Status s = ConnectGroups(running); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<compute::ModelCompute>> model_compute =
      compute::ModelCompute::Create(plan_, env_.device, running.data_group.get(),
                                    running.tensor_group.get());
  if (!model_compute.ok()) return model_compute.status();
  running.compute = *std::move(model_compute);
  if (absl::Status s = Resume(*running.compute); !s.ok()) return s;
  if (env_.rehearse) {
    if (absl::Status s = running.compute->Rehearse(); !s.ok()) return s;
  }
  const bool eval = common::EvalEnabled(plan_.spec());
  const std::vector<int> peers = executor::CommPeers(
      eval ? std::vector{&plan_.program(), &plan_.eval_program()} : std::vector{&plan_.program()});
  absl::StatusOr<std::unique_ptr<comm::Transport>> transport =
      Connect(plan_.rank(), plan_.world_size(), plan_.rendezvous_prefix(), env_, &peers);
  if (!transport.ok()) return transport.status();
  running.transport = *std::move(transport);
  executor::ExecutorOptions options;
  options.rank = plan_.rank();
  options.microbatches = plan_.spec().train().microbatches();
  options.stage_to_rank.assign(plan_.stage_to_rank().begin(), plan_.stage_to_rank().end());
  options.slowdown = env_.slowdown;
  absl::StatusOr<std::unique_ptr<executor::Executor>> executor = executor::Executor::Create(
      options, plan_.program(), running.compute.get(), running.transport.get());
  if (!executor.ok()) return executor.status();
  running.executor = *std::move(executor);
  if (eval) {
    if (plan_.eval_program().actions().empty()) {
      return absl::InvalidArgumentError("spec.eval is set but the plan has no eval_program");
    }
    options.forward_only = true;
    absl::StatusOr<std::unique_ptr<executor::Executor>> eval = executor::Executor::Create(
        options, plan_.eval_program(), running.compute.get(), running.transport.get());
    if (!eval.ok()) return eval.status();
    running.eval_executor = *std::move(eval);
  }
  Register(running);
  return absl::OkStatus();
}

// The data-parallel group (the replicas' ranks at this rank's pp and tp) and the tensor-parallel
// group (the ranks at its dp and pp), each connected on its own rendezvous keys.
absl::Status Task::ConnectGroups(Running& running) {
  const int replicas = std::max(1, plan_.spec().parallel().data());
  const int tensor = std::max(1, plan_.spec().parallel().tensor());
  // Connects this rank (`rank` of `size`) to the group named `key` under the job's prefix.
  auto connect_group = [&](int rank, int size, const std::string& key,
                           std::unique_ptr<comm::Transport>& transport,
                           std::unique_ptr<parallel::Collectives>& group) -> absl::Status {
    absl::StatusOr<std::unique_ptr<comm::Transport>> connected =
        Connect(rank, size, absl::StrCat(plan_.rendezvous_prefix(), key, "/"), env_,
                /*peers=*/nullptr);
    if (!connected.ok()) return connected.status();
    transport = std::move(*connected);
    group = comm::GroupCollectives(transport.get());
    return absl::OkStatus();
  };
  if (tensor > 1) {
    const std::string key = absl::StrCat("tp/", plan_.dp_rank(), ".", plan_.pp_rank());
    if (absl::Status s = connect_group(plan_.tp_rank(), tensor, key, running.tensor_transport,
                                       running.tensor_group);
        !s.ok()) {
      return s;
    }
  }
  if (replicas > 1) {
    const std::string key = absl::StrCat("dp/", plan_.pp_rank(), ".", plan_.tp_rank());
    if (absl::Status s = connect_group(plan_.dp_rank(), replicas, key, running.data_transport,
                                       running.data_group);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

// With resume_from: the held tensors and moments of that committed step, which must be the
// plan's start step. Only the shards holding this rank's tensors are read.
// Without it: model.init_from's weights when the spec names a folder, else the seeded values the
// model already holds.
absl::Status Task::Resume(compute::ModelCompute& model_compute) {
  if (plan_.resume_from().empty()) {
    if (plan_.spec().model().init_from().empty()) return absl::OkStatus();
    absl::StatusOr<common::HfGpt2Model> hf =
        common::ReadInitFrom(plan_.spec().model(), env_.data_roots);
    if (!hf.ok()) return hf.status();
    return model_compute.LoadInitialValues(hf->tensors);
  }
  const std::set<std::string> needed = model_compute.CheckpointTensorNames();
  absl::StatusOr<common::Checkpoint> checkpoint = common::LoadCheckpoint(
      plan_.resume_from(), [&](const std::string& name) { return needed.count(name) > 0; });
  if (!checkpoint.ok()) return checkpoint.status();
  if (checkpoint->manifest.step() != plan_.start_step()) {
    return absl::InvalidArgumentError(
        absl::StrCat("resume_from ", plan_.resume_from(), " holds step ",
                     checkpoint->manifest.step(), ", the plan starts at step ",
                     plan_.start_step()));
  }
  return model_compute.LoadCheckpointTensors(checkpoint->tensors);
}

// Makes the executor and the groups' transports reachable by Abort (aborting them at once when
// the task was aborted meanwhile).
void Task::Register(Running& running) {
  absl::MutexLock lock(&mu_);
  executor_ = running.executor.get();
  eval_executor_ = running.eval_executor.get();
  for (auto* group : {running.data_transport.get(), running.tensor_transport.get()}) {
    if (group != nullptr) groups_.push_back(group);
  }
  if (aborted_) {
    executor_->Abort();
    if (eval_executor_ != nullptr) eval_executor_->Abort();
    for (comm::Transport* group : groups_) group->Abort();
  }
}

// Steps: each step run, reported, and checkpointed when due; a coordinator's stop ends early.
absl::Status Task::RunSteps(Running& running, TaskReporter& reporter, ShardWriter& writer) {
  const pp::v1::JobSpec& spec = plan_.spec();
  const int every = spec.checkpoint().every_steps();
  const int steps = spec.train().steps();
  int bad_steps = 0;
  for (int step = plan_.start_step(); step < steps; ++step) {
    absl::StatusOr<executor::StepResult> result = running.executor->RunStep(step);
    if (!result.ok()) return result.status();
    if (running.data_group != nullptr && result->has_loss) {
      if (absl::Status s = ReplicaLoss(*running.data_group, *running.compute, *result); !s.ok()) {
        return s;
      }
    }
    const int done = step + 1;
    NoteStep(done, *result);
    if (result->non_finite && ++bad_steps > spec.train().max_bad_steps()) {
      // Every rank fails at this step. Each first finishes and reports its earlier shards, and
      // waits for the others, so those checkpoints are committed before a failure ends the job.
      if (absl::Status s = writer.Wait(); !s.ok()) return s;
      if (absl::Status s = running.transport->Barrier(); !s.ok()) return s;
      return executor::TooManyBadSteps(done, *result->non_finite, bad_steps,
                                       spec.train().max_bad_steps());
    }
    completed_steps_ = done;
    pp::v1::StepReport report = StepReportOf(done, *result, *running.compute);
    if (common::EvalDue(spec, done)) {
      absl::StatusOr<std::optional<double>> eval = Evaluate(running);
      if (!eval.ok()) return eval.status();
      if (eval->has_value()) log_.Line(absl::StrFormat("step %d: eval loss %.6g", done, **eval));
      report.set_has_eval(eval->has_value());
      report.set_eval_loss(eval->value_or(0));
    }
    const pp::v1::ReportResponse answer = reporter.ReportStep(report, *result);
    if (answer.abort()) {
      log_.Line(absl::StrCat("step ", done, ": the coordinator asked to stop"));
      Abort("the coordinator asked to stop");
      return CheckAborted();
    }
    // Every rank gets the same stop step, so all of them stop (and checkpoint) after it.
    const bool stop = answer.stop_after_step() == done && done < steps;
    const bool due = stop || common::CheckpointDue(done, steps, every);
    if (due && !plan_.checkpoint_dir().empty()) {
      if (absl::Status s = writer.Save(done, running.compute->CheckpointShard()); !s.ok()) {
        return s;
      }
    }
    if (stop) {
      log_.Line(absl::StrCat("stopping after step ", done,
                             " at the coordinator's stop step (drain, preemption or resize)"));
      drained_ = true;
      break;
    }
  }
  return absl::OkStatus();
}

// Every rank runs the forward-only program over eval.batches batches; the last stage's rank sums
// the (replica-gathered) microbatch losses in (batch, global microbatch) order, in double, as the
// single-process trainer does (packed rows: each batch's token mean, over the batches).
absl::StatusOr<std::optional<double>> Task::Evaluate(Running& running) {
  const int batches = plan_.spec().eval().batches();
  double sum = 0;
  int64_t count = 0;
  for (int batch = 0; batch < batches; ++batch) {
    absl::StatusOr<executor::StepResult> result = running.eval_executor->RunStep(batch);
    if (!result.ok()) return result.status();
    if (!result->has_loss) continue;
    if (running.data_group != nullptr) {
      if (absl::Status s = ReplicaLoss(*running.data_group, *running.compute, *result); !s.ok()) {
        return s;
      }
    }
    if (common::PacksMicrobatches(plan_.spec())) {  // each batch's token mean, as the trainer
      sum += result->loss;
      count += 1;
      continue;
    }
    for (double loss : result->loss_by_mb) sum += loss;
    count += static_cast<int64_t>(result->loss_by_mb.size());
  }
  if (count == 0) return std::optional<double>();
  return std::optional<double>(sum / static_cast<double>(count));
}

pp::v1::StepReport Task::StepReportOf(int done, const executor::StepResult& result,
                                      const compute::ModelCompute& model_compute) const {
  const pp::v1::JobSpec& spec = plan_.spec();
  pp::v1::StepReport report;
  report.set_job_id(plan_.job_id());
  report.set_attempt(plan_.attempt());
  report.set_rank(plan_.rank());
  report.set_step(done);
  report.set_has_loss(result.has_loss);
  report.set_loss(result.loss);
  report.set_step_seconds(result.step_seconds);
  report.set_busy_seconds(result.compute_seconds +
                          result.busy_seconds[static_cast<int>(executor::Phase::kOptimizer)]);
  report.set_tokens(common::ReplicaTokensPerStep(spec));
  report.set_draining(draining_);
  report.set_dp_allreduce_seconds(model_compute.last_all_reduce_times().spent_seconds);
  report.set_dp_exposed_seconds(model_compute.last_all_reduce_times().exposed_seconds);
  report.set_skipped(result.non_finite.has_value());
  report.set_grad_norm(result.grad_norm);
  *report.mutable_trace() = result.trace;
  report.mutable_trace()->set_peak_activation_bytes(result.peak_activation_bytes);
  return report;
}

// Report: the last checkpoint written and reported, replicas checked equal, every peer done.
absl::Status Task::Report(Running& running, ShardWriter& writer) {
  if (absl::Status s = writer.Wait(); !s.ok()) return s;
  if (running.data_group != nullptr) {
    if (absl::Status s = CheckReplicasEqual(*running.data_group, running.compute->StateDigest());
        !s.ok()) {
      return s;
    }
  }
  // Nobody closes its connections while a peer may still be finishing its last transfers.
  return running.transport->Barrier();
}

}  // namespace pp::daemon
