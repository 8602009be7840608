// From a submitted JobSpec to what the coordinator runs (internal): defaults, validation, the
// compiled schedule and the partition of units into stages.
#ifndef PP_COORDINATOR_PLANNING_H_
#define PP_COORDINATOR_PLANNING_H_

#include <vector>

#include "absl/status/statusor.h"
#include "pp/v1/job.pb.h"
#include "pp/v1/schedule.pb.h"

namespace pp::coordinator {

struct PlannedJob {
  pp::v1::JobSpec spec;          // defaults applied
  pp::v1::Schedule schedule;     // compiled and simulated under PlanningCosts()
  std::vector<int> stage_units;  // partition units per stage
};

// Uniform per-stage costs for the planned bubble: F = 1, B = 2 (I = W = 1 when split), free comms.
pp::v1::CostModel PlanningCosts();

// Relative forward cost of each partition unit, from the usual FLOP count per token
// (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters",
// sec. 5.1): a block 24*C^2 + 4*T*C, the head 2*vocab*C, the embedding lookup ~C.
std::vector<double> UnitCosts(const pp::v1::ModelSpec& model);

// ApplyDefaults + ValidateJobSpec (common/job_spec.h) + planner. Every error is InvalidArgument
// naming the offending field(s).
absl::StatusOr<PlannedJob> PlanJobSpec(pp::v1::JobSpec spec);

}  // namespace pp::coordinator

#endif  // PP_COORDINATOR_PLANNING_H_
