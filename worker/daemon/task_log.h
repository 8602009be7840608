// The lines a worker's tasks wrote, per job, kept in memory for Worker.ReadTaskLog (ppcoord's
// GetJobLogs, `ppctl logs`; docs/jobs.md "Worker logs"), so that a user without a shell on the
// worker sees why a rank failed.
//
// Contract:
// - TaskLog::Append keeps one line of a job's task with the next seq of that job on this worker
//   (1, 2, ...: across the job's attempts, never reused while the worker runs). A text with
//   newlines is one line per part; each line is cut at TaskLogLimits::max_line_bytes (on a UTF-8
//   boundary) with a marker saying how many bytes were cut; bytes that are not UTF-8 become '?'.
// - Bounds: per job at most max_lines lines and max_bytes bytes of text (the oldest lines go
//   first); the buffers of the max_jobs jobs written most recently are kept, an older job's buffer
//   is emptied (its seq counter stays, for max_known_jobs jobs). Nothing outlives the process.
// - Read returns the held lines with seq > after_seq, oldest first, at most max_lines (0: 1000;
//   INVALID_ARGUMENT when negative or over 10000, or for a negative after_seq), and `dropped`: how
//   many lines with seq > after_seq the buffer no longer holds. An unknown job: no lines, 0
//   dropped.
// - TaskLogWriter binds a job, attempt and rank: each Line goes to the TaskLog (when not null)
//   and, as before the log existed, to the worker's stderr as "ppworker: job J rank R: TEXT".
// Thread-safe: TaskLog locks itself; a TaskLogWriter may be used from any thread.
// REQUIRES: the TaskLog outlives every TaskLogWriter given it.
#ifndef PP_WORKER_DAEMON_TASK_LOG_H_
#define PP_WORKER_DAEMON_TASK_LOG_H_

#include <cstdint>
#include <deque>
#include <map>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "pp/v1/worker.pb.h"

namespace pp::daemon {

struct TaskLogLimits {
  int max_lines = 4096;         // per job
  int64_t max_bytes = 1 << 20;  // of text, per job
  int max_line_bytes = 4096;    // a longer line is cut, with a marker
  int max_jobs = 16;            // jobs whose buffers are kept (the most recently written)
  int max_known_jobs = 1024;    // jobs whose seq counters are kept
};

// Read's max_lines: 0 means kDefaultReadLines, at most kMaxReadLines.
inline constexpr int kDefaultReadLines = 1000;
inline constexpr int kMaxReadLines = 10000;

class TaskLog {
 public:
  explicit TaskLog(TaskLogLimits limits = {}) : limits_(limits) {}

  // Keeps `text` (one line per newline-separated part) for `job_id`; returns the last seq given.
  int64_t Append(const std::string& job_id, int attempt, int rank, absl::string_view text,
                 absl::Time now = absl::Now());

  absl::StatusOr<pp::v1::ReadTaskLogResponse> Read(const pp::v1::ReadTaskLogRequest& request);

 private:
  struct JobLines {
    std::deque<pp::v1::TaskLogLine> lines;
    int64_t bytes = 0;     // of the held lines' text
    int64_t next_seq = 1;  // the seq of the next line
    int64_t touched = 0;   // the Append count when it was last written: eviction order
  };
  JobLines& JobFor(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Empties the buffers of all but the max_jobs most recently written jobs and forgets the jobs
  // beyond max_known_jobs; called when a job is added.
  void Evict() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Keep(JobLines& job, pp::v1::TaskLogLine line) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const TaskLogLimits limits_;
  absl::Mutex mu_;
  std::map<std::string, JobLines> jobs_ ABSL_GUARDED_BY(mu_);
  int64_t appends_ ABSL_GUARDED_BY(mu_) = 0;
};

// `text` cut to at most `max_bytes` bytes (on a UTF-8 boundary, marker included) and made valid
// UTF-8 (a byte that is not becomes '?'); exposed for the tests.
std::string BoundedLine(absl::string_view text, int max_bytes);

class TaskLogWriter {
 public:
  // `log` null: stderr only. `echo`: where the prefixed copy goes (null: nowhere).
  TaskLogWriter(TaskLog* log, std::string job_id, int attempt, int rank, std::ostream* echo);

  void Line(absl::string_view text) const;

 private:
  TaskLog* const log_;
  const std::string job_id_;
  const int attempt_;
  const int rank_;
  std::ostream* const echo_;
};

}  // namespace pp::daemon

#endif  // PP_WORKER_DAEMON_TASK_LOG_H_
