// Resuming an ended job (internal), pure: which requests are valid, the spec the next attempt runs
// when the request changes the layout or the number of steps, and whether the checkpoint it would
// start from leaves steps to train. No locks, no RPC, no clock, no disk: JobManager::Resume finds
// and verifies the checkpoint and applies the result under its lock.
#ifndef PP_COORDINATOR_RESUME_LOGIC_H_
#define PP_COORDINATOR_RESUME_LOGIC_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pp/v1/coordinator.pb.h"
#include "pp/v1/job.pb.h"

namespace pp::coordinator {

// InvalidArgument unless request.step, request.steps and request.epoch are >= 0, and unless at
// most one of step and epoch is set.
absl::Status CheckResumeRequest(const pp::v1::ResumeJobRequest& request);

// FailedPrecondition unless the job ended (only an ended job can be resumed).
absl::Status CheckResumable(const pp::v1::Job& job);

// The spec the resumed job runs: request.parallel (when set) replaces spec.parallel, keeping the
// step's global batch (parallel.data x train.microbatches) so that the optimisation does not
// change, and request.steps (when > 0) replaces train.steps and clears train.epochs; otherwise a
// spec of train.epochs has its train.steps cleared, for PlanClientSpec to derive them again from
// the data as it is now (the same steps unless the data changed). InvalidArgument when the new
// parallel.data does not divide the global batch.
absl::StatusOr<pp::v1::JobSpec> ResumedSpec(pp::v1::JobSpec spec,
                                            const pp::v1::ResumeJobRequest& request);

// FailedPrecondition when the checkpoint at `from_step` already reaches spec.train.steps.
absl::Status CheckStepsLeft(const std::string& job_id, int from_step, const pp::v1::JobSpec& spec);

// The reason a resumed attempt records: the checkpoint step and the layout it runs on.
std::string ResumeReason(int from_step, const pp::v1::ParallelSpec& parallel);

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_RESUME_LOGIC_H_
