#include "coordinator/plan/plan.h"

#include <cstdint>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/job_spec.h"
#include "coordinator/plan/compile.h"
#include "coordinator/plan/convert.h"
#include "coordinator/plan/simulate.h"
#include "coordinator/plan/validate.h"
#include "program/lower.h"
#include "program/schedules.h"

namespace pp::plan {

absl::StatusOr<Simulation> ValidateAndSimulate(const prog::Schedule& schedule,
                                               const CostModel& costs) {
  if (absl::Status status = internal::CheckStatically(schedule); !status.ok()) return status;
  // With bad costs the run is symbolic: a deadlock is still reported before the costs, as the
  // validator's checks come before the simulator's.
  const absl::StatusOr<internal::Durations> durations =
      internal::DurationsOf(costs, schedule.stages(), schedule.microbatches);
  internal::Execution exec = internal::Execute(
      schedule, durations.ok() ? *durations : internal::ZeroDurations(schedule.stages()),
      /*record_times=*/durations.ok());
  if (absl::Status status = internal::CheckDeadlock(schedule, exec); !status.ok()) return status;
  if (!durations.ok()) return durations.status();
  return internal::Conclude(schedule, costs, *durations, std::move(exec));
}

absl::StatusOr<Planned> Plan(const std::string& name, int D, int V, int M, const CostModel& costs) {
  absl::StatusOr<prog::Schedule> compute = prog::Generate(name, D, V, M);
  if (!compute.ok()) return compute.status();
  absl::StatusOr<prog::Schedule> lowered = prog::LowerComms(*compute);
  if (!lowered.ok()) return lowered.status();
  absl::StatusOr<Simulation> simulation = ValidateAndSimulate(*lowered, costs);
  if (!simulation.ok()) return simulation.status();
  return Planned{*std::move(lowered), *std::move(simulation)};
}

std::vector<double> UnitCosts(const pp::v1::ModelSpec& model) {
  const double c = model.d_model(), t = model.seq_len(), vocab = model.vocab_size();
  std::vector<double> costs;
  costs.push_back(c);
  for (int i = 0; i < model.n_layers(); ++i) costs.push_back(24 * c * c + 4 * t * c);
  costs.push_back(2 * vocab * c);
  return costs;
}

absl::StatusOr<pp::v1::Schedule> PlanForwardOnly(const std::vector<int>& stage_to_rank, int D,
                                                 int V, int M) {
  if (D < 1 || V < 1 || M < 1 || static_cast<int64_t>(stage_to_rank.size()) != int64_t{D} * V) {
    return absl::InvalidArgumentError(absl::StrCat("forward-only: a layout of ",
                                                   stage_to_rank.size(), " stages for D=", D,
                                                   " V=", V, " (M=", M, ")"));
  }
  std::vector<int> held(D, 0);
  for (int rank : stage_to_rank) {
    if (rank < 0 || rank >= D || ++held[rank] > V) {
      return absl::InvalidArgumentError(
          absl::StrCat("forward-only: stage_to_rank does not give each of ", D, " ranks ", V,
                       " stages"));
    }
  }
  absl::StatusOr<prog::Schedule> lowered =
      prog::LowerComms(prog::ForwardOnly(stage_to_rank, D, V, M));
  if (!lowered.ok()) return lowered.status();
  absl::StatusOr<Simulation> simulation = ValidateAndSimulate(*lowered, CostModel{});
  if (!simulation.ok()) return simulation.status();
  return ScheduleToProto(*lowered, &*simulation);
}

namespace {

// A PlanTorchCsv error about the CSV parallel.program makes: "line N, ..." names program[N-1].
std::string InProgram(absl::string_view message) {
  absl::string_view rest = message;
  int line = 0;
  if (absl::ConsumePrefix(&rest, "line ")) {
    const size_t digits = rest.find_first_not_of("0123456789");
    if (digits != absl::string_view::npos && absl::SimpleAtoi(rest.substr(0, digits), &line) &&
        line >= 1) {
      return absl::StrCat("parallel.program[", line - 1, "]", rest.substr(digits));
    }
  }
  return absl::StrCat("parallel.program: ", message);
}

absl::StatusOr<Planned> PlanCarriedSchedule(const pp::v1::ParallelSpec& parallel, int M,
                                            const CostModel& costs) {
  const bool inline_rows = parallel.program_size() > 0;
  absl::StatusOr<Planned> planned = PlanTorchCsv(common::CarriedScheduleCsv(parallel), costs);
  if (!planned.ok()) {
    const absl::string_view why = planned.status().message();
    return absl::InvalidArgumentError(
        inline_rows ? InProgram(why) : absl::StrCat(common::CarriedScheduleField(parallel), ": ", why));
  }
  const prog::Schedule& s = planned->schedule;
  if (s.pipeline != parallel.pipeline() || s.chunks != parallel.chunks() || s.microbatches != M) {
    return absl::InvalidArgumentError(absl::StrCat(
        common::CarriedScheduleField(parallel), ": its schedule runs D=",
        s.pipeline, " ranks with V=", s.chunks, " chunks and M=", s.microbatches,
        " microbatches, but the spec says parallel.pipeline=", parallel.pipeline(),
        ", parallel.chunks=", parallel.chunks(), ", train.microbatches=", M,
        "; they must agree"));
  }
  return planned;
}

}  // namespace

absl::StatusOr<Planned> PlanSpecSchedule(const pp::v1::ParallelSpec& parallel, int M,
                                         const CostModel& costs) {
  if (common::CarriesSchedule(parallel)) return PlanCarriedSchedule(parallel, M, costs);
  absl::StatusOr<Planned> planned =
      Plan(parallel.schedule(), parallel.pipeline(), parallel.chunks(), M, costs);
  if (planned.ok()) return planned;
  return absl::InvalidArgumentError(absl::StrCat(
      "parallel.schedule \"", parallel.schedule(), "\" with parallel.pipeline=",
      parallel.pipeline(), ", parallel.chunks=", parallel.chunks(), ", train.microbatches=", M,
      ": ", planned.status().message()));
}

absl::StatusOr<pp::v1::Schedule> PlanSchedule(const std::string& name, int D, int V, int M,
                                              const pp::v1::CostModel& costs) {
  absl::StatusOr<Planned> planned = Plan(name, D, V, M, CostsFromProto(costs));
  if (!planned.ok()) return planned.status();
  return ScheduleToProto(planned->schedule, &planned->simulation);
}

}  // namespace pp::plan
