// The planner's front door: what the coordinator daemon, ppctl and the benches call. Pure
// functions, no threads, no RPC. Callers outside coordinator/plan/ include this header only; it
// brings in the public parts of the planner:
//   compile.h    Plan (generate -> lower comms -> validate -> simulate) on plain structs
//   program/schedules.h  the schedule table (names, rules, generators) and Generate, one
//                layer down (program/ is shared with the worker: ir.h, rules.h, message.h, lower.h)
//   simulate.h   CostModel, Simulation, Simulate; timeline.h: Timeline and the bubble, IdleFraction
//   render.h     RenderAscii and RenderChrome of a Timeline
//   convert.h    plain structs <-> pp.v1 protos
//   auto_plan.h  the auto-planners (schedule, V and M; the DP x PP x TP mesh)
//   calibrated.h parallel.schedule "auto": the choice from a calibration of the placed workers
//   memory.h     EstimateMemory: each rank's peak bytes, broken down
//   packed.h     packed variable-length microbatches: their lengths as per-microbatch costs
//   recompute.h  what activation recomputation costs, and the choice recompute "auto" makes
//   torch_csv.h  schedules in and out as torch.distributed.pipelining's CSV
// The rest (validate.h, execute.h) is how the planner works inside.
#ifndef PP_COORDINATOR_PLAN_PLAN_H_
#define PP_COORDINATOR_PLAN_PLAN_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/plan/auto_plan.h"
#include "coordinator/plan/calibrated.h"
#include "coordinator/plan/compile.h"
#include "coordinator/plan/convert.h"
#include "coordinator/plan/memory.h"
#include "coordinator/plan/packed.h"
#include "coordinator/plan/recompute.h"
#include "coordinator/plan/render.h"
#include "coordinator/plan/simulate.h"
#include "coordinator/plan/timeline.h"
#include "coordinator/plan/torch_csv.h"
#include "pp/v1/job.pb.h"
#include "pp/v1/schedule.pb.h"
#include "program/schedules.h"

namespace pp::plan {

// Relative forward cost of each partition unit (for partition: cost), from the usual FLOP count
// per token (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
// Clusters", sec. 5.1): a block 24*C^2 + 4*T*C, the head 2*vocab*C, the embedding lookup ~C.
std::vector<double> UnitCosts(const pp::v1::ModelSpec& model);

// Generates schedule `name` for D ranks, V chunks per rank and M microbatches, lowers the
// communication, validates and simulates it under `costs`. Errors (unknown schedule, an M or V
// the schedule refuses) are InvalidArgument with a message that says why.
absl::StatusOr<pp::v1::Schedule> PlanSchedule(const std::string& name, int D, int V, int M,
                                              const pp::v1::CostModel& costs);

// The schedule a job's parallel section asks for, for M microbatches, under `costs`: generated
// by name (Plan), or read from the torch CSV it carries (common/job_spec.h CarriedScheduleCsv,
// PlanTorchCsv), whose D, V and M must be parallel.pipeline, parallel.chunks and M. REQUIRES:
// `parallel` passed ValidateJobSpec. Errors are InvalidArgument naming the field:
// "parallel.schedule \"zb-v\" with parallel.pipeline=4, ...: why", "parallel.schedule_file:
// line 2, column 5 ('1F0'): ...", "parallel.program[1], column 5 ('1F0'): ..." (row r of the
// program is line r + 1 of the file it makes).
absl::StatusOr<Planned> PlanSpecSchedule(const pp::v1::ParallelSpec& parallel, int M,
                                         const CostModel& costs);

// The forward-only schedule (generate.h ForwardOnly) on the layout of a training schedule
// (`stage_to_rank`, D*V entries in pipeline ranks, V per rank), lowered, validated and simulated
// under unit costs: what evaluation runs. InvalidArgument for a layout that is not one.
absl::StatusOr<pp::v1::Schedule> PlanForwardOnly(const std::vector<int>& stage_to_rank, int D,
                                                 int V, int M);

// Splits the model's n_layers + 2 partition units (embedding, blocks, head) into S contiguous
// non-empty stages. method: uniform | params | cost | explicit. `explicit_units` is used by
// explicit (S entries summing to n_layers + 2), `unit_costs` by cost (n_layers + 2 entries).
// Returns the number of units per stage. Refuses layouts that leave a stage empty or drop units.
absl::StatusOr<std::vector<int>> PartitionUnits(const pp::v1::ModelSpec& model, int S,
                                                const std::string& method,
                                                const std::vector<int>& explicit_units,
                                                const std::vector<double>& unit_costs);

// The costs measured in one step, as a cost model for `schedule` (S stages): every stage's own
// mean F, B, I and W (stage_costs; B = I + W when the backward is split, I = W = B / 2 when not),
// their means over stages in forward..backward_weight with stage_scale (for display), the mean
// time a SEND kept its rank (send_overhead) and the mean delivery latency of the messages whose
// receiver was already waiting (comm_latency). Actions outside 0..S-1 are ignored. NotFound when
// a stage has no forward or backward time.
absl::StatusOr<CostModel> CostsFromTrace(const prog::Schedule& schedule,
                                         const pp::v1::StepTrace& trace);

// One traced step's bubble (kBubbleDefinition over its actions: the ranks' compute against the
// span from the first action to the last) beside the bubble of `schedule` re-simulated under
// that step's CostsFromTrace (what the measured compute and messages would leave idle if every
// action took its mean): how far the run's idle time is from what its own measured costs
// predict. InvalidArgument for a schedule that does not convert or run; NotFound as
// CostsFromTrace.
struct TracedBubble {
  double measured = 0, simulated = 0;
  CostModel costs;
};
absl::StatusOr<TracedBubble> CompareTraceWithSimulation(const pp::v1::Schedule& schedule,
                                                        const pp::v1::StepTrace& trace);

// What a running plan's steps cost outside the units' compute (pp.v1.StepOverheads), from
// traced steps and their measured seconds (`traces[i]` took `step_seconds[i]`): the medians over
// the steps of each step's mean SEND time and mean waited-message latency (as CostsFromTrace),
// and of its span and tail: its last action's end, and the step's seconds minus that (every
// rank's times count from its step start). action_seconds is left to the caller (it needs the
// calibration: calibrated.h RefitWithTrial). InvalidArgument when the lists are empty or differ
// in length, or a step has no action or a non-finite or negative time.
absl::StatusOr<pp::v1::StepOverheads> FitStepOverheads(
    const std::vector<pp::v1::StepTrace>& traces, const std::vector<double>& step_seconds);

}  // namespace pp::plan

#endif  // PP_COORDINATOR_PLAN_PLAN_H_
