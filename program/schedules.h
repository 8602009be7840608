// The schedule table: every pipeline schedule the service runs, one row each, and the generator
// that writes its compute-only programs (F, B, I, W; lower.h adds the comms) for D ranks, V
// chunks per rank and M microbatches. Every list of schedules derives from it: job-spec
// validation and bounds (common/job_spec.h, common/spec_bounds.h), the planner and the
// auto-planner's candidates (coordinator/plan/), ppctl's help, the e2e tests' parameters, and the
// table in docs/planner.md (a test compares it with ScheduleTableMarkdown()). Adding a schedule
// is adding a row: docs/planner.md#adding-a-schedule.
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
//
// Contract: the table is built on first use and never changes; every function is thread-safe.
#ifndef PP_PROGRAM_SCHEDULES_H_
#define PP_PROGRAM_SCHEDULES_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "program/ir.h"

namespace pp::prog {

struct ScheduleKind {
  std::string name;
  // One line for people: what the schedule does and where it comes from (docs/planner.md's table).
  std::string doc;
  // The compute program; called only for D, V, M that pass the chunk rule and the constraints.
  absl::StatusOr<Schedule> (*generate)(int D, int V, int M) = nullptr;
  // Whether some backward is split into BACKWARD_INPUT and BACKWARD_WEIGHT (three compute actions
  // per stage and microbatch instead of two: spec bounds count them).
  bool splits_backward = false;
  // V rule: V in [min_chunks, max_chunks]; max_chunks 0 = no upper bound. default_chunks: V when
  // a caller passes none. fewer_chunks_hint ends the refusal of a V below min_chunks.
  int min_chunks = 1;
  int max_chunks = 1;
  int default_chunks = 1;
  std::string fewer_chunks_hint;
  // M rule, for people ("any", "M >= 2D"), and the check behind it and any other constraint on
  // D, V, M (OK or InvalidArgument saying why); null: none. REQUIRES: D, M >= 1 and V within the
  // V rule.
  std::string m_rule = "any";
  absl::Status (*constraints)(int D, int V, int M) = nullptr;
  // False for forward-only: it computes a loss but no gradient, so a job's parallel.schedule may
  // not name it and the auto-planner never picks it.
  bool trains = true;
};

// Every schedule, in the order they are documented.
const std::vector<ScheduleKind>& Schedules();

// The row named `name`, or null.
const ScheduleKind* FindSchedule(absl::string_view name);

// The names, in the order they are documented.
const std::vector<std::string>& ScheduleNames();
// Those of them that train (ScheduleKind::trains): what a job spec and the auto-planner choose
// from.
const std::vector<std::string>& TrainingScheduleNames();

// The schedule evaluation runs: forwards of every stage and microbatch, on the layout of the
// job's training schedule.
inline constexpr const char kForwardOnly[] = "forward-only";

// The name of a schedule a job carries as torch.distributed.pipelining CSV (parallel.schedule_file
// or parallel.program) instead of naming one of the table's.
inline constexpr const char kScheduleFileName[] = "schedule-file";

// parallel.schedule "auto": ppcoord calibrates the placed workers and chooses the schedule, V, M
// and partition itself (coordinator/plan/calibrated.h).
inline constexpr const char kAutoSchedule[] = "auto";

// OK when V obeys `kind`'s V rule, else InvalidArgument in the planner's words: "zb-v runs
// exactly 2 chunk(s) per rank, got V=3", "interleaved-1f1b needs V >= 2 chunks per rank (got V=1;
// with one chunk use 1f1b)", "NAME needs V <= N chunks per rank, got V=...".
absl::Status CheckChunkRule(const ScheduleKind& kind, int V);

// V chunks `name` runs with when the caller passes V <= 0 (1 for an unknown name).
int DefaultChunks(absl::string_view name);

// The V values worth trying for `kind` up to `max_chunks` (the auto-planner's candidates): the
// fixed V of a fixed rule, else min_chunks..max_chunks.
std::vector<int> ChunkChoices(const ScheduleKind& kind, int max_chunks);

// OK, or InvalidArgument "unknown schedule 'NAME' (known: ...)" for a name not in the table.
absl::Status CheckScheduleNames(const std::vector<std::string>& names);

// The compute program of `name`: InvalidArgument (saying why) for an unknown name, D/M < 1, a
// size past what the planner handles, or a V or M the row refuses. V <= 0 means default_chunks.
absl::StatusOr<Schedule> Generate(const std::string& name, int D, int V, int M);

// The forward-only program on the layout `stage_to_rank` (S = D*V entries, V stages per rank, as
// a training schedule's): rank r runs, for each stage it holds in ascending order, F of
// microbatches 0..M-1. Every F follows the F it needs in the order (stage, microbatch), which
// every rank's program respects, so it never deadlocks; each stage's M forwards stream to the next
// rank as in GPipe's forward half. REQUIRES a valid layout and M >= 1.
Schedule ForwardOnly(const std::vector<int>& stage_to_rank, int D, int V, int M);

// The table as Markdown, one row per schedule: name, V rule, M rule, split backward, doc.
std::string ScheduleTableMarkdown();

}  // namespace pp::prog

#endif  // PP_PROGRAM_SCHEDULES_H_
