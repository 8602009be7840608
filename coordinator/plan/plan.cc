#include "coordinator/plan/plan.h"

#include "coordinator/plan/compile.h"
#include "coordinator/plan/convert.h"
#include "coordinator/plan/generate.h"
#include "coordinator/plan/lower.h"
#include "coordinator/plan/simulate.h"
#include "coordinator/plan/validate.h"

namespace pp::plan {

absl::StatusOr<Planned> Plan(const std::string& name, int D, int V, int M, const CostModel& costs) {
  absl::StatusOr<Schedule> compute = Generate(name, D, V, M);
  if (!compute.ok()) return compute.status();
  absl::StatusOr<Schedule> lowered = LowerComms(*compute);
  if (!lowered.ok()) return lowered.status();
  if (absl::Status status = Validate(*lowered); !status.ok()) return status;
  absl::StatusOr<Simulation> simulation = Simulate(*lowered, costs);
  if (!simulation.ok()) return simulation.status();
  return Planned{*std::move(lowered), *std::move(simulation)};
}

absl::StatusOr<pp::v1::Schedule> PlanSchedule(const std::string& name, int D, int V, int M,
                                              const pp::v1::CostModel& costs) {
  absl::StatusOr<Planned> planned = Plan(name, D, V, M, CostsFromProto(costs));
  if (!planned.ok()) return planned.status();
  return ScheduleToProto(planned->schedule, &planned->simulation);
}

}  // namespace pp::plan
