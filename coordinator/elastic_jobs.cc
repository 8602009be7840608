// JobManager and elastic jobs (spec.elastic; elastic.h is the pure part): a QUEUED job short of
// workers shrinks onto the idle ones once its grace passed (TryPlace calls ShrinkToPlace), and a
// RUNNING one grows back at its next step boundary once idle workers stayed idle long enough
// (Tick calls GrowElastic). Both resize through ResizeTo: JobEdit::Resize, EVENT_RESIZED,
// pp_job_resizes_total. Everything here runs under mu_. docs/recovery.md "Elastic jobs".
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "coordinator/elastic.h"
#include "coordinator/jobs.h"
#include "coordinator/log.h"
#include "coordinator/placement.h"

namespace pp::coordinator {

bool JobManager::ResizeTo(JobRecord& rec, int workers, const std::string& why,
                          const std::vector<pp::v1::WorkerInfo>* idle,
                          std::vector<pp::v1::RankPlacement>* placement) {
  const pp::v1::JobSpec before = rec.job().spec();
  for (const pp::v1::JobSpec& layout : LayoutsFor(BaseSpec(rec.job()), workers)) {
    absl::StatusOr<PlannedJob> planned = PlanJobSpec(layout);
    if (!planned.ok()) continue;
    std::vector<int64_t> rank_bytes = RankBytes(planned->memory);
    if (idle != nullptr) {
      const std::vector<int> stage_to_rank(planned->schedule.stage_to_rank().begin(),
                                           planned->schedule.stage_to_rank().end());
      absl::StatusOr<std::vector<pp::v1::RankPlacement>> placed =
          PlaceRanks(planned->spec, stage_to_rank, *idle, rank_bytes);
      if (!placed.ok()) continue;
      *placement = *std::move(placed);
    }
    const std::string message = absl::StrCat("resized from ", LayoutLabel(before), " to ",
                                             LayoutLabel(planned->spec), ": ", why);
    if (LogAndApply(rec, JobEdit::Resize(planned->spec, message, NowUnix())) == 0) return false;
    rec.schedule = std::move(planned->schedule);
    rec.stage_units = std::move(planned->stage_units);
    rec.rank_bytes = std::move(rank_bytes);
    rec.auto_plan.set_calibrate(common::IsAutoSchedule(rec.job().spec().parallel()));
    metrics_->JobResized(rec.job().id());
    Log(absl::StrCat("job ", rec.job().id(), ": ", message));
    pp::v1::JobEvent& event = Emit(rec, pp::v1::EVENT_RESIZED, message);
    *event.mutable_resized_from() = before.parallel();
    *event.mutable_resized_to() = rec.job().spec().parallel();
    return true;
  }
  return false;
}

std::optional<std::vector<pp::v1::RankPlacement>> JobManager::ShrinkToPlace(
    JobRecord& rec, const std::vector<pp::v1::WorkerInfo>& idle, int available, absl::Time now) {
  const pp::v1::Job& job = rec.job();
  if (!IsElastic(job.spec())) return std::nullopt;
  const ElasticBounds bounds = BoundsOf(BaseSpec(job));
  const int workers = std::min(available, bounds.max_workers);
  const double waited = absl::ToDoubleSeconds(now - absl::UnixEpoch()) - job.queued_unix();
  if (workers < bounds.min_workers || waited < absl::ToDoubleSeconds(bounds.grace)) {
    return std::nullopt;
  }
  // Workers still ending this job's previous attempt (told to stop, not yet idle) are about to
  // be idle: a shrink now would leave them out. They get one more grace.
  const bool releasing = std::any_of(held_.begin(), held_.end(), [&job](const auto& held) {
    return held.second.job_id == job.id() && held.second.attempt != job.attempt();
  });
  if (releasing && waited < 2 * absl::ToDoubleSeconds(bounds.grace)) return std::nullopt;
  const std::vector<pp::v1::WorkerInfo> usable(idle.begin(), idle.begin() + available);
  std::string names;
  for (const pp::v1::WorkerInfo& w : usable) absl::StrAppend(&names, w.name(), ",");
  if (names == rec.shrink_failed_on) return std::nullopt;
  std::vector<pp::v1::RankPlacement> placement;
  const std::string why =
      absl::StrCat("no spare worker within the grace of ", absl::FormatDuration(bounds.grace), "; ",
                   available, " idle");
  if (!ResizeTo(rec, workers, why, &usable, &placement)) {
    rec.shrink_failed_on = names;
    return std::nullopt;
  }
  rec.shrink_failed_on.clear();
  return placement;
}

void JobManager::GrowElastic(absl::Time now) {
  for (const auto& [id, rec] : jobs_) {
    // Queued work comes first: an elastic job grows only into workers nobody waits for.
    if (rec.job().state() == pp::v1::QUEUED &&
        JobQueue::HoldOf(rec, now) == JobQueue::Hold::kNone) {
      for (auto& [other_id, other] : jobs_) other.grow_since = absl::InfiniteFuture();
      return;
    }
  }
  int idle = workers_.CountInState(pp::v1::IDLE);
  for (auto& [id, rec] : jobs_) {
    const pp::v1::Job& job = rec.job();
    if (job.state() != pp::v1::RUNNING || !IsElastic(job.spec()) || rec.stop_step > 0 ||
        !rec.preempted_for.empty() || rec.suspicion || rec.calibrating) {
      continue;
    }
    const pp::v1::JobSpec base = BaseSpec(job);
    const ElasticBounds bounds = BoundsOf(base);
    const int current = job.placement_size();
    const int target = std::min(bounds.max_workers, current + idle);
    if (target <= current || rec.NextCommonStopStep() >= job.spec().train().steps()) {
      rec.grow_since = absl::InfiniteFuture();  // the hysteresis starts again
      continue;
    }
    if (rec.grow_since == absl::InfiniteFuture()) rec.grow_since = now;
    if (now - rec.grow_since < bounds.grow_after) continue;
    // A grow never changes the replica count but back to the base's: it would give up bitwise
    // training for a few more workers (LayoutsFor).
    const int data = std::max(1, job.spec().parallel().data());
    const int base_data = std::max(1, base.parallel().data());
    int grow_to = 0;
    for (const pp::v1::JobSpec& layout : LayoutsFor(base, target)) {
      const int to_data = std::max(1, layout.parallel().data());
      if (LayoutWorkers(layout.parallel()) > current && (to_data == data || to_data == base_data) &&
          PlanJobSpec(layout).ok()) {
        grow_to = LayoutWorkers(layout.parallel());
        break;
      }
    }
    if (grow_to == 0) {  // no larger layout plans: look again after another grow_after
      rec.grow_since = now;
      continue;
    }
    // Like a drain: every rank checkpoints after the stop step and ends; EndAttempt requeues the
    // job and TryPlace resizes it for grow_to before placing it.
    rec.grow_to = grow_to;
    rec.stop_step = rec.NextCommonStopStep();
    idle -= grow_to - current;
    Log(absl::StrCat("job ", id, ": ", grow_to - current, " idle workers for ",
                     absl::FormatDuration(now - rec.grow_since), ": stops after step ",
                     rec.stop_step, " to grow from ", current, " to ", grow_to, " workers"));
  }
}

}  // namespace pp::coordinator
