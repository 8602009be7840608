// The job queue (internal): every job in submission order, and of them the QUEUED jobs to try to
// place now, in the order to try them. It decides order and eligibility only; JobManager
// (jobs.h PlaceQueued, shared_cluster.cc) applies quotas and preemption, fits each job on the
// idle workers and starts it.
//
// The order is scheduling.h's OrderQueued: priority with aging, then the owner's fair share, then
// submission order. A QUEUED job is held while its restart checkpoint is not verified, during its
// restart backoff, and while its workers calibrate.
//
// Threading: none of its own; pure but for the order it keeps. JobManager keeps it under mu_
// (jobs.h), beside the JobRecords it reads.
#ifndef PP_COORDINATOR_JOB_QUEUE_H_
#define PP_COORDINATOR_JOB_QUEUE_H_

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "coordinator/job_record.h"
#include "coordinator/scheduling.h"
#include "pp/v1/policy.pb.h"

namespace pp::coordinator {

// Fair share weighs what each owner's jobs used in the last hour: an owner is not held back for
// long by what it ran long ago, and one that just ran a lot waits behind those that did not.
inline constexpr absl::Duration kFairShareWindow = absl::Hours(1);

class JobQueue {
 public:
  // Why a QUEUED job is not tried now.
  enum class Hold {
    kNone,         // tried now
    kVerifying,    // its restart checkpoint is not verified yet (JobRecord::verify_pending)
    kBackoff,      // before JobRecord::not_before: a restart's or a failed calibration's backoff
    kCalibrating,  // its workers calibrate (calibration.cc)
  };
  static Hold HoldOf(const JobRecord& rec, absl::Time now);

  // A job joins at the end (Submit, and Reload in the stored order).
  void Add(const std::string& job_id);
  // Expired jobs leave (retention.cc).
  void Erase(const std::set<std::string>& job_ids);
  // Every job, in submission order: the order of ListJobs.
  const std::vector<std::string>& submitted() const { return submitted_; }

  // What scheduling.h needs of each QUEUED and RUNNING job of `jobs`, and of each job that ended
  // within kFairShareWindow before `now_unix` (its worker-seconds count in its owner's fair
  // share), in submission order. REQUIRES: every id added is in `jobs`.
  std::vector<SchedJob> Snapshot(const std::map<std::string, JobRecord>& jobs,
                                 double now_unix) const;

  // The ids of the QUEUED jobs of `jobs` not held at `now`, in the order to try them
  // (OrderQueued under `aging`). REQUIRES: every id added is in `jobs`.
  std::vector<std::string> PlacementOrder(const std::map<std::string, JobRecord>& jobs,
                                          absl::Time now,
                                          const pp::v1::Aging& aging = pp::v1::Aging()) const;
  // PlacementOrder from `snapshot`, this queue's Snapshot of `jobs` at `now`, for a caller that
  // uses the snapshot too (JobManager::PlaceQueued).
  std::vector<std::string> Order(const std::map<std::string, JobRecord>& jobs,
                                 const std::vector<SchedJob>& snapshot, absl::Time now,
                                 const pp::v1::Aging& aging) const;

 private:
  std::vector<std::string> submitted_;
};

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_JOB_QUEUE_H_
