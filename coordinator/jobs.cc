// JobManager: construction and reload, the scheduler thread (and the committer's start and
// stop), placement of queued jobs, and the client side (submit, get, list, cancel, resume, traces,
// watch).
#include "coordinator/jobs.h"

#include <deque>
#include <filesystem>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/job_spec.h"
#include "common/mesh.h"
#include "coordinator/list_page.h"
#include "coordinator/log.h"
#include "coordinator/placement.h"
#include "coordinator/resume_checkpoint.h"
#include "coordinator/resume_logic.h"

namespace pp::coordinator {
namespace {

// A change the job store refused: Unavailable (the client may retry), with the store's error.
absl::Status Unsaved(const std::string& what, const absl::Status& store) {
  return absl::UnavailableError(
      absl::StrCat(what, ": the job store did not save it: ", store.message()));
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
  manager->committer_.Start();
  return manager;
}

JobManager::JobManager(const ManagerOptions& options, std::unique_ptr<JobStore> store,
                       CoordinatorMetrics* metrics)
    : options_(options),
      metrics_(metrics),
      store_(std::move(store)),
      rpc_(&mu_, metrics, options.worker_credentials, options.worker_rpc_deadline,
           options.probe_deadline,
           [this](const Outbound& rpc, const grpc::Status& status)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { RpcDone(rpc, status); }),
      events_(&mu_),
      policy_(options.policy != nullptr ? options.policy
                                        : std::make_shared<const Policy>(Policy::Default())),
      committer_(&mu_, &store_mu_, store_.get(), this,
                 CommitterOptions{.checkpoint_root = checkpoint_root(),
                                  .retain_jobs = options.retain_jobs,
                                  .verify_period = options.tick}) {}

JobManager::~JobManager() { Stop(); }

void JobManager::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    events_.Close();
    committer_.StopVerifier();
  }
  rendezvous_.Close();
  if (scheduler_.joinable()) scheduler_.join();
  committer_.JoinVerifier();
  {
    // Worker RPCs carry deadlines, so their callbacks come back in bounded time.
    absl::MutexLock lock(&mu_);
    rpc_.AwaitIdle(options_.worker_rpc_deadline + absl::Seconds(1));
    committer_.Close();  // the committer writes what is marked, then ends
  }
  committer_.Join();
}

std::string JobManager::checkpoint_root() const {
  return (std::filesystem::path(options_.data_dir) / "checkpoints").string();
}

absl::Status JobManager::Reload() {
  absl::StatusOr<std::vector<pp::v1::Job>> jobs;
  {
    absl::MutexLock store_lock(&store_mu_);
    jobs = store_->LoadJobs();
  }
  if (!jobs.ok()) return jobs.status();
  absl::MutexLock lock(&mu_);
  for (pp::v1::Job& job : *jobs) {
    const std::string id = job.id();
    JobRecord& rec = jobs_.try_emplace(id, std::move(job)).first->second;
    queue_.Add(id);
    if (IsTerminal(rec.job().state())) continue;
    // Its fields only: its files were checked when it came in, and reading them here would hold
    // mu_ (and ppcoord's start) for as long as its data takes to read.
    absl::StatusOr<PlannedJob> planned = PlanJobSpec(rec.job().spec());
    if (!planned.ok()) {
      // Stored by an older ppcoord, or under older limits: it must not keep ppcoord from starting.
      const std::string reason =
          absl::StrCat("quarantined at startup: its spec is refused: ", planned.status().message());
      Log(absl::StrCat("job ", id, ": ", reason));
      Finish(rec, pp::v1::FAILED, reason);  // logged above; ppcoord starts anyway
      continue;
    }
    rec.schedule = std::move(planned->schedule);
    rec.stage_units = std::move(planned->stage_units);
    rec.rank_bytes = RankBytes(planned->memory);
    rec.auto_plan.set_calibrate(common::IsAutoSchedule(rec.job().spec().parallel()));
    metrics_->JobCreated(id, rec.schedule.simulation().bubble_fraction());
    // Its workers still run the old attempt; they register again and are told to stop it.
    if (rec.job().state() == pp::v1::RUNNING) {
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
        return stopping_ || rpc_.HasQueued();
      };
      mu_.AwaitWithTimeout(absl::Condition(&wake), options_.tick);
      if (stopping_) return;
      Tick();
      rpcs = rpc_.TakeQueued();
    }
    for (Outbound& rpc : rpcs) rpc_.Issue(std::move(rpc));
  }
}

void JobManager::Tick() {
  const absl::Time now = absl::Now();
  for (auto& [id, rec] : jobs_) {
    if (!rec.suspicion) continue;
    if (!IsLive(Held{.job_id = id, .attempt = rec.suspicion->attempt})) {
      rec.suspicion.reset();
    } else if (now >= rec.suspicion->deadline && rec.suspicion->probes_pending <= 0) {
      const JobRecord::Suspicion suspicion = *std::exchange(rec.suspicion, std::nullopt);
      Fail(rec, suspicion.reason, suspicion.worker);
    }
  }
  EnforcePreemptionGrace(now);
  GrowElastic(now);
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
         absl::StrCat("worker ", w.name(), " (rank ", RankOfWorker(rec.job(), w.name()),
                      ") stopped heartbeating: silent for more than ",
                      absl::FormatDuration(options_.worker_timeout)),
         w.name());
  }
  for (const std::string& name :
       workers_.ForgetDown(now, options_.down_worker_ttl, [this](const std::string& w)
                               ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                                 auto held = held_.find(w);
                                 return held != held_.end() && IsLive(held->second);
                               })) {
    Log(absl::StrCat("worker ", name, " forgotten: DOWN for more than ",
                     absl::FormatDuration(options_.down_worker_ttl)));
  }
  PlaceQueued();
  UpdateGauges();
}

void JobManager::NoteWait(JobRecord& rec, const std::string& reason) {
  if (rec.job().reason() == reason) return;
  LogAndApply(rec, JobEdit::Wait(reason, NowUnix()));
  Emit(rec, pp::v1::EVENT_QUEUED, reason);
}

void JobManager::Start(JobRecord& rec, std::vector<pp::v1::RankPlacement> placement) {
  // Its state, placement and the attempt's progress reset; the workers, RPCs and event follow.
  if (LogAndApply(rec, JobEdit::Place(std::move(placement), NowUnix())) == 0) return;
  const pp::v1::Job& job = rec.job();
  const std::string& id = job.id();
  std::vector<std::string> names;
  for (const pp::v1::RankPlacement& p : job.placement()) {
    workers_.SetBusy(p.worker(), id);
    held_[p.worker()] = Held{.job_id = id, .attempt = job.attempt()};
    names.push_back(absl::StrCat(p.worker(), " (rank ", p.rank(), ")"));
  }
  // checkpoint.autoEverySteps: this attempt's interval, in the spec the task plans copy.
  const std::string every =
      ApplyAutoEverySteps(*rec.mutable_job(), rec.checkpoint_cost, failure_rate_);
  if (!every.empty()) Log(every);
  for (pp::v1::TaskPlan& plan :
       BuildTaskPlans(job, rec.schedule, rec.stage_units, checkpoint_root())) {
    const pp::v1::RankPlacement& p = job.placement(plan.rank());
    rpc_.Queue(Outbound{.kind = Outbound::Kind::kRun,
                        .worker = p.worker(),
                        .address = p.address(),
                        .job_id = id,
                        .reason = "",
                        .attempt = job.attempt(),
                        .plan = std::move(plan)});
  }
  Emit(rec, pp::v1::EVENT_PLACED,
       absl::StrCat("attempt ", job.attempt(), " placed on ", absl::StrJoin(names, ", "),
                    job.start_step() > 0 ? absl::StrCat(", from step ", job.start_step()) : ""));
}

absl::StatusOr<std::string> JobManager::Submit(const pp::v1::JobSpec& spec, const Caller& caller) {
  // Before mu_: this reads the spec's data files through.
  absl::StatusOr<PlannedJob> planned =
      PlanClientSpec(spec, options_.data_roots,
                     spec.parallel().recompute() == "auto" ? RegisteredMemoryFits() : nullptr);
  if (!planned.ok()) return planned.status();
  const std::vector<int64_t> rank_bytes = RankBytes(planned->memory);
  pp::v1::Job job;
  job.set_owner(caller.name);
  *job.mutable_spec() = std::move(planned->spec);
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return absl::UnavailableError("ppcoord is shutting down");
    if (absl::Status fits = CheckMemoryFits(rank_bytes, workers_.All()); !fits.ok()) return fits;
    // Two submits of one owner racing here may both pass max_queued_jobs: it bounds the queue
    // by the owner's concurrent calls at worst, which the RPC limits bound.
    if (absl::Status admitted = Admit(job, caller); !admitted.ok()) return admitted;
  }
  // Nothing is acknowledged that a restart would lose: the job exists once its row is stored.
  // The row is written under store_mu_ alone, so heartbeats (mu_) do not wait on the disk;
  // store_mu_ is held on until the job is listed, so jobs are listed in their rows' order.
  absl::MutexLock store_lock(&store_mu_);
  absl::StatusOr<int64_t> sequence = store_->ReserveSequence();
  if (!sequence.ok()) return Unsaved("job not submitted", sequence.status());
  job.set_id(MakeJobId(job.spec().name(), *sequence));
  job.set_state(pp::v1::QUEUED);
  job.set_train_windows(planned->train_windows);
  SetStep(job, 0);
  if (!planned->recompute_reason.empty()) job.mutable_plan()->set_reason(planned->recompute_reason);
  job.set_created_unix(NowUnix());
  job.set_updated_unix(job.created_unix());
  job.set_queued_unix(job.created_unix());
  if (absl::Status saved = store_->Put(job); !saved.ok()) {
    Log(absl::StrCat("job ", job.id(), " not saved: ", saved.message()));
    return Unsaved("job not submitted", saved);
  }
  const std::string id = job.id();
  absl::MutexLock lock(&mu_);
  JobRecord& rec = jobs_.try_emplace(id, std::move(job)).first->second;
  rec.schedule = std::move(planned->schedule);
  rec.stage_units = std::move(planned->stage_units);
  rec.rank_bytes = rank_bytes;
  rec.auto_plan.set_calibrate(common::IsAutoSchedule(rec.job().spec().parallel()));
  queue_.Add(id);
  metrics_->JobCreated(id, rec.schedule.simulation().bubble_fraction());
  Emit(rec, pp::v1::EVENT_QUEUED,
       absl::StrCat("waiting for ", common::WorldSize(rec.job().spec()), " idle workers",
                    rec.job().plan().reason().empty() ? "" : "; ", rec.job().plan().reason()));
  PlaceQueued();
  UpdateGauges();
  return id;
}

absl::StatusOr<pp::v1::Job> JobManager::Get(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  JobRecord* rec = FindLocked(job_id);
  if (rec == nullptr) return absl::NotFoundError(absl::StrCat("job \"", job_id, "\" not found"));
  pp::v1::Job job = rec->job();
  if (job.state() == pp::v1::QUEUED) FillQueueView(ViewQueue(), job);
  return job;
}

absl::StatusOr<pp::v1::ListJobsResponse> JobManager::List(const pp::v1::ListJobsRequest& request) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<ListPage> page =
      SelectPage(queue_.submitted(), request.page_size(), request.page_token(),
                 [this](size_t i) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                   return FieldBytes(jobs_.at(queue_.submitted()[i]).job().ByteSizeLong());
                 });
  if (!page.ok()) return page.status();
  pp::v1::ListJobsResponse response;
  const std::map<std::string, QueueView> view = ViewQueue();
  for (size_t i = page->begin; i < page->end; ++i) {
    FillQueueView(view, *response.add_jobs() = jobs_.at(queue_.submitted()[i]).job());
  }
  response.set_next_page_token(page->next_page_token);
  return response;
}

absl::StatusOr<pp::v1::Job> JobManager::Cancel(const std::string& job_id) {
  pp::v1::Job cancelled;
  int64_t ticket = 0;
  {
    absl::MutexLock lock(&mu_);
    JobRecord* rec = FindLocked(job_id);
    if (rec == nullptr) return absl::NotFoundError(absl::StrCat("job \"", job_id, "\" not found"));
    if (IsTerminal(rec->job().state())) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job \"", job_id, "\" already ended: ", pp::v1::JobState_Name(rec->job().state())));
    }
    ticket = Finish(*rec, pp::v1::CANCELLED, "cancelled by the user");
    cancelled = rec->job();
  }
  if (absl::Status saved = committer_.AwaitStored(job_id, ticket); !saved.ok()) {
    return Unsaved("job cancelled, but a restart may bring it back", saved);
  }
  return cancelled;
}

absl::StatusOr<pp::v1::Job> JobManager::Resume(const pp::v1::ResumeJobRequest& request,
                                               const Caller& caller) {
  if (absl::Status valid = CheckResumeRequest(request); !valid.ok()) return valid;
  // Checked under the lock, the checkpoint verified outside it (hashing every shard of a large
  // model takes long), then applied under the lock if the job did not change meanwhile.
  int attempt = 0;
  absl::StatusOr<PlannedJob> planned = PlanResume(request, &attempt);
  if (!planned.ok()) return planned.status();
  // The same admission as SubmitJob, before the checkpoint is verified: a new layout (fewer
  // stages, more layers a rank) may no longer fit any worker, and it would wait QUEUED forever.
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status fits = CheckMemoryFits(RankBytes(planned->memory), workers_.All());
        !fits.ok()) {
      return fits;
    }
  }
  const std::string& id = request.job_id();
  const ResumeCheckpoint checkpoint =
      FindResumeCheckpoint(checkpoint_root(), request, planned->spec, planned->train_windows);
  int64_t ticket = 0;
  absl::StatusOr<pp::v1::Job> resumed;
  {
    absl::MutexLock lock(&mu_);
    resumed = ApplyResume(id, attempt, *std::move(planned), checkpoint, caller, &ticket);
  }
  if (!resumed.ok()) return resumed;
  if (absl::Status saved = committer_.AwaitStored(id, ticket); !saved.ok()) {
    return Unsaved("job resumed, but a restart may end it again", saved);
  }
  return resumed;
}

absl::StatusOr<PlannedJob> JobManager::PlanResume(const pp::v1::ResumeJobRequest& request,
                                                  int* attempt) {
  const std::string& id = request.job_id();
  absl::StatusOr<pp::v1::JobSpec> spec;
  {
    absl::MutexLock lock(&mu_);
    JobRecord* rec = FindLocked(id);
    if (rec == nullptr) return absl::NotFoundError(absl::StrCat("job \"", id, "\" not found"));
    if (absl::Status ended = CheckResumable(rec->job()); !ended.ok()) return ended;
    // The checkpoint it resumes from may still be in the committer's queue.
    auto committed = [rec]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return rec->commits_in_flight == 0;
    };
    mu_.AwaitWithTimeout(absl::Condition(&committed), absl::Seconds(30));
    *attempt = rec->job().attempt();
    spec = ResumedSpec(rec->job().spec(), request);
  }
  if (!spec.ok()) return spec.status();
  // Outside the lock: planning a large job takes long, and its data files are read again (they
  // may have changed since the submission). A stored spec names its recompute mode (auto was
  // resolved at submission); a resume that asks for auto again gets it resolved.
  const bool choose = spec->parallel().recompute() == "auto";
  return PlanClientSpec(*spec, options_.data_roots, choose ? RegisteredMemoryFits() : nullptr);
}

absl::StatusOr<pp::v1::Job> JobManager::ApplyResume(const std::string& id, int attempt,
                                                    PlannedJob planned,
                                                    const ResumeCheckpoint& checkpoint,
                                                    const Caller& caller, int64_t* ticket) {
  JobRecord* rec = FindLocked(id);
  if (rec == nullptr) return absl::NotFoundError(absl::StrCat("job \"", id, "\" not found"));
  if (absl::Status ended = CheckResumable(rec->job()); !ended.ok()) return ended;
  if (rec->job().attempt() != attempt) {
    return absl::AbortedError(
        absl::StrCat("job \"", id, "\" was resumed by another request meanwhile"));
  }
  if (rec->commits_in_flight > 0) {  // a commit would move last_checkpoint_step past the resume
    return absl::AbortedError(
        absl::StrCat("job \"", id, "\" still commits a checkpoint; retry"));
  }
  for (const std::string& why : checkpoint.skipped) {
    Log(absl::StrCat("job ", id, ": resume skipped a checkpoint: ", why));
  }
  if (!checkpoint.manifest.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job \"", id, "\" cannot resume: ", checkpoint.manifest.status().message()));
  }
  const int from_step = checkpoint.manifest->step();
  if (absl::Status left = CheckStepsLeft(id, from_step, planned.spec); !left.ok()) return left;
  pp::v1::Job admitted;  // the class is checked, and its value read, under today's policy
  admitted.set_owner(rec->job().owner());
  *admitted.mutable_spec() = planned.spec;
  if (absl::Status allowed = Admit(admitted, caller); !allowed.ok()) return allowed;
  // Verified above, and asked for: no backoff.
  const std::string reason = ResumeReason(from_step, planned.spec.parallel());
  const JobEdit edit = JobEdit::Resume(from_step, reason, std::move(planned.spec),
                                       planned.train_windows, NowUnix());
  if (absl::Status legal = rec->Check(edit); !legal.ok()) {
    Log(absl::StrCat("internal error: ", legal.message()));
    return legal;
  }
  rec->mutable_job()->set_priority(admitted.priority());
  rec->grow_to = 0;  // the user's layout replaces an elastic grow in flight
  rec->schedule = std::move(planned.schedule);
  rec->stage_units = std::move(planned.stage_units);
  rec->rank_bytes = RankBytes(planned.memory);
  rec->auto_plan.set_calibrate(common::IsAutoSchedule(edit.spec->parallel()));
  *ticket = LogAndApply(*rec, edit);
  metrics_->JobCreated(id, rec->schedule.simulation().bubble_fraction());
  Emit(*rec, pp::v1::EVENT_QUEUED, rec->job().reason());
  PlaceQueued();
  UpdateGauges();
  return rec->job();
}

std::optional<LiveAttempt> JobManager::LiveAttemptOf(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  const JobRecord* rec = FindLocked(job_id);
  if (rec == nullptr) return std::nullopt;
  LiveAttempt live;
  if (rec->calibrating) {  // its workers meet under "<job>/<attempt>/calibrate/"
    live.attempt = rec->calibrating->attempt();
    for (const pp::v1::RankPlacement& p : rec->calibrating->placement()) {
      live.workers.push_back(p.worker());
      live.ranks.push_back(p.rank());
    }
    return live;
  }
  if (rec->job().state() != pp::v1::RUNNING) return std::nullopt;
  live.attempt = rec->job().attempt();
  for (const pp::v1::RankPlacement& p : rec->job().placement()) {
    live.workers.push_back(p.worker());
    live.ranks.push_back(p.rank());
  }
  return live;
}

std::vector<pp::v1::WorkerInfo> JobManager::Workers() {
  absl::MutexLock lock(&mu_);
  return workers_.All();
}

pp::plan::MemoryFits JobManager::RegisteredMemoryFits() {
  return [workers = Workers()](const std::vector<pp::plan::RankMemory>& memory) {
    return CheckMemoryFits(RankBytes(memory), workers);
  };
}

absl::StatusOr<pp::v1::StepTrace> JobManager::Trace(const std::string& job_id, int step) {
  absl::MutexLock lock(&mu_);
  if (FindLocked(job_id) == nullptr) {
    return absl::NotFoundError(absl::StrCat("job \"", job_id, "\" not found"));
  }
  return events_.Trace(job_id, step);
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
    first = SnapshotEvent(rec->job(), NowUnix());
    next = events_.End(job_id);
  }
  if (!send(first) || EndsWatch(first.kind())) return absl::OkStatus();
  return events_.Follow(job_id, next, send, cancelled);
}

}  // namespace pp::coordinator
