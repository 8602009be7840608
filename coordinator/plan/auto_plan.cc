#include "coordinator/plan/auto_plan.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "coordinator/plan/compile.h"
#include "program/schedules.h"

namespace pp::plan {
namespace {

// Both planners compare schedules that train: forward-only (evaluation) is never a candidate.
absl::Status CheckTrainingSchedules(const std::vector<std::string>& names) {
  if (absl::Status known = prog::CheckScheduleNames(names); !known.ok()) return known;
  for (const std::string& name : names) {
    if (!prog::FindSchedule(name)->trains) {
      return absl::InvalidArgumentError(absl::StrCat(
          "schedule '", name, "' trains nothing (it runs evaluation); the planner compares ",
          absl::StrJoin(prog::TrainingScheduleNames(), ", ")));
    }
  }
  return absl::OkStatus();
}

// The end of a plan's reason: the fitting candidate with the shortest step other than `chosen`
// among the `eligible`, "; <runner_label> <name> takes <step> (+x%)", then how many candidates
// do not fit, "; <n> <over_label>".
template <typename C, typename Eligible, typename NameOf>
void AppendAlternatives(const std::vector<C>& candidates, int chosen, int fitting,
                        Eligible eligible, NameOf name, const char* runner_label,
                        const char* over_label, std::string& reason) {
  int next = -1;
  for (int i = 0; i < static_cast<int>(candidates.size()); ++i) {
    const C& c = candidates[i];
    if (i == chosen || !c.fits || !eligible(c)) continue;
    if (next < 0 || c.step < candidates[next].step) next = i;
  }
  const C& best = candidates[chosen];
  if (next >= 0) {
    const C& c = candidates[next];
    absl::StrAppend(&reason, "; ", runner_label, " ", name(c), " takes ", c.step,
                    absl::StrFormat(" (%+.1f%%)", 100 * (c.step / best.step - 1)));
  }
  const int over = static_cast<int>(candidates.size()) - fitting;
  if (over > 0) absl::StrAppend(&reason, "; ", over, " ", over_label);
}

CostModel Scaled(const CostModel& costs, double factor) {
  CostModel scaled = costs;
  scaled.forward *= factor;
  scaled.backward *= factor;
  scaled.backward_input *= factor;
  scaled.backward_weight *= factor;
  scaled.activation_bytes *= factor;
  return scaled;
}

std::string Name(const Candidate& c) {
  return absl::StrCat(c.schedule, " V=", c.chunks, " M=", c.microbatches,
                      c.recompute == "none" ? "" : absl::StrCat(" recompute=", c.recompute));
}

// The modes ChooseSchedule tries with each shape: none, then the request's when a budget is set.
std::vector<RecomputeOption> RecomputeOptions(const AutoPlanRequest& request) {
  std::vector<RecomputeOption> options = {RecomputeOption{}};
  if (request.memory_budget > 0) {
    options.insert(options.end(), request.recompute.begin(), request.recompute.end());
  }
  return options;
}

std::string MeshName(const MeshCandidate& c) {
  return absl::StrCat("dp", c.dp, " x pp", c.pp, " x tp", c.tp);
}

// Ring all-reduce of `bytes` over `ranks` (Patarasuk and Yuan 2009): 2(k-1) steps, each moving
// 1/k of the data.
double RingAllReduce(double bytes, int ranks, const MeshCosts& c) {
  if (ranks <= 1) return 0;
  double t = 2.0 * (ranks - 1) * c.comm_latency;
  if (c.comm_bandwidth > 0) t += 2.0 * (ranks - 1) / ranks * bytes / c.comm_bandwidth;
  return t;
}

// Share of a layer's activations that tensor parallelism does not split: the 10 of
// sbh(10 + 24/t) in Korthikanti et al. 2022 (LayerNorm inputs, residuals, dropout masks).
constexpr double kTpReplicatedActivations = 10.0 / 34.0;

double SequencesPerMicrobatch(const MeshPlanRequest& r, const MeshCandidate& c) {
  return static_cast<double>(r.batch) / c.dp / c.microbatches;
}

// The TP all-reduces of one stage-microbatch's forward (the backward has as many).
double TpForwardComm(const MeshPlanRequest& r, const MeshCandidate& c) {
  const double blocks = static_cast<double>(r.n_layers) / (c.pp * c.chunks);
  return 2 * blocks *
         RingAllReduce(SequencesPerMicrobatch(r, c) * r.costs.boundary_bytes, c.tp, r.costs);
}

// Fits first, then the shorter step, then less memory; among splits that do not fit, less memory.
bool Better(const MeshCandidate& a, const MeshCandidate& b) {
  if (a.fits != b.fits) return a.fits;
  if (!a.fits) return a.memory < b.memory;
  return a.step < b.step || (a.step == b.step && a.memory < b.memory);
}

absl::Status CheckMeshRequest(const MeshPlanRequest& r) {
  const std::pair<const char*, int> positive[] = {{"workers", r.workers},
                                                  {"batch", r.batch},
                                                  {"n_layers", r.n_layers},
                                                  {"n_heads", r.n_heads},
                                                  {"max_tensor", r.max_tensor}};
  for (const auto& [name, value] : positive) {
    if (value < 1)
      return absl::InvalidArgumentError(absl::StrCat(name, " must be >= 1, got ", value));
  }
  // The costs a pipeline stage is made of are checked as the simulator checks its own.
  const MeshCosts& c = r.costs;
  const CostModel stage{.forward = c.forward,
                        .backward = c.backward,
                        .comm_latency = c.comm_latency,
                        .comm_bandwidth = c.comm_bandwidth,
                        .activation_bytes = c.activation_bytes,
                        .stage_scale = {}};
  if (auto resolved = ResolveCosts(stage, 1); !resolved.ok()) return resolved.status();
  const std::pair<const char*, double> sizes[] = {{"memory_per_worker", r.memory_per_worker},
                                                  {"boundary_bytes", c.boundary_bytes},
                                                  {"weight_bytes", c.weight_bytes}};
  for (const auto& [name, value] : sizes) {
    if (!(value >= 0) || value == std::numeric_limits<double>::infinity()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " must be finite and >= 0, got ", value));
    }
  }
  return CheckTrainingSchedules(r.schedules);
}

// One (schedule, V, M) to simulate.
struct Shape {
  std::string schedule;
  int chunks;
  int microbatches;
};

// The shapes both planners compare, in the order compared: M from min_m to max_m where
// `take_m(M)`, then the schedules in order (all of them when `schedules` is empty), then their V
// (ChunkChoices).
template <typename TakeM>
std::vector<Shape> Shapes(const std::vector<std::string>& schedules, int max_chunks, int min_m,
                          int max_m, TakeM take_m) {
  const std::vector<std::string>& names =
      schedules.empty() ? prog::TrainingScheduleNames() : schedules;
  std::vector<Shape> shapes;
  for (int M = min_m; M <= max_m; ++M) {
    if (!take_m(M)) continue;
    for (const std::string& name : names) {
      for (int V : prog::ChunkChoices(*prog::FindSchedule(name), max_chunks))
        shapes.push_back({name, V, M});
    }
  }
  return shapes;
}

// AutoPlanRequest.microbatch_weights: checked here, as a candidate's simulation refusing them
// would read as a shape its schedule refuses.
absl::Status CheckAutoWeights(const AutoPlanRequest& request) {
  const std::vector<double>& weights = request.microbatch_weights;
  if (!request.costs.microbatch_weight.empty()) {
    return absl::InvalidArgumentError(
        "the auto-planner takes microbatch weights as microbatch_weights, not costs");
  }
  if (!weights.empty() && static_cast<int>(weights.size()) < request.max_microbatches) {
    return absl::InvalidArgumentError(absl::StrCat("microbatch_weights has ", weights.size(),
                                                   " entries, fewer than the largest M ",
                                                   request.max_microbatches));
  }
  for (double w : weights) {
    if (!std::isfinite(w) || w < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("microbatch weight must be a finite number >= 0, got ", w));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckAutoRequest(const AutoPlanRequest& request) {
  const int D = request.pipeline;
  if (D < 1) return absl::InvalidArgumentError(absl::StrCat("pipeline depth D=", D, " < 1"));
  if (request.min_microbatches < 1 || request.max_microbatches < request.min_microbatches) {
    return absl::InvalidArgumentError(absl::StrCat("microbatch range [", request.min_microbatches,
                                                   ", ", request.max_microbatches,
                                                   "] is empty or starts below 1"));
  }
  if (request.memory_budget < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory budget must be >= 0, got ", request.memory_budget));
  }
  if (!request.costs.stage_scale.empty()) {
    return absl::InvalidArgumentError("the auto-planner does not take per-stage cost scales");
  }
  if (auto costs = ResolveCosts(request.costs, 1); !costs.ok()) return costs.status();
  if (request.costs.recompute_forward != 0 || request.costs.recompute_dropped != 0) {
    return absl::InvalidArgumentError(
        "the auto-planner takes recomputation as options (AutoPlanRequest.recompute), not costs");
  }
  if (absl::Status s = CheckAutoWeights(request); !s.ok()) return s;
  for (const RecomputeOption& option : request.recompute) {
    CostModel costs = request.costs;
    costs.recompute_forward = option.forward, costs.recompute_dropped = option.dropped;
    if (auto resolved = ResolveCosts(costs, 1); !resolved.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("recompute option ", option.name, ": ", resolved.status().message()));
    }
  }
  return CheckTrainingSchedules(request.schedules);
}

// The figures of a simulated candidate; memory in the budget's unit.
Candidate Figures(const AutoPlanRequest& request, Candidate c, const Simulation& sim) {
  const double factor = static_cast<double>(request.min_microbatches) / c.microbatches / c.chunks;
  const bool in_bytes = request.costs.activation_bytes > 0;
  c.step = sim.makespan, c.bubble = sim.bubble_fraction;
  for (const RankStats& rank : sim.ranks) {
    c.memory = std::max(c.memory, in_bytes ? rank.peak_bytes : rank.peak_units * factor);
  }
  c.fits = request.memory_budget == 0 || c.memory <= request.memory_budget;
  return c;
}

// The fitting candidate with the shortest step; ties go to less memory, then to the earlier
// candidate. -1 when none fits.
int Shortest(const std::vector<Candidate>& candidates) {
  int chosen = -1;
  for (int i = 0; i < static_cast<int>(candidates.size()); ++i) {
    const Candidate& c = candidates[i];
    if (!c.fits) continue;
    if (chosen < 0) {
      chosen = i;
      continue;
    }
    const Candidate& best = candidates[chosen];
    if (c.step < best.step || (c.step == best.step && c.memory < best.memory)) chosen = i;
  }
  return chosen;
}

template <typename C>
int CountFitting(const std::vector<C>& candidates) {
  return static_cast<int>(
      std::count_if(candidates.begin(), candidates.end(), [](const C& c) { return c.fits; }));
}

// Why the chosen candidate recomputes: the best fitting one that does not, and what it loses.
void AppendWhyRecompute(const AutoPlan& plan, const Candidate& best, std::string& reason) {
  const Candidate* plain = nullptr;
  for (const Candidate& c : plan.candidates) {
    if (c.fits && c.recompute == "none" && (plain == nullptr || c.step < plain->step)) plain = &c;
  }
  if (plain == nullptr) {
    absl::StrAppend(&reason, "; recompute ", best.recompute,
                    " because no candidate fits the budget without recomputation");
    return;
  }
  absl::StrAppend(&reason, "; recompute ", best.recompute, " because the best without it, ",
                  Name(*plain), ", takes ", plain->step,
                  absl::StrFormat(" (%+.1f%%)", 100 * (plain->step / best.step - 1)));
}

std::string AutoReason(const AutoPlan& plan, double memory_budget) {
  const int fitting = CountFitting(plan.candidates);
  if (plan.chosen < 0) {
    double least = 0;
    for (size_t i = 0; i < plan.candidates.size(); ++i) {
      if (i == 0 || plan.candidates[i].memory < least) least = plan.candidates[i].memory;
    }
    return absl::StrCat("none of the ", plan.candidates.size(),
                        " candidates fits the memory budget ", memory_budget,
                        " (the smallest needs ", least, ")");
  }
  const Candidate& best = plan.candidates[plan.chosen];
  std::string reason = absl::StrCat("chose ", Name(best), ": the shortest simulated step (",
                                    best.step, ") of the ", fitting, " candidates within the budget");
  AppendAlternatives(
      plan.candidates, plan.chosen, fitting,
      [&](const Candidate& c) { return c.schedule != best.schedule; }, Name,
      "best other schedule", "candidates exceed the budget", reason);
  if (best.recompute != "none") AppendWhyRecompute(plan, best, reason);
  return reason;
}

// Simulates one candidate and fills in its figures. InvalidArgument: a D, V, M it refuses.
absl::Status Evaluate(const MeshPlanRequest& r, MeshCandidate& c) {
  absl::StatusOr<Planned> planned =
      Plan(c.schedule, c.pp, c.chunks, c.microbatches, MeshStageCosts(r, c));
  if (!planned.ok()) return planned.status();
  const Simulation& sim = planned->simulation;
  const int stages = c.pp * c.chunks;
  c.pipeline = sim.makespan;
  c.bubble = sim.bubble_fraction;
  c.tp_comm = 2 * TpForwardComm(r, c) * c.microbatches * c.chunks;
  c.dp_comm = RingAllReduce(r.costs.weight_bytes / (c.pp * c.tp), c.dp, r.costs);
  c.step = c.pipeline + c.dp_comm;
  int peak_live = 0;
  for (const RankStats& rank : sim.ranks) peak_live = std::max(peak_live, rank.peak_live);
  const double activation = r.costs.activation_bytes * SequencesPerMicrobatch(r, c) / stages *
                            (kTpReplicatedActivations + (1 - kTpReplicatedActivations) / c.tp);
  c.memory = 4 * r.costs.weight_bytes / (c.pp * c.tp) + peak_live * activation;
  c.fits = r.memory_per_worker == 0 || c.memory <= r.memory_per_worker;
  return absl::OkStatus();
}

// The best schedule, V and M of one DP x PP x TP split (Better); none when no shape runs on it.
absl::StatusOr<std::optional<MeshCandidate>> BestOfSplit(const MeshPlanRequest& request, int dp,
                                                         int pp, int tp) {
  const int per_replica = request.batch / dp;
  std::optional<MeshCandidate> best;
  for (const Shape& shape : Shapes(request.schedules, request.max_chunks, 1, per_replica,
                                   [&](int M) { return per_replica % M == 0; })) {
    if (pp * shape.chunks > request.n_layers) continue;
    MeshCandidate c{dp, pp, tp, shape.schedule, shape.chunks, shape.microbatches};
    absl::Status s = Evaluate(request, c);
    if (absl::IsInvalidArgument(s)) continue;  // a D, V, M this schedule refuses
    if (!s.ok()) return s;
    if (!best.has_value() || Better(c, *best)) best = c;
  }
  return best;
}

std::string MeshReason(const MeshPlan& plan, double memory_per_worker) {
  const int fitting = CountFitting(plan.candidates);
  if (plan.chosen < 0) {
    double least = plan.candidates[0].memory;
    for (const MeshCandidate& c : plan.candidates) least = std::min(least, c.memory);
    return absl::StrCat("none of the ", plan.candidates.size(), " splits fits memory_per_worker ",
                        memory_per_worker, " bytes (the smallest needs ", least, ")");
  }
  const MeshCandidate& best = plan.candidates[plan.chosen];
  std::string reason = absl::StrCat(
      "chose ", MeshName(best), " with ", best.schedule, " V=", best.chunks, " M=",
      best.microbatches, ": the shortest simulated step (", best.step, " = pipeline ",
      best.pipeline, " incl. TP all-reduces ", best.tp_comm, " + DP all-reduce ", best.dp_comm,
      ") of the ", fitting, " splits within memory");
  AppendAlternatives(
      plan.candidates, plan.chosen, fitting, [](const MeshCandidate&) { return true; }, MeshName,
      "next best", "splits exceed memory", reason);
  return reason;
}

}  // namespace

CostModel CandidateCosts(const AutoPlanRequest& request, const Candidate& candidate) {
  CostModel costs = Scaled(request.costs, static_cast<double>(request.min_microbatches) /
                                              candidate.microbatches / candidate.chunks);
  for (const RecomputeOption& option : request.recompute) {
    if (option.name != candidate.recompute) continue;
    costs.recompute_forward = option.forward, costs.recompute_dropped = option.dropped;
  }
  if (!request.microbatch_weights.empty()) {
    costs.microbatch_weight.assign(request.microbatch_weights.begin(),
                                   request.microbatch_weights.begin() + candidate.microbatches);
  }
  return costs;
}

absl::StatusOr<AutoPlan> ChooseSchedule(const AutoPlanRequest& request) {
  if (absl::Status s = CheckAutoRequest(request); !s.ok()) return s;
  AutoPlan plan;
  for (const auto& [name, V, M] : Shapes(request.schedules, request.max_chunks,
                                         request.min_microbatches, request.max_microbatches,
                                         [](int) { return true; })) {
    for (const RecomputeOption& option : RecomputeOptions(request)) {
      const Candidate c{name, V, M, option.name};
      absl::StatusOr<Planned> planned =
          Plan(name, request.pipeline, V, M, CandidateCosts(request, c));
      // Costs were checked above, so InvalidArgument is a D, V, M this schedule refuses.
      if (absl::IsInvalidArgument(planned.status())) break;
      if (!planned.ok()) return planned.status();
      plan.candidates.push_back(Figures(request, c, planned->simulation));
    }
  }
  plan.chosen = Shortest(plan.candidates);
  plan.reason = AutoReason(plan, request.memory_budget);
  return plan;
}

// The recompute column is there only when some candidate recomputes.
std::string DescribeAutoPlan(const AutoPlan& plan) {
  const bool modes = std::any_of(plan.candidates.begin(), plan.candidates.end(),
                                 [](const Candidate& c) { return c.recompute != "none"; });
  std::string out = absl::StrFormat("%-18s %2s %5s %s%12s %8s %12s %s\n", "schedule", "V", "M",
                                    modes ? "recompute " : "", "step", "bubble", "memory", "fits");
  for (int i = 0; i < static_cast<int>(plan.candidates.size()); ++i) {
    const Candidate& c = plan.candidates[i];
    absl::StrAppend(
        &out, absl::StrFormat("%-18s %2d %5d %s%12.6g %7.2f%% %12.6g %s%s\n", c.schedule, c.chunks,
                              c.microbatches, modes ? absl::StrFormat("%-9s ", c.recompute) : "",
                              c.step, 100 * c.bubble, c.memory, c.fits ? "yes" : "no",
                              i == plan.chosen ? "  <- chosen" : ""));
  }
  return out + plan.reason + "\n";
}

CostModel MeshStageCosts(const MeshPlanRequest& request, const MeshCandidate& candidate) {
  const MeshCosts& c = request.costs;
  const double seqs = SequencesPerMicrobatch(request, candidate);
  const double share = seqs / (candidate.pp * candidate.chunks) / candidate.tp;
  const double tp = TpForwardComm(request, candidate);
  CostModel m;
  m.forward = c.forward * share + tp;
  m.backward = c.backward * share + tp;
  m.backward_weight = c.backward * share / 2;  // the TP all-reduces sit in the input-gradient half
  m.comm_latency = c.comm_latency;
  m.comm_bandwidth = c.comm_bandwidth;
  m.activation_bytes = seqs * c.boundary_bytes;  // what one pipeline message carries
  return m;
}

absl::StatusOr<MeshPlan> ChooseMesh(const MeshPlanRequest& request) {
  if (absl::Status s = CheckMeshRequest(request); !s.ok()) return s;
  const int N = request.workers;
  MeshPlan plan;
  for (int tp = 1; tp <= std::min(N, request.max_tensor); ++tp) {
    if (N % tp != 0 || request.n_heads % tp != 0) continue;
    for (int pp = 1; pp <= N / tp; ++pp) {
      if (N / tp % pp != 0) continue;
      const int dp = N / tp / pp;
      if (request.batch % dp != 0) continue;
      absl::StatusOr<std::optional<MeshCandidate>> best = BestOfSplit(request, dp, pp, tp);
      if (!best.ok()) return best.status();
      if (best->has_value()) plan.candidates.push_back(**best);
    }
  }
  if (plan.candidates.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no split of ", N, " workers into DP x PP x TP runs a batch of ",
                     request.batch, " sequences (DP must divide the batch, TP the ",
                     request.n_heads, " heads and be <= max_tensor ", request.max_tensor,
                     ", PP x V <= ", request.n_layers, " layers)"));
  }
  for (int i = 0; i < static_cast<int>(plan.candidates.size()); ++i) {
    if (plan.candidates[i].fits &&
        (plan.chosen < 0 || plan.candidates[i].step < plan.candidates[plan.chosen].step)) {
      plan.chosen = i;
    }
  }
  plan.reason = MeshReason(plan, request.memory_per_worker);
  return plan;
}

std::string DescribeMeshPlan(const MeshPlan& plan) {
  std::string out = absl::StrFormat("%-16s %-18s %2s %4s %11s %11s %11s %11s %8s %12s %s\n",
                                    "dp x pp x tp", "schedule", "V", "M", "step", "pipeline",
                                    "tp comm", "dp comm", "bubble", "memory", "fits");
  for (int i = 0; i < static_cast<int>(plan.candidates.size()); ++i) {
    const MeshCandidate& c = plan.candidates[i];
    absl::StrAppend(
        &out, absl::StrFormat("%-16s %-18s %2d %4d %11.6g %11.6g %11.6g %11.6g %7.2f%% "
                              "%12.6g %s%s\n",
                              MeshName(c), c.schedule, c.chunks, c.microbatches, c.step, c.pipeline,
                              c.tp_comm, c.dp_comm, 100 * c.bubble, c.memory, c.fits ? "yes" : "no",
                              i == plan.chosen ? "  <- chosen" : ""));
  }
  return out + plan.reason + "\n";
}

}  // namespace pp::plan
