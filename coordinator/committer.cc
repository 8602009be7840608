// Committer (committer.h): the committer and verifier threads, and their I/O outside the host's
// lock.
#include "coordinator/committer.h"

#include <cstdlib>
#include <map>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "coordinator/log.h"
#include "coordinator/retention.h"

namespace pp::coordinator {
namespace {

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

Committer::Committer(absl::Mutex* mu, absl::Mutex* store_mu, JobStore* store, CommitterHost* host,
                     CommitterOptions options)
    : mu_(mu), store_mu_(store_mu), store_(store), host_(host), options_(std::move(options)) {}

void Committer::Start() {
  verifier_ = std::thread([this] { VerifierLoop(); });
  committer_ = std::thread([this] { CommitterLoop(); });
}

int64_t Committer::MarkDirty(const std::string& job_id) {
  mu_->AssertHeld();
  return queue_.MarkDirty(job_id);
}

bool Committer::IsDirty(const std::string& job_id) const {
  mu_->AssertHeld();
  return queue_.IsDirty(job_id);
}

void Committer::QueueCommit(PendingCommit commit) {
  mu_->AssertHeld();
  queue_.AddCommit(std::move(commit));
}

void Committer::AddStep(const std::string& job_id, const pp::v1::JobStepRecord& step) {
  mu_->AssertHeld();
  queue_.AddStep(job_id, step);
}

void Committer::Forget(const std::string& job_id) {
  mu_->AssertHeld();
  queue_.Forget(job_id);
}

absl::Status Committer::AwaitStored(const std::string& job_id, int64_t ticket) {
  if (ticket <= 0) return absl::OkStatus();
  absl::MutexLock lock(mu_);
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return queue_.done() || queue_.WrittenAt(job_id, ticket) != nullptr;
  };
  mu_->AwaitWithTimeout(absl::Condition(&done), kStoreWait);  // releases mu_ while it waits
  if (const StoredRow* written = queue_.WrittenAt(job_id, ticket); written != nullptr) {
    return written->status;
  }
  if (queue_.done()) return absl::UnavailableError("ppcoord is shutting down");
  return absl::DeadlineExceededError(
      absl::StrCat("the job store did not answer within ", absl::FormatDuration(kStoreWait)));
}

void Committer::StopVerifier() {
  mu_->AssertHeld();
  verifier_stopping_ = true;
}

void Committer::JoinVerifier() {
  if (verifier_.joinable()) verifier_.join();
}

void Committer::Close() {
  mu_->AssertHeld();
  queue_.Close();
}

void Committer::Join() {
  if (committer_.joinable()) committer_.join();
}

void Committer::CommitterLoop() {
  const bool expire = options_.retain_jobs > absl::ZeroDuration();
  absl::Time next_scan = absl::InfinitePast();
  while (true) {
    std::deque<PendingCommit> commits;
    std::vector<Expiring> expiring;
    bool work = false;
    {
      absl::MutexLock lock(mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return queue_.closing() || queue_.HasWork();
      };
      mu_->AwaitWithTimeout(absl::Condition(&ready),
                            expire ? kExpiryScan : absl::InfiniteDuration());
      work = queue_.HasWork();
      if (queue_.closing() && !work) {  // everything is written
        queue_.Done();
        return;
      }
      commits = queue_.TakeCommits();
      if (expire && !queue_.closing() && absl::Now() >= next_scan) {
        expiring = host_->ExpiredJobs();
        next_scan = absl::Now() + kExpiryScan;
      }
    }
    // Before the round's rows: a job resumed while its row is deleted is dirty, and this round's
    // CommitRound writes its row again (DropExpired).
    if (!expiring.empty()) ExpireRound(expiring);
    if (work) CommitRound(std::move(commits));
  }
}

void Committer::CommitRound(std::deque<PendingCommit> commits) {
  const std::string& root = options_.checkpoint_root;
  for (PendingCommit& commit : commits) {
    PauseIfTestHookInCommit(commit.step);
    commit.written =
        common::CommitManifest(common::StepDir(root, commit.job_id, commit.step), commit.manifest);
  }
  std::vector<pp::v1::Job> rows;
  std::map<std::string, StoredRow> stored;
  std::vector<std::pair<std::string, pp::v1::JobStepRecord>> steps;
  {
    absl::MutexLock lock(mu_);
    for (PendingCommit& commit : commits) host_->ApplyManifest(commit);
    for (const auto& [id, ticket] : queue_.TakeDirty()) {
      if (const pp::v1::Job* row = host_->RowToStore(id); row != nullptr) rows.push_back(*row);
      stored[id].ticket = ticket;
    }
    steps = queue_.TakeSteps();
  }
  {
    absl::MutexLock lock(store_mu_);
    for (const pp::v1::Job& row : rows) stored[row.id()].status = store_->Put(row);
    for (const auto& [id, step] : steps) {
      if (absl::Status saved = store_->AddStep(id, step); !saved.ok()) {
        Log(absl::StrCat("step ", step.step(), " of job ", id, " not saved: ", saved.message()));
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
  absl::MutexLock lock(mu_);
  for (const auto& [id, outcome] : stored) {
    if (!outcome.status.ok()) {
      Log(absl::StrCat("job ", id, " not saved: ", outcome.status.message()));
    }
    queue_.RecordStored(id, outcome);
  }
  host_->ApplyStored(commits);
}

void Committer::ExpireRound(const std::vector<Expiring>& expiring) {
  std::vector<absl::Status> deleted;
  {
    absl::MutexLock store_lock(store_mu_);
    for (const Expiring& e : expiring) deleted.push_back(store_->Delete(e.job_id));
  }
  absl::MutexLock lock(mu_);
  host_->DropExpired(expiring, deleted);
}

void Committer::VerifierLoop() {
  while (true) {
    {
      absl::MutexLock lock(mu_);
      mu_->AwaitWithTimeout(absl::Condition(&verifier_stopping_), options_.verify_period);
      if (verifier_stopping_) return;
    }
    VerifyQueued();
  }
}

void Committer::VerifyQueued() {
  std::vector<StartToVerify> pending;
  {
    absl::MutexLock lock(mu_);
    pending = host_->StartsToVerify();
  }
  if (pending.empty()) return;
  for (StartToVerify& p : pending) {
    p.latest = common::LatestVerifiedCheckpoint(options_.checkpoint_root, p.job_id, p.max_step);
  }
  absl::MutexLock lock(mu_);
  host_->ApplyVerified(pending);
}

}  // namespace pp::coordinator
