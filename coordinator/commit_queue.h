// The committer's queue (internal): what the store and checkpoint I/O of ppcoord still has to do,
// and what it did. Transitions put work in under JobManager's lock (a job's row to write, a
// complete checkpoint to commit, a step record to store); the committer thread (committer.h) takes
// it out in rounds, does the I/O without the lock, and records each row it wrote, which the RPCs
// that answer only once durable wait for (Committer::AwaitStored, by ticket).
//
// Rows coalesce: a job marked twice before a round is written once, as it is then, and the
// round's ticket covers both marks. Checkpoints are committed in the order they were queued.
//
// Threading: none of its own. The Committer owns it, under JobManager's mu_ (jobs.h), which it
// holds only to put in, take out and record, never for the I/O.
#ifndef PP_COORDINATOR_COMMIT_QUEUE_H_
#define PP_COORDINATOR_COMMIT_QUEUE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "coordinator/store.h"
#include "pp/v1/checkpoint.pb.h"

namespace pp::coordinator {

// A complete checkpoint, queued for the committer thread.
struct PendingCommit {
  std::string job_id;
  int step = 0;
  int keep = 0;  // the job's checkpoint.keep: what the prune leaves
  pp::v1::CheckpointManifest manifest;
  absl::Status written;  // CommitManifest's outcome
  int64_t ticket = 0;    // the row write that points the job at it (0: none)
};

// A row write the committer made: the newest ticket it covers and its outcome.
struct StoredRow {
  int64_t ticket = 0;
  absl::Status status;
};

class CommitQueue {
 public:
  // ---- put in (transitions) ----
  // Marks the job's row to be written; returns the ticket WrittenAt answers for.
  int64_t MarkDirty(const std::string& job_id);
  bool IsDirty(const std::string& job_id) const { return dirty_.count(job_id) > 0; }
  void AddCommit(PendingCommit commit) { commits_.push_back(std::move(commit)); }
  void AddStep(const std::string& job_id, const pp::v1::JobStepRecord& step) {
    steps_.emplace_back(job_id, step);
  }

  // ---- taken out (the committer's round) ----
  bool HasWork() const { return !dirty_.empty() || !commits_.empty() || !steps_.empty(); }
  std::deque<PendingCommit> TakeCommits() { return std::exchange(commits_, {}); }
  // The rows marked, each with its newest ticket.
  std::map<std::string, int64_t> TakeDirty() { return std::exchange(dirty_, {}); }
  std::vector<std::pair<std::string, pp::v1::JobStepRecord>> TakeSteps() {
    return std::exchange(steps_, {});
  }

  // ---- what was written ----
  void RecordStored(const std::string& job_id, const StoredRow& outcome) {
    stored_[job_id] = outcome;
  }
  // The outcome of the write of the job's row as of `ticket`; nullptr while not written.
  const StoredRow* WrittenAt(const std::string& job_id, int64_t ticket) const;
  // A job deleted from the store (retention.cc): nothing waits on its rows any more.
  void Forget(const std::string& job_id) { stored_.erase(job_id); }

  // ---- shutdown: Close, the committer writes what is left, then Done ----
  void Close() { closing_ = true; }
  bool closing() const { return closing_; }
  void Done() { done_ = true; }
  bool done() const { return done_; }

 private:
  int64_t next_ticket_ = 1;
  std::map<std::string, int64_t> dirty_;  // job id -> newest ticket
  std::deque<PendingCommit> commits_;
  std::vector<std::pair<std::string, pp::v1::JobStepRecord>> steps_;
  std::map<std::string, StoredRow> stored_;
  bool closing_ = false;
  bool done_ = false;
};

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_COMMIT_QUEUE_H_
