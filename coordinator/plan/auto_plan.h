// Auto-planner: for D ranks, a range of M and a per-rank activation memory budget, simulates every
// schedule (and V for interleaved-1f1b) and picks the shortest step that fits.
//
// Costs describe ONE microbatch of the SMALLEST M in the range, for a rank's whole share of the
// model (what a V=1 stage holds). A candidate with M microbatches and V chunks per rank scales
// compute costs and activation bytes by (min M / M) / V: the global batch is fixed, so more
// microbatches are smaller ones, and a chunk is 1/V of a rank's layers. Comm latency is per
// message and does not scale, which is what makes very large M lose. With a memory budget,
// recomputation is a further knob: each shape is also simulated under each requested mode (an F
// again before each B or I, less held between them), and the reason says what it bought.
#ifndef PP_COORDINATOR_PLAN_AUTO_PLAN_H_
#define PP_COORDINATOR_PLAN_AUTO_PLAN_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/plan/simulate.h"

namespace pp::plan {

// A recomputation mode as the simulator sees it (recompute.h RecomputeSharesOf gives a job's).
struct RecomputeOption {
  std::string name = "none";
  double forward = 0;  // CostModel.recompute_forward
  double dropped = 0;  // CostModel.recompute_dropped
};

struct AutoPlanRequest {
  int pipeline = 0;  // D
  int min_microbatches = 0;
  int max_microbatches = 0;
  // Peak activation memory allowed on any rank; 0 = unlimited. In bytes when
  // costs.activation_bytes > 0, otherwise in units of one (min-M) microbatch of a rank's share.
  double memory_budget = 0;
  CostModel costs;
  std::vector<std::string> schedules;  // empty: all of ScheduleNames()
  int max_chunks = 4;                  // V tried for interleaved-1f1b: 2..max_chunks
  // Recomputation modes tried with every (schedule, V, M) besides none, when memory_budget > 0
  // (without a budget recomputation only costs time). costs' own recompute shares must be 0.
  std::vector<RecomputeOption> recompute;
  // Packed variable-length microbatches (packed.h MicrobatchWeights): empty, or at least
  // max_microbatches multipliers, of the step's microbatches in order. A candidate with M
  // microbatches is simulated with the first M (CostModel.microbatch_weight), on top of the
  // (min M / M) / V scaling: the step's first M microbatches are data replica 0's, whatever M
  // is. costs.microbatch_weight must be empty.
  std::vector<double> microbatch_weights;
};

struct Candidate {
  std::string schedule;
  int chunks = 1;
  int microbatches = 0;
  std::string recompute = "none";
  double step = 0;  // simulated makespan
  double bubble = 0;
  double memory = 0;  // peak over ranks, in the budget's unit
  bool fits = false;
};

struct AutoPlan {
  std::vector<Candidate> candidates;  // in the order compared
  int chosen = -1;                    // index into candidates; -1 when none fits
  std::string reason;                 // why that one (or why none)
};

// InvalidArgument for a bad request (D < 1, empty or inverted M range, unknown schedule, bad
// costs). Candidates a generator refuses (e.g. interleaved with M < D) are not listed.
absl::StatusOr<AutoPlan> ChooseSchedule(const AutoPlanRequest& request);

// The per-stage, per-microbatch costs `candidate` was simulated with, as Plan() takes them: the
// request's costs scaled by (min M / M) / V, with its recomputation option's shares and the
// first M of the request's microbatch_weights.
CostModel CandidateCosts(const AutoPlanRequest& request, const Candidate& candidate);

// The candidates as a table, then the reason.
std::string DescribeAutoPlan(const AutoPlan& plan);

// ---- the mesh: data x pipeline x tensor parallel ------------------------------------------------
// ChooseMesh splits `workers` into DP x PP x TP and, for each split, every schedule, V and M as
// above, at a fixed global batch. Costs are measured on one worker for ONE SEQUENCE through the
// WHOLE model; a stage-microbatch of a candidate costs forward * (sequences per microbatch) / S /
// TP (S = PP * V stages of equal depth) plus its TP all-reduces: 2 per block in forward and 2 in
// backward (input-gradient part), each of the microbatch's (B,T,C) boundary activation. A ring
// all-reduce of n bytes over k ranks takes 2(k-1) latencies + 2(k-1)/k * n / bandwidth (Patarasuk
// and Yuan 2009). The DP gradient all-reduce of a rank's weights follows the pipeline in full (no
// overlap credited: a pessimistic bound). Memory per worker: weights, gradients and two AdamW
// moments (4 x weight_bytes / (PP x TP), replicated tensors ignored) plus the simulated peak of
// live stage-microbatch activations, of which TP splits all but 10/34 (the per-layer
// sbh(10 + 24/t) of Korthikanti et al. 2022, attention scores left out).

struct MeshCosts {
  double forward = 1;  // one sequence through the whole model
  double backward = 2;
  double activation_bytes = 0;  // saved by one sequence's forward through the whole model
  double boundary_bytes = 0;    // one sequence's (T,C) activation
  double weight_bytes = 0;      // the whole model's fp32 weights
  double comm_latency = 0;      // per message and per all-reduce step
  double comm_bandwidth = 0;    // bytes per time unit; 0 = infinite
};

struct MeshPlanRequest {
  int workers = 0;
  double memory_per_worker = 0;  // bytes; 0 = unlimited
  int batch = 0;                 // sequences per step, over all replicas
  int n_layers = 0;              // S = PP x V must not exceed it
  int n_heads = 0;               // TP must divide it
  int max_tensor = 8;            // largest TP (the workers of one host)
  MeshCosts costs;
  std::vector<std::string> schedules;  // empty: all of ScheduleNames()
  int max_chunks = 4;                  // V tried for interleaved-1f1b: 2..max_chunks
};

struct MeshCandidate {
  int dp = 1, pp = 1, tp = 1;
  std::string schedule;
  int chunks = 1;
  int microbatches = 0;  // per replica
  double step = 0;       // pipeline + dp_comm
  double pipeline = 0;   // simulated makespan, TP all-reduces included
  double tp_comm = 0;    // time a rank spends in TP all-reduces per step
  double dp_comm = 0;    // the gradient all-reduce after the pipeline
  double bubble = 0;
  double memory = 0;  // bytes per worker
  bool fits = false;
};

struct MeshPlan {
  // The best schedule, V and M of each DP x PP x TP split (the least memory when none fits).
  std::vector<MeshCandidate> candidates;
  int chosen = -1;  // -1 when no split fits
  std::string reason;
};

// InvalidArgument for a bad request (workers, batch, n_layers or n_heads < 1, max_tensor < 1,
// negative costs or memory, unknown schedule) or when no split can run the batch at all.
absl::StatusOr<MeshPlan> ChooseMesh(const MeshPlanRequest& request);

// The per-stage, per-microbatch costs of a candidate's pipeline, as Plan() takes them.
CostModel MeshStageCosts(const MeshPlanRequest& request, const MeshCandidate& candidate);

// The splits as a table, then the reason.
std::string DescribeMeshPlan(const MeshPlan& plan);

}  // namespace pp::plan

#endif  // PP_COORDINATOR_PLAN_AUTO_PLAN_H_
