#include "coordinator/job_record.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pp::coordinator {

JobEdit JobEdit::Place(std::vector<pp::v1::RankPlacement> placement, double now_unix) {
  JobEdit edit;
  edit.kind = Kind::kPlace;
  edit.state = pp::v1::RUNNING;
  edit.placement = std::move(placement);
  edit.now_unix = now_unix;
  return edit;
}

JobEdit JobEdit::End(pp::v1::JobState state, std::string reason, double now_unix) {
  JobEdit edit;
  edit.kind = Kind::kEnd;
  edit.state = state;
  edit.reason = std::move(reason);
  edit.now_unix = now_unix;
  return edit;
}

JobEdit JobEdit::Requeue(int from_step, std::string reason, bool automatic, absl::Time not_before,
                         double now_unix) {
  JobEdit edit;
  edit.kind = Kind::kRequeue;
  edit.state = pp::v1::QUEUED;
  edit.from_step = from_step;
  edit.reason = std::move(reason);
  edit.automatic = automatic;
  edit.not_before = not_before;
  edit.now_unix = now_unix;
  return edit;
}

JobEdit JobEdit::Resume(int from_step, std::string reason, pp::v1::JobSpec spec,
                        int64_t train_windows, double now_unix) {
  JobEdit edit;
  edit.kind = Kind::kResume;
  edit.state = pp::v1::QUEUED;
  edit.from_step = from_step;
  edit.reason = std::move(reason);
  edit.spec = std::move(spec);
  edit.train_windows = train_windows;
  edit.now_unix = now_unix;
  return edit;
}

JobEdit JobEdit::Wait(std::string reason, double now_unix) {
  JobEdit edit;
  edit.kind = Kind::kWait;
  edit.state = pp::v1::QUEUED;
  edit.reason = std::move(reason);
  edit.now_unix = now_unix;
  return edit;
}

JobEdit JobEdit::Backoff(absl::Time not_before) {
  JobEdit edit;
  edit.kind = Kind::kBackoff;
  edit.state = pp::v1::QUEUED;
  edit.not_before = not_before;
  return edit;
}

JobEdit JobEdit::SettleStart(int from_step) {
  JobEdit edit;
  edit.kind = Kind::kSettleStart;
  edit.state = pp::v1::QUEUED;
  edit.from_step = from_step;
  return edit;
}

JobEdit JobEdit::Checkpoint(int step) {
  JobEdit edit;
  edit.kind = Kind::kCheckpoint;
  edit.from_step = step;
  return edit;
}

JobEdit JobEdit::Resize(pp::v1::JobSpec spec, std::string reason, double now_unix) {
  JobEdit edit;
  edit.kind = Kind::kResize;
  edit.state = pp::v1::QUEUED;
  edit.spec = std::move(spec);
  edit.reason = std::move(reason);
  edit.now_unix = now_unix;
  return edit;
}

const char* JobEditName(JobEdit::Kind kind) {
  switch (kind) {
    case JobEdit::Kind::kPlace:
      return "place";
    case JobEdit::Kind::kEnd:
      return "end";
    case JobEdit::Kind::kRequeue:
      return "requeue";
    case JobEdit::Kind::kResume:
      return "resume";
    case JobEdit::Kind::kWait:
      return "wait";
    case JobEdit::Kind::kBackoff:
      return "backoff";
    case JobEdit::Kind::kSettleStart:
      return "settle start";
    case JobEdit::Kind::kCheckpoint:
      return "checkpoint";
    case JobEdit::Kind::kResize:
      return "resize";
  }
  return "unknown";
}

absl::Status JobRecord::Check(const JobEdit& edit) const {
  using K = JobEdit::Kind;
  const pp::v1::JobState from = job_.state();
  bool ok = false;
  switch (edit.kind) {
    case K::kPlace:
      ok = from == pp::v1::QUEUED && !edit.placement.empty();
      break;
    case K::kEnd:
      ok = IsTerminal(edit.state) && CheckTransition(from, edit.state).ok();
      break;
    case K::kRequeue:
      ok = from == pp::v1::RUNNING;
      break;
    case K::kResume:
      ok = IsTerminal(from) && edit.spec.has_value();
      break;
    case K::kWait:
    case K::kBackoff:
      ok = from == pp::v1::QUEUED;
      break;
    case K::kSettleStart:
      ok = from == pp::v1::QUEUED && verify_pending_;
      break;
    case K::kCheckpoint:
      ok = true;
      break;
    case K::kResize:
      ok = from == pp::v1::QUEUED && edit.spec.has_value();
      break;
  }
  if (ok) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("job ", job_.id(), ": illegal edit \"", JobEditName(edit.kind), "\" (to ",
                   pp::v1::JobState_Name(edit.state), ") of a job ", pp::v1::JobState_Name(from),
                   verify_pending_ ? ", its checkpoint unverified" : "", "; nothing applied"));
}

absl::StatusOr<bool> JobRecord::Apply(const JobEdit& edit) {
  if (absl::Status legal = Check(edit); !legal.ok()) return legal;
  switch (edit.kind) {
    case JobEdit::Kind::kPlace:
      Place(edit);
      return true;
    case JobEdit::Kind::kEnd:
      CountWorkerSeconds(edit.now_unix);
      job_.set_state(edit.state);
      job_.set_reason(edit.reason);
      job_.set_updated_unix(edit.now_unix);
      return true;
    case JobEdit::Kind::kRequeue:
    case JobEdit::Kind::kResume:
      StartNext(edit);
      return true;
    case JobEdit::Kind::kWait:
      waiting_ = true;
      job_.set_reason(edit.reason);
      job_.set_updated_unix(edit.now_unix);
      return true;
    case JobEdit::Kind::kBackoff:
      not_before_ = edit.not_before;
      return false;
    case JobEdit::Kind::kSettleStart:
      return SettleStart(edit.from_step);
    case JobEdit::Kind::kCheckpoint:
      // Only a resume moves last_checkpoint_step back, and it waits for the commits in flight.
      if (edit.from_step > job_.start_step()) restarts_without_progress_ = 0;
      if (edit.from_step <= job_.last_checkpoint_step()) return false;
      job_.set_last_checkpoint_step(edit.from_step);
      return true;
    case JobEdit::Kind::kResize:
      Resize(edit);
      return true;
  }
  return false;
}

void JobRecord::Resize(const JobEdit& edit) {
  if (!job_.has_base_parallel()) {
    *job_.mutable_base_parallel() = job_.spec().parallel();
    job_.set_base_microbatches(job_.spec().train().microbatches());
  }
  *job_.mutable_spec() = *edit.spec;
  job_.set_resizes(job_.resizes() + 1);
  // The attempt's entry says why it began; now also on what.
  if (const int n = job_.restart_log_size();
      n > 0 && job_.restart_log(n - 1).attempt() == job_.attempt()) {
    pp::v1::JobRestart& entry = *job_.mutable_restart_log(n - 1);
    entry.set_reason(entry.reason().empty() ? edit.reason
                                            : absl::StrCat(entry.reason(), "; ", edit.reason));
  }
  job_.set_updated_unix(edit.now_unix);
}

void JobRecord::Place(const JobEdit& edit) {
  job_.mutable_placement()->Assign(edit.placement.begin(), edit.placement.end());
  job_.set_state(pp::v1::RUNNING);
  if (std::exchange(waiting_, false)) {  // running now: the reason is why this attempt began
    const int n = job_.restart_log_size();
    const bool logged = n > 0 && job_.restart_log(n - 1).attempt() == job_.attempt();
    job_.set_reason(logged ? job_.restart_log(n - 1).reason() : "");
  }
  job_.set_updated_unix(edit.now_unix);
  placed_unix_ = edit.now_unix;
  steps = std::make_unique<StepAggregator>(job_.placement_size());
  checkpoints = std::make_unique<CheckpointCollector>(job_.placement_size());
  ranks_done.clear();
  drained = false;
  stop_step = 0;
  newest_reported_step = job_.start_step();
  preempted_for.clear();
  borrowing = false;
  grow_since = absl::InfiniteFuture();
}

void JobRecord::CountWorkerSeconds(double now_unix) {
  // A job stored RUNNING by an earlier ppcoord was placed before this one started: that attempt
  // is not counted (placed_unix_ is unknown).
  if (job_.state() != pp::v1::RUNNING || placed_unix_ <= 0) return;
  job_.set_worker_seconds(job_.worker_seconds() +
                          job_.placement_size() * std::max(0.0, now_unix - placed_unix_));
  placed_unix_ = 0;
}

void JobRecord::StartNext(const JobEdit& edit) {
  if (edit.kind == JobEdit::Kind::kResume) {
    *job_.mutable_spec() = *edit.spec;
    job_.clear_placement();
    job_.set_last_checkpoint_step(edit.from_step);
    job_.set_train_windows(edit.train_windows);  // the data may have changed since submission
    job_.clear_base_parallel();                  // the user's layout is the base from now on
    job_.clear_base_microbatches();
    verify_pending_ = false;                     // the resume verified it
  } else {
    // Hashing a large checkpoint takes long: VerifyQueued does it outside the lock.
    verify_pending_ = edit.from_step > 0;
    if (edit.automatic) {
      job_.set_restarts(job_.restarts() + 1);
      ++restarts_without_progress_;
    }
  }
  CountWorkerSeconds(edit.now_unix);
  not_before_ = edit.not_before;
  job_.set_state(pp::v1::QUEUED);
  job_.set_queued_unix(edit.now_unix);
  StartNextAttempt(job_, edit.from_step, edit.reason, edit.automatic, edit.now_unix);
}

bool JobRecord::SettleStart(int from_step) {
  verify_pending_ = false;
  if (from_step == job_.start_step()) return false;
  job_.set_start_step(from_step);
  SetStep(job_, from_step);
  if (const int n = job_.restart_log_size(); n > 0) {
    job_.mutable_restart_log(n - 1)->set_from_step(from_step);
  }
  return true;
}

}  // namespace pp::coordinator
