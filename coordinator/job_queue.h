// The job queue (internal): every job in submission order, and of them the QUEUED jobs to try to
// place now, in the order to try them. It decides order and eligibility only; JobManager
// (jobs.h PlaceQueued) fits each job on the idle workers and starts it. This is where issue 30's
// scheduling goes: priorities reorder PlacementOrder, a quota is one more Hold, and preemption
// (choosing the running jobs a waiting one may stop) a method beside PlacementOrder.
//
// Today's policy: oldest first, with backfill (a job that does not fit the idle workers does not
// hold back later ones that fit), and a QUEUED job is held while its restart checkpoint is not
// verified, during its restart backoff, and while its workers calibrate.
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

namespace pp::coordinator {

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

  // The ids of the QUEUED jobs of `jobs` not held at `now`, in the order to try them.
  // REQUIRES: every id added is in `jobs`.
  std::vector<std::string> PlacementOrder(const std::map<std::string, JobRecord>& jobs,
                                          absl::Time now) const;

 private:
  std::vector<std::string> submitted_;
};

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_JOB_QUEUE_H_
