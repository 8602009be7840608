// How long ppcoord keeps an ended job (SUCCEEDED, FAILED or CANCELLED): ppcoord --retain_jobs.
// A job that ended and has not changed for that long expires: the committer (committer.h) deletes
// its row from the store and JobManager (retention.cc) drops it from memory, so it is NOT_FOUND
// from then on, after a restart too; its checkpoints stay on disk. Without it, every job ever
// submitted would stay in ppcoord's memory and be loaded at each start.
// Contract: the functions here are pure.
#ifndef PP_COORDINATOR_RETENTION_H_
#define PP_COORDINATOR_RETENTION_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "pp/v1/job.pb.h"

namespace pp::coordinator {

inline constexpr absl::Duration kDefaultRetainJobs = absl::Hours(30 * 24);
// How often the committer looks for expired jobs: a job goes at most this long after its time.
inline constexpr absl::Duration kExpiryScan = absl::Seconds(1);

// A retention as --retain_jobs takes it: whole days ("30d") or any absl duration ("12h", "90m",
// "2s"); "0" keeps ended jobs forever. InvalidArgument, naming the flag, for a negative, infinite
// or malformed one.
absl::StatusOr<absl::Duration> ParseRetention(absl::string_view text);
// "30d" for whole days, else absl's form ("2s"); "0" for zero.
std::string FormatRetention(absl::Duration retain);

// Whether `job` ended and has not changed (Job.updated_unix) for `retain` at `now_unix`; never
// with a zero `retain`.
bool Expired(const pp::v1::Job& job, double now_unix, absl::Duration retain);

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_RETENTION_H_
