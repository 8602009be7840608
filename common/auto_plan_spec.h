// parallel.schedule "auto" in a job spec: the defaults of its search bounds (parallel.auto_plan)
// and the rules that keep what ppcoord chooses open (docs/planner.md "Auto at run time").
// job_spec.h's ApplyDefaults and ValidateJobSpec call these for an "auto" spec; ppcoord's chooser
// is coordinator/plan/calibrated.h. Pure functions, thread-safe.
#ifndef PP_COMMON_AUTO_PLAN_SPEC_H_
#define PP_COMMON_AUTO_PLAN_SPEC_H_

#include "absl/status/status.h"
#include "pp/v1/job.pb.h"

namespace pp::common {

// The largest V and M the search may be asked for.
inline constexpr int kMaxAutoChunks = 16;
inline constexpr int kMaxAutoMicrobatches = 1024;

// max_chunks 0 -> 4, max_microbatches 0 -> 64, calibration_seconds 0 -> 10, drift_threshold
// 0 -> 0.25, drift_steps 0 -> 5, max_replans 0 -> 1 (negative stays: never).
void ApplyAutoPlanDefaults(pp::v1::AutoPlanSpec* bounds);

// The parallel section of an "auto" spec (defaults applied): pipeline >= 1 within the model's
// units, tensor and data 1, no carried schedule, no partition or stage_layers, recompute none or
// auto, chunks 0 (chosen) or a fixed V, and every bound in range. InvalidArgument naming the
// field otherwise.
absl::Status ValidateAutoParallel(const pp::v1::JobSpec& spec);

}  // namespace pp::common

#endif  // PP_COMMON_AUTO_PLAN_SPEC_H_
