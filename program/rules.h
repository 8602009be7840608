// The rules every pipeline program obeys, in one place for the planner (generators, lowering,
// validator, simulator: coordinator/plan/) and the worker (its executor: worker/executor/):
// - where an action may run: its stage, microbatch and peer against the layout (ActionProblem);
// - what an action waits for: the events it consumes, local or remote (DepsOf).
// Every input of a compute or a send is produced on its own rank (an earlier compute or
// receive), so a rank only ever waits at receives.
//
// Thread-safe: pure functions.
#ifndef PP_PROGRAM_RULES_H_
#define PP_PROGRAM_RULES_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "program/ir.h"

namespace pp::prog {

// How a comm action names its stage: the planner always names the stage on the action's own
// rank; a worker accepts either end of the edge (message.h).
enum class StageNaming { kOwnStage, kEitherEnd };

// Why action `a` cannot run on `rank` of the layout `stage_to_rank` with `microbatches`
// microbatches, or nullopt: a known kind; stage and microbatch in range; a compute on a stage this
// rank holds, without a peer; a comm between a stage of this rank and its neighbour on another
// rank, whose rank is `peer`.
std::optional<std::string> ActionProblem(const std::vector<int>& stage_to_rank, int microbatches,
                                         int rank, const Action& a, StageNaming naming);

// Shape and index checks every pass needs before it may index arrays by stage or microbatch:
// D, V, M >= 1; S = D*V stages, each rank holding V of them; D programs; no ActionProblem
// (kOwnStage). Message names the first offending rank and action.
absl::Status CheckIndices(const Schedule& schedule);

// What finishing an action makes available, per (stage, microbatch of the action).
enum Event { kForwardDone, kGradDone, kWeightDone, kActSent, kGradSent, kActRecvd, kGradRecvd };
Event Produces(Kind kind);

// The inputs an action waits for, as (event, stage) of the same microbatch: local ones for
// computes and sends, the matching send (remote) for a receive. Requires CheckIndices to pass.
struct Deps {
  int count = 0;
  Event event[2];
  int stage[2];
  bool remote = false;
};
Deps DepsOf(const Action& action, const Schedule& schedule);

}  // namespace pp::prog

#endif  // PP_PROGRAM_RULES_H_
