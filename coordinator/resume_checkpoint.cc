#include "coordinator/resume_checkpoint.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/checkpoint.h"
#include "common/epoch.h"
#include "common/step_math.h"

namespace pp::coordinator {
namespace {

// Every checkpoint step is an int32: a bound past it bounds nothing.
constexpr int64_t kMaxStep = std::numeric_limits<int32_t>::max();

}  // namespace

absl::StatusOr<int64_t> ResumeStepBound(const pp::v1::ResumeJobRequest& request,
                                        const pp::v1::JobSpec& spec, int64_t train_windows) {
  if (request.step() > 0) return request.step();
  if (request.epoch() == 0) return 0;
  if (train_windows < 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "epoch: job \"", request.job_id(),
        "\" does not know its training windows (stored by an older ppcoord); resume by step"));
  }
  return common::EpochStartStep(
      request.epoch(), train_windows,
      common::GlobalMicrobatches(spec) * spec.train().microbatch_size());
}

ResumeCheckpoint FindResumeCheckpoint(const std::string& root,
                                      const pp::v1::ResumeJobRequest& request,
                                      const pp::v1::JobSpec& spec, int64_t train_windows) {
  const std::string& id = request.job_id();
  ResumeCheckpoint checkpoint;
  absl::StatusOr<int64_t> bound = ResumeStepBound(request, spec, train_windows);
  if (!bound.ok()) {
    checkpoint.manifest = bound.status();
  } else if (request.step() > 0) {
    checkpoint.manifest = common::VerifyCheckpoint(common::StepDir(root, id, request.step()));
  } else if (absl::StatusOr<common::LatestManifest> latest =
                 common::LatestVerifiedCheckpoint(
                     root, id, static_cast<int>(std::min<int64_t>(*bound, kMaxStep)));
             latest.ok()) {
    checkpoint.skipped = std::move(latest->skipped);
    checkpoint.manifest = std::move(latest->manifest);
  } else if (request.epoch() > 0) {
    checkpoint.manifest = absl::NotFoundError(
        absl::StrCat("epoch ", request.epoch(), " starts at step ", *bound,
                     " and no committed checkpoint at or before it verifies: ",
                     latest.status().message()));
  } else {
    checkpoint.manifest = latest.status();
  }
  return checkpoint;
}

}  // namespace pp::coordinator
