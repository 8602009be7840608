#include "coordinator/plan/simulate.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "coordinator/plan/execute.h"

namespace pp::plan {
namespace {

absl::Status CheckCost(const char* name, double value) {
  if (std::isfinite(value) && value >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("cost ", name, " must be a finite number >= 0, got ", value));
}

// A rank's compute time: each action starts when the previous one on its rank ends (the first
// at 0), so a compute action took end[k] - end[k-1].
double ComputeTime(const std::vector<prog::Action>& program, const std::vector<double>& end) {
  double busy = 0, start = 0;
  for (size_t k = 0; k < program.size(); ++k) {
    if (!prog::IsComm(program[k].kind)) busy += end[k] - start;
    start = end[k];
  }
  return busy;
}

// Activations live at once on a rank, at most: each F adds one, its B (or W) frees it. A
// forward-only F keeps none.
int PeakLive(const std::vector<prog::Action>& program, bool trains) {
  if (!trains) return 0;
  int live = 0, peak = 0;
  for (const prog::Action& a : program) {
    if (a.kind == prog::Kind::kForward) peak = std::max(peak, ++live);
    if (a.kind == prog::Kind::kBackward || a.kind == prog::Kind::kBackwardWeight) --live;
  }
  return peak;
}

// Peak activation bytes on a rank, each F holding `held` of one activation of `bytes` and its
// B or I rebuilding the whole of it first (recomputation; held = 1 without it). The forward and
// the rebuild hold the whole activation at their end, so that is where the peak is looked for.
double PeakBytes(const std::vector<prog::Action>& program, bool trains, double bytes, double held) {
  if (!trains) return 0;
  double live = 0, peak = 0;
  for (const prog::Action& a : program) {
    switch (a.kind) {
      case prog::Kind::kForward:
        peak = std::max(peak, live + bytes);
        live += held * bytes;
        break;
      case prog::Kind::kBackward:
        peak = std::max(peak, live + (1 - held) * bytes);
        live -= held * bytes;
        break;
      case prog::Kind::kBackwardInput:
        live += (1 - held) * bytes;
        peak = std::max(peak, live);
        break;
      case prog::Kind::kBackwardWeight:
        live -= bytes;
        break;
      default:
        break;
    }
  }
  return peak;
}

}  // namespace

namespace {

// CostModel.stage_costs, checked, with the recomputed forward added before each B and I.
absl::StatusOr<std::vector<StageCosts>> OwnStageCosts(const CostModel& costs, int S) {
  if (static_cast<int>(costs.stage_costs.size()) != S) {
    return absl::InvalidArgumentError(absl::StrCat("stage_costs has ", costs.stage_costs.size(),
                                                   " entries but the schedule has ", S, " stages"));
  }
  std::vector<StageCosts> stages;
  for (const StageCosts& c : costs.stage_costs) {
    for (double value : {c.forward, c.backward, c.backward_input, c.backward_weight}) {
      if (absl::Status status = CheckCost("stage_costs", value); !status.ok()) return status;
    }
    const double again = costs.recompute_forward * c.forward;
    stages.push_back({c.forward, c.backward + again, c.backward_input + again, c.backward_weight});
  }
  return stages;
}

// CostModel.microbatch_weight: empty, or M finite multipliers >= 0.
absl::Status CheckWeights(const std::vector<double>& weights, int M) {
  if (weights.empty()) return absl::OkStatus();
  if (static_cast<int64_t>(weights.size()) != M) {
    return absl::InvalidArgumentError(absl::StrCat("microbatch_weight has ", weights.size(),
                                                   " entries but the schedule has ", M,
                                                   " microbatches"));
  }
  for (size_t j = 0; j < weights.size(); ++j) {
    if (!std::isfinite(weights[j]) || weights[j] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cost microbatch_weight[", j, "] must be a finite number >= 0, got ", weights[j]));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<StageCosts>> ResolveCosts(const CostModel& costs, int S) {
  const std::pair<const char*, double> named[] = {{"forward", costs.forward},
                                                  {"backward", costs.backward},
                                                  {"backward_input", costs.backward_input},
                                                  {"backward_weight", costs.backward_weight},
                                                  {"comm_latency", costs.comm_latency},
                                                  {"send_overhead", costs.send_overhead},
                                                  {"comm_bandwidth", costs.comm_bandwidth},
                                                  {"activation_bytes", costs.activation_bytes}};
  for (const auto& [name, value] : named) {
    if (absl::Status status = CheckCost(name, value); !status.ok()) return status;
  }
  for (const auto& [name, share] : {std::pair<const char*, double>{"recompute_forward",
                                                                    costs.recompute_forward},
                                    {"recompute_dropped", costs.recompute_dropped}}) {
    if (!(share >= 0 && share <= 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("cost ", name, " must be a share in [0, 1], got ", share));
    }
  }
  for (double scale : costs.stage_scale) {
    if (absl::Status status = CheckCost("stage_scale", scale); !status.ok()) return status;
  }
  if (!costs.stage_scale.empty() && static_cast<int>(costs.stage_scale.size()) != S) {
    return absl::InvalidArgumentError(absl::StrCat("stage_scale has ", costs.stage_scale.size(),
                                                   " entries but the schedule has ", S, " stages"));
  }
  const double b =
      costs.backward > 0 ? costs.backward : costs.backward_input + costs.backward_weight;
  double i = costs.backward_input, w = costs.backward_weight;
  if (i == 0 && w == 0) {
    i = w = b / 2;
  } else if (i == 0) {
    i = b - w;
  } else if (w == 0) {
    w = b - i;
  }
  if (i < 0 || w < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "backward_input / backward_weight larger than backward (b=", b, " i=", i, " w=", w, ")"));
  }
  if (!costs.stage_costs.empty()) return OwnStageCosts(costs, S);
  std::vector<StageCosts> stages(S);
  for (int s = 0; s < S; ++s) {
    const double scale = costs.stage_scale.empty() ? 1.0 : costs.stage_scale[s];
    const double again = costs.recompute_forward * costs.forward;  // before each B or I
    stages[s] = {costs.forward * scale, (b + again) * scale, (i + again) * scale, w * scale};
  }
  return stages;
}

namespace internal {

absl::StatusOr<Durations> DurationsOf(const CostModel& costs, int S, int M) {
  absl::StatusOr<std::vector<StageCosts>> stages = ResolveCosts(costs, S);
  if (!stages.ok()) return stages.status();
  if (absl::Status status = CheckWeights(costs.microbatch_weight, M); !status.ok()) return status;
  Durations durations;
  durations.compute.resize(4 * static_cast<size_t>(S));
  for (int s = 0; s < S; ++s) {
    durations.compute[0 * S + s] = (*stages)[s].forward;
    durations.compute[1 * S + s] = (*stages)[s].backward;
    durations.compute[2 * S + s] = (*stages)[s].backward_input;
    durations.compute[3 * S + s] = (*stages)[s].backward_weight;
  }
  durations.latency = costs.comm_latency;
  if (costs.comm_bandwidth > 0) {
    durations.bytes_time = costs.activation_bytes / costs.comm_bandwidth;
  }
  durations.transfer = durations.latency + durations.bytes_time;
  durations.send = costs.send_overhead;
  durations.weight = costs.microbatch_weight;
  return durations;
}

absl::StatusOr<Simulation> Summarize(const prog::Schedule& schedule, const CostModel& costs,
                                     Execution exec) {
  const int D = schedule.pipeline;
  Simulation sim;
  for (int r = 0; r < D; ++r) {
    if (!exec.end[r].empty()) sim.makespan = std::max(sim.makespan, exec.end[r].back());
  }
  if (!std::isfinite(sim.makespan)) {
    return absl::InvalidArgumentError("costs too large: the simulated step does not end");
  }
  sim.end = std::move(exec.end);
  sim.ranks.resize(D);
  std::vector<double> busy(D);
  for (int r = 0; r < D; ++r) {
    RankStats& stats = sim.ranks[r];
    stats.busy = busy[r] = ComputeTime(schedule.programs[r], sim.end[r]);
    stats.idle = sim.makespan - stats.busy;
    stats.peak_live = PeakLive(schedule.programs[r], schedule.trains());
    stats.peak_units =
        PeakBytes(schedule.programs[r], schedule.trains(), 1, 1 - costs.recompute_dropped);
    stats.peak_bytes = stats.peak_units * costs.activation_bytes;
  }
  // The first action starts at 0, so the span from the first action to the last is the makespan.
  sim.bubble_fraction = IdleFraction(busy, sim.makespan);
  return sim;
}

}  // namespace internal

absl::StatusOr<Simulation> Simulate(const prog::Schedule& schedule, const CostModel& costs) {
  if (absl::Status status = prog::CheckIndices(schedule); !status.ok()) return status;
  absl::StatusOr<internal::Durations> durations =
      internal::DurationsOf(costs, schedule.stages(), schedule.microbatches);
  if (!durations.ok()) return durations.status();
  internal::Execution exec = internal::Execute(schedule, *durations, /*record_times=*/true);
  if (exec.deadlocked) {
    return absl::InvalidArgumentError("schedule deadlocks; run the validator for details");
  }
  return internal::Conclude(schedule, costs, *durations, std::move(exec));
}

Timeline TimelineFromSimulation(const prog::Schedule& schedule, const Simulation& simulation) {
  return TimelineFromEnds(schedule, simulation.end);
}

}  // namespace pp::plan
