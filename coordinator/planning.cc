#include "coordinator/planning.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/data_spec.h"
#include "common/epoch.h"
#include "common/job_spec.h"
#include "common/path_roots.h"
#include "coordinator/plan/plan.h"

namespace pp::coordinator {

pp::v1::CostModel PlanningCosts(const pp::plan::RecomputeShares& shares) {
  pp::v1::CostModel costs;
  costs.set_forward(1);
  costs.set_backward(2);
  costs.set_backward_input(1);
  costs.set_backward_weight(1);
  costs.set_recompute_forward(shares.forward);
  costs.set_recompute_dropped(shares.dropped);
  return costs;
}

namespace {

absl::StatusOr<pp::v1::Schedule> SpecSchedule(const pp::v1::ParallelSpec& parallel, int M,
                                              const pp::v1::CostModel& costs) {
  absl::StatusOr<pp::plan::Planned> planned =
      pp::plan::PlanSpecSchedule(parallel, M, pp::plan::CostsFromProto(costs));
  if (!planned.ok()) return planned.status();
  return pp::plan::ScheduleToProto(planned->schedule, &planned->simulation);
}

}  // namespace

absl::StatusOr<PlannedJob> PlanJobSpec(pp::v1::JobSpec spec, const pp::plan::MemoryFits& fits) {
  pp::common::ApplyDefaults(&spec);
  if (absl::Status valid = pp::common::ValidateJobSpecFields(spec); !valid.ok()) {
    return absl::InvalidArgumentError(valid.message());
  }
  if (pp::common::IsAutoSchedule(spec.parallel())) {
    absl::StatusOr<PlannedJob> provisional = PlanJobSpec(pp::plan::ProvisionalSpec(spec), nullptr);
    if (!provisional.ok()) return provisional.status();
    provisional->spec = std::move(spec);
    return provisional;
  }
  const pp::v1::ParallelSpec& p = spec.parallel();
  const std::vector<int> explicit_units(p.stage_layers().begin(), p.stage_layers().end());
  absl::StatusOr<std::vector<int>> units =
      pp::plan::PartitionUnits(spec.model(), p.pipeline() * p.chunks(), p.partition(),
                               explicit_units, pp::plan::UnitCosts(spec.model()));
  if (!units.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("parallel.partition \"", p.partition(), "\": ", units.status().message()));
  }
  // The schedule's order does not depend on recomputation, so "auto" can choose on it.
  absl::StatusOr<pp::v1::Schedule> schedule =
      SpecSchedule(p, spec.train().microbatches(), PlanningCosts());
  if (!schedule.ok()) return schedule.status();
  PlannedJob planned;
  if (p.recompute() == "auto") {
    const pp::plan::MemoryFits any = [](const std::vector<pp::plan::RankMemory>&) {
      return absl::OkStatus();
    };
    absl::StatusOr<pp::plan::RecomputeChoice> choice =
        pp::plan::ChooseRecompute(spec, *units, *schedule, fits ? fits : any);
    if (!choice.ok()) return choice.status();
    spec.mutable_parallel()->set_recompute(choice->mode);
    planned.recompute_reason = std::move(choice->reason);
  }
  absl::StatusOr<pp::plan::RecomputeShares> shares = pp::plan::RecomputeSharesOf(spec, *units);
  if (!shares.ok()) return absl::InvalidArgumentError(shares.status().message());
  planned.costs = PlanningCosts(*shares);
  if (shares->forward > 0) {  // simulated again: recomputation lengthens every B and I
    schedule = SpecSchedule(p, spec.train().microbatches(), planned.costs);
    if (!schedule.ok()) return schedule.status();
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

absl::StatusOr<PlannedJob> PlanClientSpec(const pp::v1::JobSpec& spec,
                                          const std::vector<std::string>& data_roots,
                                          const pp::plan::MemoryFits& fits) {
  for (const auto& [field, path] : pp::common::SpecInputPaths(spec)) {
    absl::Status inside = pp::common::CheckUnderRoots(field, path, data_roots, "data_root");
    if (!inside.ok()) return inside;
  }
  pp::v1::JobSpec defaulted = spec;
  pp::common::ApplyDefaults(&defaulted);
  if (absl::Status valid = pp::common::ValidateJobSpecFields(defaulted); !valid.ok()) {
    return absl::InvalidArgumentError(valid.message());
  }
  // The files a job reads are fixed here, for its life: a file that matches a glob later must not
  // shift the windows of a running or resumed job.
  absl::StatusOr<pp::v1::JobSpec> listed =
      pp::common::ResolveDataGlobs(std::move(defaulted), data_roots);
  if (!listed.ok()) return listed.status();
  absl::StatusOr<int64_t> windows = pp::common::CheckSpecFiles(*listed, data_roots);
  if (!windows.ok()) return absl::InvalidArgumentError(windows.status().message());
  // The end-of-text id stored with the files (data.tokenizer's, checked under the roots above):
  // workers read data.end_of_text and never the tokenizer.
  absl::StatusOr<pp::v1::JobSpec> documents = pp::common::ResolveEndOfText(*std::move(listed));
  if (!documents.ok()) return documents.status();
  absl::StatusOr<pp::v1::JobSpec> resolved =
      pp::common::ResolveEpochs(*std::move(documents), *windows);
  if (!resolved.ok()) return resolved.status();
  absl::StatusOr<PlannedJob> planned = PlanJobSpec(*std::move(resolved), fits);
  if (planned.ok()) planned->train_windows = *windows;
  return planned;
}

std::vector<int64_t> RankBytes(const std::vector<pp::plan::RankMemory>& memory) {
  std::vector<int64_t> bytes;
  for (const pp::plan::RankMemory& rank : memory) bytes.push_back(rank.bytes.total);
  return bytes;
}

}  // namespace pp::coordinator
