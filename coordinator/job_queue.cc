#include "coordinator/job_queue.h"

#include <algorithm>

#include "common/mesh.h"
#include "common/step_math.h"

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

namespace {

SchedJob SchedJobOf(const JobRecord& rec, int64_t order) {
  const pp::v1::Job& job = rec.job();
  const bool running = job.state() == pp::v1::RUNNING;
  const int64_t step_tokens = common::GlobalTokensPerStep(job.spec());
  return SchedJob{
      .id = job.id(),
      .owner = job.owner(),
      .order = order,
      .priority = job.priority(),
      .preemptible = !job.spec().has_preemptible() || job.spec().preemptible(),
      .state = job.state(),
      .workers = running ? job.placement_size() : common::WorldSize(job.spec()),
      .queued_unix = job.queued_unix(),
      .worker_seconds = job.worker_seconds(),
      .started_unix = rec.placed_unix(),
      .step = job.step(),
      .last_checkpoint_step = std::max(job.last_checkpoint_step(), job.start_step()),
      .total_steps = job.spec().train().steps(),
      .step_seconds = job.tokens_per_second() > 0
                          ? static_cast<double>(step_tokens) / job.tokens_per_second()
                          : 0,
      .borrowing = rec.borrowing,
      .stopping = rec.stop_step > 0,
      .preempted_unix = {job.preempted_unix().begin(), job.preempted_unix().end()},
  };
}

}  // namespace

std::vector<SchedJob> JobQueue::Snapshot(const std::map<std::string, JobRecord>& jobs,
                                         double now_unix) const {
  std::vector<SchedJob> snapshot;
  for (size_t i = 0; i < submitted_.size(); ++i) {
    const JobRecord& rec = jobs.at(submitted_[i]);
    const pp::v1::Job& job = rec.job();
    const bool live = job.state() == pp::v1::QUEUED || job.state() == pp::v1::RUNNING;
    if (live || job.updated_unix() >= now_unix - absl::ToDoubleSeconds(kFairShareWindow)) {
      snapshot.push_back(SchedJobOf(rec, static_cast<int64_t>(i)));
    }
  }
  return snapshot;
}

std::vector<std::string> JobQueue::PlacementOrder(const std::map<std::string, JobRecord>& jobs,
                                                  absl::Time now,
                                                  const pp::v1::Aging& aging) const {
  return Order(jobs, Snapshot(jobs, absl::ToDoubleSeconds(now - absl::UnixEpoch())), now, aging);
}

std::vector<std::string> JobQueue::Order(const std::map<std::string, JobRecord>& jobs,
                                         const std::vector<SchedJob>& snapshot, absl::Time now,
                                         const pp::v1::Aging& aging) const {
  // Held jobs are ordered with the others (their owners' usage counts) and then left out.
  std::vector<std::string> order =
      OrderQueued(snapshot, aging, absl::ToDoubleSeconds(now - absl::UnixEpoch()));
  std::erase_if(order,
                [&](const std::string& id) { return HoldOf(jobs.at(id), now) != Hold::kNone; });
  return order;
}

}  // namespace pp::coordinator
