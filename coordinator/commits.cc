// JobManager's side of the committer (committer.h): what transitions hand it under mu_ (rows to
// write, complete checkpoints to commit), and the CommitterHost calls it makes back under mu_,
// which apply what its I/O outside mu_ found (a checkpoint committed, rows stored, a requeued
// job's start checkpoint verified). The threading contract is in jobs.h.
#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/checkpoint.h"
#include "common/manifest.h"
#include "coordinator/jobs.h"
#include "coordinator/log.h"

namespace pp::coordinator {

int64_t JobManager::Persist(JobRecord& rec) {
  return committer_.MarkDirty(rec.job().id());
}

void JobManager::CommitCheckpoint(JobRecord& rec,
                                  const std::vector<pp::v1::CheckpointReport>& shards) {
  const pp::v1::Job& job = rec.job();
  PendingCommit commit;
  commit.job_id = job.id();
  commit.step = shards.front().step();
  commit.keep = job.spec().checkpoint().keep();
  std::vector<pp::v1::CheckpointShard> manifest_shards;
  for (const pp::v1::CheckpointReport& r : shards) {
    manifest_shards.push_back(common::ManifestShard(r));
  }
  commit.manifest = common::BuildManifest(job.id(), commit.step, job.spec(),
                                          common::MeshLayout(job.spec(), rec.stage_units),
                                          manifest_shards, NowUnix(), job.train_windows());
  ++rec.commits_in_flight;
  rec.newest_commit_in_flight = std::max(rec.newest_commit_in_flight, commit.step);
  committer_.QueueCommit(std::move(commit));
}

const pp::v1::Job* JobManager::RowToStore(const std::string& job_id) {
  const JobRecord* rec = FindLocked(job_id);
  return rec != nullptr ? &rec->job() : nullptr;
}

void JobManager::ApplyManifest(PendingCommit& commit) {
  JobRecord* rec = FindLocked(commit.job_id);
  if (rec == nullptr) return;
  const pp::v1::Job& job = rec->job();
  if (!commit.written.ok()) {
    Log(absl::StrCat("job ", job.id(), ": checkpoint step ", commit.step,
                     " not committed: ", commit.written.message()));
    metrics_->CheckpointFailed(job.id());
    return;
  }
  commit.ticket = LogAndApply(*rec, JobEdit::Checkpoint(commit.step));
  metrics_->CheckpointCommitted(job.id(), commit.step, commit.manifest.created_unix());
  pp::v1::JobEvent& event = Emit(*rec, pp::v1::EVENT_CHECKPOINT,
                                 absl::StrCat("checkpoint step ", commit.step, " committed"));
  event.set_step(commit.step);
  if (commit.manifest.has_epoch()) *event.mutable_epoch() = commit.manifest.epoch();
}

void JobManager::ApplyStored(const std::deque<PendingCommit>& commits) {
  for (const PendingCommit& commit : commits) {
    JobRecord* rec = FindLocked(commit.job_id);
    if (rec == nullptr || --rec->commits_in_flight > 0) continue;
    rec->newest_commit_in_flight = 0;
    for (const TaskEnd& end : std::exchange(rec->reports_after_commits, {})) {
      if (IsLive(Held{.job_id = commit.job_id, .attempt = end.report.attempt()})) {
        ApplyTaskEnd(*rec, end.report, end.worker);
      }
    }
  }
  PlaceQueued();  // a requeued job waited for its commits (VerifyQueued)
  UpdateGauges();
}

std::vector<StartToVerify> JobManager::StartsToVerify() {
  std::vector<StartToVerify> pending;
  for (const auto& [id, rec] : jobs_) {
    // A checkpoint still being committed is verified once it is (or found missing).
    if (rec.verify_pending() && rec.job().state() == pp::v1::QUEUED &&
        rec.commits_in_flight == 0) {
      StartToVerify& p = pending.emplace_back();
      p.job_id = id;
      p.attempt = rec.job().attempt();
      p.max_step = rec.job().start_step();
    }
  }
  return pending;
}

void JobManager::ApplyVerified(const std::vector<StartToVerify>& verified) {
  for (const StartToVerify& p : verified) {
    JobRecord* rec = FindLocked(p.job_id);
    if (rec == nullptr || rec->job().state() != pp::v1::QUEUED ||
        rec->job().attempt() != p.attempt || !rec->verify_pending()) {
      continue;  // cancelled or requeued meanwhile
    }
    SettleStartStep(*rec, p.latest);
  }
  PlaceQueued();
  UpdateGauges();
}

void JobManager::SettleStartStep(JobRecord& rec,
                                 const absl::StatusOr<pp::common::LatestManifest>& latest) {
  int from_step = 0;
  if (latest.ok()) {
    from_step = latest->manifest.step();
    for (const std::string& why : latest->skipped) {
      Log(absl::StrCat("job ", rec.job().id(), ": skipped a checkpoint: ", why));
    }
  } else {
    Log(absl::StrCat("job ", rec.job().id(), ": restarting from scratch: ",
                     latest.status().message()));
  }
  LogAndApply(rec, JobEdit::SettleStart(from_step));
}

}  // namespace pp::coordinator
