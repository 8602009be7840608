#include "coordinator/job_queue.h"

#include <algorithm>

namespace pp::coordinator {

JobQueue::Hold JobQueue::HoldOf(const JobRecord& rec, absl::Time now) {
  // Its start step is known once VerifyQueued ran; a restart waits out its backoff.
  if (rec.verify_pending()) return Hold::kVerifying;
  if (now < rec.not_before()) return Hold::kBackoff;
  if (rec.calibrating) return Hold::kCalibrating;
  return Hold::kNone;
}

void JobQueue::Add(const std::string& job_id) { submitted_.push_back(job_id); }

void JobQueue::Erase(const std::set<std::string>& job_ids) {
  std::erase_if(submitted_, [&job_ids](const std::string& id) { return job_ids.count(id) > 0; });
}

std::vector<std::string> JobQueue::PlacementOrder(const std::map<std::string, JobRecord>& jobs,
                                                  absl::Time now) const {
  // Oldest first among the jobs that fit. Backfill lets a stream of small jobs keep a large one
  // waiting; without it, a large job that never fits would stop every job behind it.
  std::vector<std::string> order;
  for (const std::string& id : submitted_) {
    const JobRecord& rec = jobs.at(id);
    if (rec.job().state() == pp::v1::QUEUED && HoldOf(rec, now) == Hold::kNone) {
      order.push_back(id);
    }
  }
  return order;
}

}  // namespace pp::coordinator
