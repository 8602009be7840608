// Durable job store of ppcoord (internal): SQLite file <data_dir>/ppcoord.db.
// Table jobs: one row per job (spec as proto3 JSON, state, reason, step, loss, restarts,
// timestamps, and the whole pp.v1.Job as JSON for reloading). Table steps: per-step history
// (the fields of pp.v1.JobStepRecord, one column each),
// bounded per job (kMaxStepRecords). Table meta: the next job sequence number, kept
// apart from the rows so that a number handed out once is never handed out again, even when its
// job's insert failed. Table quarantine: rows of jobs that could not be decoded, moved aside at
// load so that one damaged row does not keep ppcoord from starting.
// A write that returns OK is durable (in the WAL). Not thread-safe: callers serialise.
#ifndef PP_COORDINATOR_STORE_H_
#define PP_COORDINATOR_STORE_H_

#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pp/v1/coordinator.pb.h"
#include "pp/v1/job.pb.h"

struct sqlite3;

namespace pp::coordinator {

// The step records kept per job (docs/jobs.md "Step history"): past kMaxStepRecords, AddStep
// drops every other record older than the newest kKeptNewestSteps, but never one of an evaluated
// or a skipped step, so a job of any length keeps its recent steps at full resolution, its
// history at halving resolution, and every eval and skip. At most kMaxStepRecords plus the
// job's eval and skipped steps.
inline constexpr int kMaxStepRecords = 4096;
inline constexpr int kKeptNewestSteps = 1024;

class JobStore {
 public:
  // Opens (creating if needed) the database file at `path`.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::string& path);
  ~JobStore();

  absl::Status Put(const pp::v1::Job& job);  // insert or replace
  // Deletes the job's row and its step records, both or neither; OK when there are none. What an
  // expired job leaves (coordinator/retention.h): it is then unknown, also after a restart.
  absl::Status Delete(const std::string& job_id);
  absl::Status AddStep(const std::string& job_id, const pp::v1::JobStepRecord& step);
  // Every decodable job, in submission order. A row whose job does not parse (or whose id is not
  // its row's) is moved to table quarantine with the parse error, and logged; it is not returned.
  absl::StatusOr<std::vector<pp::v1::Job>> LoadJobs();
  absl::StatusOr<std::vector<pp::v1::JobStepRecord>> Steps(const std::string& job_id) const;
  // At most `limit` records of the job from step `from_step` on, in step order.
  absl::StatusOr<std::vector<pp::v1::JobStepRecord>> StepsFrom(const std::string& job_id,
                                                               int from_step, int limit) const;
  // Hands out the next submission number (job ids embed it) and records it as used before
  // returning, so no number repeats: not after a failed insert, a quarantined row or a restart.
  absl::StatusOr<int64_t> ReserveSequence();

 private:
  explicit JobStore(sqlite3* db) : db_(db) {}
  absl::Status Exec(const std::string& sql);
  // Adds the step columns a store written before them lacks.
  absl::Status UpgradeSteps();
  // Halves the job's older records past kMaxStepRecords (see kMaxStepRecords).
  absl::Status ThinSteps(const std::string& job_id);
  // Moves the row of table jobs with this rowid to table quarantine, noting `error`.
  absl::Status Quarantine(int64_t rowid, const std::string& error);
  class Statement;  // a prepared statement (store.cc)
  // Runs `statements` in one transaction, each bound by `bind`: all take effect or none.
  absl::Status InTransaction(std::initializer_list<const char*> statements,
                             const std::function<void(Statement&)>& bind);

  sqlite3* db_;
};

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_STORE_H_
