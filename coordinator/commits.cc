// JobManager: the checkpoint and store I/O, all outside mu_ (the threading contract is in jobs.h):
// the committer thread, which writes the job rows transitions marked dirty, the per-step records
// and complete checkpoints (with the prune of older ones); and the verifier thread, which hashes
// the checkpoint a requeued job will start from.
#include <algorithm>
#include <cstdlib>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/checkpoint.h"
#include "common/manifest.h"
#include "coordinator/jobs.h"
#include "coordinator/log.h"

namespace pp::coordinator {
namespace {

// How long an RPC waits for its row to be written: the store's busy timeout (5 s) several times.
constexpr absl::Duration kStoreWait = absl::Seconds(30);

// Test hook: PP_TEST_EXIT_AFTER_PRUNE=STEP (tests only) ends ppcoord at once, as a crash would,
// right after it pruned the checkpoints older than step STEP, to check what a restart finds.
void ExitIfTestHookAfterPrune(int step) {
  static const int hook_step = [] {
    const char* value = std::getenv("PP_TEST_EXIT_AFTER_PRUNE");
    int parsed = 0;
    return value != nullptr && absl::SimpleAtoi(value, &parsed) ? parsed : 0;
  }();
  if (hook_step <= 0 || step != hook_step) return;
  Log(absl::StrCat("PP_TEST_EXIT_AFTER_PRUNE: exiting after the prune of checkpoint ", step));
  std::_Exit(3);  // not 0, 1 or 2: an exit ppcoord never makes of its own
}

// Test hook: PP_TEST_COMMIT_PAUSE=SECONDS (tests only) sleeps that long in every checkpoint
// commit's I/O, as a slow disk would while a large manifest and its shards are checked and synced.
void PauseIfTestHookInCommit(int step) {
  static const double pause_seconds = [] {
    const char* value = std::getenv("PP_TEST_COMMIT_PAUSE");
    double parsed = 0;
    return value != nullptr && absl::SimpleAtod(value, &parsed) ? parsed : 0;
  }();
  if (pause_seconds <= 0) return;
  Log(absl::StrCat("PP_TEST_COMMIT_PAUSE: checkpoint step ", step, ": pausing ", pause_seconds,
                   " s"));
  absl::SleepFor(absl::Seconds(pause_seconds));
}

}  // namespace

int64_t JobManager::Persist(JobRecord& rec) {
  return commit_queue_.MarkDirty(rec.job().id());
}

absl::Status JobManager::AwaitStored(const std::string& job_id, int64_t ticket) {
  if (ticket <= 0) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return commit_queue_.done() || commit_queue_.WrittenAt(job_id, ticket) != nullptr;
  };
  mu_.AwaitWithTimeout(absl::Condition(&done), kStoreWait);  // releases mu_ while it waits
  if (const StoredRow* written = commit_queue_.WrittenAt(job_id, ticket); written != nullptr) {
    return written->status;
  }
  if (commit_queue_.done()) return absl::UnavailableError("ppcoord is shutting down");
  return absl::DeadlineExceededError(
      absl::StrCat("the job store did not answer within ", absl::FormatDuration(kStoreWait)));
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
  commit_queue_.AddCommit(std::move(commit));
}

void JobManager::CommitterLoop() {
  const bool expire = options_.retain_jobs > absl::ZeroDuration();
  absl::Time next_scan = absl::InfinitePast();
  while (true) {
    std::deque<PendingCommit> commits;
    std::vector<Expiring> expiring;
    bool work = false;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return commit_queue_.closing() || commit_queue_.HasWork();
      };
      mu_.AwaitWithTimeout(absl::Condition(&ready),
                           expire ? kExpiryScan : absl::InfiniteDuration());
      work = commit_queue_.HasWork();
      if (commit_queue_.closing() && !work) {  // everything is written
        commit_queue_.Done();
        return;
      }
      commits = commit_queue_.TakeCommits();
      if (expire && !commit_queue_.closing() && absl::Now() >= next_scan) {
        expiring = ExpiredJobs();
        next_scan = absl::Now() + kExpiryScan;
      }
    }
    // Before the round's rows: a job resumed while its row is deleted is dirty, and this round's
    // CommitRound writes its row again (ForgetExpired).
    if (!expiring.empty()) ExpireRound(expiring);
    if (work) CommitRound(std::move(commits));
  }
}

void JobManager::CommitRound(std::deque<PendingCommit> commits) {
  const std::string root = checkpoint_root();
  for (PendingCommit& commit : commits) {
    PauseIfTestHookInCommit(commit.step);
    commit.written =
        common::CommitManifest(common::StepDir(root, commit.job_id, commit.step), commit.manifest);
  }
  std::vector<pp::v1::Job> rows;
  std::map<std::string, StoredRow> stored;
  std::vector<std::pair<std::string, StepRecord>> steps;
  {
    absl::MutexLock lock(&mu_);
    for (PendingCommit& commit : commits) ApplyManifest(commit);
    for (const auto& [id, ticket] : commit_queue_.TakeDirty()) {
      if (JobRecord* rec = FindLocked(id); rec != nullptr) rows.push_back(rec->job());
      stored[id].ticket = ticket;
    }
    steps = commit_queue_.TakeSteps();
  }
  {
    absl::MutexLock lock(&store_mu_);
    for (const pp::v1::Job& row : rows) stored[row.id()].status = store_->Put(row);
    for (const auto& [id, step] : steps) {
      if (absl::Status saved = store_->AddStep(id, step); !saved.ok()) {
        Log(absl::StrCat("step ", step.step, " of job ", id, " not saved: ", saved.message()));
      }
    }
  }
  // The row that points at the new checkpoint is stored before older ones go: a crash in between
  // leaves one checkpoint too many, never a row that points at a pruned one. When the row cannot
  // be stored, the older checkpoints stay (a restart resumes from the one the row names).
  for (const PendingCommit& commit : commits) {
    if (commit.ticket == 0 || !stored[commit.job_id].status.ok()) continue;
    if (absl::Status pruned = common::PruneCheckpoints(root, commit.job_id, commit.keep);
        !pruned.ok()) {
      Log(absl::StrCat("job ", commit.job_id, ": ", pruned.message()));
    }
    ExitIfTestHookAfterPrune(commit.step);
  }
  absl::MutexLock lock(&mu_);
  ApplyStored(stored, commits);
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
  pp::v1::JobEvent& event =
      Emit(*rec, pp::v1::EVENT_CHECKPOINT, absl::StrCat("checkpoint step ", commit.step, " committed"));
  event.set_step(commit.step);
  if (commit.manifest.has_epoch()) *event.mutable_epoch() = commit.manifest.epoch();
}

void JobManager::ApplyStored(const std::map<std::string, StoredRow>& stored,
                             const std::deque<PendingCommit>& commits) {
  for (const auto& [id, outcome] : stored) {
    if (!outcome.status.ok()) Log(absl::StrCat("job ", id, " not saved: ", outcome.status.message()));
    commit_queue_.RecordStored(id, outcome);
  }
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
      // A checkpoint still being committed is verified once it is (or found missing).
      if (rec.verify_pending() && rec.job().state() == pp::v1::QUEUED &&
          rec.commits_in_flight == 0) {
        Pending& p = pending.emplace_back();
        p.job_id = id;
        p.attempt = rec.job().attempt();
        p.max_step = rec.job().start_step();
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
