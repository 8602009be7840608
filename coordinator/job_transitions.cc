// JobManager: how a job's live attempt ends, fails or is queued again, and what every transition
// records (the store, through the committer; the event stream; the gauges). Everything here runs
// under mu_.
#include <algorithm>
#include <map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "coordinator/jobs.h"
#include "coordinator/log.h"

namespace pp::coordinator {

JobRecord* JobManager::FindLocked(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : &it->second;
}

bool JobManager::IsLive(const Held& held) {
  JobRecord* rec = FindLocked(held.job_id);
  return rec != nullptr && rec->job().state() == pp::v1::RUNNING &&
         rec->job().attempt() == held.attempt;
}

void JobManager::Release(const std::string& worker, const Held& held) {
  auto it = held_.find(worker);
  if (it == held_.end() || it->second.job_id != held.job_id ||
      it->second.attempt != held.attempt) {
    return;
  }
  held_.erase(it);
  workers_.SetIdle(worker);
}

void JobManager::QueueAbort(const std::string& worker, const std::string& address,
                            const std::string& job_id, int attempt, const std::string& reason) {
  rpc_.Queue(Outbound{.kind = Outbound::Kind::kAbort,
                      .worker = worker,
                      .address = address,
                      .job_id = job_id,
                      .reason = reason,
                      .attempt = attempt,
                      .plan = {}});
}

void JobManager::StopAttempt(JobRecord& rec, const std::string& reason,
                             const std::string& skip_worker) {
  ReleaseCalibration(rec);
  const pp::v1::Job& job = rec.job();
  for (const pp::v1::RankPlacement& p : job.placement()) {
    auto held = held_.find(p.worker());
    if (p.worker() == skip_worker || held == held_.end() || held->second.job_id != job.id() ||
        held->second.attempt != job.attempt()) {
      continue;
    }
    QueueAbort(p.worker(), p.address(), job.id(), job.attempt(), reason);
  }
  rendezvous_.EraseWithPrefix(absl::StrCat(job.id(), "/", job.attempt(), "/"));
}

int64_t JobManager::Finish(JobRecord& rec, pp::v1::JobState state, const std::string& reason,
                           const std::string& skip_worker) {
  const JobEdit edit = JobEdit::End(state, reason, NowUnix());
  if (!MayApply(rec, edit)) return 0;
  StopAttempt(rec, reason, skip_worker);
  rendezvous_.EraseWithPrefix(rec.job().id() + "/");
  const int64_t ticket = LogAndApply(rec, edit);
  Emit(rec, FinalEventKind(state),
       reason.empty() ? absl::StrCat("finished after ", rec.job().step(), " steps") : reason);
  UpdateGauges();
  return ticket;
}

void JobManager::Fail(JobRecord& rec, const std::string& reason, const std::string& skip_worker) {
  if (rec.job().state() == pp::v1::RUNNING) failure_rate_.AddFailure();
  const int budget = rec.job().spec().max_restarts();
  if (rec.job().restarts() < budget) {
    Requeue(rec, reason, /*automatic=*/true, skip_worker);
    return;
  }
  Finish(rec, pp::v1::FAILED,
         budget > 0 ? absl::StrCat(reason, " (after ", budget, " automatic restarts)") : reason,
         skip_worker);
}

void JobManager::Suspect(JobRecord& rec, const std::string& reason, const std::string& worker) {
  const pp::v1::Job& job = rec.job();
  // The workers still running this attempt: each may be the cause, or report its own error.
  std::vector<const pp::v1::RankPlacement*> busy;
  for (const pp::v1::RankPlacement& p : job.placement()) {
    auto held = held_.find(p.worker());
    if (held != held_.end() && held->second.job_id == job.id() &&
        held->second.attempt == job.attempt()) {
      busy.push_back(&p);
    }
  }
  const bool first = !rec.suspicion || rec.suspicion->attempt != job.attempt();
  if (first) {
    rec.suspicion = JobRecord::Suspicion{.attempt = job.attempt(),
                                         .reason = reason,
                                         .worker = worker,
                                         .deadline = absl::Now() + options_.failure_settle,
                                         .probes_pending = static_cast<int>(busy.size())};
    for (const pp::v1::RankPlacement* p : busy) {
      rpc_.Queue(Outbound{.kind = Outbound::Kind::kProbe,
                          .worker = p->worker(),
                          .address = p->address(),
                          .job_id = job.id(),
                          .reason = "",
                          .attempt = job.attempt(),
                          .plan = {}});
    }
  }
  if (busy.empty()) {  // every rank has spoken, each only of a lost peer: the first report stands
    const JobRecord::Suspicion suspicion = *std::exchange(rec.suspicion, std::nullopt);
    Fail(rec, suspicion.reason, suspicion.worker);
  }
}

void JobManager::ProbeAnswered(const Outbound& probe, const grpc::Status& status) {
  JobRecord* rec = FindLocked(probe.job_id);
  if (rec == nullptr || !IsLive(Held{.job_id = probe.job_id, .attempt = probe.attempt}) ||
      !rec->suspicion || rec->suspicion->attempt != probe.attempt) {
    return;
  }
  // Any answer, even an error, comes from a live process, which may still report an error of its
  // own before the deadline; no connection or no answer in time means this worker is the cause.
  if (status.error_code() != grpc::StatusCode::UNAVAILABLE &&
      status.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
    --rec->suspicion->probes_pending;
    return;
  }
  const std::string reason = absl::StrCat(
      "worker ", probe.worker, " (rank ", RankOfWorker(rec->job(), probe.worker), ") at ",
      probe.address, " does not answer (", status.error_message(),
      "); its peer reported: ", rec->suspicion->reason);
  rec->suspicion.reset();
  Fail(*rec, reason, probe.worker);
}

void JobManager::RpcDone(const Outbound& rpc, const grpc::Status& status) {
  if (rpc.kind == Outbound::Kind::kProbe) {
    ProbeAnswered(rpc, status);
    return;
  }
  if (rpc.kind == Outbound::Kind::kCalibrate) {
    CalibrationAnswered(rpc, status);
    return;
  }
  const Held held{.job_id = rpc.job_id, .attempt = rpc.attempt};
  if (status.ok() || rpc.kind != Outbound::Kind::kRun || !IsLive(held)) return;
  Release(rpc.worker, held);  // it never started the task
  Fail(jobs_.at(rpc.job_id),
       absl::StrCat("rank ", rpc.plan.rank(), " on worker ", rpc.worker, " (", rpc.address,
                    "): RunTask failed: ", status.error_message()),
       rpc.worker);
}

void JobManager::Requeue(JobRecord& rec, const std::string& reason, bool automatic,
                         const std::string& skip_worker) {
  const pp::v1::Job& job = rec.job();
  // From the newest checkpoint this job committed (a resume to an older step left newer folders of
  // the abandoned history behind, which last_checkpoint_step excludes). Hashing its shards takes
  // long for a large model, so the scheduler verifies it outside the lock before placing the job
  // (VerifyQueued) and falls back to an older one when it is damaged.
  // A checkpoint still being committed counts: VerifyQueued waits for its commit, and falls back
  // to an older one when that commit fails.
  const int from_step = rec.commits_in_flight > 0
                            ? std::max(job.last_checkpoint_step(), rec.newest_commit_in_flight)
                            : job.last_checkpoint_step();
  const absl::Duration backoff =
      automatic ? RestartBackoff(rec.restarts_without_progress() + 1, options_.restart_backoff,
                                 options_.restart_backoff_cap)
                : absl::ZeroDuration();
  const JobEdit edit =
      JobEdit::Requeue(from_step, reason, automatic, absl::Now() + backoff, NowUnix());
  if (!MayApply(rec, edit)) return;
  StopAttempt(rec, reason, skip_worker);
  if (automatic) metrics_->JobRestarted(job.id());
  LogAndApply(rec, edit);
  Log(absl::StrCat("job ", job.id(), ": attempt ", job.attempt(), " from step ", from_step,
                   " after: ", reason));
  Emit(rec, pp::v1::EVENT_RESTARTED,
       absl::StrCat(
           automatic ? absl::StrCat("restart ", job.restarts(), " of ", job.spec().max_restarts())
                     : "restart",
           " from step ", from_step, ": ", reason,
           automatic
               ? absl::StrCat(" (placed after a backoff of ", absl::FormatDuration(backoff), ")")
               : ""));
  UpdateGauges();
}

bool JobManager::MayApply(const JobRecord& rec, const JobEdit& edit) {
  absl::Status legal = rec.Check(edit);
  if (!legal.ok()) Log(absl::StrCat("internal error: ", legal.message()));
  return legal.ok();
}

int64_t JobManager::LogAndApply(JobRecord& rec, const JobEdit& edit) {
  const double worker_seconds = rec.job().worker_seconds();
  absl::StatusOr<bool> row_changed = rec.Apply(edit);
  failure_rate_.AddWorkerSeconds(rec.job().worker_seconds() - worker_seconds);
  if (!row_changed.ok()) {
    Log(absl::StrCat("internal error: ", row_changed.status().message()));
    return 0;
  }
  const pp::v1::Job& job = rec.job();
  metrics_->JobWorkers(job.id(), job.state() == pp::v1::RUNNING ? job.placement_size() : 0);
  return *row_changed ? Persist(rec) : 0;
}

pp::v1::JobEvent& JobManager::Emit(JobRecord& rec, pp::v1::JobEventKind kind,
                                   const std::string& message) {
  pp::v1::JobEvent event = SnapshotEvent(rec.job(), NowUnix());
  event.set_kind(kind);
  event.set_message(message);
  return events_.Append(rec.job().id(), std::move(event));
}

void JobManager::UpdateGauges() {
  std::map<std::string, int> jobs;
  for (pp::v1::JobState s :
       {pp::v1::QUEUED, pp::v1::RUNNING, pp::v1::SUCCEEDED, pp::v1::FAILED, pp::v1::CANCELLED}) {
    jobs[pp::v1::JobState_Name(s)] = 0;
  }
  for (const auto& [id, rec] : jobs_) ++jobs[pp::v1::JobState_Name(rec.job().state())];
  metrics_->SetJobCounts(jobs);
  std::map<std::string, int> workers;
  for (pp::v1::WorkerState s : {pp::v1::IDLE, pp::v1::BUSY, pp::v1::DOWN}) {
    workers[pp::v1::WorkerState_Name(s)] = workers_.CountInState(s);
  }
  metrics_->SetWorkerCounts(workers);
  UpdateSharedGauges();
}

}  // namespace pp::coordinator
