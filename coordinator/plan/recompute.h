// Activation recomputation in the planner (common/recompute.h names the modes): what a mode costs
// the cost model, and the choice parallel.recompute "auto" makes. Pure: no locks, no RPC, no
// clock. Safe to call from any thread.
//
// Costs: the simulator (simulate.h) runs recompute_forward x F again before each B or I and holds
// (1 - recompute_dropped) of a stage-microbatch's activation between them. A job's shares:
// - forward: full runs the stage's forward again, 1; selective runs the attention core again,
//   whose share of the forward FLOPs is 4TC per token per block over UnitCosts' total (Narayanan
//   et al. 2021, sec. 5.1: a block's forward is 24C^2 + 4TC per token, the 4TC being QK^T and
//   the weighted sum of V); the softmax it also repeats is left out, as in that count.
// - dropped: 1 - the bytes a microbatch's forward leaves saved under the mode over those it
//   leaves under none, summed over the stages (memory.h HeldBytesPerMicrobatch, exact per stage).
#ifndef PP_COORDINATOR_PLAN_RECOMPUTE_H_
#define PP_COORDINATOR_PLAN_RECOMPUTE_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/plan/memory.h"
#include "pp/v1/job.pb.h"
#include "pp/v1/schedule.pb.h"

namespace pp::plan {

struct RecomputeShares {
  double forward = 0;  // CostModel.recompute_forward
  double dropped = 0;  // CostModel.recompute_dropped
};

// The shares of `spec`'s parallel.recompute (none, selective or full; none gives 0, 0) over its
// partition `stage_units`. REQUIRES and errors: as HeldBytesPerMicrobatch.
absl::StatusOr<RecomputeShares> RecomputeSharesOf(const pp::v1::JobSpec& spec,
                                                  const std::vector<int>& stage_units);

// Whether a job whose ranks have these estimates can run (OK), or why not.
using MemoryFits = std::function<absl::Status(const std::vector<RankMemory>&)>;

struct RecomputeChoice {
  std::string mode;                // none | selective | full
  std::vector<RankMemory> memory;  // its estimate
  std::string reason;              // one line: what was tried and why this one
};

// parallel.recompute "auto": the first of none, selective, full (less compute first) whose
// estimate `fits` accepts. When none does, the refusal of full, saying that every mode was
// tried. REQUIRES: as EstimateMemory, except that parallel.recompute is ignored.
absl::StatusOr<RecomputeChoice> ChooseRecompute(pp::v1::JobSpec spec,
                                                const std::vector<int>& stage_units,
                                                const pp::v1::Schedule& schedule,
                                                const MemoryFits& fits);

}  // namespace pp::plan

#endif  // PP_COORDINATOR_PLAN_RECOMPUTE_H_
