// Schedule generators: compute-only programs (F, B, I, W; no comms yet, see lower.h) for D ranks,
// V chunks per rank and M microbatches.
//
//   gpipe             V=1: all forwards, then all backwards (Huang et al. 2019).
//   1f1b              V=1: D-1-r warm-up forwards, then one forward / one backward
//                     (PipeDream-Flush, Megatron's non-interleaved schedule).
//   interleaved-1f1b  V>=2 looped chunks, Megatron-LM's depth-first order with its microbatch-group
//                     rule; refuses M < D as Megatron does.
//   zb-h1             V=1, backward split into I and W; W fills the bubbles, peak memory of 1F1B.
//   zb-h2             V=1, split backward, up to 2D-1 live activations: no warm-up bubble.
//   zb-v              V=2 chunks in a V (rank r holds stages r and 2D-1-r), split backward.
//   v-half, v-min     zb-v's V at 1/2 and 1/3 of 1F1B's activation memory (list_schedule.h).
//   dualpipe-v        V=2 in a V, DeepSeek's overlapped F&B as F then B (dualpipe_v.h); M >= 2D.
//   forward-only      any V: each rank runs F of every microbatch, stage by stage; no B, I or W.
//                     Evaluation runs it on the layout of the job's training schedule.
#ifndef PP_COORDINATOR_PLAN_GENERATE_H_
#define PP_COORDINATOR_PLAN_GENERATE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/schedules.h"
#include "coordinator/plan/ir.h"

namespace pp::plan {

// One schedule the planner knows: an entry of the one schedule table (common/schedules.h: name,
// chunk rule, default chunks, constraints; job-spec validation reads it too) with its generator.
// Generate, its refusals and the auto-planner's candidates all read Schedules(). V <= 0 from a
// caller means default_chunks.
struct ScheduleKind : common::ScheduleRule {
  // The compute program; called only for D, V, M that pass the chunk rule and the constraints.
  absl::StatusOr<Schedule> (*generate)(int D, int V, int M) = nullptr;
};

// Every schedule of common::ScheduleRules(), in that order.
const std::vector<ScheduleKind>& Schedules();

// The entry named `name`, or null.
const ScheduleKind* FindSchedule(const std::string& name);

// The names Generate accepts, in the order they are documented.
const std::vector<std::string>& ScheduleNames();

// V chunks `name` runs with when the caller passes V <= 0 (2 for interleaved-1f1b and the V
// schedules: zb-v, v-half, v-min, dualpipe-v).
int DefaultChunks(const std::string& name);

// The V values worth trying for `kind` up to `max_chunks` (the auto-planner's candidates): the
// fixed V of a fixed rule, else min_chunks..max_chunks.
std::vector<int> ChunkChoices(const ScheduleKind& kind, int max_chunks);

// The forward-only program on the layout `stage_to_rank` (S = D*V entries, V stages per rank, as
// a training schedule's): rank r runs, for each stage it holds in ascending order, F of
// microbatches 0..M-1. Every F follows the F it needs in the order (stage, microbatch), which
// every rank's program respects, so it never deadlocks; each stage's M forwards stream to the next
// rank as in GPipe's forward half. REQUIRES a valid layout and M >= 1.
Schedule ForwardOnly(const std::vector<int>& stage_to_rank, int D, int V, int M);

// OK, or InvalidArgument "unknown schedule 'NAME' (known: ...)" for a name not in the table.
absl::Status CheckScheduleNames(const std::vector<std::string>& names);

// InvalidArgument (saying why) for an unknown name, D/M < 1, or a V or M the schedule refuses.
absl::StatusOr<Schedule> Generate(const std::string& name, int D, int V, int M);

}  // namespace pp::plan

#endif  // PP_COORDINATOR_PLAN_GENERATE_H_
