// The pipeline bubble: the one definition the planner's simulator, the coordinator's measured
// bubble, each worker's per-rank pp_bubble_ratio and ppctl share.
//
// IdleFraction(busy, span) = 1 - sum(busy) / (ranks * span), where busy[r] is rank r's compute
// time (F, B, I, W; sends and receives count as idle) and span the time from the first action to
// the last over all ranks: the idle share of all ranks' time, not idle over ideal compute. 0 when
// there is no rank or span <= 0. It takes the totals rather than a timeline so that the simulator
// need not materialize one. Pure function: thread-safe.
#ifndef PP_COMMON_BUBBLE_H_
#define PP_COMMON_BUBBLE_H_

#include <vector>

namespace pp::common {

double IdleFraction(const std::vector<double>& busy, double span);

}  // namespace pp::common

#endif  // PP_COMMON_BUBBLE_H_
