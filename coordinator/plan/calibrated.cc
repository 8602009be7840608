#include "coordinator/plan/calibrated.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "coordinator/plan/calibrated_hosts.h"
#include "coordinator/plan/plan.h"
#include "program/schedules.h"

namespace pp::plan {
namespace {

int64_t GlobalBatch(const pp::v1::JobSpec& spec) {
  return int64_t{spec.train().microbatches()} * spec.train().microbatch_size();
}

// M among the divisors of the global batch: at least D (or the batch, when smaller: fewer leave
// ranks idle most of the step), at most auto_plan.max_microbatches, and no more than
// kMaxCalibratedSizes of them (every k-th when there are more), one microbatch size each.
std::vector<int> MicrobatchChoices(const pp::v1::JobSpec& spec, int fixed_microbatches) {
  if (fixed_microbatches > 0) return {fixed_microbatches};
  const int64_t batch = GlobalBatch(spec);
  const int least = static_cast<int>(std::min<int64_t>(spec.parallel().pipeline(), batch));
  std::vector<int> divisors;
  for (int m = 1; m <= spec.parallel().auto_plan().max_microbatches() && m <= batch; ++m) {
    if (batch % m == 0 && m >= least) divisors.push_back(m);
  }
  const size_t step = (divisors.size() + kMaxCalibratedSizes - 1) / kMaxCalibratedSizes;
  std::vector<int> choices;
  for (size_t i = 0; i < divisors.size(); i += std::max<size_t>(step, 1)) {
    choices.push_back(divisors[i]);
  }
  return choices;
}

const char* UnitKind(int unit, int n_layers) {
  if (unit == 0) return "embedding";
  return unit == n_layers + 1 ? "head" : "block";
}

bool Sane(double value) { return std::isfinite(value) && value >= 0; }

// Calibrated seconds by (rank, unit kind, sequences).
class UnitTimes {
 public:
  // A worker's answer is checked like any input: one per rank, every time finite and >= 0.
  static absl::StatusOr<UnitTimes> From(const pp::v1::Calibration& calibration, int D) {
    if (calibration.ranks_size() != D) {
      return absl::InvalidArgumentError(absl::StrCat(
          "calibration has ", calibration.ranks_size(), " ranks, the job ", D));
    }
    const pp::v1::StepOverheads& trial = calibration.trial();
    if (!Sane(trial.send_seconds()) || !Sane(trial.latency_seconds()) ||
        !Sane(trial.tail_seconds()) || !Sane(trial.action_seconds())) {
      return absl::InvalidArgumentError("calibration's trial steps: bad overheads");
    }
    UnitTimes times;
    times.by_rank_.resize(D);
    for (const pp::v1::RankCalibration& rank : calibration.ranks()) {
      if (rank.rank() < 0 || rank.rank() >= D) {
        return absl::InvalidArgumentError(
            absl::StrCat("calibration of rank ", rank.rank(), " outside 0..", D - 1));
      }
      if (!Sane(rank.link_latency_seconds()) || !Sane(rank.link_bytes_per_second())) {
        return absl::InvalidArgumentError(
            absl::StrCat("calibration of rank ", rank.rank(), ": bad link figures"));
      }
      for (const pp::v1::UnitCost& unit : rank.units()) {
        for (double t : {unit.forward(), unit.backward(), unit.backward_input(),
                         unit.backward_weight(), unit.optimizer()}) {
          if (!Sane(t)) {
            return absl::InvalidArgumentError(absl::StrCat(
                "calibration of rank ", rank.rank(), ": bad time ", t, " for ", unit.unit()));
          }
        }
        times.by_rank_[rank.rank()][{unit.unit(), unit.sequences()}] = unit;
      }
    }
    return times;
  }
  const pp::v1::UnitCost* Find(int rank, const std::string& kind, int sequences) const {
    auto it = by_rank_[rank].find({kind, sequences});
    return it == by_rank_[rank].end() ? nullptr : &it->second;
  }

 private:
  std::vector<std::map<std::pair<std::string, int>, pp::v1::UnitCost>> by_rank_;
};

struct Shape {
  std::string schedule;
  int chunks = 1;
  int microbatches = 1;
};

// One stage's units: [first, first + count).
struct StageUnits {
  int first = 0, count = 0;
};

std::vector<StageUnits> Spans(const std::vector<int>& units) {
  std::vector<StageUnits> spans;
  int first = 0;
  for (int count : units) {
    spans.push_back({first, count});
    first += count;
  }
  return spans;
}

// Everything a candidate's costs are computed from.
struct Context {
  const pp::v1::JobSpec& spec;
  const UnitTimes& times;
  Link link;
  const CalibratedHosts& hosts;
  int D = 1;
  const pp::v1::StepOverheads* trial = nullptr;
};

// What `spec`'s candidates are costed from; `times` and `hosts` must outlive it.
Context ContextOf(const pp::v1::JobSpec& spec, const pp::v1::Calibration& calibration,
                  const UnitTimes& times, const CalibratedHosts& hosts) {
  return Context{.spec = spec,
                 .times = times,
                 .link = SlowestLink(calibration),
                 .hosts = hosts,
                 .D = spec.parallel().pipeline(),
                 .trial = calibration.has_trial() ? &calibration.trial() : nullptr};
}

// The stage's calibrated costs on `rank` at `sequences`, as if the rank computed alone (its times
// scaled by its rate while every rank calibrated at once: calibrated_hosts.h), or nullopt when a
// unit was not timed.
std::optional<StageCosts> StageCost(const Context& ctx, int rank, StageUnits span, int sequences) {
  StageCosts sum{0, 0, 0, 0};
  for (int u = span.first; u < span.first + span.count; ++u) {
    const pp::v1::UnitCost* c =
        ctx.times.Find(rank, UnitKind(u, ctx.spec.model().n_layers()), sequences);
    if (c == nullptr) return std::nullopt;
    sum.forward += c->forward();
    sum.backward += c->backward();
    sum.backward_input += c->backward_input();
    sum.backward_weight += c->backward_weight();
  }
  const double rate = ctx.hosts.calibration_rate[rank];
  return StageCosts{sum.forward * rate, sum.backward * rate, sum.backward_input * rate,
                    sum.backward_weight * rate};
}

// Contiguous split of the units into the schedule's stages minimising the slowest stage, where
// a stage costs F + B of its units on the worker of its own rank: the linear partition problem
// with per-part weights, by dynamic programming over (stages, prefix length).
std::optional<std::vector<int>> MeasuredPartition(const Context& ctx,
                                                  const std::vector<int>& stage_to_rank,
                                                  int sequences) {
  const int U = ctx.spec.model().n_layers() + 2, S = static_cast<int>(stage_to_rank.size());
  std::vector<std::vector<double>> prefix(ctx.D, std::vector<double>(U + 1, 0));
  for (int r = 0; r < ctx.D; ++r) {
    for (int u = 0; u < U; ++u) {
      std::optional<StageCosts> c = StageCost(ctx, r, {u, 1}, sequences);
      if (!c) return std::nullopt;
      prefix[r][u + 1] = prefix[r][u] + c->forward + c->backward;
    }
  }
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(S + 1, std::vector<double>(U + 1, kInf));
  std::vector<std::vector<int>> cut(S + 1, std::vector<int>(U + 1, 0));
  best[0][0] = 0;
  for (int k = 1; k <= S; ++k) {
    const std::vector<double>& p = prefix[stage_to_rank[k - 1]];
    for (int i = k; i <= U - (S - k); ++i) {
      for (int j = k - 1; j < i; ++j) {
        const double cost = std::max(best[k - 1][j], p[i] - p[j]);
        if (cost < best[k][i]) best[k][i] = cost, cut[k][i] = j;
      }
    }
  }
  std::vector<int> units(S);
  for (int k = S, i = U; k > 0; i = cut[k][i], --k) units[k - 1] = i - cut[k][i];
  return units;
}

// The distinct partitions tried for one layout.
std::vector<std::vector<int>> Partitions(const Context& ctx, const std::vector<int>& stage_to_rank,
                                         int sequences) {
  const int S = static_cast<int>(stage_to_rank.size());
  std::vector<std::vector<int>> partitions;
  auto add = [&](const std::vector<int>& units) {
    if (std::find(partitions.begin(), partitions.end(), units) == partitions.end()) {
      partitions.push_back(units);
    }
  };
  for (const char* method : {"uniform", "params", "cost"}) {
    absl::StatusOr<std::vector<int>> units =
        PartitionUnits(ctx.spec.model(), S, method, {}, UnitCosts(ctx.spec.model()));
    if (units.ok()) add(*units);
  }
  if (std::optional<std::vector<int>> units = MeasuredPartition(ctx, stage_to_rank, sequences)) {
    add(*units);
  }
  return partitions;
}

pp::v1::JobSpec Resolve(const pp::v1::JobSpec& spec, const Shape& shape,
                        const std::vector<int>& units, const std::string& recompute) {
  pp::v1::JobSpec resolved = spec;
  pp::v1::ParallelSpec* p = resolved.mutable_parallel();
  p->set_schedule(shape.schedule);
  p->set_chunks(shape.chunks);
  p->set_partition("explicit");
  p->mutable_stage_layers()->Assign(units.begin(), units.end());
  p->set_recompute(recompute);
  resolved.mutable_train()->set_microbatches(shape.microbatches);
  resolved.mutable_train()->set_microbatch_size(
      static_cast<int>(GlobalBatch(spec) / shape.microbatches));
  return resolved;
}

struct Option {
  Shape shape;
  std::vector<int> units;
  std::string recompute;
  double step = 0;
  bool fits = false;
  std::string refusal = "";  // why it does not fit
  pp::v1::JobSpec spec = {};
};

std::string Label(const Option& c) {
  return absl::StrCat(c.shape.schedule, " V=", c.shape.chunks, " M=", c.shape.microbatches,
                      " stages ", absl::StrJoin(c.units, ","), " recompute ", c.recompute);
}

// The first rank whose estimate exceeds its worker's free memory, as a refusal; empty: fits.
std::string MemoryRefusal(const std::vector<RankMemory>& memory,
                          const pp::v1::Calibration& calibration) {
  for (const RankMemory& rank : memory) {
    const int64_t free = calibration.ranks(rank.pp).free_memory_bytes();
    if (free > 0 && rank.bytes.total > free) {
      return absl::StrCat("rank ", rank.pp, " needs ", FormatBytes(rank.bytes.total), ", its worker has ",
                          FormatBytes(free), " free");
    }
  }
  return "";
}

// `c` with `trial`'s action_seconds added to each of its actions.
StageCosts WithActionOverhead(const StageCosts& c, const pp::v1::StepOverheads* trial) {
  const double extra = trial != nullptr ? trial->action_seconds() : 0;
  return StageCosts{c.forward + extra, c.backward + extra, c.backward_input + extra,
                    c.backward_weight + extra};
}

// The predicted step of `c` on `schedule`: the simulated makespan under the stages' calibrated
// costs, plus the slowest rank's optimizer and the norm's all-gather. nullopt: not costed.
std::optional<double> PredictStep(const Context& ctx, const prog::Schedule& schedule,
                                  const Option& c, const RecomputeShares& shares) {
  const int sequences = static_cast<int>(GlobalBatch(ctx.spec) / c.shape.microbatches);
  CostModel costs;
  costs.comm_latency = ctx.link.latency;
  costs.comm_bandwidth = ctx.link.bandwidth;
  costs.activation_bytes = BoundaryBytes(ctx.spec.model(), sequences);
  costs.recompute_forward = shares.forward;
  costs.recompute_dropped = shares.dropped;
  costs.rank_host = ctx.hosts.rank_host;  // ranks on one machine share its cores
  costs.host_cores = ctx.hosts.host_cores;
  std::vector<double> optimizer(ctx.D, 0);
  const std::vector<StageUnits> spans = Spans(c.units);
  for (size_t s = 0; s < spans.size(); ++s) {
    const int rank = schedule.stage_to_rank[s];
    std::optional<StageCosts> stage = StageCost(ctx, rank, spans[s], sequences);
    if (!stage) return std::nullopt;
    costs.stage_costs.push_back(WithActionOverhead(*stage, ctx.trial));
    for (int u = spans[s].first; u < spans[s].first + spans[s].count; ++u) {
      optimizer[rank] +=
          ctx.times.Find(rank, UnitKind(u, ctx.spec.model().n_layers()), sequences)->optimizer();
    }
  }
  const pp::v1::StepOverheads* trial = ctx.trial;
  if (trial != nullptr) {
    costs.send_overhead = trial->send_seconds();
    costs.comm_latency = std::max(costs.comm_latency, trial->latency_seconds());
  }
  absl::StatusOr<Simulation> sim = Simulate(schedule, costs);
  if (!sim.ok()) return std::nullopt;
  if (trial != nullptr) return sim->makespan + trial->tail_seconds();
  return sim->makespan + *std::max_element(optimizer.begin(), optimizer.end()) +
         (ctx.D - 1) * ctx.link.latency;
}

// Costs and checks one (shape, partition): recompute none, else the first mode that fits.
std::optional<Option> Evaluate(const Context& ctx, const pp::v1::Calibration& calibration,
                                  const Shape& shape, const Planned& generated,
                                  const std::vector<int>& units) {
  const pp::v1::Schedule proto = ScheduleToProto(generated.schedule, nullptr);
  std::optional<Option> last;
  for (const char* mode : {"none", "selective", "full"}) {
    Option c{.shape = shape, .units = units, .recompute = mode};
    c.spec = Resolve(ctx.spec, shape, units, mode);
    absl::StatusOr<RecomputeShares> shares = RecomputeSharesOf(c.spec, units);
    absl::StatusOr<std::vector<RankMemory>> memory = EstimateMemory(c.spec, units, proto);
    if (!shares.ok() || !memory.ok()) return last;
    std::optional<double> step = PredictStep(ctx, generated.schedule, c, *shares);
    if (!step) return last;
    c.step = *step;
    c.refusal = MemoryRefusal(*memory, calibration);
    c.fits = c.refusal.empty();
    last = std::move(c);
    if (last->fits) break;
  }
  return last;
}

std::vector<Option> Search(const Context& ctx, const pp::v1::Calibration& calibration,
                              int fixed_microbatches) {
  std::vector<Option> out;
  const pp::v1::ParallelSpec& p = ctx.spec.parallel();
  const int units = ctx.spec.model().n_layers() + 2;
  for (const std::string& name : prog::TrainingScheduleNames()) {
    const prog::ScheduleKind* kind = prog::FindSchedule(name);
    for (int V : prog::ChunkChoices(*kind, p.auto_plan().max_chunks())) {
      if ((p.chunks() > 0 && V != p.chunks()) || ctx.D * V > units) continue;
      for (int M : MicrobatchChoices(ctx.spec, fixed_microbatches)) {
        absl::StatusOr<Planned> generated = Plan(name, ctx.D, V, M, CostModel{});
        if (!generated.ok()) continue;  // the generator refuses this D, V, M
        const Shape shape{.schedule = name, .chunks = V, .microbatches = M};
        const int sequences = static_cast<int>(GlobalBatch(ctx.spec) / M);
        for (const std::vector<int>& split :
             Partitions(ctx, generated->schedule.stage_to_rank, sequences)) {
          if (std::optional<Option> c = Evaluate(ctx, calibration, shape, *generated, split)) {
            out.push_back(*std::move(c));
          }
        }
      }
    }
  }
  return out;
}

std::string Ms(double seconds) { return absl::StrFormat("%.2f ms", seconds * 1e3); }

// What the choice was made on, for the reason line.
std::string CostsSummary(const Context& ctx, const pp::v1::Calibration& calibration,
                         int sequences) {
  std::string block = "?";
  if (const pp::v1::UnitCost* c = ctx.times.Find(0, "block", sequences)) {
    block = absl::StrCat(Ms(c->forward()), " forward, ", Ms(c->backward()), " backward");
  }
  std::string link = "no link";
  if (ctx.D > 1) {
    link = absl::StrCat("slowest link ", Ms(ctx.link.latency), " + ",
                        ctx.link.bandwidth > 0
                            ? absl::StrFormat("%.1f MB/s", ctx.link.bandwidth / 1e6)
                            : std::string("unmeasured bandwidth"));
  }
  std::string sharing;
  if (!ctx.hosts.summary.empty()) {
    sharing = absl::StrCat("; ", ctx.hosts.summary,
                           ": simulated sharing the cores, from compute times scaled to a rank "
                           "alone (the ranks calibrated at once)");
  }
  std::string trial;
  if (ctx.trial != nullptr) {
    trial = absl::StrCat("; from ", ctx.trial->steps(), " trial steps of ", ctx.trial->plan(),
                         ": sends ", Ms(ctx.trial->send_seconds()), ", a waited message ",
                         Ms(ctx.trial->latency_seconds()), ", step tail ",
                         Ms(ctx.trial->tail_seconds()),
                         ", ", Ms(ctx.trial->action_seconds()), " an action");
  }
  return absl::StrCat("a block takes ", block, " at ", sequences, " sequences on rank 0; ", link,
                      sharing, trial, "; calibrated in ",
                      absl::StrFormat("%.2f s", calibration.seconds()),
                      calibration.cached() ? " (cached)" : "");
}

// The best candidate of another schedule or V (one that fits before one that does not), and why
// it lost to `best`.
void NoteRunnerUp(const std::vector<Option>& candidates, const Option& best,
                  CalibratedPlan* plan) {
  const Option* second = nullptr;
  for (const Option& c : candidates) {
    if (c.shape.schedule == best.shape.schedule && c.shape.chunks == best.shape.chunks) continue;
    if (second == nullptr || (c.fits && !second->fits) ||
        (c.fits == second->fits && c.step < second->step)) {
      second = &c;
    }
  }
  if (second == nullptr) return;
  plan->runner_up = Label(*second);
  plan->runner_up_step_seconds = second->step;
  plan->runner_up_reason =
      second->fits ? absl::StrFormat("predicted %s, %.1f%% slower", Ms(second->step),
                                     100 * (second->step / best.step - 1))
                   : absl::StrCat("does not fit: ", second->refusal);
}

}  // namespace

pp::v1::JobSpec ProvisionalSpec(pp::v1::JobSpec spec) {
  pp::v1::ParallelSpec* p = spec.mutable_parallel();
  p->set_schedule("1f1b");
  p->set_chunks(1);
  p->set_partition("cost");
  if (p->recompute() == "auto") p->set_recompute("none");
  return spec;
}

std::vector<int> CalibrationSequences(const pp::v1::JobSpec& spec, int fixed_microbatches) {
  std::set<int> sizes;
  for (int M : MicrobatchChoices(spec, fixed_microbatches)) {
    sizes.insert(static_cast<int>(GlobalBatch(spec) / M));
  }
  return {sizes.begin(), sizes.end()};
}

absl::StatusOr<double> PredictStepSeconds(const pp::v1::JobSpec& resolved,
                                          const pp::v1::Calibration& calibration) {
  const pp::v1::ParallelSpec& p = resolved.parallel();
  const int D = p.pipeline();
  absl::StatusOr<UnitTimes> times = UnitTimes::From(calibration, D);
  if (!times.ok()) return times.status();
  // Sizes are looked up by the resolved microbatch: its global batch is that times M.
  const CalibratedHosts hosts = HostsOf(calibration, D, resolved.train().threads());
  const Context ctx = ContextOf(resolved, calibration, *times, hosts);
  absl::StatusOr<Planned> generated =
      Plan(p.schedule(), D, p.chunks(), resolved.train().microbatches(), CostModel{});
  if (!generated.ok()) return generated.status();
  Option option{.shape = {.schedule = p.schedule(),
                          .chunks = p.chunks(),
                          .microbatches = resolved.train().microbatches()},
                .units = {p.stage_layers().begin(), p.stage_layers().end()},
                .recompute = p.recompute()};
  if (static_cast<int>(option.units.size()) != generated->schedule.stages()) {
    return absl::InvalidArgumentError("parallel.stage_layers must give every stage its units");
  }
  absl::StatusOr<RecomputeShares> shares = RecomputeSharesOf(resolved, option.units);
  if (!shares.ok()) return shares.status();
  std::optional<double> step = PredictStep(ctx, generated->schedule, option, *shares);
  if (!step) return absl::InvalidArgumentError("the calibration does not cover this layout");
  return *step;
}

absl::StatusOr<CalibratedPlan> ChooseCalibrated(const pp::v1::JobSpec& spec,
                                                const pp::v1::Calibration& calibration,
                                                int fixed_microbatches) {
  const int D = spec.parallel().pipeline();
  absl::StatusOr<UnitTimes> times = UnitTimes::From(calibration, D);
  if (!times.ok()) return times.status();
  const CalibratedHosts hosts = HostsOf(calibration, D, spec.train().threads());
  const Context ctx = ContextOf(spec, calibration, *times, hosts);
  std::vector<Option> candidates = Search(ctx, calibration, fixed_microbatches);
  if (candidates.empty()) {
    return absl::InvalidArgumentError(
        "no candidate could be costed: the calibration misses a unit or a microbatch size");
  }
  const Option* best = nullptr;
  int fitting = 0;
  for (const Option& c : candidates) {
    if (!c.fits) continue;
    ++fitting;
    if (best == nullptr || c.step < best->step) best = &c;
  }
  if (best == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("schedule auto: none of ", candidates.size(),
                     " plans fits the workers' memory; the first: ", Label(candidates[0]), ": ",
                     candidates[0].refusal));
  }
  CalibratedPlan plan;
  plan.spec = best->spec;
  plan.chosen = Label(*best);
  plan.predicted_step_seconds = best->step;
  plan.candidates = static_cast<int>(candidates.size());
  NoteRunnerUp(candidates, *best, &plan);
  const int sequences = best->spec.train().microbatch_size();
  plan.reason = absl::StrCat("schedule auto chose ", plan.chosen, ": predicted ",
                             Ms(best->step), " per step, the shortest of ", fitting,
                             " plans that fit (", candidates.size(), " simulated); ",
                             CostsSummary(ctx, calibration, sequences));
  return plan;
}

}  // namespace pp::plan
