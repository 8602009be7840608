// Auto-planner: for D ranks, a range of M and a per-rank activation memory budget, simulates every
// schedule (and V for interleaved-1f1b) and picks the shortest step that fits.
//
// Costs describe ONE microbatch of the SMALLEST M in the range, for a rank's whole share of the
// model (what a V=1 stage holds). A candidate with M microbatches and V chunks per rank scales
// compute costs and activation bytes by (min M / M) / V: the global batch is fixed, so more
// microbatches are smaller ones, and a chunk is 1/V of a rank's layers. Comm latency is per
// message and does not scale, which is what makes very large M lose.
#ifndef PP_COORDINATOR_PLAN_AUTO_PLAN_H_
#define PP_COORDINATOR_PLAN_AUTO_PLAN_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/plan/simulate.h"

namespace pp::plan {

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
};

struct Candidate {
  std::string schedule;
  int chunks = 1;
  int microbatches = 0;
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

// The candidates as a table, then the reason.
std::string DescribeAutoPlan(const AutoPlan& plan);

}  // namespace pp::plan

#endif  // PP_COORDINATOR_PLAN_AUTO_PLAN_H_
