#include "coordinator/planning.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "coordinator/plan/plan.h"

namespace pp::coordinator {

pp::v1::CostModel PlanningCosts() {
  pp::v1::CostModel costs;
  costs.set_forward(1);
  costs.set_backward(2);
  costs.set_backward_input(1);
  costs.set_backward_weight(1);
  return costs;
}

absl::StatusOr<PlannedJob> PlanJobSpec(pp::v1::JobSpec spec) {
  pp::common::ApplyDefaults(&spec);
  if (absl::Status valid = pp::common::ValidateJobSpec(spec); !valid.ok()) {
    return absl::InvalidArgumentError(valid.message());
  }
  const pp::v1::ParallelSpec& p = spec.parallel();
  PlannedJob planned;
  absl::StatusOr<pp::v1::Schedule> schedule = pp::plan::PlanSchedule(
      p.schedule(), p.pipeline(), p.chunks(), spec.train().microbatches(), PlanningCosts());
  if (!schedule.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parallel.schedule \"", p.schedule(), "\" with parallel.pipeline=", p.pipeline(),
        ", parallel.chunks=", p.chunks(), ", train.microbatches=", spec.train().microbatches(),
        ": ", schedule.status().message()));
  }
  const std::vector<int> explicit_units(p.stage_layers().begin(), p.stage_layers().end());
  absl::StatusOr<std::vector<int>> units =
      pp::plan::PartitionUnits(spec.model(), p.pipeline() * p.chunks(), p.partition(),
                               explicit_units, pp::plan::UnitCosts(spec.model()));
  if (!units.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("parallel.partition \"", p.partition(), "\": ", units.status().message()));
  }
  absl::StatusOr<std::vector<pp::plan::RankMemory>> memory =
      pp::plan::EstimateMemory(spec, *units, *schedule);
  if (!memory.ok()) return absl::InvalidArgumentError(memory.status().message());
  planned.memory = *std::move(memory);
  planned.spec = std::move(spec);
  planned.schedule = *std::move(schedule);
  planned.stage_units = *std::move(units);
  return planned;
}

std::vector<int64_t> RankBytes(const std::vector<pp::plan::RankMemory>& memory) {
  std::vector<int64_t> bytes;
  for (const pp::plan::RankMemory& rank : memory) bytes.push_back(rank.bytes.total);
  return bytes;
}

}  // namespace pp::coordinator
