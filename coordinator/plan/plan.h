// The planner's front door: what the coordinator daemon and ppctl call. Pure functions, no
// threads, no RPC. Generators, lowering, validation, simulation and rendering live behind it
// (see the other headers in this folder).
#ifndef PP_COORDINATOR_PLAN_PLAN_H_
#define PP_COORDINATOR_PLAN_PLAN_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pp/v1/job.pb.h"
#include "pp/v1/schedule.pb.h"

namespace pp::plan {

// Generates schedule `name` for D ranks, V chunks per rank and M microbatches, lowers the
// communication, validates and simulates it under `costs`. Errors (unknown schedule, an M or V
// the schedule refuses) are InvalidArgument with a message that says why.
absl::StatusOr<pp::v1::Schedule> PlanSchedule(const std::string& name, int D, int V, int M,
                                              const pp::v1::CostModel& costs);

// Splits the model's n_layers + 2 partition units (embedding, blocks, head) into S contiguous
// non-empty stages. method: uniform | params | cost | explicit. `explicit_units` is used by
// explicit (S entries summing to n_layers + 2), `unit_costs` by cost (n_layers + 2 entries).
// Returns the number of units per stage. Refuses layouts that leave a stage empty or drop units.
absl::StatusOr<std::vector<int>> PartitionUnits(const pp::v1::ModelSpec& model, int S,
                                                const std::string& method,
                                                const std::vector<int>& explicit_units,
                                                const std::vector<double>& unit_costs);

}  // namespace pp::plan

#endif  // PP_COORDINATOR_PLAN_PLAN_H_
