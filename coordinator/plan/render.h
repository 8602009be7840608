// Renderers for what a step looks like, planned or measured. Both the simulator's output and a
// measured pp.v1.StepTrace become a Timeline, so `ppctl plan` and `ppctl trace` draw with the same
// code:
//   RenderAscii   one line per rank, `rank 0: [F1] [F2] [  ] [B1] ...`, idle cells shown,
//                 microbatches numbered from 1. A cell is one time quantum: the shortest compute
//                 action, unless that makes a line longer than about 200 columns; then (and always
//                 for measured times) a round value (2 ms, 5 ms, 30 ms...) that fits. An action
//                 shorter than a cell still gets one cell, so its label shows;
//   RenderChrome  Chrome trace event JSON (chrome://tracing, ui.perfetto.dev).
#ifndef PP_COORDINATOR_PLAN_RENDER_H_
#define PP_COORDINATOR_PLAN_RENDER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/plan/simulate.h"
#include "coordinator/plan/timeline.h"
#include "pp/v1/schedule.pb.h"
#include "program/ir.h"

namespace pp::plan {

// What a timeline's times are: the planner's abstract cost units, or seconds (measured steps,
// labelled in ms or s).
enum class TimeUnit { kCostUnits, kSeconds };

std::string RenderAscii(const Timeline& timeline, TimeUnit unit = TimeUnit::kCostUnits);
// A compute action's cell label: kind letter and microbatch from 1, "F3", with its chunk as a
// letter when ranks hold V > 1 chunks of D ranks: "F3b". (Other kinds get '?'.)
std::string ActionLabel(const prog::Action& a, int D, int V);
// `microseconds_per_unit` converts the timeline's unit: 1e6 for seconds (measured traces); the
// planner's abstract units are drawn as milliseconds (1000).
std::string RenderChrome(const Timeline& timeline, double microseconds_per_unit);

// For callers holding protos (ppcoord's PlanJob): validates and re-simulates `schedule` under
// `costs` and draws it. InvalidArgument (the validator's message) if the schedule is not valid.
absl::StatusOr<std::string> RenderScheduleAscii(const pp::v1::Schedule& schedule,
                                                const pp::v1::CostModel& costs);

}  // namespace pp::plan

#endif  // PP_COORDINATOR_PLAN_RENDER_H_
