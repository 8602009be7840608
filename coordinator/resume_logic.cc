#include "coordinator/resume_logic.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/step_math.h"
#include "coordinator/job_logic.h"

namespace pp::coordinator {

absl::Status CheckResumeRequest(const pp::v1::ResumeJobRequest& request) {
  if (request.step() < 0 || request.steps() < 0 || request.epoch() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("step (", request.step(), "), steps (",
                                                   request.steps(), ") and epoch (",
                                                   request.epoch(), ") must be >= 0"));
  }
  if (request.step() > 0 && request.epoch() > 0) {
    return absl::InvalidArgumentError(absl::StrCat("step (", request.step(), ") and epoch (",
                                                   request.epoch(), "): set at most one"));
  }
  return absl::OkStatus();
}

absl::Status CheckResumable(const pp::v1::Job& job) {
  if (IsTerminal(job.state())) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("job \"", job.id(), "\" is ", pp::v1::JobState_Name(job.state()),
                   ": only an ended job can be resumed (cancel it first)"));
}

absl::StatusOr<pp::v1::JobSpec> ResumedSpec(pp::v1::JobSpec spec,
                                            const pp::v1::ResumeJobRequest& request) {
  if (request.has_parallel()) {
    // A job stored by an older ppcoord may hold sizes that no bound checked: hence int64.
    const int64_t global = pp::common::GlobalMicrobatches(spec);
    const int64_t replicas = std::max(1, request.parallel().data());
    if (global % replicas != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parallel.data ", replicas, " does not divide the job's ", global,
          " microbatches per step (train.microbatches x parallel.data): a resume keeps the "
          "global batch"));
    }
    if (global / replicas > std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError(absl::StrCat("train.microbatches: the job's ", global,
                                                     " microbatches per step over ", replicas,
                                                     " replicas do not fit an int32"));
    }
    *spec.mutable_parallel() = request.parallel();
    spec.mutable_train()->set_microbatches(global / replicas);
  }
  pp::v1::TrainSpec& train = *spec.mutable_train();
  if (request.steps() > 0) {
    train.set_steps(request.steps());
    train.clear_epochs();  // the steps asked for replace the epochs they came from
  } else if (train.epochs() > 0) {
    train.clear_steps();  // derived again from the data as it is now (common/epoch.h)
  }
  return spec;
}

absl::Status CheckStepsLeft(const std::string& job_id, int from_step, const pp::v1::JobSpec& spec) {
  if (from_step < spec.train().steps()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "job \"", job_id, "\": checkpoint step ", from_step, " already reaches train.steps ",
      spec.train().steps(), "; ask for more steps to train further"));
}

std::string ResumeReason(int from_step, const pp::v1::ParallelSpec& parallel) {
  return absl::StrCat("resumed by the user from checkpoint step ", from_step, " on ",
                      common::ScheduleLabel(parallel), " D=", parallel.pipeline(), " V=", parallel.chunks());
}

}  // namespace pp::coordinator
