// Durable job store of ppcoord (internal): SQLite file <data_dir>/ppcoord.db.
// Table jobs: one row per job (spec as proto3 JSON, state, reason, step, loss, restarts,
// timestamps, and the whole pp.v1.Job as JSON for reloading). Table steps: per-step history
// (loss, step seconds, tokens/s, measured bubble). Not thread-safe: callers serialise.
#ifndef PP_COORDINATOR_STORE_H_
#define PP_COORDINATOR_STORE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pp/v1/coordinator.pb.h"
#include "pp/v1/job.pb.h"

struct sqlite3;

namespace pp::coordinator {

struct StepRecord {
  int step = 0;
  double loss = 0;
  double step_seconds = 0;
  double tokens_per_second = 0;
  double bubble_ratio = 0;
  double time_unix = 0;
};

class JobStore {
 public:
  // Opens (creating if needed) the database file at `path`.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::string& path);
  ~JobStore();

  absl::Status Put(const pp::v1::Job& job);  // insert or replace
  absl::Status AddStep(const std::string& job_id, const StepRecord& step);
  absl::StatusOr<std::vector<pp::v1::Job>> LoadJobs() const;  // in submission order
  absl::StatusOr<std::vector<StepRecord>> Steps(const std::string& job_id) const;
  // Next submission number: one more than any stored (job ids embed it, so they never repeat).
  absl::StatusOr<int64_t> NextSequence() const;

 private:
  explicit JobStore(sqlite3* db) : db_(db) {}
  absl::Status Exec(const std::string& sql);

  sqlite3* db_;
};

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_STORE_H_
