// JobManager on a shared cluster: the scheduling policy (policy.h) applied through the pure
// decisions of scheduling.h: the order, quotas and reservations PlaceQueued follows, preemption at
// a checkpoint, queue positions and start estimates in answers, and the queue's and owners'
// gauges. Everything here runs under mu_. docs/jobs.md "Priorities, quotas and preemption".
#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "coordinator/elastic.h"
#include "coordinator/jobs.h"
#include "coordinator/log.h"
#include "coordinator/placement.h"

namespace pp::coordinator {
namespace {

double UnixOf(absl::Time t) { return absl::ToDoubleSeconds(t - absl::UnixEpoch()); }

}  // namespace

void JobManager::SetPolicy(std::shared_ptr<const Policy> policy) {
  absl::MutexLock lock(&mu_);
  policy_ = std::move(policy);
  Log("scheduling policy loaded");
  PlaceQueued();
  UpdateGauges();
}

absl::Status JobManager::Admit(pp::v1::Job& job, const Caller& caller) {
  absl::StatusOr<int> priority = policy_->PriorityOf(job.spec().priority(), caller);
  if (!priority.ok()) return priority.status();
  if (job.spec().has_preemptible() && !job.spec().preemptible() && caller.role != Role::kAdmin) {
    return absl::PermissionDeniedError(
        absl::StrCat("preemptible: false is for admins; ", caller.name, " is not one"));
  }
  if (const pp::v1::Quota* quota = policy_->QuotaOf(job.owner());
      quota != nullptr && quota->max_queued_jobs() > 0) {
    int queued = 0;
    for (const auto& [id, rec] : jobs_) {
      queued += rec.job().owner() == job.owner() && rec.job().state() == pp::v1::QUEUED;
    }
    if (queued >= quota->max_queued_jobs()) {
      return absl::ResourceExhaustedError(absl::StrCat("owner ", job.owner(), " has ", queued,
                                                       " of ", quota->max_queued_jobs(),
                                                       " queued jobs (its quota)"));
    }
  }
  job.set_priority(*priority);
  return absl::OkStatus();
}

void JobManager::PlaceQueued() {
  // One snapshot for the round, kept current as jobs start or are preempted in it: placing one
  // job changes no other's place in the order, only who holds which workers.
  const absl::Time now = absl::Now();
  Round round;
  round.snapshot = queue_.Snapshot(jobs_, UnixOf(now));
  for (size_t i = 0; i < round.snapshot.size(); ++i) round.index[round.snapshot[i].id] = i;
  round.owner_workers = OwnerWorkers(round.snapshot);
  for (const auto& [id, rec] : jobs_) {
    if (rec.job().state() == pp::v1::RUNNING && !rec.preempted_for.empty()) {
      round.freeing[rec.preempted_for] += rec.job().placement_size();
    }
  }
  for (const std::string& id : queue_.Order(jobs_, round.snapshot, now, policy_->aging())) {
    TryPlace(jobs_.at(id), round, now);
  }
}

void JobManager::TryPlace(JobRecord& rec, Round& round, absl::Time now) {
  SchedJob& me = round.snapshot[round.index.at(rec.job().id())];
  const QuotaVerdict quota =
      CheckQuota(me, round.owner_workers[me.owner], policy_->QuotaOf(me.owner));
  if (!quota.within && !quota.may_borrow) {
    NoteWait(rec, quota.reason);
    return;
  }
  if (rec.grow_to > 0) {  // it stopped to grow (GrowElastic)
    ResizeTo(rec, std::exchange(rec.grow_to, 0),
             absl::StrCat("workers idle for ",
                          absl::FormatDuration(BoundsOf(BaseSpec(rec.job())).grow_after)));
    me.workers = LayoutWorkers(rec.job().spec().parallel());
  }
  const std::vector<pp::v1::WorkerInfo> idle = workers_.Idle();
  const int available = std::max(0, static_cast<int>(idle.size()) - round.reserved);
  absl::StatusOr<std::vector<pp::v1::RankPlacement>> placement =
      absl::ResourceExhaustedError("reserved");
  if (available >= me.workers) {
    const std::vector<int> stage_to_rank(rec.schedule.stage_to_rank().begin(),
                                         rec.schedule.stage_to_rank().end());
    placement = PlaceRanks(rec.job().spec(), stage_to_rank, idle, rec.rank_bytes);
  } else if (auto shrunk = ShrinkToPlace(rec, idle, available, now)) {
    placement = *std::move(shrunk);
    me.workers = static_cast<int>(placement->size());
  }
  if (placement.ok()) {
    if (rec.auto_plan.calibrate()) {
      BeginCalibration(rec, *std::move(placement));
    } else {
      Start(rec, *std::move(placement));
      rec.borrowing = !quota.within;
      me.state = pp::v1::RUNNING;
      me.started_unix = rec.placed_unix();
      me.borrowing = rec.borrowing;
    }
    round.owner_workers[me.owner] += me.workers;
    return;
  }
  std::string reason = available < me.workers ? WaitReason(me.workers, RegisteredWorkers(),
                                                           static_cast<int>(idle.size()))
                                              : std::string(placement.status().message());
  int& freeing = round.freeing[me.id];
  if (quota.within && me.workers - available - freeing > 0) {
    freeing += PreemptFor(rec, me, me.workers - available - freeing, round);
  }
  if (freeing > 0) absl::StrAppend(&reason, "; ", freeing, " workers being freed by preemption");
  // A job that preempts, or the first waiting job once it waited reserve_after_seconds, keeps
  // the idle workers it needs from the jobs behind it: they would take the freed workers first.
  const double reserve_after = policy_->aging().reserve_after_seconds();
  const bool starving =
      round.first_waiting && reserve_after > 0 && UnixOf(now) - me.queued_unix >= reserve_after;
  if (freeing > 0 || starving) {
    round.reserved += std::min(me.workers, available);
    if (freeing == 0) absl::StrAppend(&reason, "; the next free workers are reserved for it");
  }
  round.first_waiting = false;
  NoteWait(rec, reason);
}

int JobManager::RegisteredWorkers() {
  return workers_.CountInState(pp::v1::IDLE) + workers_.CountInState(pp::v1::BUSY);
}

int JobManager::PreemptFor(JobRecord& waiting, const SchedJob& me, int missing, Round& round) {
  int freed = 0;
  for (const std::string& victim :
       ChooseVictims(me, /*waiting_within_quota=*/true, missing, round.snapshot,
                     policy_->preemption(), NowUnix())) {
    JobRecord& rec = jobs_.at(victim);
    freed += rec.job().placement_size();
    Preempt(rec, waiting);
    round.snapshot[round.index.at(victim)].stopping = true;
  }
  return freed;
}

void JobManager::Preempt(JobRecord& victim, const JobRecord& waiting) {
  pp::v1::Job& job = *victim.mutable_job();
  // Each answer from now on carries this stop step: every rank checkpoints after it and stops.
  victim.stop_step = victim.NextCommonStopStep();
  victim.preempted_for = waiting.job().id();
  victim.preempt_deadline = absl::Now() + absl::Seconds(policy_->preemption().grace_seconds());
  job.set_preemptions(job.preemptions() + 1);
  job.add_preempted_unix(NowUnix());
  if (job.preempted_unix_size() > kMaxPreemptionsPerHour) {  // what the bound counts
    job.mutable_preempted_unix()->erase(job.mutable_preempted_unix()->begin());
  }
  Persist(victim);
  const std::string message = absl::StrCat("preempted by job ", waiting.job().id(), " (priority ",
                                           policy_->ClassName(waiting.job().spec().priority()), " ",
                                           waiting.job().priority(), "): checkpoints after step ",
                                           victim.stop_step, ", then waits for workers");
  Log(absl::StrCat("job ", job.id(), ": ", message));
  Emit(victim, pp::v1::EVENT_PREEMPTED, message);
  metrics_->JobPreempted();
}

void JobManager::EnforcePreemptionGrace(absl::Time now) {
  for (auto& [id, rec] : jobs_) {
    if (rec.job().state() != pp::v1::RUNNING || rec.preempted_for.empty() ||
        now < rec.preempt_deadline) {
      continue;
    }
    Requeue(rec,
            absl::StrCat("preempted by job ", rec.preempted_for, ": did not stop within ",
                         policy_->preemption().grace_seconds(),
                         " s; stopped, it resumes from its newest checkpoint"),
            /*automatic=*/false);
  }
}

std::map<std::string, JobManager::QueueView> JobManager::ViewQueue() {
  const absl::Time now = absl::Now();
  const std::vector<SchedJob> snapshot = queue_.Snapshot(jobs_, UnixOf(now));
  std::vector<std::string> order = queue_.Order(jobs_, snapshot, now, policy_->aging());
  // Held jobs (a restart's backoff or verification, a calibration) come after, oldest first.
  for (const std::string& id : queue_.submitted()) {
    const JobRecord& rec = jobs_.at(id);
    if (rec.job().state() == pp::v1::QUEUED &&
        JobQueue::HoldOf(rec, now) != JobQueue::Hold::kNone) {
      order.push_back(id);
    }
  }
  const std::map<std::string, double> starts =
      EstimateStarts(order, snapshot, workers_.CountInState(pp::v1::IDLE));
  std::map<std::string, QueueView> view;
  for (size_t i = 0; i < order.size(); ++i) {
    auto start = starts.find(order[i]);
    view[order[i]] =
        QueueView{.position = static_cast<int>(i) + 1,
                  .estimated_start_seconds = start == starts.end() ? 0 : start->second};
  }
  return view;
}

void JobManager::FillQueueView(const std::map<std::string, QueueView>& view, pp::v1::Job& job) {
  auto it = view.find(job.id());
  if (it == view.end()) return;
  job.set_queue_position(it->second.position);
  job.set_estimated_start_seconds(it->second.estimated_start_seconds);
}

void JobManager::UpdateSharedGauges() {
  std::map<std::string, int> queued;
  for (const pp::v1::PriorityClass& c : policy_->proto().priority_class()) queued[c.name()] = 0;
  for (const auto& [id, rec] : jobs_) {
    if (rec.job().state() == pp::v1::QUEUED) {
      ++queued[policy_->ClassName(rec.job().spec().priority())];
    }
  }
  metrics_->SetQueueByPriority(queued);
  std::map<std::string, int> owners;
  for (const auto& [id, rec] : jobs_) {
    if (rec.job().state() != pp::v1::RUNNING) continue;
    const std::string& owner = rec.job().owner();
    owners[owner.empty() ? "anonymous" : owner] += rec.job().placement_size();
  }
  metrics_->SetOwnerWorkers(owners);
}

}  // namespace pp::coordinator
