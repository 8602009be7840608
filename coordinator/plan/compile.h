// The whole planning pipeline in plain structs: generate -> lower comms -> validate -> simulate.
// plan.h's PlanSchedule is this plus the proto conversion.
#ifndef PP_COORDINATOR_PLAN_COMPILE_H_
#define PP_COORDINATOR_PLAN_COMPILE_H_

#include <string>

#include "absl/status/statusor.h"
#include "coordinator/plan/simulate.h"
#include "program/ir.h"

namespace pp::plan {

struct Planned {
  prog::Schedule schedule;  // lowered and validated
  Simulation simulation;
};

// V <= 0 picks the schedule's default (program/schedules.h). InvalidArgument for what the generator
// refuses or for bad costs.
absl::StatusOr<Planned> Plan(const std::string& name, int D, int V, int M, const CostModel& costs);

// The validator (validate.h, checks 1 to 5), then Simulate, with the same results and errors, but
// executing the programs once: the validator's deadlock check and the simulator's timing are the
// same run (execute.h), and on large schedules that run is most of their cost.
absl::StatusOr<Simulation> ValidateAndSimulate(const prog::Schedule& schedule,
                                               const CostModel& costs);

}  // namespace pp::plan

#endif  // PP_COORDINATOR_PLAN_COMPILE_H_
