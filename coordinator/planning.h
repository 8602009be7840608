// From a submitted JobSpec to what the coordinator runs (internal): defaults, validation, the
// compiled schedule and the partition of units into stages.
#ifndef PP_COORDINATOR_PLANNING_H_
#define PP_COORDINATOR_PLANNING_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/plan/plan.h"
#include "pp/v1/job.pb.h"
#include "pp/v1/schedule.pb.h"

namespace pp::coordinator {

struct PlannedJob {
  pp::v1::JobSpec spec;          // defaults applied
  pp::v1::Schedule schedule;     // compiled and simulated under PlanningCosts()
  std::vector<int> stage_units;  // partition units per stage
  std::vector<pp::plan::RankMemory> memory;  // every global rank's estimate, in rank order
};

// Uniform per-stage costs for the planned bubble: F = 1, B = 2 (I = W = 1 when split), free comms.
pp::v1::CostModel PlanningCosts();

// ApplyDefaults + ValidateJobSpec (common/job_spec.h) + planner + memory estimate. Every error is
// InvalidArgument naming the offending field(s).
absl::StatusOr<PlannedJob> PlanJobSpec(pp::v1::JobSpec spec);

// The estimated peak bytes of each rank (RankMemory total), in rank order.
std::vector<int64_t> RankBytes(const std::vector<pp::plan::RankMemory>& memory);

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_PLANNING_H_
