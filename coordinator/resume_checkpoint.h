// The checkpoint a resume starts from (internal): request.step's, or the newest committed one
// that verifies, at or before the start of request.epoch when set (common/epoch.h
// EpochStartStep). Reads and hashes the checkpoint's files: call it without JobManager's lock.
#ifndef PP_COORDINATOR_RESUME_CHECKPOINT_H_
#define PP_COORDINATOR_RESUME_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pp/v1/checkpoint.pb.h"
#include "pp/v1/coordinator.pb.h"
#include "pp/v1/job.pb.h"

namespace pp::coordinator {

struct ResumeCheckpoint {
  absl::StatusOr<pp::v1::CheckpointManifest> manifest;
  std::vector<std::string> skipped;  // why each newer committed step was refused
};

// The newest step a resume may start from: request.step when set; with request.epoch N the first
// step of epoch N, ceil(N x K / S) with K = `train_windows` and S the sequences per step of
// `spec` (a resume keeps them); 0 (no bound) otherwise. FailedPrecondition for an epoch when K is
// unknown (0: a job stored by an older ppcoord).
absl::StatusOr<int64_t> ResumeStepBound(const pp::v1::ResumeJobRequest& request,
                                        const pp::v1::JobSpec& spec, int64_t train_windows);

// The checkpoint of job `request.job_id` under `root` that the resume starts from (see above); its
// manifest is an error naming the bound when none verifies.
ResumeCheckpoint FindResumeCheckpoint(const std::string& root,
                                      const pp::v1::ResumeJobRequest& request,
                                      const pp::v1::JobSpec& spec, int64_t train_windows);

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_RESUME_CHECKPOINT_H_
