// Where the planner's schedules and costs meet their protos (pp/v1/schedule.proto); single
// actions convert in program/proto.h.
#ifndef PP_COORDINATOR_PLAN_CONVERT_H_
#define PP_COORDINATOR_PLAN_CONVERT_H_

#include "absl/status/statusor.h"
#include "coordinator/plan/simulate.h"
#include "pp/v1/schedule.pb.h"
#include "program/ir.h"

namespace pp::plan {

// `simulation` may be null; when given it fills Schedule.simulation.
pp::v1::Schedule ScheduleToProto(const prog::Schedule& schedule, const Simulation* simulation);
// InvalidArgument for an unspecified or unknown action kind.
absl::StatusOr<prog::Schedule> ScheduleFromProto(const pp::v1::Schedule& proto);

// A proto without any compute cost (all of forward, backward, I, W zero, as an unset message) is
// the uniform default f=1, b=2 with free comms.
CostModel CostsFromProto(const pp::v1::CostModel& proto);

}  // namespace pp::plan

#endif  // PP_COORDINATOR_PLAN_CONVERT_H_
