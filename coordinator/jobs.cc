#include "coordinator/jobs.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <iostream>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checkpoint.h"
#include "common/manifest.h"
#include "common/mesh.h"
#include "common/step_math.h"
#include "coordinator/placement.h"
#include "coordinator/planning.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace pp::coordinator {
namespace {

constexpr int kTracedSteps = 8;
constexpr int kKeptEvents = 256;

// One line on stderr: the daemon's log.
void Log(const std::string& line) { std::cerr << "ppcoord: " + line + "\n"; }

double NowUnix() { return absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()); }

// "<name>-<n>" with the name reduced to [a-z0-9-] so ids are safe in paths, keys and labels.
std::string MakeJobId(const std::string& name, int64_t sequence) {
  std::string clean;
  for (char c : name) {
    if (clean.size() >= 40) break;
    const unsigned char u = static_cast<unsigned char>(c);
    if (std::isalnum(u)) {
      clean.push_back(static_cast<char>(std::tolower(u)));
    } else if (!clean.empty() && clean.back() != '-') {
      clean.push_back('-');
    }
  }
  while (!clean.empty() && clean.back() == '-') clean.pop_back();
  return absl::StrCat(clean.empty() ? "job" : clean, "-", sequence);
}

pp::v1::JobEventKind FinalEventKind(pp::v1::JobState state) {
  switch (state) {
    case pp::v1::SUCCEEDED:
      return pp::v1::EVENT_FINISHED;
    case pp::v1::CANCELLED:
      return pp::v1::EVENT_CANCELLED;
    default:
      return pp::v1::EVENT_FAILED;
  }
}

bool EndsWatch(pp::v1::JobEventKind kind) {
  return kind == pp::v1::EVENT_FINISHED || kind == pp::v1::EVENT_FAILED ||
         kind == pp::v1::EVENT_CANCELLED;
}

// Only an ended job can be resumed.
absl::Status CheckResumable(const pp::v1::Job& job) {
  if (IsTerminal(job.state())) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("job \"", job.id(), "\" is ", pp::v1::JobState_Name(job.state()),
                   ": only an ended job can be resumed (cancel it first)"));
}

int RankOfWorker(const pp::v1::Job& job, const std::string& worker) {
  for (const pp::v1::RankPlacement& p : job.placement()) {
    if (p.worker() == worker) return p.rank();
  }
  return -1;
}

}  // namespace

absl::StatusOr<std::unique_ptr<JobManager>> JobManager::Create(const ManagerOptions& options,
                                                               CoordinatorMetrics* metrics) {
  std::error_code error;
  std::filesystem::create_directories(options.data_dir, error);
  if (error) {
    return absl::FailedPreconditionError(
        absl::StrCat("--data_dir: cannot create ", options.data_dir, ": ", error.message()));
  }
  absl::StatusOr<std::unique_ptr<JobStore>> store =
      JobStore::Open((std::filesystem::path(options.data_dir) / "ppcoord.db").string());
  if (!store.ok()) return store.status();
  std::unique_ptr<JobManager> manager(new JobManager(options, *std::move(store), metrics));
  if (absl::Status reloaded = manager->Reload(); !reloaded.ok()) return reloaded;
  manager->scheduler_ = std::thread([m = manager.get()] { m->SchedulerLoop(); });
  manager->verifier_ = std::thread([m = manager.get()] { m->VerifierLoop(); });
  return manager;
}

JobManager::JobManager(const ManagerOptions& options, std::unique_ptr<JobStore> store,
                       CoordinatorMetrics* metrics)
    : options_(options), metrics_(metrics), store_(std::move(store)) {}

JobManager::~JobManager() { Stop(); }

void JobManager::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  rendezvous_.Close();
  if (scheduler_.joinable()) scheduler_.join();
  if (verifier_.joinable()) verifier_.join();
  // Worker RPCs carry deadlines, so their callbacks come back in bounded time.
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return in_flight_ == 0; };
  mu_.AwaitWithTimeout(absl::Condition(&idle), options_.worker_rpc_deadline + absl::Seconds(1));
}

std::string JobManager::checkpoint_root() const {
  return (std::filesystem::path(options_.data_dir) / "checkpoints").string();
}

absl::Status JobManager::Reload() {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::vector<pp::v1::Job>> jobs = store_->LoadJobs();
  if (!jobs.ok()) return jobs.status();
  absl::StatusOr<int64_t> next = store_->NextSequence();
  if (!next.ok()) return next.status();
  next_sequence_ = *next;
  for (pp::v1::Job& job : *jobs) {
    const std::string id = job.id();
    JobRecord& rec = jobs_[id];
    rec.job = std::move(job);
    order_.push_back(id);
    if (IsTerminal(rec.job.state())) continue;
    absl::StatusOr<PlannedJob> planned = PlanJobSpec(rec.job.spec());
    if (!planned.ok()) {
      if (rec.job.state() == pp::v1::RUNNING) rec.job.set_state(pp::v1::QUEUED);
      Finish(rec, pp::v1::FAILED,
             absl::StrCat("spec no longer valid after a restart: ", planned.status().message()));
      continue;
    }
    rec.schedule = std::move(planned->schedule);
    rec.stage_units = std::move(planned->stage_units);
    metrics_->JobCreated(id, rec.schedule.simulation().bubble_fraction());
    // Its workers still run the old attempt; they register again and are told to stop it.
    if (rec.job.state() == pp::v1::RUNNING) {
      Requeue(rec, "ppcoord restarted while the job was running", /*automatic=*/false);
    }
  }
  UpdateGauges();
  return absl::OkStatus();
}

void JobManager::SchedulerLoop() {
  while (true) {
    std::deque<Outbound> rpcs;
    {
      absl::MutexLock lock(&mu_);
      auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !outbound_.empty();
      };
      mu_.AwaitWithTimeout(absl::Condition(&wake), options_.tick);
      if (stopping_) return;
      Tick();
      rpcs.swap(outbound_);
    }
    for (Outbound& rpc : rpcs) Issue(std::move(rpc));
  }
}

void JobManager::VerifierLoop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), options_.tick);
      if (stopping_) return;
    }
    VerifyQueued();
  }
}

void JobManager::VerifyQueued() {
  struct Pending {
    std::string job_id;
    int attempt = 0;
    int max_step = 0;
    absl::StatusOr<pp::common::LatestManifest> latest;
  };
  std::vector<Pending> pending;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, rec] : jobs_) {
      if (rec.verify_pending && rec.job.state() == pp::v1::QUEUED) {
        Pending& p = pending.emplace_back();
        p.job_id = id;
        p.attempt = rec.job.attempt();
        p.max_step = rec.job.start_step();
      }
    }
  }
  if (pending.empty()) return;
  for (Pending& p : pending) {
    p.latest = pp::common::LatestVerifiedCheckpoint(checkpoint_root(), p.job_id, p.max_step);
  }
  absl::MutexLock lock(&mu_);
  for (Pending& p : pending) {
    JobRecord* rec = FindLocked(p.job_id);
    if (rec == nullptr || rec->job.state() != pp::v1::QUEUED || rec->job.attempt() != p.attempt ||
        !rec->verify_pending) {
      continue;  // cancelled or requeued meanwhile
    }
    rec->verify_pending = false;
    pp::v1::Job& job = rec->job;
    int from_step = 0;
    if (p.latest.ok()) {
      from_step = p.latest->manifest.step();
      for (const std::string& why : p.latest->skipped) {
        Log(absl::StrCat("job ", job.id(), ": skipped a checkpoint: ", why));
      }
    } else {
      Log(absl::StrCat("job ", job.id(), ": restarting from scratch: ",
                       p.latest.status().message()));
    }
    if (from_step != job.start_step()) {
      job.set_start_step(from_step);
      job.set_step(from_step);
      if (job.restart_log_size() > 0) {
        job.mutable_restart_log(job.restart_log_size() - 1)->set_from_step(from_step);
      }
      Persist(*rec);
    }
  }
  PlaceQueued();
  UpdateGauges();
}

void JobManager::Tick() {
  const absl::Time now = absl::Now();
  for (auto& [id, rec] : jobs_) {
    if (!rec.suspicion) continue;
    if (!IsLive(Held{.job_id = id, .attempt = rec.suspicion->attempt})) {
      rec.suspicion.reset();
    } else if (now >= rec.suspicion->deadline) {
      const JobRecord::Suspicion suspicion = *std::exchange(rec.suspicion, std::nullopt);
      Fail(rec, suspicion.reason, suspicion.worker);
    }
  }
  for (const pp::v1::WorkerInfo& w :
       workers_.MarkSilentDown(absl::Now(), options_.worker_timeout)) {
    Log(absl::StrCat("worker ", w.name(), " is DOWN (no heartbeat for ",
                     absl::FormatDuration(options_.worker_timeout), ")"));
    auto held = held_.find(w.name());
    if (held == held_.end()) continue;
    const Held lost = held->second;
    held_.erase(held);
    if (!IsLive(lost)) continue;
    JobRecord& rec = jobs_.at(lost.job_id);
    Fail(rec,
         absl::StrCat("worker ", w.name(), " (rank ", RankOfWorker(rec.job, w.name()),
                      ") stopped heartbeating: silent for more than ",
                      absl::FormatDuration(options_.worker_timeout)),
         w.name());
  }
  PlaceQueued();
  UpdateGauges();
}

void JobManager::PlaceQueued() {
  // First come, first served: a job that does not fit holds back the ones behind it.
  for (const std::string& id : order_) {
    JobRecord& rec = jobs_.at(id);
    if (rec.job.state() != pp::v1::QUEUED) continue;
    if (rec.verify_pending) return;  // its start step is known once VerifyQueued ran
    const std::vector<int> stage_to_rank(rec.schedule.stage_to_rank().begin(),
                                         rec.schedule.stage_to_rank().end());
    absl::StatusOr<std::vector<pp::v1::RankPlacement>> placement =
        PlaceRanks(rec.job.spec(), stage_to_rank, workers_.Idle());
    if (!placement.ok()) return;
    pp::v1::Job& job = rec.job;
    job.mutable_placement()->Assign(placement->begin(), placement->end());
    job.set_state(pp::v1::RUNNING);
    job.set_updated_unix(NowUnix());
    rec.steps = std::make_unique<StepAggregator>(job.placement_size());
    rec.checkpoints = std::make_unique<CheckpointCollector>(job.placement_size());
    rec.ranks_done.clear();
    rec.drained = false;
    rec.stop_step = 0;
    rec.newest_reported_step = job.start_step();
    std::vector<std::string> names;
    for (const pp::v1::RankPlacement& p : job.placement()) {
      workers_.SetBusy(p.worker(), id);
      held_[p.worker()] = Held{.job_id = id, .attempt = job.attempt()};
      names.push_back(absl::StrCat(p.worker(), " (rank ", p.rank(), ")"));
    }
    for (pp::v1::TaskPlan& plan :
         BuildTaskPlans(job, rec.schedule, rec.stage_units, checkpoint_root())) {
      const pp::v1::RankPlacement& p = job.placement(plan.rank());
      outbound_.push_back(Outbound{.kind = Outbound::Kind::kRun,
                                   .worker = p.worker(),
                                   .address = p.address(),
                                   .job_id = id,
                                   .reason = "",
                                   .attempt = job.attempt(),
                                   .plan = std::move(plan)});
    }
    Persist(rec);
    Emit(rec, pp::v1::EVENT_PLACED,
         absl::StrCat("attempt ", job.attempt(), " placed on ", absl::StrJoin(names, ", "),
                      job.start_step() > 0 ? absl::StrCat(", from step ", job.start_step()) : ""));
  }
}

pp::v1::Worker::Stub* JobManager::StubFor(const std::string& address) {
  std::unique_ptr<pp::v1::Worker::Stub>& stub = stubs_[address];
  if (!stub) {
    stub =
        pp::v1::Worker::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  }
  return stub.get();
}

void JobManager::Issue(Outbound rpc) {
  // Callback RPCs: a slow or dead worker never blocks the scheduler.
  struct Call {
    grpc::ClientContext context;
    pp::v1::AbortTaskRequest abort;
    pp::v1::RunTaskResponse run_response;
    pp::v1::AbortTaskResponse abort_response;
    pp::v1::GetStatusRequest status_request;
    pp::v1::WorkerStatus status_response;
    Outbound rpc;
  };
  auto call = std::make_shared<Call>();
  call->rpc = std::move(rpc);
  const bool run = call->rpc.kind == Outbound::Kind::kRun;
  const bool probe = call->rpc.kind == Outbound::Kind::kProbe;
  call->context.set_deadline(absl::ToChronoTime(
      absl::Now() + (probe ? options_.probe_deadline : options_.worker_rpc_deadline)));
  pp::v1::Worker::Stub* stub;
  {
    absl::MutexLock lock(&mu_);
    stub = StubFor(call->rpc.address);
    ++in_flight_;
  }
  auto done = [this, call, run, probe](grpc::Status status) {
    absl::MutexLock lock(&mu_);
    --in_flight_;
    const Outbound& rpc = call->rpc;
    if (probe) {
      ProbeAnswered(rpc, status);
      return;
    }
    if (status.ok()) return;
    metrics_->RpcError(run ? "pp.v1.Worker/RunTask" : "pp.v1.Worker/AbortTask");
    Log(absl::StrCat((run ? "RunTask" : "AbortTask"), " to ", rpc.worker, " at ", rpc.address,
                     " failed: ", status.error_message()));
    const Held held{.job_id = rpc.job_id, .attempt = rpc.attempt};
    if (!run || !IsLive(held)) return;
    Release(rpc.worker, held);  // it never started the task
    Fail(jobs_.at(rpc.job_id),
         absl::StrCat("rank ", rpc.plan.rank(), " on worker ", rpc.worker, " (", rpc.address,
                      "): RunTask failed: ", status.error_message()),
         rpc.worker);
  };
  if (run) {
    stub->async()->RunTask(&call->context, &call->rpc.plan, &call->run_response, done);
  } else if (probe) {
    stub->async()->GetStatus(&call->context, &call->status_request, &call->status_response, done);
  } else {
    call->abort.set_job_id(call->rpc.job_id);
    call->abort.set_reason(call->rpc.reason);
    call->abort.set_attempt(call->rpc.attempt);
    stub->async()->AbortTask(&call->context, &call->abort, &call->abort_response, done);
  }
}

JobManager::JobRecord* JobManager::FindLocked(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : &it->second;
}

bool JobManager::IsLive(const Held& held) {
  JobRecord* rec = FindLocked(held.job_id);
  return rec != nullptr && rec->job.state() == pp::v1::RUNNING &&
         rec->job.attempt() == held.attempt;
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

void JobManager::StopAttempt(JobRecord& rec, const std::string& reason,
                             const std::string& skip_worker) {
  const pp::v1::Job& job = rec.job;
  for (const pp::v1::RankPlacement& p : job.placement()) {
    auto held = held_.find(p.worker());
    if (p.worker() == skip_worker || held == held_.end() || held->second.job_id != job.id() ||
        held->second.attempt != job.attempt()) {
      continue;
    }
    outbound_.push_back(Outbound{.kind = Outbound::Kind::kAbort,
                                 .worker = p.worker(),
                                 .address = p.address(),
                                 .job_id = job.id(),
                                 .reason = reason,
                                 .attempt = job.attempt(),
                                 .plan = {}});
  }
  rendezvous_.EraseWithPrefix(absl::StrCat(job.id(), "/", job.attempt(), "/"));
}

void JobManager::Finish(JobRecord& rec, pp::v1::JobState state, const std::string& reason,
                        const std::string& skip_worker) {
  if (absl::Status allowed = CheckTransition(rec.job.state(), state); !allowed.ok()) {
    Log(absl::StrCat("job ", rec.job.id(), ": ", allowed.message()));
    return;
  }
  StopAttempt(rec, reason, skip_worker);
  pp::v1::Job& job = rec.job;
  job.set_state(state);
  job.set_reason(reason);
  job.set_updated_unix(NowUnix());
  rendezvous_.EraseWithPrefix(job.id() + "/");
  Persist(rec);
  Emit(rec, FinalEventKind(state),
       reason.empty() ? absl::StrCat("finished after ", job.step(), " steps") : reason);
  UpdateGauges();
}

void JobManager::Fail(JobRecord& rec, const std::string& reason, const std::string& skip_worker) {
  const int budget = rec.job.spec().max_restarts();
  if (rec.job.restarts() < budget) {
    Requeue(rec, reason, /*automatic=*/true, skip_worker);
    return;
  }
  Finish(rec, pp::v1::FAILED,
         budget > 0 ? absl::StrCat(reason, " (after ", budget, " automatic restarts)") : reason,
         skip_worker);
}

void JobManager::Suspect(JobRecord& rec, const std::string& reason, const std::string& worker) {
  const pp::v1::Job& job = rec.job;
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
                                         .deadline = absl::Now() + options_.failure_settle};
    for (const pp::v1::RankPlacement* p : busy) {
      outbound_.push_back(Outbound{.kind = Outbound::Kind::kProbe,
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
    return;
  }
  const std::string reason = absl::StrCat(
      "worker ", probe.worker, " (rank ", RankOfWorker(rec->job, probe.worker), ") at ",
      probe.address, " does not answer (", status.error_message(),
      "); its peer reported: ", rec->suspicion->reason);
  rec->suspicion.reset();
  Fail(*rec, reason, probe.worker);
}

void JobManager::Requeue(JobRecord& rec, const std::string& reason, bool automatic,
                         const std::string& skip_worker) {
  pp::v1::Job& job = rec.job;
  if (absl::Status allowed = CheckTransition(job.state(), pp::v1::QUEUED); !allowed.ok()) {
    Log(absl::StrCat("job ", job.id(), ": ", allowed.message()));
    return;
  }
  StopAttempt(rec, reason, skip_worker);
  // From the newest checkpoint this job committed (a resume to an older step left newer folders of
  // the abandoned history behind, which last_checkpoint_step excludes). Hashing its shards takes
  // long for a large model, so the scheduler verifies it outside the lock before placing the job
  // (VerifyQueued) and falls back to an older one when it is damaged.
  const int from_step = job.last_checkpoint_step();
  rec.verify_pending = from_step > 0;
  if (automatic) {
    job.set_restarts(job.restarts() + 1);
    metrics_->JobRestarted(job.id());
  }
  job.set_state(pp::v1::QUEUED);
  StartNextAttempt(rec, from_step, reason, automatic);
  Log(absl::StrCat("job ", job.id(), ": attempt ", job.attempt(), " from step ", from_step,
                   " after: ", reason));
  Persist(rec);
  Emit(rec, pp::v1::EVENT_RESTARTED,
       absl::StrCat(automatic ? absl::StrCat("restart ", job.restarts(), " of ",
                                             job.spec().max_restarts())
                              : "restart",
                    " from step ", from_step, ": ", reason));
  UpdateGauges();
}

void JobManager::StartNextAttempt(JobRecord& rec, int from_step, const std::string& reason,
                                  bool automatic) {
  pp::v1::Job& job = rec.job;
  job.set_attempt(job.attempt() + 1);
  job.set_start_step(from_step);
  job.set_step(from_step);
  job.set_reason(reason);
  job.set_updated_unix(NowUnix());
  pp::v1::JobRestart* entry = job.add_restart_log();
  entry->set_attempt(job.attempt());
  entry->set_reason(reason);
  entry->set_from_step(from_step);
  entry->set_time_unix(job.updated_unix());
  entry->set_automatic(automatic);
}

void JobManager::Emit(JobRecord& rec, pp::v1::JobEventKind kind, const std::string& message) {
  pp::v1::JobEvent event = Snapshot(rec);
  event.set_kind(kind);
  event.set_message(message);
  rec.events.push_back(std::move(event));
  if (rec.events.size() > kKeptEvents) {
    rec.events.pop_front();
    ++rec.first_event;
  }
}

pp::v1::JobEvent JobManager::Snapshot(const JobRecord& rec) const {
  const pp::v1::Job& job = rec.job;
  pp::v1::JobEvent event;
  switch (job.state()) {
    case pp::v1::QUEUED:
      event.set_kind(pp::v1::EVENT_QUEUED);
      break;
    case pp::v1::RUNNING:
      event.set_kind(job.step() > 0 ? pp::v1::EVENT_STEP : pp::v1::EVENT_PLACED);
      break;
    default:
      event.set_kind(FinalEventKind(job.state()));
      break;
  }
  event.set_job_id(job.id());
  event.set_step(job.step());
  event.set_total_steps(job.spec().train().steps());
  event.set_loss(job.loss());
  event.set_tokens_per_second(job.tokens_per_second());
  event.set_bubble_ratio(job.bubble_ratio());
  event.set_message(job.reason());
  event.set_time_unix(NowUnix());
  return event;
}

void JobManager::Persist(JobRecord& rec) {
  if (absl::Status saved = store_->Put(rec.job); !saved.ok()) {
    Log(absl::StrCat("job ", rec.job.id(), " not saved: ", saved.message()));
  }
}

void JobManager::UpdateGauges() {
  std::map<std::string, int> jobs;
  for (pp::v1::JobState s :
       {pp::v1::QUEUED, pp::v1::RUNNING, pp::v1::SUCCEEDED, pp::v1::FAILED, pp::v1::CANCELLED}) {
    jobs[pp::v1::JobState_Name(s)] = 0;
  }
  for (const auto& [id, rec] : jobs_) ++jobs[pp::v1::JobState_Name(rec.job.state())];
  metrics_->SetJobCounts(jobs);
  std::map<std::string, int> workers;
  for (pp::v1::WorkerState s : {pp::v1::IDLE, pp::v1::BUSY, pp::v1::DOWN}) {
    workers[pp::v1::WorkerState_Name(s)] = workers_.CountInState(s);
  }
  metrics_->SetWorkerCounts(workers);
}

absl::StatusOr<std::string> JobManager::Submit(const pp::v1::JobSpec& spec) {
  absl::StatusOr<PlannedJob> planned = PlanJobSpec(spec);
  if (!planned.ok()) return planned.status();
  absl::MutexLock lock(&mu_);
  if (stopping_) return absl::UnavailableError("ppcoord is shutting down");
  const std::string id = MakeJobId(planned->spec.name(), next_sequence_++);
  JobRecord& rec = jobs_[id];
  rec.job.set_id(id);
  *rec.job.mutable_spec() = std::move(planned->spec);
  rec.job.set_state(pp::v1::QUEUED);
  rec.job.set_created_unix(NowUnix());
  rec.job.set_updated_unix(rec.job.created_unix());
  rec.schedule = std::move(planned->schedule);
  rec.stage_units = std::move(planned->stage_units);
  order_.push_back(id);
  Persist(rec);
  metrics_->JobCreated(id, rec.schedule.simulation().bubble_fraction());
  Emit(rec, pp::v1::EVENT_QUEUED,
       absl::StrCat("waiting for ", common::WorldSize(rec.job.spec()), " idle workers"));
  PlaceQueued();
  UpdateGauges();
  return id;
}

absl::StatusOr<pp::v1::Job> JobManager::Get(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  JobRecord* rec = FindLocked(job_id);
  if (rec == nullptr) return absl::NotFoundError(absl::StrCat("job \"", job_id, "\" not found"));
  return rec->job;
}

std::vector<pp::v1::Job> JobManager::List() {
  absl::MutexLock lock(&mu_);
  std::vector<pp::v1::Job> jobs;
  for (const std::string& id : order_) jobs.push_back(jobs_.at(id).job);
  return jobs;
}

absl::StatusOr<pp::v1::Job> JobManager::Cancel(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  JobRecord* rec = FindLocked(job_id);
  if (rec == nullptr) return absl::NotFoundError(absl::StrCat("job \"", job_id, "\" not found"));
  if (IsTerminal(rec->job.state())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job \"", job_id, "\" already ended: ", pp::v1::JobState_Name(rec->job.state())));
  }
  Finish(*rec, pp::v1::CANCELLED, "cancelled by the user");
  return rec->job;
}

absl::StatusOr<pp::v1::Job> JobManager::Resume(const pp::v1::ResumeJobRequest& request) {
  const std::string& id = request.job_id();
  if (request.step() < 0 || request.steps() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("step (", request.step(), ") and steps (",
                                                   request.steps(), ") must be >= 0"));
  }
  // Checked under the lock, the checkpoint verified outside it (hashing every shard of a large
  // model takes long), then applied under the lock if the job did not change meanwhile.
  int attempt = 0;
  absl::StatusOr<PlannedJob> planned;
  {
    absl::MutexLock lock(&mu_);
    JobRecord* rec = FindLocked(id);
    if (rec == nullptr) return absl::NotFoundError(absl::StrCat("job \"", id, "\" not found"));
    if (absl::Status ended = CheckResumable(rec->job); !ended.ok()) return ended;
    attempt = rec->job.attempt();
    pp::v1::JobSpec spec = rec->job.spec();
    if (request.has_parallel()) {
      // A new layout must not change the optimisation: the step's global batch (data x M
      // microbatches) stays, split over the new number of replicas.
      const int global = pp::common::GlobalMicrobatches(spec);
      const int replicas = std::max(1, request.parallel().data());
      if (global % replicas != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "parallel.data ", replicas, " does not divide the job's ", global,
            " microbatches per step (train.microbatches x parallel.data): a resume keeps the "
            "global batch"));
      }
      *spec.mutable_parallel() = request.parallel();
      spec.mutable_train()->set_microbatches(global / replicas);
    }
    if (request.steps() > 0) spec.mutable_train()->set_steps(request.steps());
    planned = PlanJobSpec(spec);
    if (!planned.ok()) return planned.status();
  }

  const std::string root = checkpoint_root();
  absl::StatusOr<pp::v1::CheckpointManifest> manifest;
  std::vector<std::string> skipped;
  if (request.step() > 0) {
    manifest = pp::common::VerifyCheckpoint(pp::common::StepDir(root, id, request.step()));
  } else {
    absl::StatusOr<pp::common::LatestManifest> latest =
        pp::common::LatestVerifiedCheckpoint(root, id);
    if (latest.ok()) {
      skipped = std::move(latest->skipped);
      manifest = std::move(latest->manifest);
    } else {
      manifest = latest.status();
    }
  }

  absl::MutexLock lock(&mu_);
  JobRecord* rec = FindLocked(id);
  if (rec == nullptr) return absl::NotFoundError(absl::StrCat("job \"", id, "\" not found"));
  if (absl::Status ended = CheckResumable(rec->job); !ended.ok()) return ended;
  if (rec->job.attempt() != attempt) {
    return absl::AbortedError(absl::StrCat("job \"", id,
                                           "\" was resumed by another request meanwhile"));
  }
  for (const std::string& why : skipped) {
    Log(absl::StrCat("job ", id, ": resume skipped a checkpoint: ", why));
  }
  if (!manifest.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job \"", id, "\" cannot resume: ", manifest.status().message()));
  }
  const int from_step = manifest->step();
  if (from_step >= planned->spec.train().steps()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job \"", id, "\": checkpoint step ", from_step, " already reaches train.steps ",
        planned->spec.train().steps(), "; ask for more steps to train further"));
  }
  pp::v1::Job& job = rec->job;
  *job.mutable_spec() = std::move(planned->spec);
  rec->schedule = std::move(planned->schedule);
  rec->stage_units = std::move(planned->stage_units);
  job.set_state(pp::v1::QUEUED);
  job.clear_placement();
  job.set_last_checkpoint_step(from_step);
  rec->verify_pending = false;  // verified above
  const pp::v1::ParallelSpec& p = job.spec().parallel();
  StartNextAttempt(*rec, from_step,
                   absl::StrCat("resumed by the user from checkpoint step ", from_step, " on ",
                                p.schedule(), " D=", p.pipeline(), " V=", p.chunks()),
                   /*automatic=*/false);
  Persist(*rec);
  metrics_->JobCreated(id, rec->schedule.simulation().bubble_fraction());
  Emit(*rec, pp::v1::EVENT_QUEUED, job.reason());
  PlaceQueued();
  UpdateGauges();
  return rec->job;
}

std::vector<pp::v1::WorkerInfo> JobManager::Workers() {
  absl::MutexLock lock(&mu_);
  return workers_.All();
}

absl::StatusOr<pp::v1::StepTrace> JobManager::Trace(const std::string& job_id, int step) {
  absl::MutexLock lock(&mu_);
  JobRecord* rec = FindLocked(job_id);
  if (rec == nullptr) return absl::NotFoundError(absl::StrCat("job \"", job_id, "\" not found"));
  if (rec->traces.empty()) {
    return absl::NotFoundError(absl::StrCat("job \"", job_id, "\" has no traced step yet"));
  }
  if (step == 0) return rec->traces.back();
  for (const pp::v1::StepTrace& trace : rec->traces) {
    if (trace.step() == step) return trace;
  }
  return absl::NotFoundError(absl::StrCat(
      "step ", step, " of job \"", job_id,
      "\" is not kept; kept steps: ", rec->traces.front().step(), "..", rec->traces.back().step()));
}

absl::Status JobManager::Watch(const std::string& job_id,
                               const std::function<bool(const pp::v1::JobEvent&)>& send,
                               const std::function<bool()>& cancelled) {
  pp::v1::JobEvent first;
  int64_t next;
  {
    absl::MutexLock lock(&mu_);
    JobRecord* rec = FindLocked(job_id);
    if (rec == nullptr) return absl::NotFoundError(absl::StrCat("job \"", job_id, "\" not found"));
    first = Snapshot(*rec);
    next = rec->first_event + static_cast<int64_t>(rec->events.size());
  }
  if (!send(first) || EndsWatch(first.kind())) return absl::OkStatus();
  while (true) {
    std::vector<pp::v1::JobEvent> batch;
    {
      absl::MutexLock lock(&mu_);
      JobRecord* rec = FindLocked(job_id);
      auto ready = [this, rec, next]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || rec->first_event + static_cast<int64_t>(rec->events.size()) > next;
      };
      // Short waits so a client that left is noticed.
      mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(200));
      if (stopping_) return absl::UnavailableError("ppcoord is shutting down");
      next = std::max(next, rec->first_event);  // a slow watcher skips what was dropped
      for (; next < rec->first_event + static_cast<int64_t>(rec->events.size()); ++next) {
        batch.push_back(rec->events[next - rec->first_event]);
      }
    }
    for (const pp::v1::JobEvent& event : batch) {
      if (!send(event) || EndsWatch(event.kind())) return absl::OkStatus();
    }
    if (cancelled()) return absl::CancelledError("watcher left");
  }
}

absl::StatusOr<pp::v1::RegisterWorkerResponse> JobManager::Register(
    const pp::v1::WorkerInfo& worker) {
  absl::MutexLock lock(&mu_);
  std::optional<Held> before;
  if (auto it = held_.find(worker.name()); it != held_.end()) before = it->second;
  if (absl::Status ok = workers_.Register(worker, absl::Now()); !ok.ok()) return ok;
  Log(absl::StrCat("worker ", worker.name(), " registered at ", worker.address()));
  held_.erase(worker.name());
  const Held now{.job_id = worker.job_id(), .attempt = worker.attempt()};
  if (!worker.job_id().empty()) {
    // Busy with what it says until it says the task ended; a stale attempt is told to stop.
    held_[worker.name()] = now;
    if (!IsLive(now)) {
      outbound_.push_back(Outbound{.kind = Outbound::Kind::kAbort,
                                   .worker = worker.name(),
                                   .address = worker.address(),
                                   .job_id = now.job_id,
                                   .reason = "the attempt this worker runs was replaced",
                                   .attempt = now.attempt,
                                   .plan = {}});
    }
  }
  // A worker that comes back without the live task it held has lost that rank.
  if (before && IsLive(*before) &&
      (before->job_id != now.job_id || before->attempt != now.attempt)) {
    JobRecord& rec = jobs_.at(before->job_id);
    Fail(rec,
         absl::StrCat("worker ", worker.name(), " (rank ", RankOfWorker(rec.job, worker.name()),
                      ") registered again without its task (restarted?)"),
         worker.name());
  }
  PlaceQueued();
  UpdateGauges();
  pp::v1::RegisterWorkerResponse response;
  response.set_name(worker.name());
  response.set_heartbeat_seconds(absl::ToDoubleSeconds(options_.heartbeat_interval));
  return response;
}

pp::v1::HeartbeatResponse JobManager::Heartbeat(const pp::v1::HeartbeatRequest& request) {
  absl::MutexLock lock(&mu_);
  pp::v1::HeartbeatResponse response;
  response.set_known(workers_.Heartbeat(request.name(), absl::Now()));
  if (!response.known()) return response;
  const Held reported{.job_id = request.job_id(), .attempt = request.attempt()};
  if (!request.job_id().empty() && !IsLive(reported)) response.add_abort_jobs(request.job_id());
  // A worker is free once it says it no longer runs what it held, unless that is the live attempt
  // (its RunTask may still be on the way).
  auto held = held_.find(request.name());
  if (held != held_.end() && !IsLive(held->second) &&
      (held->second.job_id != reported.job_id || held->second.attempt != reported.attempt)) {
    held_.erase(held);
    workers_.SetIdle(request.name());
    PlaceQueued();
    UpdateGauges();
  }
  return response;
}

pp::v1::ReportResponse JobManager::ReportStep(const pp::v1::StepReport& report) {
  absl::MutexLock lock(&mu_);
  pp::v1::ReportResponse response;
  if (!IsLive(Held{.job_id = report.job_id(), .attempt = report.attempt()})) {
    response.set_abort(true);
    return response;
  }
  JobRecord* rec = FindLocked(report.job_id());
  pp::v1::Job& job = rec->job;
  // Ranks finish step s before any rank finishes s + 2 (the clip norm is gathered every step),
  // and every rank reports each step: each one still reports newest + 1 after this answer.
  rec->newest_reported_step = std::max(rec->newest_reported_step, report.step());
  if (report.draining() && rec->stop_step == 0 && report.rank() >= 0 &&
      report.rank() < job.placement_size()) {
    rec->stop_step = std::min(job.spec().train().steps(), rec->newest_reported_step + 1);
    const std::string& worker = job.placement(report.rank()).worker();
    rec->leaving_workers.insert(worker);
    Log(absl::StrCat("job ", job.id(), ": worker ", worker, " drains; every rank stops after step ",
                     rec->stop_step));
  }
  response.set_stop_after_step(rec->stop_step);
  std::optional<StepSummary> summary = rec->steps->Add(report);
  if (!summary) return response;
  job.set_step(summary->step);
  job.set_loss(summary->loss);
  job.set_bubble_ratio(summary->bubble_ratio);
  job.set_tokens_per_second(
      summary->step_seconds > 0 ? static_cast<double>(pp::common::GlobalTokensPerStep(job.spec())) /
                                      summary->step_seconds : 0);
  job.set_updated_unix(NowUnix());
  rec->traces.push_back(std::move(summary->trace));
  if (rec->traces.size() > kTracedSteps) rec->traces.pop_front();
  StepRecord record{.step = summary->step,
                    .loss = summary->loss,
                    .step_seconds = summary->step_seconds,
                    .tokens_per_second = job.tokens_per_second(),
                    .bubble_ratio = summary->bubble_ratio,
                    .time_unix = job.updated_unix()};
  if (absl::Status saved = store_->AddStep(job.id(), record); !saved.ok()) {
    Log(absl::StrCat("step of job ", job.id(), " not saved: ", saved.message()));
  }
  Persist(*rec);
  metrics_->StepCompleted(job.id(), summary->loss, summary->bubble_ratio);
  Emit(*rec, pp::v1::EVENT_STEP, "");
  rec->events.back().set_step_seconds(summary->step_seconds);
  return response;
}

pp::v1::ReportResponse JobManager::ReportTask(const pp::v1::TaskReport& report) {
  absl::MutexLock lock(&mu_);
  pp::v1::ReportResponse response;
  JobRecord* rec = FindLocked(report.job_id());
  const Held ended{.job_id = report.job_id(), .attempt = report.attempt()};
  std::string worker = report.worker();
  if (worker.empty() && rec != nullptr && report.rank() >= 0 &&
      report.rank() < rec->job.placement_size()) {
    worker = rec->job.placement(report.rank()).worker();
  }
  const bool live = IsLive(ended);
  Release(worker, ended);
  if (!live) {
    response.set_abort(true);
    PlaceQueued();
    UpdateGauges();
    return response;
  }
  pp::v1::Job& job = rec->job;
  if (!report.ok()) {
    const std::string reason =
        absl::StrCat("rank ", report.rank(), " on worker ", worker, ": ", report.error());
    const auto code = static_cast<absl::StatusCode>(report.error_code());
    if (code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kDeadlineExceeded) {
      Suspect(*rec, reason, worker);
    } else {
      Fail(*rec, reason, worker);  // the rank's own error: the cause
    }
  } else if (report.rank() >= 0 && report.rank() < job.placement_size()) {
    rec->ranks_done.insert(report.rank());
    rec->drained = rec->drained || report.drained();
    if (static_cast<int>(rec->ranks_done.size()) == job.placement_size()) {
      if (rec->drained) {
        // The workers that asked to drain are leaving: the next attempt goes elsewhere.
        for (const std::string& w : rec->leaving_workers) workers_.SetDown(w);
        Requeue(*rec,
                absl::StrCat("worker(s) ", absl::StrJoin(rec->leaving_workers, ", "),
                             " drained after step ", rec->stop_step),
                /*automatic=*/false);
      } else {
        Finish(*rec, pp::v1::SUCCEEDED, "");
      }
    }
  }
  PlaceQueued();
  UpdateGauges();
  return response;
}

pp::v1::ReportResponse JobManager::ReportCheckpoint(const pp::v1::CheckpointReport& report) {
  absl::MutexLock lock(&mu_);
  pp::v1::ReportResponse response;
  JobRecord* rec = FindLocked(report.job_id());
  // A rank's last checkpoint may arrive after another rank ended the job.
  const bool current = rec != nullptr && rec->job.attempt() == report.attempt() &&
                       rec->checkpoints != nullptr &&
                       (rec->job.state() == pp::v1::RUNNING ||
                        rec->job.state() == pp::v1::SUCCEEDED);
  if (!current) {
    response.set_abort(rec == nullptr || rec->job.state() != pp::v1::SUCCEEDED);
    return response;
  }
  absl::StatusOr<std::optional<std::vector<pp::v1::CheckpointReport>>> complete =
      rec->checkpoints->Add(report);
  if (!complete.ok()) {
    Log(absl::StrCat("job ", rec->job.id(), ": ", complete.status().message()));
    metrics_->CheckpointFailed(rec->job.id());
  } else if (complete->has_value()) {
    CommitCheckpoint(*rec, **complete);
  }
  return response;
}

void JobManager::CommitCheckpoint(JobRecord& rec,
                                  const std::vector<pp::v1::CheckpointReport>& shards) {
  pp::v1::Job& job = rec.job;
  const pp::v1::JobSpec& spec = job.spec();
  const int step = shards.front().step();
  std::vector<pp::v1::CheckpointShard> manifest_shards;
  for (const pp::v1::CheckpointReport& r : shards) {
    manifest_shards.push_back(pp::common::ManifestShard(r));
  }
  const pp::v1::CheckpointManifest manifest =
      pp::common::BuildManifest(job.id(), step, spec, pp::common::MeshLayout(spec, rec.stage_units),
                                manifest_shards, NowUnix());
  const std::string root = checkpoint_root();
  absl::Status committed =
      pp::common::CommitManifest(pp::common::StepDir(root, job.id(), step), manifest);
  if (!committed.ok()) {
    Log(absl::StrCat("job ", job.id(), ": checkpoint step ", step,
                     " not committed: ", committed.message()));
    metrics_->CheckpointFailed(job.id());
    return;
  }
  if (absl::Status pruned = pp::common::PruneCheckpoints(root, job.id(), spec.checkpoint().keep());
      !pruned.ok()) {
    Log(absl::StrCat("job ", job.id(), ": ", pruned.message()));
  }
  job.set_last_checkpoint_step(step);
  Persist(rec);
  metrics_->CheckpointCommitted(job.id(), step, manifest.created_unix());
  Emit(rec, pp::v1::EVENT_CHECKPOINT, absl::StrCat("checkpoint step ", step, " committed"));
  rec.events.back().set_step(step);
}

}  // namespace pp::coordinator
