// Simulator: runs a lowered schedule under a cost model and reports makespan, busy and idle time
// per rank, the bubble fraction and peak live activations.
//
// Model: compute actions take their stage's cost; a send costs its rank nothing (asynchronous);
// a receive waits until the matching send's time + comm latency + activation bytes / bandwidth
// (activations and their gradients are the same size). An activation is live on its rank from
// the start of its F to the end of its B (or of its W when the backward is split: W still needs
// the layer inputs). With recomputation (CostModel.recompute_*) the held bytes of a microbatch
// fall to the undropped share after its F; its B or I brings the activation back whole first.
// Microbatches may differ in cost (CostModel.microbatch_weight: packed variable-length ones):
// microbatch j's computes and message bytes are w_j times a uniform microbatch's.
//
// Shared processors (CostModel.rank_host, host_cores; simulate_shared.cc): by default every rank
// has a processor of its own. When ranks share a host's cores, the step is a fluid simulation: at
// any instant, on a host of c cores where k of its ranks run a compute or a SEND's send_overhead,
// each of those k progresses at rate min(1, c / k) (the host's cores shared evenly, as a
// time-slicing scheduler shares them over a slice); a rank waiting at a receive, or done, uses
// no core. An action's remaining work shrinks at its rank's current rate, and rates change
// whenever an action starts or ends on that host. Messages still take comm_latency + bytes /
// bandwidth after their SEND ends. A rank's busy stays the nominal cost of its compute actions
// (what they take alone), so the bubble 1 - sum(busy) / (D x makespan) also counts the time lost
// to sharing. When no host has more ranks than cores nobody ever slows down, and the per-rank
// path runs: the same results, bit for bit, as without rank_host.
#ifndef PP_COORDINATOR_PLAN_SIMULATE_H_
#define PP_COORDINATOR_PLAN_SIMULATE_H_

#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/plan/execute.h"
#include "coordinator/plan/timeline.h"
#include "program/ir.h"

namespace pp::plan {

// The costs of one stage after applying the defaulting rules and stage_scale.
struct StageCosts {
  double forward, backward, backward_input, backward_weight;
};

// Per-stage costs, in any time unit (pp.v1.CostModel in plain form).
struct CostModel {
  double forward = 1;
  double backward = 2;        // full B; 0 means backward_input + backward_weight
  double backward_input = 0;  // I and W: when one is 0 it is B minus the other; both 0: B / 2
  double backward_weight = 0;
  double comm_latency = 0;          // per message
  // Time a SEND keeps its rank busy handing the message over (copy, posting); it delays what the
  // rank runs next and counts as idle, not compute. 0 = asynchronous sends are free.
  double send_overhead = 0;
  double comm_bandwidth = 0;        // bytes per time unit; 0 = infinite
  double activation_bytes = 0;      // of one stage-microbatch activation (and of its gradient)
  std::vector<double> stage_scale;  // empty, or one multiplier of the compute costs per stage
  // Empty, or every stage's own compute costs (forward, backward, I, W; none 0), which then
  // replace forward..backward_weight and stage_scale: what calibration measured per stage.
  std::vector<StageCosts> stage_costs = {};
  // Activation recomputation (memory.h RecomputeSharesOf gives a job's): each B, or I when the
  // backward is split, first runs recompute_forward x F again, and between a microbatch's F and
  // that B or I its rank holds (1 - recompute_dropped) x activation_bytes. 0, 0: none.
  double recompute_forward = 0;  // in [0, 1]
  double recompute_dropped = 0;  // in [0, 1]
  // Shared processors (see the top of this file). Empty: every rank on a processor of its own.
  // Else one entry per rank (D): the index of the host it runs on, into host_cores, which holds
  // each host's cores (>= 1). host_cores without rank_host is refused.
  std::vector<int> rank_host = {};
  std::vector<int> host_cores = {};
  // Per-microbatch costs (packed variable-length microbatches; packed.h MicrobatchWeights gives a
  // job's). Empty: every microbatch costs the same. Else one multiplier w_j >= 0 per microbatch of
  // the schedule (M): microbatch j's F, B, I and W (recomputation included) take w_j times their
  // stage's cost, and its messages carry w_j x activation_bytes (comm_latency and send_overhead
  // are per message and do not scale). All 1 gives the results of empty, bit for bit. Peak
  // memory stays unweighted: activations and boundary buffers are sized for the largest
  // microbatch (common/packing.h MaxMicrobatchTokens), which activation_bytes describes.
  std::vector<double> microbatch_weight = {};
};

// InvalidArgument for negative or non-finite costs, or stage_scale without S entries.
absl::StatusOr<std::vector<StageCosts>> ResolveCosts(const CostModel& costs, int S);

struct RankStats {
  double busy = 0;    // compute time: the compute actions' nominal costs (alone on a processor)
  double idle = 0;    // makespan - busy
  int peak_live = 0;  // stage-microbatch activations in flight (F run, B or W not yet)
  double peak_bytes = 0;  // their bytes at the highest point, recomputation included
  double peak_units = 0;  // the same in units of one activation (peak_live without recompute)
};

struct Simulation {
  double makespan = 0;
  double bubble_fraction = 0;  // IdleFraction (timeline.h) of the busy times over the makespan
  std::vector<RankStats> ranks;
  // Per rank, per action of the program: when it ends. It starts when the previous action on its
  // rank ends (the first at 0): ranks run their programs back to back, waiting only at receives.
  std::vector<std::vector<double>> end;
};

// InvalidArgument for bad costs (including costs whose sum overflows, and rank_host / host_cores
// that break their contract), a malformed schedule or one that deadlocks.
absl::StatusOr<Simulation> Simulate(const prog::Schedule& schedule, const CostModel& costs);

// The simulated step as a timeline (TimelineFromEnds of simulation.end).
Timeline TimelineFromSimulation(const prog::Schedule& schedule, const Simulation& simulation);

namespace internal {

// Simulate in two halves, for callers that execute the schedule anyway (compile.h's
// ValidateAndSimulate). InvalidArgument for bad costs, as ResolveCosts, and for a
// microbatch_weight that is not empty and not M finite entries >= 0 (M: the schedule's
// microbatches).
absl::StatusOr<Durations> DurationsOf(const CostModel& costs, int S, int M = 0);
// The figures of an execution of `schedule` under DurationsOf(costs) that recorded its times and
// did not deadlock. InvalidArgument when the step does not end in finite time.
absl::StatusOr<Simulation> Summarize(const prog::Schedule& schedule, const CostModel& costs,
                                     Execution exec);

// OK when rank_host and host_cores keep their contract for a schedule of D ranks; else
// InvalidArgument naming the field and entry.
absl::Status CheckSharing(const CostModel& costs, int D);
// Whether some host has more ranks than cores, so that the processor-sharing run is needed.
// REQUIRES: CheckSharing ok.
bool Oversubscribed(const CostModel& costs);
// The processor-sharing run (simulate_shared.cc), whatever the hosts' load: on hosts with enough
// cores it gives Summarize's figures up to rounding. REQUIRES: CheckIndices and CheckSharing ok,
// `durations` = DurationsOf(costs). InvalidArgument when the programs deadlock or the step does
// not end in finite time.
absl::StatusOr<Simulation> SimulateShared(const prog::Schedule& schedule, const CostModel& costs,
                                          const Durations& durations);
// Summarize(exec), or SimulateShared when the costs oversubscribe a host: what Simulate and
// ValidateAndSimulate return after their execution. InvalidArgument as CheckSharing.
absl::StatusOr<Simulation> Conclude(const prog::Schedule& schedule, const CostModel& costs,
                                    const Durations& durations, Execution exec);

}  // namespace internal

}  // namespace pp::plan

#endif  // PP_COORDINATOR_PLAN_SIMULATE_H_
