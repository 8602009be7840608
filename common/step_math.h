// Step arithmetic of a job, shared by the coordinator, the workers and the single-process trainer:
// how many microbatches and tokens one optimizer step takes, where a step's data starts, and
// after which steps a checkpoint is written. Pure.
//
// Words: M = train.microbatches is one data replica's microbatches per step, B =
// train.microbatch_size sequences of T = model.seq_len tokens each, R = parallel.data replicas
// (0 counts as 1). The step's global batch is R x M microbatches.
#ifndef PP_COMMON_STEP_MATH_H_
#define PP_COMMON_STEP_MATH_H_

#include <cstdint>

#include "pp/v1/job.pb.h"

namespace pp::common {

// R x M: the microbatches of one step over every data replica. In int64 for specs not validated
// (a job stored by an older ppcoord); a validated spec's stays below 2^24 (common/spec_bounds.h).
int64_t GlobalMicrobatches(const pp::v1::JobSpec& spec);

// M x B x T: the tokens one data replica trains on per step (what a rank reports).
int64_t ReplicaTokensPerStep(const pp::v1::JobSpec& spec);

// R x M x B x T: the tokens the whole job trains on per step (the job's tokens per second).
int64_t GlobalTokensPerStep(const pp::v1::JobSpec& spec);

// Sequences consumed before `step` in a run that started at step 0: step x microbatches x
// microbatch_size, where `microbatches` counts every replica's microbatches of a step.
int64_t DataPositionAtStep(int64_t step, int64_t microbatches, int64_t microbatch_size);

// Whether a checkpoint is written once `done_steps` of `total_steps` are complete: after the last
// step and after every multiple of `every_steps` (0: only after the last).
bool CheckpointDue(int done_steps, int total_steps, int every_steps);

}  // namespace pp::common

#endif  // PP_COMMON_STEP_MATH_H_
