// What a step looks like, planned or measured, and the one bubble definition. The simulator's
// output and a measured pp.v1.StepTrace both become a Timeline, so the renderers (render.h) draw
// planned and measured steps alike.
#ifndef PP_COORDINATOR_PLAN_TIMELINE_H_
#define PP_COORDINATOR_PLAN_TIMELINE_H_

#include <vector>

#include "common/bubble.h"
#include "pp/v1/schedule.pb.h"
#include "program/ir.h"

namespace pp::plan {

struct TimedAction {
  prog::Action action;
  double start = 0;
  double end = 0;
};

// Per rank, the actions it ran with their start and end, in the order they ran.
struct Timeline {
  std::vector<std::vector<TimedAction>> ranks;
};

// `end[r][k]` is when action k of rank r's program ends; it starts when the previous one on its
// rank ends (the first at 0), as the simulator runs programs (simulate.h).
Timeline TimelineFromEnds(const prog::Schedule& schedule,
                          const std::vector<std::vector<double>>& end);
// Actions with a kind outside FORWARD..RECV_GRAD are skipped; ranks are placed by RankTrace.rank.
Timeline TimelineFromTrace(const pp::v1::StepTrace& trace);

inline constexpr char kBubbleDefinition[] =
    "1 - sum(busy) / (D * makespan): idle share of all ranks' time from the first action to the "
    "last (not idle over ideal compute)";

// The bubble (kBubbleDefinition): common::IdleFraction (common/bubble.h), where the workers'
// per-rank bubble can use it too; the planner's API names it here. It takes the totals rather
// than a Timeline so that the simulator need not materialize one (for the largest schedules that
// would double the planning time).
using common::IdleFraction;

}  // namespace pp::plan

#endif  // PP_COORDINATOR_PLAN_TIMELINE_H_
